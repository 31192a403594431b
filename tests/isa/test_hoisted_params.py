"""Parameters are loaded once, at the kernel's entry, whichever path asks first: a register of a parameter
first read inside one arm holds its value in the other arm and after the construct (the interpreter runs
both), and the PTX has one ``ld.param`` per parameter, before the first branch."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pkptx.errors import PTXBuildError
from pkptx.isa import Kernel, Param, address, u32, u64


def _arms_kernel(loads_in_then: bool) -> Kernel:
    """out[tid] = 2·x + y (odd tid) or 2·x + 2·y (even), where x and y are first loaded inside an arm."""
    k = Kernel("arms", [Param("out", u64), Param("x", u32), Param("y", u32)], req_threads=64)
    b = k.builder()
    tid = b.special("tid.x")
    odd = b.setp("ne", u32, b.and_("b32", tid, 1), 0)
    acc = b.mov(u32, 0, name="acc")
    with b.if_else(odd) as (then, otherwise):
        with then:
            if loads_in_then:
                b.add(u32, acc, b.load_param("x"), into=acc)
            b.add(u32, acc, b.load_param("y"), into=acc)
        with otherwise:
            b.add(u32, acc, b.mul(u32, b.load_param("y"), 2, mode="lo"), into=acc)
            if not loads_in_then:
                b.add(u32, acc, b.load_param("x"), into=acc)
    with b.if_then(odd):
        b.add(u32, acc, b.load_param("x"), into=acc)
    with b.if_then(b.not_("pred", odd)):
        b.add(u32, acc, b.load_param("x"), into=acc)
    if loads_in_then:       # the even threads' second x (the odd ones' came in their arm)
        with b.if_then(b.not_("pred", odd)):
            b.add(u32, acc, b.load_param("x"), into=acc)
    else:                   # the odd threads' second x (the even ones' came in their arm)
        with b.if_then(odd):
            b.add(u32, acc, b.load_param("x"), into=acc)
    at = b.mad(u64, b.cvt(u64, u32, tid), 4, b.load_param("out"), mode="lo")
    b.st(u32, address(at), acc, space="global")
    b.ret()
    return k


@pytest.mark.parametrize("loads_in_then", [True, False])
def test_one_load_per_parameter_before_the_first_branch(loads_in_then):
    lines = _arms_kernel(loads_in_then).render().splitlines()
    loads = [i for i, line in enumerate(lines) if "ld.param" in line]
    first_branch = next(i for i, line in enumerate(lines) if "bra" in line)
    assert len(loads) == 3 and max(loads) < first_branch


@settings(max_examples=10, deadline=None)
@given(x=st.integers(0, 1 << 20), y=st.integers(0, 1 << 20), loads_in_then=st.booleans())
def test_a_parameter_loaded_in_one_arm_holds_its_value_everywhere(x, y, loads_in_then):
    out = np.full(64, 0xDEADBEEF, np.uint32)
    _arms_kernel(loads_in_then).interpret(1, 64, out, x, y)
    odd = np.arange(64) % 2 == 1
    want = np.where(odd, 2 * x + y, 2 * x + 2 * y).astype(np.uint32)
    assert np.array_equal(out, want)


def test_the_same_register_every_time_and_unknown_names_fail_at_build():
    k = Kernel("same", [Param("n", u32)], req_threads=32)
    b = k.builder()
    assert b.load_param("n") is b.load_param("n")
    with pytest.raises(PTXBuildError, match=r"no parameter 'm'.*n") as info:
        b.load_param("m")
    assert info.value.origin and "test_hoisted_params.py" in info.value.origin
