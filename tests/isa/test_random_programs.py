"""Property tests: random well-typed programs always render and assemble; random corruptions of valid
instruction forms always raise PTXBuildError before the assembler is reached."""
from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings, strategies as st

from pkptx.errors import PTXBuildError
from tests.helpers.assemble import Sandbox, assert_assembles
from tests.helpers.errors import assembler_forbidden
from tests.helpers.forms import GROUPS, record_group
from tests.helpers.strategies import OPS, REGISTER_TYPES, apply_corruption, corruptions, emit_program, programs


def test_every_register_type_has_operations():
    assert {t.name for t in REGISTER_TYPES} == set(OPS) and all(OPS.values())


@settings(max_examples=250)
@given(programs())
def test_random_programs_assemble(program):
    """Each program assembles, and building it again in a fresh kernel gives byte-identical PTX (names,
    labels and declarations depend only on the program), with every instruction traced to its line."""
    sb = Sandbox("random", target="sm_90a")
    emit_program(sb, program)
    kernel = sb.finish()
    again = Sandbox("random", target="sm_90a")
    emit_program(again, program)
    assert again.finish().render() == kernel.render()
    instruction_lines = {i + 1 for i, line in enumerate(kernel.render().splitlines())
                         if line.startswith("\t") and line.rstrip().endswith(";") and not line.startswith("\t.reg")}
    assert instruction_lines <= set(kernel.origins)
    assert_assembles(kernel)


@functools.lru_cache(maxsize=None)
def recorded():
    """Every valid emit call of the spec-table forms, with the sandbox it was recorded in."""
    return [(sb, call) for group in GROUPS.values() for sb, calls in [record_group(group)] for call in calls]


def test_recorded_forms_replay_cleanly():
    """The corruption test below is only meaningful if the uncorrupted calls are valid: each replays
    into its kernel without an error and emits the very line it emitted when recorded."""
    calls = recorded()
    assert len(calls) > 500
    for sb, call in calls:
        replayed = sb.b.emit(call.key, *call.operands, types=call.types, pred=call.pred, **call.mods)
        sb.k.body.pop()
        assert replayed.render() == call.line, call


@settings(max_examples=400)
@given(st.data())
def test_corrupted_forms_never_reach_the_assembler(data):
    sb, call = data.draw(st.sampled_from(recorded()), label="form")
    corruption = data.draw(corruptions(call, sb), label="corruption")
    operands, types, guard, mods = apply_corruption(corruption, call, sb)
    with assembler_forbidden(), pytest.raises(PTXBuildError):
        sb.b.emit(call.key, *operands, types=types, pred=guard, **mods)
        sb.finish().compile(use_cache=False)     # reached only if the builder wrongly accepted it
