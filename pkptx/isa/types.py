"""PTX fundamental types as interned singletons.

A :class:`PtxType` knows its width, its kind (bit, unsigned, signed, float, packed float, predicate)
and which register type holds it. Types compare by identity; look them up with :func:`ptx_type`.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, eq=False)
class PtxType:
    name: str          # as spelled in PTX, without the dot: "u32", "bf16x2", "pred"
    bits: int
    kind: str          # "b", "u", "s", "f", "fx2" (packed pair), "pred"
    reg_decl: str      # the type a .reg declaration uses for it
    reg_prefix: str    # default register name prefix

    @property
    def bytes(self) -> int:
        return max(1, self.bits // 8)

    @property
    def is_int(self) -> bool:
        return self.kind in ("u", "s")

    @property
    def is_float(self) -> bool:
        return self.kind in ("f", "fx2")

    def __repr__(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.name


def _mk(name, bits, kind, decl=None, prefix=None) -> PtxType:
    default_prefix = {8: "rc", 16: "rs", 32: "r", 64: "rd", 128: "rq", 1: "p"}[bits]
    return PtxType(name, bits, kind, decl or name, prefix or default_prefix)


b8, b16, b32, b64, b128 = (_mk(f"b{n}", n, "b") for n in (8, 16, 32, 64, 128))
u8, u16, u32, u64 = (_mk(f"u{n}", n, "u") for n in (8, 16, 32, 64))
s8, s16, s32, s64 = (_mk(f"s{n}", n, "s") for n in (8, 16, 32, 64))
f16 = _mk("f16", 16, "f", prefix="h")
bf16 = _mk("bf16", 16, "f", decl="b16", prefix="hb")
f32 = _mk("f32", 32, "f", prefix="f")
f64 = _mk("f64", 64, "f", prefix="fd")
f16x2 = _mk("f16x2", 32, "fx2", decl="b32", prefix="hh")
bf16x2 = _mk("bf16x2", 32, "fx2", decl="b32", prefix="hhb")
tf32 = _mk("tf32", 32, "f", decl="b32", prefix="ft")
e4m3 = _mk("e4m3", 8, "f", decl="b8", prefix="q")
e5m2 = _mk("e5m2", 8, "f", decl="b8", prefix="q")
pred = PtxType("pred", 1, "pred", "pred", "p")

ALL_TYPES: dict[str, PtxType] = {
    t.name: t
    for t in (b8, b16, b32, b64, b128, u8, u16, u32, u64, s8, s16, s32, s64,
              f16, bf16, f32, f64, f16x2, bf16x2, tf32, e4m3, e5m2, pred)
}
REGISTER_TYPES = tuple(t for t in ALL_TYPES.values() if t.name not in ("tf32", "e4m3", "e5m2"))


def ptx_type(name: str | PtxType) -> PtxType:
    """The singleton for ``name`` ("u32", ".u32" or a PtxType)."""
    if isinstance(name, PtxType):
        return name
    if not isinstance(name, str):
        from ..errors import PTXBuildError
        raise PTXBuildError(f"a PTX type is a name such as 'u32' or a PtxType (pkptx.isa.u32), got "
                            f"{type(name).__name__} {name!r}")
    key = name.lstrip(".")
    if key not in ALL_TYPES:
        from ..errors import PTXBuildError
        raise PTXBuildError(f"unknown PTX type {name!r}; expected one of {', '.join(ALL_TYPES)}")
    return ALL_TYPES[key]


def compatible(instr: PtxType, reg: PtxType) -> bool:
    """Whether a register of type ``reg`` may be an operand of an instruction typed ``instr``.

    PTX's rule: same width, and either one is a bit type, or both are integers, or both are the
    same float type. (16-bit floats live in .b16 registers, packed pairs in .b32 ones.)
    """
    if instr is reg:
        return True
    if instr.kind == "pred" or reg.kind == "pred":
        return False
    if instr.bits != reg.bits:
        return False
    if instr.kind == "b" or reg.kind == "b":
        return True
    return instr.is_int and reg.is_int
