"""Assertions about pkptx's build errors (style rule 6): the bad part, the legal options, the user's line."""
from __future__ import annotations

import contextlib
import inspect
import os
from unittest import mock

import pytest

from pkptx.errors import PTXBuildError


def caller_line() -> int:
    """The line number the caller is executing (``x = f(); line = caller_line()`` on one line)."""
    return inspect.currentframe().f_back.f_lineno


@contextlib.contextmanager
def assembler_forbidden():
    """Fail the test if anything reaches nvJitLink: the error must come from the builder."""
    def refuse(*args, **kwargs):
        pytest.fail("the assembler was reached; the builder should have rejected this first")
    with mock.patch("pkptx.toolchain._link", refuse):
        yield


@contextlib.contextmanager
def build_error(*needles: str, cls=PTXBuildError):
    """``with build_error("'.relaxed'", ".cta"): <one call>``: the call raises ``cls`` (without reaching
    the assembler), its message contains every needle, and its origin is the ``with`` statement's
    line (the user's line, never a pkptx frame)."""
    caller = inspect.stack(context=0)[2]    # [0] this generator, [1] contextlib, [2] the test
    with assembler_forbidden(), pytest.raises(cls) as info:
        yield info
    message = str(info.value)
    for needle in needles:
        assert needle in message, f"{needle!r} not in the error message:\n{message}"
    origin = info.value.origin or ""
    here = f"{os.path.abspath(caller.filename)}:"
    assert os.path.abspath(origin.split(":")[0]) == os.path.abspath(caller.filename), \
        f"origin {origin!r} is not in the test file {caller.filename}"
    line = int(origin.split(":")[1].split()[0])
    assert caller.lineno <= line <= caller.lineno + 3, \
        f"origin {origin!r} is not the call on line {caller.lineno} of {here}"
