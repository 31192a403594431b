"""The spec-driven property (issue 20): thousands of random programs drawn from the spec table itself
(tests/helpers/spec_programs.py: any row, legal types, any subset of modifier groups, valid-looking
operands) through ``Builder.emit``. Whatever the builder accepts must assemble; whatever it refuses must
be a PTXBuildError (never another exception), and nothing may crash the process."""
from __future__ import annotations

import random
import re

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pkptx.errors import AssemblyError, PTXBuildError
from pkptx.isa import SPECS
from tests.helpers.spec_programs import Chooser, draw_call, finish, spec_sandbox

PROGRAMS = 2000
DRAWS = 40                # instructions offered per program (about half are accepted)


def _program(seed: int, target: str):
    """The program of ``seed``: a hypothesis draw of one integer keeps each example cheap, and a failure
    is reproduced by its seed alone."""
    c = Chooser(random.Random(seed))
    sb = spec_sandbox(target=target)
    accepted = 0
    for _ in range(DRAWS):
        key, operands, types, mods = draw_call(c, sb)
        try:
            sb.b.emit(key, *operands, types=types, **mods)
            accepted += 1
        except PTXBuildError:
            pass
    return finish(sb), accepted


@settings(max_examples=PROGRAMS, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 32 - 1), target=st.sampled_from(("sm_90", "sm_90a")))
def test_what_the_builder_accepts_assembles(seed, target):
    kernel, accepted = _program(seed, target)
    try:
        kernel.compile(use_cache=False)
    except PTXBuildError as exc:            # a whole-kernel rule, checked when the kernel renders
        assert exc.origin, exc
    except AssemblyError as exc:
        lines = kernel.render().splitlines()
        bad = [(lines[int(n) - 1].strip(), msg) for n, msg in re.findall(r"line (\d+); error\s*:\s*(.*)", exc.log)]
        pytest.fail(f"program {seed} ({target}): the builder accepted {accepted} form(s), ptxas rejects "
                    f"{len(bad) or 'the kernel'}:\n{exc.log[:300] if not bad else ''}"
                    + "\n".join(f"  {line}   <- {msg}" for line, msg in bad[:10]))


def test_the_generator_exercises_the_table():
    """Guard against a generator that only produces refusals: most rows get accepted forms."""
    seen = set()
    for seed in range(60):
        kernel, _ = _program(seed, "sm_90a")
        seen |= {ins.key for ins in kernel.body if ins.kind == "ins"}
    assert len(seen) >= 0.8 * len(SPECS), sorted(set(SPECS) - seen)
