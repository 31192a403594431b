"""The happens-before race checker on small kernels: each ordering edge it models, with and without the
instruction that provides it."""
from __future__ import annotations

import numpy as np
import pytest

from pkptx.interp import Machine, RaceError
from pkptx.interp.world import World
from pkptx.isa import Kernel, Param, address, u32, u64


def _shared_handoff(barrier: bool) -> Kernel:
    """Warp 0 writes shared memory, warp 1 reads it (after ``bar.sync`` when ``barrier``)."""
    k = Kernel("handoff", [Param("out", u64, pointer=True)], max_threads=64)
    b = k.builder()
    buf = b.mov(u32, k.shared("buf", 256, align=16), name="buf")
    tid = b.special("tid.x")
    with b.if_then(b.setp("lt", u32, tid, 32)):
        b.st(u32, address(b.mad(u32, tid, 4, buf, mode="lo")), tid, space="shared")
    if barrier:
        b.bar_sync(0)
    with b.if_then(b.setp("ge", u32, tid, 32)):
        v = b.ld(u32, address(b.mad(u32, b.sub(u32, tid, 32), 4, buf, mode="lo")), space="shared")
        b.st(u32, address(b.add(u64, b.load_param("out"), b.mul(u32, tid, 4, mode="wide"))), v, space="global")
    b.ret()
    return k


@pytest.mark.parametrize("seed", range(3))
def test_shared_read_needs_the_barrier(seed):
    out = np.zeros(64, np.uint32)
    Machine(seed=seed, check_races=True).launch(_shared_handoff(True), 1, 64, out).machine.run()
    m = Machine(seed=seed, check_races=True)
    m.launch(_shared_handoff(False), 1, 64, out)
    with pytest.raises(RaceError, match=r"data race: (read|write) of shared of block[\s\S]*warp [01]: (ld|st).shared"):
        m.run()


def _flag_kernel(sem: str, fence: bool) -> Kernel:
    """Rank 0 writes data to rank 1 and raises rank 1's flag; rank 1 waits for it and reads the data."""
    k = Kernel("flag", [Param("data", u64, pointer=True), Param("peer_data", u64, pointer=True),
                        Param("flag", u64, pointer=True), Param("peer_flag", u64, pointer=True), ("rank", u32),
                        Param("out", u64, pointer=True)], max_threads=32)
    b = k.builder()
    first = b.setp("eq", u32, b.special("tid.x"), 0)
    with b.if_then(first):
        with b.if_else(b.setp("eq", u32, b.load_param("rank"), 0)) as (then, otherwise):
            with then:
                b.st(u32, address(b.load_param("peer_data")), 42, space="global")
                if fence:
                    b.fence("acq_rel", "sys")
                b.red("add", u32, address(b.load_param("peer_flag")), 1, sem=sem, scope="sys", space="global")
            with otherwise:
                with b.loop("spin") as lp:
                    seen = b.ld(u32, address(b.load_param("flag")), sem="acquire", scope="sys", space="global")
                    lp.break_if(b.setp("ge", u32, seen, 1))
                b.st(u32, address(b.load_param("out")), b.ld(u32, address(b.load_param("data")), space="global"),
                     space="global")
    b.ret()
    return k


@pytest.mark.parametrize("sem, fence, ok", [("release", False, True), ("relaxed", True, True),
                                            ("relaxed", False, False)])
def test_peer_data_needs_a_release_before_the_flag(sem, fence, ok):
    w = World(2, check_races=True)
    data, flag = w.symmetric((4,), np.uint32, name="data", fill=0), w.symmetric((4,), np.uint32, name="flag", fill=0)
    outs = [w.machine.alloc(4, name="out", rank=r) for r in range(2)]
    kernel = _flag_kernel(sem, fence)
    for r in range(2):
        w.launch(r, kernel, 1, 32, data.ptr(r), data.ptr(1 - r), flag.ptr(r), flag.ptr(1 - r), r, outs[r])
    if ok:
        w.run()
        assert outs[1].read(np.uint32)[0] == 42
        return
    with pytest.raises(RaceError, match=r"read of data\+0 \(rank 1\)[\s\S]*rank 0 block[\s\S]*last acquire was "
                                        r"flag flag\[0\] of rank 1"):
        w.run()
