"""Every modifier combination of every spec row, with canonical operands, and the PTX version the
builder computes for each accepted one.

``combinations(row)`` walks each type tuple over the full product of the row's modifier groups (each
option or absent), or, where that product is too large (ld, st, atom, red), over every pair of
optional groups with the required ones always present: the version rules fire on one option or type
each, so pairs reach every rule and every pairwise interaction. ``operands`` builds deterministic,
valid-looking operands for a combination in any Sandbox, so a form found acceptable in one kernel can
be emitted again into the kernel of its PTX version.
"""
from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

from pkptx.errors import PTXBuildError
from pkptx.isa import SPECS, Pipe, Sink, Vec, address, ptx_type, tensor_ref
from pkptx.isa.builder import as_operand
from pkptx.isa.validate import validate

from . import forms
from .assemble import Sandbox

FULL_PRODUCT_LIMIT = 30000           # combinations per row beyond which pairs of groups are used
REG_OF = {**forms.REG_OF, "b8": "b16"}     # the register type that holds a type slot's value
WGMMA_ACC = {"f32": "f32", "s32": "s32", "f16": "b32"}


def _mods_product(row, names):
    """Each group of ``names`` over its options, and absence where the group is optional."""
    options = [row.groups[g] if g in row.required else (None,) + row.groups[g] for g in names]
    for values in itertools.product(*options):
        yield {g: v for g, v in zip(names, values) if v is not None}


def combinations(row):
    """(types, mods) for the row: the full product, or required groups x every pair of optional ones."""
    sizes = [len(v) + (g not in row.required) for g, v in row.groups.items()]
    full = math.prod(len(t) for t in row.types) * math.prod(sizes)
    required = [g for g in row.groups if g in row.required]
    optional = [g for g in row.groups if g not in row.required]
    if full <= FULL_PRODUCT_LIMIT:
        mod_sets = list(_mods_product(row, list(row.groups)))
    else:
        seen, mod_sets = set(), []
        for pair in itertools.combinations(optional, 2) if len(optional) > 1 else [tuple(optional)]:
            for mods in _mods_product(row, required + list(pair)):
                key = tuple(sorted(mods.items()))
                if key not in seen:
                    seen.add(key)
                    mod_sets.append(mods)
    for types in itertools.product(*row.types):
        for mods in mod_sets:
            yield types, mods


def slot_register(row, rule: str, types: tuple, mods: dict) -> str | None:
    """The register type an operand rule asks for (None for ``any`` outside wgmma)."""
    if rule == "any":
        return WGMMA_ACC[types[0]] if row.key.startswith("wgmma.mma_async") else None
    if rule.startswith("T") and rule[1:2].isdigit():
        name = types[int(rule[1])]
        if rule.endswith("x2") and mods.get("mode") == "wide":
            name = forms.WIDE.get(name, name)
        return REG_OF.get(name, name)
    return REG_OF.get(rule, rule)


def _lanes(row, op, types, mods) -> int | None:
    """How many registers a brace-vector operand takes, or None for a scalar."""
    if row.key.startswith("wgmma.mma_async"):
        if op.dest:
            n = int(mods["shape"].split("n")[1].split("k")[0])
            return n // 2 if types[0] in ("f32", "s32") else n // 4
        return 4 if op.name == "a" else None
    if op.name == "offsets":
        return int(mods["dim"][0]) - 2
    if "num" in mods:
        return int(mods["num"][1:])
    if mods.get("vec") and op.name in ("d", "b"):
        return int(mods["vec"][1:])
    return None


def _address(sb: Sandbox, row, op, mods):
    space = op.space or (mods.get("space") if "space" in row.groups else None) or ""
    if op.name == "mbar" or row.key.startswith("mbarrier"):
        return address(sb.bar if space.startswith("shared") else sb.smem64)
    if space.startswith("shared"):
        return sb.s()
    if space == "param":
        return address(sb.k.param("n"))
    if row.key.startswith("multimem"):
        return address(sb.mc)
    return sb.g()


