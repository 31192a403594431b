"""Clusters under the interpreter: distributed shared memory through ``mapa`` ordered by
``barrier.cluster``, and a multicast tensor load that lands in every CTA of the cluster."""
from __future__ import annotations

import numpy as np
import pytest

from pkptx.interp import Machine, RaceError
from pkptx.interp.tensormap import tiled
from pkptx.isa import Kernel, Param, address, b8, u32, u64
from pkptx.primitives import wait_parity


def _dsmem(barrier: bool) -> Kernel:
    """Each CTA of a 2-CTA cluster fills its ``buf``; then each reads the other CTA's into ``out``."""
    k = Kernel("dsmem", [Param("out", u64, pointer=True)], max_threads=32, cluster=(2, 1, 1))
    b = k.builder()
    buf = b.mov(u32, k.shared("buf", 128, align=16), name="buf")
    tid, me = b.special("tid.x"), b.special("cluster_ctarank")
    b.st(u32, address(b.mad(u32, tid, 4, buf, mode="lo")), b.mad(u32, me, 100, tid, mode="lo"), space="shared")
    if barrier:
        b.cluster_arrive(sem="release")
        b.cluster_wait()
    peer = b.mapa(u32, buf, b.xor("b32", me, 1), name="peer_buf")
    v = b.ld(u32, address(b.mad(u32, tid, 4, peer, mode="lo")), space="shared::cluster")
    at = b.mad(u32, me, 32, tid, mode="lo")
    b.st(u32, address(b.add(u64, b.load_param("out"), b.mul(u32, at, 4, mode="wide"))), v, space="global")
    if barrier:                     # nobody leaves while its shared memory may still be read
        b.cluster_arrive(sem="release")
        b.cluster_wait()
    b.ret()
    return k


@pytest.mark.parametrize("seed", range(3))
def test_distributed_shared_memory_after_the_cluster_barrier(seed):
    out = np.zeros(64, np.uint32)
    m = Machine(seed=seed, check_races=True)
    m.launch(_dsmem(True), 2, 32, out)
    m.run()
    tid = np.arange(32)
    assert np.array_equal(out, np.concatenate([100 + tid, tid]))


def test_distributed_shared_memory_without_the_barrier_is_a_race():
    with pytest.raises(RaceError, match=r"shared of block \((0|1), 0, 0\)"):
        for seed in range(8):
            m = Machine(seed=seed, check_races=True, quantum=4)
            m.launch(_dsmem(False), 2, 32, np.zeros(64, np.uint32))
            m.run()


def test_multicast_tensor_load_fills_every_cta():
    """CTA 0 loads one 8 x 16 box and multicasts it to both CTAs; each CTA waits on its own mbarrier."""
    k = Kernel("mcast", [Param("tmap", b8, 128, 64), Param("out", u64, pointer=True)], max_threads=32,
               cluster=(2, 1, 1))
    b = k.builder()
    tile = b.mov(u32, k.shared("tile", 256, align=1024), name="tile")
    bar = b.mov(u32, k.shared("bar", 8, align=8), name="bar")
    tid, me = b.special("tid.x"), b.special("cluster_ctarank")
    leader = b.setp("eq", u32, tid, 0)
    with b.if_then(leader):
        b.mbarrier_init(address(bar), 1)
        b.fence_mbarrier_init()
        b.mbarrier_arrive_expect_tx(address(bar), 256)
    b.cluster_arrive(sem="release")
    b.cluster_wait()
    with b.if_then(b.and_("pred", leader, b.setp("eq", u32, me, 0))):
        b.tensor_load(address(tile), b.cvta(u64, "param", b.param_address("tmap")), (0, 0), address(bar),
                      multicast_mask=3)
    wait_parity(b, address(bar), 0, deadline=None)
    for i in range(2):
        v = b.ld(u32, address(b.mad(u32, tid, 4, tile, mode="lo"), 128 * i), space="shared")
        at = b.mad(u32, me, 64, b.add(u32, tid, 32 * i), mode="lo")
        b.st(u32, address(b.add(u64, b.load_param("out"), b.mul(u32, at, 4, mode="wide"))), v, space="global")
    b.cluster_arrive(sem="release")
    b.cluster_wait()
    b.ret()
    src = np.arange(8 * 16, dtype=np.uint16).reshape(8, 16)
    m = Machine(check_races=True)
    a = m.from_numpy(src)
    out = np.zeros(128, np.uint32)
    m.launch(k, 2, 32, tiled(a.base, np.uint16, (8, 16), (8, 16)).data, out)
    m.run()
    assert np.array_equal(out.view(np.uint16).reshape(2, 8, 16), np.stack([src, src]))
