"""The one timeout setting: seconds everywhere; the call's, else the World's, else PKPTX_TIMEOUT_S,
else the default; bad values are SettingErrors naming where they came from."""
from __future__ import annotations

import math
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pkptx.errors import PkptxError, SettingError, WorldError
from pkptx.launch.timeouts import (DEFAULT_TIMEOUT_S, ENV, MAX_TIMEOUT_S, default_timeout_s, resolve_timeout_s,
                                   to_ns)
from pkptx.launch.world import World

seconds = st.floats(min_value=1e-6, max_value=MAX_TIMEOUT_S)
maybe = st.none() | seconds


@given(call=maybe, world=maybe, env=maybe)
def test_the_call_wins_then_the_world_then_the_environment_then_the_default(call, world, env):
    with pytest.MonkeyPatch.context() as mp:
        if env is None:
            mp.delenv(ENV, raising=False)
        else:
            mp.setenv(ENV, repr(env))
        w = World.single(timeout=world)
        expected = next(v for v in (call, world, env, DEFAULT_TIMEOUT_S) if v is not None)
        assert resolve_timeout_s(call, w) == expected
        assert w.timeout == next(v for v in (world, env, DEFAULT_TIMEOUT_S) if v is not None)
        assert resolve_timeout_s(call) == next(v for v in (call, env, DEFAULT_TIMEOUT_S) if v is not None)
        w.close()


@pytest.mark.parametrize("text", ["abc", "0", "-1", "nan", "inf", "1e7", "3s"])
def test_a_bad_environment_value_is_named(monkeypatch, text):
    monkeypatch.setenv(ENV, text)
    with pytest.raises(SettingError, match=rf"{ENV}='{text}' \(environment\): expected a number of seconds > 0"):
        default_timeout_s()
    with pytest.raises(SettingError, match=ENV):
        World.single()


def test_blank_environment_means_the_default(monkeypatch):
    monkeypatch.setenv(ENV, "  ")
    assert default_timeout_s() == DEFAULT_TIMEOUT_S


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, MAX_TIMEOUT_S * 2, True, "5", None])
def test_bad_world_and_call_timeouts_are_refused_before_any_wait(monkeypatch, bad):
    monkeypatch.delenv(ENV, raising=False)
    if bad is not None:
        with pytest.raises(SettingError, match=r"World\(timeout\)=.*expected a number of seconds"):
            World.single(timeout=bad)
    with World.single() as world:
        if bad is None:
            world.barrier(timeout=bad)      # None: the world's own
            return
        for collective in (world.barrier, lambda timeout: world.allgather(1, timeout=timeout)):
            with pytest.raises(SettingError, match=r"timeout=.*expected a number of seconds > 0 and <= 1e\+06"):
                collective(timeout=bad)
    assert issubclass(SettingError, PkptxError) and issubclass(SettingError, ValueError)


@given(seconds)
def test_to_ns_is_the_same_time_in_nanoseconds(s):
    ns = to_ns(s)
    assert isinstance(ns, int) and abs(ns - s * 1e9) <= 0.5 + s * 1e9 * 1e-15
    assert ns < 2**63


def test_to_ns_refuses_what_no_wait_may_take():
    with pytest.raises(SettingError):
        to_ns(0)


def test_abort_ends_the_process_with_its_status_after_flushing():
    code = ("from pkptx.launch.world import World; w = World.single(); print('before', flush=False); "
            "w.abort(5); print('after')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 5 and out.stdout == "before\n", (out.stdout, out.stderr)
    assert "ends with status 5 without MPI_Finalize: World.abort(5) on rank 0" in out.stderr


@pytest.mark.parametrize("bad", [-1, 256, 1.0, True])
def test_abort_status_is_checked(bad):
    with World.single() as world, pytest.raises(WorldError, match=r"World.abort\(status=.*expected an int exit status in 0..255"):
        world.abort(bad)