def _register(sb: Sandbox, ty: str, dest: bool, index: int = 0):
    if dest:
        if sb.dest_pool is None:
            return sb.b.reg(ty)
        pool = sb.dest_pool.setdefault(ty, [])     # probing only: validation does not need fresh ones
        while len(pool) <= index:
            pool.append(sb.b.reg(ty))
        return pool[index]
    if ty == "b128":
        return sb.b.mov("b128", [sb.r("b64"), sb.r("b64")])
    return sb.r(ty)


def _immediate(op, ty: str | None):
    if op.limits:
        return op.limits[0]
    if ty in ("f32", "f64"):
        return 1.0
    return 0 if op.name in ("ta", "tb") else 1


def operands(sb: Sandbox, key: str, types: tuple, mods: dict) -> list:
    """Canonical operands of ``key`` for (types, mods), optional ones included (see :func:`select`)."""
    row = SPECS[key]
    out = []
    for op in row.operands:
        ty = slot_register(row, op.rule, types, mods)
        lanes = _lanes(row, op, types, mods)
        kind = "V" if lanes is not None and "V" in op.kinds else op.kinds[0]
        if kind == "R":
            out.append(_register(sb, ty or "b32", op.dest))
        elif kind == "V":
            if op.name == "offsets":
                out.append(Vec(tuple(range(lanes))))
            else:
                out.append(Vec(tuple(_register(sb, ty or "b32", op.dest, i) for i in range(lanes))))
        elif kind == "I":
            out.append(_immediate(op, ty))
        elif kind == "A":
            out.append(_address(sb, row, op, mods))
        elif kind == "M":
            out.append(tensor_ref(sb.tmap, [sb.r("s32")] + list(range(1, int(mods["dim"][0])))))
        elif kind == "K":
            out.append(Pipe(Sink(ptx_type("b32")), sb.b.reg("pred")))
        elif kind == "N":
            out.append(Sink(ptx_type(ty or "b64")))
        elif kind == "L":
            out.append(sb.end_label)
        else:
            raise AssertionError(f"{key}: no canonical operand of kind {kind}")
    return out


def select(key: str, values: list, include: frozenset) -> list:
    """``values`` with the optional operands not named in ``include`` left out."""
    ops = [None if op.optional and op.name not in include else v for op, v in zip(SPECS[key].operands, values)]
    while ops and ops[-1] is None:
        ops.pop()
    return ops


def _includes(row):
    """Every subset of the row's optional operands."""
    names = [op.name for op in row.operands if op.optional]
    return [frozenset(c) for n in range(len(names) + 1) for c in itertools.combinations(names, n)]


@dataclass(frozen=True)
class Form:
    key: str
    types: tuple
    mods: tuple                    # sorted (group, option) pairs
    include: frozenset
    version: tuple


def _version(key, types, mods, ops):
    try:
        return validate(SPECS[key], mods, types, [None if v is None else as_operand(v) for v in ops])[4]
    except PTXBuildError:
        return None


@functools.lru_cache(maxsize=None)
def accepted_forms(key: str) -> tuple:
    """Every combination of ``key`` (and subset of its optional operands) the builder accepts, with the
    PTX version it computes for it."""
    row = SPECS[key]
    sb = scratch(row.target)
    sb.dest_pool = {}
    forms = []
    for types, mods in combinations(row):
        values = operands(sb, key, types, mods)
        for include in _includes(row):
            version = _version(key, types, mods, select(key, values, include))
            if version is not None:
                forms.append(Form(key, types, tuple(sorted(mods.items())), include, version))
    return tuple(forms)


def scratch(target: str, name: str = "forms", ptx_version=None) -> Sandbox:
    sb = Sandbox(name, target=target, cluster=(2,), ptx_version=ptx_version)
    sb.end_label = sb.b.new_label("end")
    sb.dest_pool = None
    return sb


def emit(sb: Sandbox, form: Form) -> None:
    mods = dict(form.mods)
    values = select(form.key, operands(sb, form.key, form.types, mods), form.include)
    sb.b.emit(form.key, *values, types=form.types, **mods)
