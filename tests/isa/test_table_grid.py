"""The table and the assembler agree on every type x modifier combination of the register-only rows.

For each row, every combination is offered to the Builder. The accepted ones go into one kernel that
must assemble; the rejected ones are written as raw PTX into another kernel, where ptxas must reject
every one of them (so the table is neither looser nor stricter than the assembler), except the
deliberate strictness in STRICTER. Memory rows take their operands from MEMORY_OPERANDS.
"""
from __future__ import annotations

import re

import pytest

from pkptx.errors import AssemblyError, PTXBuildError
from pkptx.isa import MAX_PTX, SPECS, address
from pkptx.isa.builder import as_operand
from tests.helpers.assemble import Sandbox, assert_assembles
from tests.helpers.forms import grid, register_operands

_ARITH = ("add", "sub", "mul", "mad", "fma", "div", "rem", "abs", "neg", "min", "max", "rcp", "sqrt", "rsqrt",
          "ex2", "lg2", "sin", "cos", "tanh", "addc", "subc")
_LOGIC = ("popc", "clz", "brev", "bfe", "bfi", "and", "or", "xor", "not", "shl", "shr", "prmt", "selp", "setp")
CVT_GROUPS = [{"rnd", "ftz"}, {"rnd", "sat"}, {"rnd", "relu"}, {"rnd", "satfinite"}]
ROWS = [(key, None) for key in _ARITH + _LOGIC] + [("cvt", groups) for groups in CVT_GROUPS]


def _address(sb, mods, space_group="space"):
    space = mods.get(space_group)
    if space and space.startswith("shared"):
        return sb.s()
    return address(sb.k.param("n")) if space == "param" else sb.g()


def _data(sb, ty, mods, dest):
    ty = {"b8": "b32", "u8": "u32", "s8": "s32"}.get(ty, ty)       # bytes move through 32-bit registers
    lanes = {"v2": 2, "v4": 4, "v8": 8}.get(mods.get("vec"), 1)
    if dest:
        return sb.b.reg(ty) if lanes == 1 else sb.b.regs(ty, lanes)
    if ty == "b128":
        return sb.b.mov("b128", [sb.r("b64"), sb.r("b64")])
    return sb.r(ty) if lanes == 1 else sb.vec(ty, lanes)


def _policy(sb, mods):
    return [sb.policy] if mods.get("hint") else []


MEMORY_OPERANDS = {
    "ld": lambda sb, t, m: [_data(sb, t[0], m, True), _address(sb, m)] + _policy(sb, m),
    "st": lambda sb, t, m: [_address(sb, m), _data(sb, t[0], m, False)] + _policy(sb, m),
    "atom": lambda sb, t, m: ([sb.b.reg(t[0]), _address(sb, m), sb.r(t[0])]
                              + ([sb.r(t[0])] if m.get("op") == "cas" else [None] * bool(m.get("hint")))
                              + _policy(sb, m)),
    "red": lambda sb, t, m: [_address(sb, m), sb.r(t[0])] + _policy(sb, m),
    "multimem.ld_reduce": lambda sb, t, m: [_data(sb, t[0], m, True), address(sb.mc)],
    "multimem.st": lambda sb, t, m: [address(sb.mc), _data(sb, t[0], m, False)],
    "multimem.red": lambda sb, t, m: [address(sb.mc), _data(sb, t[0], m, False)],
}
U32 = [("u32",)]
MEMORY_ROWS = [
    ("ld", {"sem", "scope", "space", "nc", "cache"}, U32),
    ("ld", {"space", "nc", "cache", "evict", "prefetch", "hint"}, U32),
    ("ld", {"sem", "scope", "evict", "prefetch", "hint", "vec"}, U32), ("ld", {"space", "vec"}, None),
    ("st", {"sem", "scope", "space", "cache", "evict"}, U32), ("st", {"space", "cache", "evict", "hint", "vec"}, U32),
    ("st", {"space", "vec"}, None),
    ("atom", {"sem", "scope", "space", "hint", "op"}, [("b32",), ("u32",)]), ("atom", {"op", "noftz"}, None),
    ("red", {"sem", "scope", "space", "hint", "op"}, [("b32",), ("u32",)]), ("red", {"op", "noftz", "space"}, None),
    ("multimem.ld_reduce", {"sem", "scope", "op"}, [("u32",), ("b32",)]),
    ("multimem.ld_reduce", {"op", "acc", "vec"}, None),
    ("multimem.st", {"sem", "scope"}, U32), ("multimem.st", {"vec"}, None),
    ("multimem.red", {"sem", "scope", "op"}, [("u32",), ("b32",)]), ("multimem.red", {"op", "vec"}, None),
]
# Forms ptxas takes that the table refuses on purpose (style rule 5: ordering is spelled out).
STRICTER = {"atom": lambda mods: bool(mods.get("sem")) != bool(mods.get("scope")),
            "red": lambda mods: bool(mods.get("sem")) != bool(mods.get("scope"))}


def _split(key, groups, types_list=None):
    """Offer every combination to the Builder; return (the accepted kernel, the raw kernel of the
    rejected ones, their PTX lines)."""
    row = SPECS[key]
    operands = MEMORY_OPERANDS.get(key, lambda sb, t, m: register_operands(sb, row, t, m))
    accepted, rejected = Sandbox(f"grid_{key.replace('.', '_')}", target="sm_90a"), []
    raw = Sandbox("rejected", target="sm_90a", ptx_version=MAX_PTX)
    for types, mods in grid(row, groups):
        if types_list is not None and types not in types_list:
            continue
        try:
            accepted.b.emit(key, *operands(accepted, types, mods), types=types, **mods)
        except PTXBuildError:
            if key in STRICTER and STRICTER[key](mods):
                continue
            ops = [o for o in operands(raw, types, mods) if o is not None]
            line = f"{row.render_stem(mods, types)} {', '.join(as_operand(o).render() for o in ops)};"
            raw.b.raw_ptx(line)
            rejected.append(line)
    return accepted.finish(), raw.finish(), rejected


GRIDS = [(key, groups, None) for key, groups in ROWS] + MEMORY_ROWS


@pytest.mark.parametrize("key,groups,types_list", GRIDS,
                         ids=[f"{k}-{'+'.join(sorted(g or ()))}" for k, g, _ in GRIDS])
def test_table_agrees_with_the_assembler(key, groups, types_list):
    accepted, raw, rejected = _split(key, groups, types_list)
    assert_assembles(accepted)
    if not rejected:
        return
    with pytest.raises(AssemblyError) as info:
        assert_assembles(raw)
    lines = raw.render().splitlines()
    refused = {lines[int(n) - 1].strip() for n in re.findall(r"line (\d+); error", info.value.log)}
    too_strict = [line for line in rejected if line not in refused]
    assert not too_strict, f"the table rejects forms ptxas accepts: {too_strict[:10]}"
