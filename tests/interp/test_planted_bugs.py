"""Bugs planted in real kernels, each caught by the interpreter with a message that names the flag or the
Python line: a flag raised without a release fence (AG+GEMM), an off-by-one tile coordinate in the flag
a block waits for before loading a tile (AG+GEMM), a missing mbarrier arrive (GEMM), and a signal after
waiting for the bulk copies' reads only (``wait_group.read``, pk-design 5)."""
from __future__ import annotations

import functools

import pytest

from pkptx.interp import DeadlockError, InterpError, RaceError
from pkptx.isa import Sem, builder as isa_builder, u64
from pkptx.templates.kernels import ag_gemm

from .test_tier_gemm import run_ag_gemm, test_gemm_128x256x64 as run_gemm


def _fresh(build):
    """A build that is not the tier's cached kernel (the planted bug changes what it emits)."""
    return functools.wraps(build)(lambda cfg: build(cfg))


def test_flag_without_release_fence(monkeypatch):
    stamp = ag_gemm.stamp

    def relaxed_stamp(b, flag, value, *, sem, scope):
        stamp(b, flag, value, sem=Sem.RELAXED, scope=scope)        # planted: a plain store, no release
    monkeypatch.setattr(ag_gemm, "stamp", relaxed_stamp)
    with pytest.raises(RaceError) as err:
        run_ag_gemm(2, 1, build=_fresh(ag_gemm.build))
    text = str(err.value)
    assert "data race: read of a+" in text and "flag ready[" in text and "cp.async.bulk.global" in text, text


def test_off_by_one_tile_in_the_awaited_flag(monkeypatch):
    wait = ag_gemm.wait

    def wait_previous_tile(b, flag, expected, **kw):
        wait(b, b.sub(u64, flag, 4), expected, **kw)                # planted: the flag of tile tm - 1
    monkeypatch.setattr(ag_gemm, "wait", wait_previous_tile)
    with pytest.raises(InterpError) as err:
        run_ag_gemm(2, 2, build=_fresh(ag_gemm.build))
    text = str(err.value)
    assert "(in wait_previous_tile)" in text, text             # the planted line, as race or fault


def test_missing_arrive(monkeypatch):
    def expect_only(self, addr, tx_bytes, **kw):
        self.mbarrier_expect_tx(addr, tx_bytes, **kw)               # planted: the arrive is gone
    monkeypatch.setattr(isa_builder.Builder, "mbarrier_arrive_expect_tx", expect_only)
    monkeypatch.setattr("tests.interp.test_tier_gemm.kernel", lambda build, cfg: build(cfg))
    with pytest.raises(DeadlockError) as err:
        run_gemm("nk", "bf16")
    text = str(err.value)
    assert "no warp can make progress" in text and "mbarrier full" in text and "1 of 1 arrivals pending" in text, text


def test_signal_after_a_read_only_wait(monkeypatch):
    def read_only(b):
        b.bulk_wait_group(0, read=True)                              # planted: the writes may be in flight
        b.fence_proxy_async("global")
    monkeypatch.setattr(ag_gemm, "publish_async_writes", read_only)
    with pytest.raises(RaceError) as err:
        run_ag_gemm(2, 1, build=_fresh(ag_gemm.build))
    text = str(err.value)
    assert "not ordered after the write by the copy" in text and "flag ready[" in text, text
