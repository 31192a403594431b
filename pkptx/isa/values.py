"""Immutable operands. Only address arithmetic (``addr + 16``) has an operator; nothing here emits code."""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ..errors import PTXBuildError
from .signature import Kind, default_kind
from .types import PtxType, b8, pred


@dataclass(frozen=True)
class Reg:
    """A virtual register. Created only by the builder, which declares it."""
    name: str            # with the leading %
    type: PtxType

    def render(self) -> str:
        return self.name

    def negated(self) -> "NotPred":
        if self.type is not pred:
            raise PTXBuildError(f"only predicates can be negated; {self.name} is .{self.type}")
        return NotPred(self)


@dataclass(frozen=True)
class NotPred:
    """``!p`` as an operand or guard."""
    reg: Reg

    @property
    def type(self) -> PtxType:
        return pred

    def render(self) -> str:
        return "!" + self.reg.name

    def negated(self) -> Reg:
        return self.reg


@dataclass(frozen=True)
class Special:
    """A special register such as %tid.x (read-only)."""
    name: str
    type: PtxType

    def render(self) -> str:
        return self.name


def _hex_float(value: float, ty: PtxType) -> str:
    if ty.bits == 64:
        return "0d" + struct.pack(">d", value).hex().upper()
    return "0f" + struct.pack(">f", value).hex().upper()


@dataclass(frozen=True)
class Imm:
    """An immediate. Floats render as exact hex (0f3F800000); integers in decimal."""
    value: int | float
    type: PtxType | None = None   # None: adopts the instruction's type

    def render(self, as_type: PtxType | None = None) -> str:
        ty = self.type or as_type
        if ty is not None and ty.kind == "f" and ty.bits in (32, 64):
            return _hex_float(float(self.value), ty)
        if isinstance(self.value, float):
            if not self.value.is_integer():
                raise PTXBuildError(f"immediate {self.value} is not an integer but the operand is .{ty}")
            return str(int(self.value))
        return str(self.value)


@dataclass(frozen=True)
class Symbol:
    """A named variable: a kernel parameter, a .shared array, a global. Renders as its name."""
    name: str
    space: str                # "param", "shared", "global", "const"
    type: PtxType = b8

    def render(self) -> str:
        return self.name


@dataclass(frozen=True)
class Addr:
    """``[base + offset]``. ``base`` is a 32/64-bit register, a Symbol, or None for an absolute address."""
    base: Reg | Symbol | None
    offset: int = 0

    def __add__(self, delta: int) -> "Addr":
        if not isinstance(delta, int):
            return NotImplemented
        return Addr(self.base, self.offset + delta)

    def __sub__(self, delta: int) -> "Addr":
        if not isinstance(delta, int):
            return NotImplemented
        return Addr(self.base, self.offset - delta)

    def render(self) -> str:
        if self.base is None:
            return f"[{self.offset}]"
        if self.offset == 0:
            return f"[{self.base.render()}]"
        return f"[{self.base.render()}+{self.offset}]"     # ptxas parses [%r+-8], not [%r-8]


@dataclass(frozen=True)
class Label:
    name: str

    def render(self) -> str:
        return self.name


@dataclass(frozen=True)
class Vec:
    """A brace list ``{a, b, c, d}`` of registers (or ``_`` sinks) for vector and wgmma operands."""
    items: tuple

    @property
    def type(self) -> PtxType:
        return self.items[0].type

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self):
        return iter(self.items)

    def __getitem__(self, i):
        return self.items[i]

    def render(self) -> str:
        return "{" + ", ".join(x.render() if hasattr(x, "render") else str(x) for x in self.items) + "}"


@dataclass(frozen=True)
class Sink:
    """The ``_`` operand: a destination whose value is discarded."""
    type: PtxType = b8

    def render(self) -> str:
        return "_"


@dataclass(frozen=True)
class Param:
    """One ``.param`` of a kernel entry.

    ``count`` > 1 makes a byte array such as ``.param .align 64 .b8 tmap[128]`` (a tensor map).
    ``pointer`` marks a 64-bit device address, so a launcher may accept arrays for it. ``kind`` is what
    the host passes for it (:class:`pkptx.isa.signature.Kind`); None: what the other attributes imply
    (a pointer, a tensor map for 128 bytes, a scalar). It never changes the PTX.
    """
    name: str
    type: PtxType
    count: int = 1
    align: int | None = None
    pointer: bool = False
    kind: Kind | None = None
    symbol: Symbol = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        from . import declare
        what = f"Param({self.name!r})"
        declare.identifier(self.name, "parameter name")
        object.__setattr__(self, "type", declare.param_type(self.type, what))
        declare.integer(self.count, f"{what}: count", 1)
        declare.alignment(self.align, what)
        if self.pointer:
            declare.pointer(self.type, self.count, what)
        object.__setattr__(self, "kind", declare.param_kind(self.kind, default_kind(self.pointer, self.count, self.size),
                                                            self.type.bits, what))
        object.__setattr__(self, "symbol", Symbol(self.name, "param", self.type))

    @property
    def size(self) -> int:
        return self.type.bytes * self.count

    @property
    def alignment(self) -> int:
        return self.align or self.type.bytes

    @property
    def is_bytes(self) -> bool:
        return self.count > 1

    def decl(self) -> str:
        align = f".align {self.align} " if self.align else ""
        arr = f"[{self.count}]" if self.count > 1 else ""
        return f".param {align}.{self.type.reg_decl} {self.name}{arr}"       # .bf16 is declared .b16


def special_registers() -> dict[str, Special]:
    """Every special register the builder exposes, by PTX name."""
    from .types import u32, u64
    names32 = [f"%{r}.{c}" for r in ("tid", "ntid", "ctaid", "nctaid", "clusterid", "nclusterid",
                                      "cluster_ctaid", "cluster_nctaid") for c in "xyz"]
    names32 += ["%laneid", "%warpid", "%nwarpid", "%smid", "%nsmid", "%gridid", "%cluster_ctarank",
                "%cluster_nctarank", "%dynamic_smem_size", "%total_smem_size",
                "%lanemask_eq", "%lanemask_lt", "%lanemask_le", "%lanemask_gt", "%lanemask_ge", "%clock"]
    names64 = ["%clock64", "%globaltimer"]
    out = {n: Special(n, u32) for n in names32}
    out.update({n: Special(n, u64) for n in names64})
    out["%is_explicit_cluster"] = Special("%is_explicit_cluster", pred)
    return out


SPECIALS = special_registers()


@dataclass(frozen=True)
class TensorRef:
    """``[tmap, {c0, c1, ...}]``: a tensor map (64-bit address register or .param symbol) and coordinates."""
    tmap: Reg | Symbol
    coords: tuple

    def render(self) -> str:
        return "[" + self.tmap.render() + ", {" + ", ".join(c.render() for c in self.coords) + "}]"


@dataclass(frozen=True)
class Pipe:
    """``d|p``: the paired destinations of elect.sync (a .b32 register or sink, and a predicate)."""
    first: Reg | Sink
    second: Reg

    def render(self) -> str:
        return f"{self.first.render()}|{self.second.render()}"
