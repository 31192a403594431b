"""Golden PTX for small fixed kernels (tests/corpus/*.ptx): the diff is a review artefact for any
change to the builder's output. Each kernel is also assembled (a golden match is not sufficient).
Regenerate after an intended change with ``PKPTX_UPDATE_CORPUS=1`` and review the diff."""
from __future__ import annotations

import pytest

from pkptx.isa import Kernel, Param, address, b8, f32, u32, u64
from tests.helpers.assemble import assert_assembles
from tests.helpers.golden import check_corpus, check_ptx


def axpy() -> Kernel:
    """y[i] = alpha * x[i] + y[i] for i < n."""
    k = Kernel("axpy", [Param("x", u64, pointer=True), Param("y", u64, pointer=True), ("n", u32), ("alpha", f32)],
               max_threads=256)
    b = k.builder()
    x, y, n, alpha = (b.load_param(p) for p in ("x", "y", "n", "alpha"))
    i = b.mad(u32, b.special("ctaid.x"), b.special("ntid.x"), b.special("tid.x"), mode="lo", name="i")
    with b.if_then(b.setp("lt", u32, i, n)):
        offset = b.mul(u32, i, 4, mode="wide", name="offset")
        px, py = b.add(u64, x, offset, name="px"), b.add(u64, y, offset, name="py")
        vx = b.ld(f32, address(px), space="global", nc=True, name="vx")
        vy = b.ld(f32, address(py), space="global", name="vy")
        b.st(f32, address(py), b.fma(f32, alpha, vx, vy, rnd="rn", name="r"), space="global")
    b.ret()
    return k


def tma_tile_copy() -> Kernel:
    """One elected thread TMA-loads a 2-D tile into shared memory behind an mbarrier, everyone waits on
    the phase, then the tile is TMA-stored back out through a bulk group."""
    k = Kernel("tma_tile_copy", [Param("src", b8, count=128, align=64), Param("dst", b8, count=128, align=64)],
               max_threads=128)
    b = k.builder()
    tile = k.shared("tile", 64 * 64 * 2, align=128)
    bar = k.shared("full", 8, align=8)
    # TMA takes the generic address of a by-value tensor-map parameter: mov + cvta.param
    src, dst = (b.cvta(u64, "param", b.param_address(p), name=f"{p}_map") for p in ("src", "dst"))
    x = b.mul(u32, b.special("ctaid.x"), 64, mode="lo", name="x")
    leader = b.elect(name="leader")
    with b.if_then(leader):
        b.mbarrier_init(address(bar), 1)
        b.fence_mbarrier_init()
    b.bar_sync(0)
    with b.if_then(leader):
        b.mbarrier_arrive_expect_tx(address(bar), 64 * 64 * 2, sem="release", scope="cta")
        b.tensor_load(address(tile), src, (x, 0), address(bar))
    with b.loop("wait_full") as lp:
        lp.break_if(b.mbarrier_try_wait(address(bar), 0, parity=True, sem="acquire", scope="cta"))
    b.fence_proxy_async("shared::cta")
    with b.if_then(leader):
        b.tensor_store(dst, (x, 0), address(tile))
        b.bulk_commit_group()
        b.bulk_wait_group(0)
    b.ret()
    return k


def signal_wait() -> Kernel:
    """Release-add a flag on another GPU's copy, then spin on the local copy with acquire loads."""
    k = Kernel("signal_wait", [Param("peer_flag", u64, pointer=True), Param("my_flag", u64, pointer=True),
                               ("expected", u32)])
    b = k.builder()
    peer, mine, expected = (b.load_param(p) for p in ("peer_flag", "my_flag", "expected"))
    with b.if_then(b.setp("eq", u32, b.special("tid.x"), 0)):
        b.fence("acq_rel", "sys")
        b.red("add", u32, address(peer), 1, sem="release", scope="sys", space="global")
        with b.loop("spin") as lp:
            seen = b.ld(u32, address(mine), sem="acquire", scope="sys", space="global", name="seen")
            lp.break_if(b.setp("ge", u32, seen, expected))
            b.nanosleep(64)
    b.bar_sync(0)
    b.ret()
    return k


CORPUS = {"axpy": axpy, "tma_tile_copy": tma_tile_copy, "signal_wait": signal_wait}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_kernel_matches_its_golden_file(name):
    kernel = CORPUS[name]()
    check_corpus(kernel, name)
    assert_assembles(kernel)


def test_check_ptx_inline():
    k = Kernel("tiny", [("n", u32)])
    b = k.builder()
    b.add(u32, b.load_param("n"), 1, name="m")
    b.ret()
    check_ptx(k, """
        // pkptx kernel tiny
        .version 7.8
        .target sm_90
        .address_size 64

        .visible .entry tiny(
        \t.param .u32 n
        )
        {
        \t.reg .u32 %n0, %m0;

        \tld.param.u32 %n0, [n];
        \tadd.u32 %m0, %n0, 1;
        \tret;
        }
        """)


def test_check_ptx_reports_a_diff():
    k = Kernel("tiny", [("n", u32)])
    k.builder().ret()
    with pytest.raises(AssertionError, match=r"(?s)differs.*-\tbogus;.*\+\tret;"):
        check_ptx(k, k.render().replace("\tret;", "\tbogus;"))
