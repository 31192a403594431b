"""A catalogue of valid instruction forms, emitted through the Builder into scratch kernels.

Each ``FormGroup`` is one function that emits many forms into a :class:`Sandbox` (the groups live in
forms_compute.py and forms_memory.py); the spec-table test assembles every group (for sm_90 and
sm_90a where the group allows), checks that together they cover every row of ``SPECS``, and the
invalid-form property test corrupts the recorded ``emit`` calls. Keep one group per PTX-ISA area so
an assembler error points at a short function. ``grid`` and ``register_operands`` drive the
exhaustive table-versus-assembler comparison.
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field
from typing import Callable

from pkptx.isa import Kernel
from pkptx.isa.builder import Builder

from .assemble import ARCHS, Sandbox

SCOPES = ("cta", "cluster", "gpu", "sys")


@dataclass(frozen=True)
class FormGroup:
    name: str
    emit: Callable[[Sandbox], None]
    archs: tuple = ARCHS                  # ("sm_90a",) for groups that use sm_90a-only rows
    kernel_args: dict = field(default_factory=dict)

    def build(self, arch: str) -> Kernel:
        sb = Sandbox(f"forms_{self.name}", target=arch, **self.kernel_args)
        self.emit(sb)
        return sb.finish()


GROUPS: dict[str, FormGroup] = {}


def group(name: str, *, archs=ARCHS, **kernel_args):
    def register(fn):
        GROUPS[name] = FormGroup(name, fn, tuple(archs), kernel_args)
        return fn
    return register


@functools.lru_cache(maxsize=None)
def built(name: str, arch: str) -> Kernel:
    """The group's kernel for ``arch``, built once per test session (tests only read it)."""
    return GROUPS[name].build(arch)


def emitted_keys(kernel: Kernel) -> set[str]:
    """The spec keys of every instruction in ``kernel`` (what the kernel actually exercises)."""
    return {ins.key for ins in kernel.body if ins.kind == "ins"}


@dataclass(frozen=True)
class EmitCall:
    """One recorded ``Builder.emit`` call: enough to replay (or corrupt) it in the same kernel, and the
    PTX line it emitted."""
    key: str
    operands: tuple
    types: tuple
    pred: object
    mods: dict
    line: str


def record_group(form_group: FormGroup, arch: str = "sm_90a"):
    """Build ``form_group`` and return (sandbox, every emit call the forms made, prologue excluded)."""
    calls: list[EmitCall] = []
    original = Builder.emit

    sb = Sandbox(f"forms_{form_group.name}", target=arch, **form_group.kernel_args)

    def recording(self, key, *operands, types=(), pred=None, **mods):
        ins = original(self, key, *operands, types=types, pred=pred, **mods)
        calls.append(EmitCall(key, operands, tuple(types), pred, dict(mods), ins.render()))
        return ins

    Builder.emit = recording
    try:
        form_group.emit(sb)
    finally:
        Builder.emit = original
    return sb, calls


# ============================================================================ exhaustive grids
WIDE = {"u16": "u32", "u32": "u64", "s16": "s32", "s32": "s64"}
REG_OF = {"u8": "u16", "s8": "s16", "tf32": "b32"}


def register_operands(sb: Sandbox, row, types: tuple, mods: dict) -> list:
    """One register per required operand of ``row`` (destinations fresh, sources from the prologue),
    typed by the operand's rule; for rows whose operands are all registers."""
    ops = []
    for op in row.operands:
        if op.optional:
            continue
        name = op.rule
        if name.startswith("T"):
            name = types[int(name[1])]
            if op.rule.endswith("x2") and mods.get("mode") == "wide":
                name = WIDE.get(name, name)
        name = REG_OF.get(name, name)
        ops.append(sb.b.reg(name) if op.dest else sb.r(name))
    if row.key == "cvt" and types[0] in ("f16x2", "bf16x2"):
        ops.append(sb.r(REG_OF.get(types[1], types[1])))     # packing conversions take two sources
    return ops


def grid(row, groups=None):
    """Every (types, modifiers) combination of ``row``: each type slot over its legal types, each
    modifier group (or only ``groups``) over its options and absence."""
    names = [g for g in row.groups if groups is None or g in groups]
    for types in itertools.product(*row.types):
        for values in itertools.product(*[(None,) + row.groups[g] for g in names]):
            yield types, {g: v for g, v in zip(names, values) if v is not None}


# The catalogue: importing these modules registers their groups.
from . import forms_compute, forms_memory  # noqa: E402,F401
