"""The builder's instruction list as decoded operations: each ``Instruction`` (spec key, rendered stem,
rendered operands, guard, origin) becomes an :class:`Op` with its modifiers by group, its types by
slot and typed operand descriptors. Registers take their types from the kernel's declarations; no
PTX text is re-parsed beyond the one instruction's own fields."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..isa.spec import SPECS
from ..isa.types import PtxType, ptx_type
from ..isa.values import SPECIALS
from .errors import UnsupportedError


@dataclass(frozen=True)
class Operand:
    kind: str                 # reg, notreg, imm, special, sym, addr, vec, label, tref, pipe, sink
    name: str = ""            # register / special / symbol / label name; immediate text
    type: PtxType | None = None
    offset: int = 0           # addr: byte offset
    base: "Operand | None" = None   # addr: base register/symbol (None: absolute); tref: the tensor map
    items: tuple = ()         # vec items, tref coordinates, pipe pair


@dataclass(eq=False)
class Op:
    index: int
    key: str
    text: str
    mods: dict
    types: tuple
    operands: tuple
    guard: tuple | None       # (register name, negated)
    origin: str
    run: object = field(default=None, repr=False)     # fn(warp, mask) set by the semantics tables

    @property
    def where(self) -> str:
        return f"{self.text} ({self.origin})"

    def type(self, slot: int = 0) -> PtxType:
        return ptx_type(self.types[slot])


def split_stem(key: str, text: str) -> tuple[dict, tuple]:
    """The modifier groups and type slots of a rendered stem, matched against its spec row."""
    spec = SPECS[key]
    parts = text.split(".")
    mods, types, i = {}, {}, 0
    for tok in spec.pattern:
        part = parts[i] if i < len(parts) else None
        if tok[0] == "lit":
            if part == tok[1]:
                i += 1
        elif tok[0] == "grp":
            if part in spec.groups.get(tok[1], ()):
                mods[tok[1]] = part
                i += 1
        elif part in spec.types[tok[1]]:
            types[tok[1]] = part
            i += 1
    if i != len(parts):
        raise UnsupportedError(f"cannot match {text!r} against spec row {key!r}")
    return mods, tuple(types[k] for k in sorted(types))


class OperandParser:
    """Rendered operand text -> Operand, with the kernel's register types."""

    def __init__(self, registers: dict):
        self.registers = registers

    def __call__(self, text: str) -> Operand:
        text = text.strip()
        if text.startswith("[") and "{" in text:
            tmap, coords = text[1:-1].split(",", 1)
            return Operand("tref", base=self(tmap), items=self._items(coords.strip()))
        if text.startswith("["):
            return self._address(text[1:-1])
        if text.startswith("{"):
            return Operand("vec", items=self._items(text))
        if "|" in text:
            first, second = text.split("|")
            return Operand("pipe", items=(self(first), self(second)))
        if text == "_":
            return Operand("sink")
        if text.startswith("!"):
            return Operand("notreg", text[1:], self.registers[text[1:]].type)
        if text.startswith("%"):
            if text in self.registers:
                return Operand("reg", text, self.registers[text].type)
            return Operand("special", text, SPECIALS[text].type)
        if text.startswith("$"):
            return Operand("label", text)
        if text[0].isdigit() or text[0] == "-":
            return Operand("imm", text)
        return Operand("sym", text)

    def _items(self, text: str) -> tuple:
        return tuple(self(t) for t in text.strip()[1:-1].split(","))

    def _address(self, inner: str) -> Operand:
        for sign in ("+", "-"):
            if sign in inner[1:]:
                base, off = inner.rsplit(sign, 1)
                return Operand("addr", base=self(base), offset=int(off) * (1 if sign == "+" else -1))
        if inner[0].isdigit():
            return Operand("addr", offset=int(inner))
        return Operand("addr", base=self(inner))


def decode(kernel) -> tuple[list[Op], dict[str, int]]:
    """The kernel body as ops (labels and comments dropped) and each label's op index."""
    parse = OperandParser(kernel.registers)
    ops, labels = [], {}
    for ins in kernel.body:
        if ins.kind == "label":
            labels[ins.text] = len(ops)
        elif ins.kind == "raw":
            raise UnsupportedError(f"raw PTX line {ins.text!r} cannot be interpreted", str(ins.origin))
        elif ins.kind == "ins":
            mods, types = split_stem(ins.key, ins.text)
            guard = None
            if ins.guard:
                neg = ins.guard.startswith("@!")
                guard = (ins.guard[2:] if neg else ins.guard[1:], neg)
            ops.append(Op(len(ops), ins.key, ins.text, mods, types, tuple(parse(o) for o in ins.operands), guard,
                          str(ins.origin) if ins.origin else "?"))
    return ops, labels
