"""A spec-driven program generator, independent of the hand-written forms: every instruction is drawn
from the table itself (a row, legal types, any subset of its modifier groups with legal options) with
valid-looking operands chosen by each operand's kinds and type rule. Most draws are refused by the
builder; the property is that whatever it accepts, the assembler accepts too.

``choices`` is a source of decisions (``choices.pick(options)``, ``choices.coin()``), so the same
generator serves a hypothesis strategy and an exhaustive enumeration.
"""
from __future__ import annotations

import random

from pkptx.isa import SPECS, Label, Pipe, Sink, Vec, address, ptx_type, tensor_ref
from pkptx.isa.types import ALL_TYPES

from . import spec_forms
from .assemble import ALL_REG, Sandbox

REG_OF = {**spec_forms.REG_OF, "e4m3": "b16", "e5m2": "b16", "b128": "b64"}
INTS = (0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 64, 96, 100, 128, 256, 1000, 1024, 4096, 65535, 1 << 20, -8)
FLOATS = (0.5, 1.0, -2.0, 1e-3)
SPECIAL = ("%tid.x", "%ctaid.x", "%laneid", "%clock64", "%cluster_ctarank", "%smid")
KEYS = tuple(sorted(SPECS))


class Chooser:
    """Decisions from a ``random.Random`` (hypothesis passes one via ``st.randoms()``)."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def pick(self, options):
        options = tuple(options)
        return options[self.rng.randrange(len(options))]

    def coin(self, p: float = 0.5) -> bool:
        return self.rng.random() < p


def _reg_type(c: Chooser, name: str | None) -> str:
    if name is None:
        return c.pick([t.name for t in ALL_REG])
    name = REG_OF.get(name, name)
    if c.coin(0.1):                         # sometimes a compatible or wider register
        bits = ALL_TYPES[name].bits
        return c.pick([t.name for t in ALL_REG if t.bits >= bits and t.name != "pred"] or [name])
    return name


def _lanes(c: Chooser, mods: dict) -> int:
    for group in ("vec", "num"):
        v = mods.get(group)
        if v and v[1:].isdigit() and c.coin(0.9):
            return int(v[1:])
    return c.pick((1, 2, 4, 8, 16, 32, 64, 128))


def _address(c: Chooser, sb: Sandbox, mods: dict, name: str):
    space = mods.get("space") or ""
    bases = [sb.gptr, sb.smem, sb.smem64, sb.bar, sb.smem_sym, sb.bar_sym, sb.k.param("n"), None]
    if name in ("mbar",):
        bases = [sb.bar, sb.bar_sym, sb.smem64]
    elif space.startswith("shared") and c.coin(0.7):
        bases = [sb.smem, sb.bar, sb.smem_sym, sb.bar_sym]
    elif space == "global" and c.coin(0.7):
        bases = [sb.gptr]
    elif space == "param" and c.coin(0.7):
        bases = [sb.k.param("n"), sb.k.param("tmap")]
    base = c.pick(bases)
    offset = c.pick((0, 0, 0, 8, 16, 128, -8))
    return address(base, 64 if base is None else offset)


def operand(c: Chooser, sb: Sandbox, key: str, op, types: tuple, mods: dict):
    """One valid-looking value for operand ``op`` of a row."""
    kind = c.pick(op.kinds)
    slot = spec_forms.slot_register(SPECS[key], op.rule, types, mods)
    b = sb.b
    if kind == "R":
        ty = _reg_type(c, slot)
        return b.reg(ty) if op.dest else sb.r(ty)
    if kind == "I":
        if slot in ("f32", "f64") or (slot is None and c.coin(0.2)):
            return c.pick(FLOATS)
        return c.pick(INTS)
    if kind == "A":
        return _address(c, sb, mods, op.name)
    if kind == "V":
        lanes = _lanes(c, mods)
        ty = _reg_type(c, slot if slot is None or not op.rule.endswith("v") else c.pick(("b16", "b32", "b64")))
        if op.dest:
            return b.regs(ty, lanes)
        if slot in ("b16", "u16", "s16") and op.name == "offsets":
            return Vec(tuple(c.pick(INTS[:8]) for _ in range(lanes)))
        return Vec(tuple(sb.r(ty) for _ in range(lanes)))
    if kind == "S":
        from pkptx.isa.values import SPECIALS
        return SPECIALS[c.pick(SPECIAL)]
    if kind == "Y":
        return c.pick((sb.smem_sym, sb.bar_sym, sb.k.param("n").symbol, sb.k.param("tmap").symbol))
    if kind == "L":
        return sb.end_label
    if kind == "M":
        dims = int(mods["dim"][0]) if mods.get("dim") and c.coin(0.9) else c.pick((1, 2, 3, 4, 5))
        return tensor_ref(sb.tmap, [sb.r("s32")] + [c.pick((0, 1, 2, 64)) for _ in range(dims - 1)])
    if kind == "K":
        return Pipe(Sink(ptx_type("b32")), b.reg("pred"))
    return Sink(ptx_type(slot or "b64"))


def draw_call(c: Chooser, sb: Sandbox, key: str | None = None):
    """(key, operands, types, mods) for one random instruction of the table."""
    key = key or c.pick(KEYS)
    row = SPECS[key]
    types = tuple(c.pick(options) for options in row.types)
    mods = {}
    for group, options in row.groups.items():
        if group in row.required or c.coin(0.35):
            mods[group] = c.pick(options)
    operands = []
    for op in row.operands:
        if op.optional and c.coin(0.5):
            operands.append(None)
        else:
            operands.append(operand(c, sb, key, op, types, mods))
    return key, operands, types, mods


def spec_sandbox(name: str = "specprog", target: str = "sm_90a") -> Sandbox:
    sb = Sandbox(name, target=target, cluster=(2,))
    sb.end_label = sb.b.new_label("end")
    return sb


def finish(sb: Sandbox):
    sb.b.place(sb.end_label)
    return sb.finish()
