"""CI tier under the interpreter: the TMA/wgmma GEMM on a 128 x 256 x 64 problem (both B layouts, bf16
and f32 output) and each fused GEMM + communication kernel on its smallest legal shape at world sizes
1 to 3 (64-row tiles, one tile per rank), against the kernels' numpy references
(the GEMM elementwise, the fused kernels by the fused GPU tests' normwise rule)."""
from __future__ import annotations

import dataclasses
import functools

import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from pkptx.errors import PTXBuildError
from pkptx.templates.kernels import ag_gemm, gemm, gemm_ar, gemm_rs

from .harness import DTYPES, Ranks, assert_bits, assert_close, assert_rel, inputs

FP8 = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
SMALL = gemm.Config(tile_m=64, tile_n=64, stages=2)
AR_TILE = gemm.Config(tile_m=128, tile_n=128, stages=2)    # gemm_ar reduces a tile in whole 256 x 8-vector steps


@functools.lru_cache(maxsize=None)
def kernel(build, cfg):
    return build(cfg)


def _threads(cfg: gemm.Config) -> int:
    return 128 * (1 + cfg.consumers)


def _operands(seed: int, w: int, m: int, n: int, k: int, layout: str):
    a = inputs(seed, w, (m, k), "bf16")
    b = inputs(seed + 1, w, (n, k) if layout == "nk" else (k, n), "bf16")
    return a, b


def _poisoned_c(mach, m: int, n: int, out_dtype: str):
    """C on the machine, every element NaN: a kernel must write each one."""
    out_bytes = 4 if out_dtype == "f32" else 2
    c_dev = mach.alloc(m * n * out_bytes, name="c")
    c_dev.write(np.full(m * n * out_bytes // 2, 0x7FC0, np.uint16))
    return c_dev


@pytest.mark.parametrize("layout, out_dtype", [("nk", "bf16"), ("kn", "bf16"), ("nk", "f32")])
def test_gemm_128x256x64(layout, out_dtype):
    m, n, k = 128, 256, 64
    cfg = gemm.Config(out_dtype=out_dtype, b_layout=layout, tile_n=256, stages=2)
    ranks = Ranks(1, seed=3)
    (a,), (b,) = _operands(5, 1, m, n, k, layout)
    mach = ranks.world.machine
    a_dev, c_dev = mach.from_numpy(a, name="a"), mach.alloc(m * n * 4, name="c")
    values = ranks.gemm_values(cfg, a_dev.base, b, 0, m, n, k)
    ranks.launch(0, kernel(gemm.build, cfg), _threads(cfg), layouts={}, grid=1, smem=cfg.smem_bytes, num_comm_sms=0,
                 tmap_c=ranks.tensor_map(c_dev.base, DTYPES[out_dtype], (m, n), cfg.c_box), **values)
    ranks.run()
    got = c_dev.read(DTYPES[out_dtype], (m, n))
    assert_close(got, gemm.reference(a, b, layout), out_dtype, 1, "C")


@pytest.mark.parametrize("tile_m, tile_n, out_dtype, epilogue", [
    (64, 80, "bf16", "tma"), (64, 72, "bf16", "tma"), (256, 152, "bf16", "tma"), (128, 200, "f32", "direct"),
    (64, 112, "f32", "tma"), (64, 240, "bf16", "tma"), (256, 80, "bf16", "tma"),
    (256, 64, "f32", "direct")])
def test_gemm_tile_widths_and_256_rows(tile_m, tile_n, out_dtype, epilogue):
    """A tile width that is not whole C boxes (pkptx.ops.gemm_plan fits waves with such widths): the
    TMA epilogue stores the whole boxes, registers the columns past them, clipped at C's edges; and
    256-row tiles, two 64-row chains a warpgroup (C NaN-poisoned; M = 300 and N = 200 cut the last tile
    row and column short)."""
    m, n, k = 300 if tile_m == 256 else 100, 200, 128
    cfg = gemm.Config(tile_m=tile_m, tile_n=tile_n, stages=2, out_dtype=out_dtype, epilogue=epilogue)
    ranks = Ranks(1, seed=14)
    (a,), (b,) = _operands(31, 1, m, n, k, "nk")
    mach = ranks.world.machine
    a_dev, c_dev = mach.from_numpy(a, name="a"), _poisoned_c(mach, m, n, out_dtype)
    values = ranks.gemm_values(cfg, a_dev.base, b, 0, m, n, k)
    ranks.launch(0, kernel(gemm.build, cfg), _threads(cfg), layouts={}, grid=2, smem=cfg.smem_bytes, num_comm_sms=0,
                 tmap_c=ranks.tensor_map(c_dev.base, DTYPES[out_dtype], (m, n), cfg.c_box), c=c_dev.base, m=m, n=n,
                 **values)
    ranks.run()
    assert_close(c_dev.read(DTYPES[out_dtype], (m, n)), gemm.reference(a, b, "nk"), out_dtype, 1, "C")


@pytest.mark.parametrize("dtype, out_dtype, tile_m, tile_n", [
    ("e4m3", "bf16", 64, 128), ("e5m2", "f32", 64, 64), ("e4m3", "bf16", 256, 152), ("e4m3", "f32", 128, 200)])
def test_fp8_gemm_scaled(dtype, out_dtype, tile_m, tile_n):
    """fp8 A and B (two 128-deep k-blocks, a short last tile row and column) with per-tensor scales read
    from global memory: C = scale_a · scale_b · A·Bᵀ; also the planner's fitted widths (the last columns
    stored from registers) and a 256-row tile."""
    m, n, k = 2 * tile_m - 8, 2 * tile_n - 8, 256
    cfg = gemm.Config(dtype=dtype, out_dtype=out_dtype, tile_m=tile_m, tile_n=tile_n, stages=2)
    ranks = Ranks(1, seed=4)
    rng = np.random.default_rng(9)
    a, b = (rng.standard_normal(shape, dtype=np.float32).astype(FP8[dtype]) for shape in ((m, k), (n, k)))
    scale_a, scale_b = np.float32(0.75), np.float32(-2.5)
    mach = ranks.world.machine
    a_dev, c_dev = mach.from_numpy(a, name="a"), mach.alloc(m * n * 4, name="c")
    scales = {name: mach.from_numpy(np.array([v], np.float32), name=name).base
              for name, v in (("scale_a", scale_a), ("scale_b", scale_b))}
    values = ranks.gemm_values(cfg, a_dev.base, b, 0, m, n, k)
    ranks.launch(0, kernel(gemm.build, cfg), _threads(cfg), layouts={}, grid=2, smem=cfg.smem_bytes, num_comm_sms=0,
                 tmap_c=ranks.tensor_map(c_dev.base, DTYPES[out_dtype], (m, n), cfg.c_box), **values, **scales,
                 **(dict(c=c_dev.base, m=m, n=n) if cfg.c_tail else {}))
    ranks.run()
    ref = gemm.reference(a, b) * float(scale_a * scale_b)
    assert_close(c_dev.read(DTYPES[out_dtype], (m, n)), ref, out_dtype, 1, "C")


@settings(max_examples=8, deadline=None)
@given(tile_m=st.sampled_from([64, 128]), tile_n=st.sampled_from([64, 128]), k_split=st.sampled_from([2, 4]),
       k_blocks=st.integers(1, 3), m_tail=st.integers(0, 63), n_tail=st.sampled_from([0, 8, 56]),
       layout=st.sampled_from(["nk", "kn"]))
@example(tile_m=64, tile_n=64, k_split=2, k_blocks=3, m_tail=0, n_tail=0, layout="nk")
@example(tile_m=128, tile_n=64, k_split=4, k_blocks=2, m_tail=0, n_tail=0, layout="nk")
def test_gemm_k_split(tile_m, tile_n, k_split, k_blocks, m_tail, n_tail, layout):
    """k-split accumulators: a k-block's four wgmma steps alternate over 2 or 4 accumulators, summed
    after the K loop, where the registers allow (one k-block or more than the stages; one or two
    warpgroups; M and N cutting the last tiles short; C NaN-poisoned)."""
    try:
        cfg = gemm.Config(tile_m=tile_m, tile_n=tile_n, stages=2, b_layout=layout, k_split=k_split)
    except PTXBuildError:
        assume(False)
    m, n, k = 2 * tile_m - m_tail, 2 * tile_n - n_tail, 64 * k_blocks       # two tile rows and columns
    ranks = Ranks(1, seed=8)
    (a,), (b,) = _operands(17, 1, m, n, k, layout)
    mach = ranks.world.machine
    a_dev, c_dev = mach.from_numpy(a, name="a"), mach.alloc(m * n * 2, name="c")
    c_dev.write(np.full(m * n, 0x7FC0, np.uint16))
    values = ranks.gemm_values(cfg, a_dev.base, b, 0, m, n, k)
    ranks.launch(0, kernel(gemm.build, cfg), _threads(cfg), layouts={}, grid=1, smem=cfg.smem_bytes, num_comm_sms=0,
                 tmap_c=ranks.tensor_map(c_dev.base, DTYPES["bf16"], (m, n), cfg.c_box), **values)
    ranks.run()
    assert_close(c_dev.read(DTYPES["bf16"], (m, n)), gemm.reference(a, b, layout), "bf16", 1, "C")


@pytest.mark.parametrize("m, k, stages, epilogue, tile_m", [
    (256, 128, 2, "tma", 64), (192, 192, 2, "tma", 64), (320, 64, 3, "direct", 64),
    (384, 128, 2, "tma", 128), (320, 192, 3, "direct", 128), (256, 128, 2, "tma", (128, 192))])
def test_gemm_pingpong(m, k, stages, epilogue, tile_m):
    """Ping-pong on one block: tiles alternate between the two warpgroups, each skipping the other's
    stages (an even and an odd tile count, more k-blocks than stages, a tail of 1); 128-row tiles: two
    accumulator chains a warpgroup, the last tile half out of C; 128 x 192: setmaxnreg)."""
    tile_m, n = tile_m if isinstance(tile_m, tuple) else (tile_m, 128)
    cfg = gemm.Config(tile_m=tile_m, tile_n=n, stages=stages, pingpong=True, epilogue=epilogue)
    ranks = Ranks(1, seed=4)
    (a,), (b,) = _operands(11, 1, m, n, k, "nk")
    mach = ranks.world.machine
    a_dev, c_dev = mach.from_numpy(a, name="a"), mach.alloc(m * n * 2, name="c")
    c_dev.write(np.full(m * n, 0x7FC0, np.uint16))             # NaN: every element must be written
    values = ranks.gemm_values(cfg, a_dev.base, b, 0, m, n, k)
    out = (dict(tmap_c=ranks.tensor_map(c_dev.base, DTYPES["bf16"], (m, n), cfg.c_box)) if epilogue == "tma"
           else dict(c=c_dev.base, m=m, n=n))
    ranks.launch(0, kernel(gemm.build, cfg), _threads(cfg), layouts={}, grid=1, smem=cfg.smem_bytes, num_comm_sms=0,
                 **values, **out)
    ranks.run()
    assert_close(c_dev.read(DTYPES["bf16"], (m, n)), gemm.reference(a, b, "nk"), "bf16", 1, "C")


@pytest.mark.parametrize("m, n, tile_n, splits, out_dtype, k_split", [
    (20, 136, 32, 1, "bf16", 1), (16, 64, 16, 2, "f32", 4), (40, 72, 48, 3, "bf16", 2), (7, 72, 8, 1, "bf16", 4),
    (20, 136, 24, 2, "f32", 4)])
def test_gemm_swapped_small_m(m, n, tile_n, splits, out_dtype, k_split):
    """The swapped schedule (pkptx.ops.gemm_plan): the kernel computes Cᵀ = B·Aᵀ with B's N rows down
    the 64-row side and M as a narrow tile, and stores each tile transposed into C (NaN-poisoned
    first); M and N cut tiles short; split-K sums the slices' partials; k-split accumulators."""
    k = 64 * (splits + 1)
    cfg = gemm.Config(tile_m=64, tile_n=tile_n, stages=2, out_dtype=out_dtype, epilogue="direct",
                      transpose_c=True, split_k=splits > 1, k_split=k_split)
    ranks = Ranks(1, seed=6)
    (a,), (b,) = _operands(13, 1, m, n, k, "nk")
    mach = ranks.world.machine
    b_dev, c_dev = mach.from_numpy(b, name="b"), _poisoned_c(mach, m, n, out_dtype)
    values = ranks.gemm_values(cfg, b_dev.base, a, 0, n, m, k)             # the kernel's A is B, its B is A
    if splits > 1:
        slabs = values["tiles_m"] * values["tiles_n"]
        values.update(splits=splits, split_ws=mach.alloc(slabs * splits * 64 * tile_n * 4, name="ws").base,
                      split_tickets=mach.from_numpy(np.zeros(slabs, np.uint32), name="tickets").base)
    ranks.launch(0, kernel(gemm.build, cfg), _threads(cfg), layouts={}, grid=2, smem=cfg.smem_bytes, num_comm_sms=0,
                 c=c_dev.base, m=n, n=m, **values)
    ranks.run()
    assert_close(c_dev.read(DTYPES[out_dtype], (m, n)), gemm.reference(a, b, "nk"), out_dtype, 1, "C")


@pytest.mark.parametrize("cfg, m, n, k, splits", [
    (gemm.Config(tile_m=64, tile_n=64, stages=2, drawn=True), 200, 192, 128, 1),
    (gemm.Config(tile_m=64, tile_n=128, stages=2, pingpong=True, drawn=True), 320, 128, 192, 1),
    (gemm.Config(tile_m=64, tile_n=64, stages=2, epilogue="direct", split_k=True, drawn=True), 128, 120, 192, 3)])
def test_gemm_drawn_tiles_twice(cfg, m, n, k, splits):
    """Drawn tiles (the op's form in a partial context): 2 blocks draw 6-8 tasks from the counter,
    ping-pong turns and split-K slices included; C NaN-poisoned before each of two launches, and the
    counter back at 0 after each (the second launch draws from 0 again)."""
    ranks = Ranks(1, seed=9)
    (a,), (b,) = _operands(21, 1, m, n, k, "nk")
    mach = ranks.world.machine
    a_dev, c_dev = mach.from_numpy(a, name="a"), mach.alloc(m * n * 2, name="c")
    counter = mach.from_numpy(np.zeros(2, np.uint32), name="task_counter")
    values = ranks.gemm_values(cfg, a_dev.base, b, 0, m, n, k)
    if splits > 1:
        slabs = values["tiles_m"] * values["tiles_n"]
        values.update(splits=splits, split_ws=mach.alloc(slabs * splits * 64 * cfg.tile_n * 4, name="ws").base,
                      split_tickets=mach.from_numpy(np.zeros(slabs, np.uint32), name="tickets").base)
    out = (dict(tmap_c=ranks.tensor_map(c_dev.base, DTYPES["bf16"], (m, n), cfg.c_box)) if cfg.epilogue == "tma"
           else dict(c=c_dev.base, m=m, n=n))
    for _ in range(2):
        c_dev.write(np.full(m * n, 0x7FC0, np.uint16))
        ranks.launch(0, kernel(gemm.build, cfg), _threads(cfg), layouts={}, grid=2, smem=cfg.smem_bytes,
                     num_comm_sms=0, task_counter=counter.base, **values, **out)
        ranks.run()
        assert_close(c_dev.read(DTYPES["bf16"], (m, n)), gemm.reference(a, b, "nk"), "bf16", 1, "C")
        assert counter.read(np.uint32, (2,)).tolist() == [0, 0], "each launch leaves the counter at 0"


@pytest.mark.parametrize("m, k, workers, epilogue, drawn", [
    (320, 256, 2, "tma", False),      # 5 tiles: 4 whole, 1 cut in two runs of 2 k-blocks
    (256, 320, 3, "direct", False),   # 4 tiles: 3 whole, 1 cut in three runs (5 k-blocks)
    (320, 192, 3, "tma", True),       # 5 tiles: 3 whole, 2 cut; worker 1 heads one and tails the other
])
def test_gemm_stream_k_twice(m, k, workers, epilogue, drawn):
    """Stream-K (pkptx.templates.stream_k): whole tiles, then the last wave's tiles cut into equal
    k-block runs across the blocks, summed in position order by whoever completes the count; C
    NaN-poisoned before each of two launches, the same bits both times, every counter back at 0 (with
    drawn tasks as in a partial context, too)."""
    cfg = dataclasses.replace(SMALL, stream_k=True, epilogue=epilogue, drawn=drawn)
    n = 64
    ranks = Ranks(1, seed=12)
    (a,), (b,) = _operands(23, 1, m, n, k, "nk")
    mach = ranks.world.machine
    a_dev, c_dev = mach.from_numpy(a, name="a"), mach.alloc(m * n * 2, name="c")
    values = ranks.gemm_values(cfg, a_dev.base, b, 0, m, n, k)
    tiles = values["tiles_m"] * values["tiles_n"]
    tickets = mach.from_numpy(np.zeros(workers, np.uint32), name="tickets")
    values.update(dp_tiles=(-(-tiles // workers) - 1) * workers, sk_workers=workers,
                  sk_ws=mach.alloc(2 * workers * 64 * n * 4, name="ws").base, sk_tickets=tickets.base)
    if drawn:
        values.update(task_counter=mach.from_numpy(np.zeros(2, np.uint32), name="task_counter").base)
    out = (dict(tmap_c=ranks.tensor_map(c_dev.base, DTYPES["bf16"], (m, n), cfg.c_box)) if epilogue == "tma"
           else dict(c=c_dev.base, m=m, n=n))
    results = []
    for _ in range(2):
        c_dev.write(np.full(m * n, 0x7FC0, np.uint16))
        ranks.launch(0, kernel(gemm.build, cfg), _threads(cfg), layouts={}, grid=workers, smem=cfg.smem_bytes,
                     num_comm_sms=0, **values, **out)
        ranks.run()
        results.append(c_dev.read(DTYPES["bf16"], (m, n)))
        assert_close(results[-1], gemm.reference(a, b, "nk"), "bf16", 1, "C")
        assert not tickets.read(np.uint32, (workers,)).any(), "each launch leaves its counters at 0"
    assert_bits(results[1], results[0], "C, second launch")


@pytest.mark.parametrize("w", (1, 2, 3))
def test_gemm_rs_smallest(w):
    cfg = gemm_rs.Config(dataclasses.replace(SMALL, out_dtype="f32"))
    m, n, k = 64 * w, 64, 64
    ranks = Ranks(w, seed=w)
    a, b = _operands(w, w, m, n, k, "nk")
    out = ranks.symmetric((m // w, n), np.float32, "out", fill=0)
    mach = ranks.world.machine
    for r in range(w):
        a_dev = mach.from_numpy(a[r], name="a", rank=r)
        maps = b"".join(ranks.tensor_map(out.ptr(p), np.float32, out.shape, cfg.gemm.c_box) for p in range(w))
        c_maps = mach.from_numpy(np.frombuffer(maps, np.uint8), name="c_tmaps", rank=r)
        ranks.launch(r, kernel(gemm_rs.build, cfg), _threads(cfg.gemm), layouts={}, smem=cfg.gemm.smem_bytes,
                     num_comm_sms=0, rows_per_rank=m // w, c_tmaps=c_maps.base,
                     **ranks.gemm_values(cfg.gemm, a_dev.base, b[r], r, m, n, k))
    ranks.run()
    refs = gemm_rs.reference(a, b, w)
    for r in range(w):
        assert_rel(out.read(r), refs[r], f"rank {r}")


def run_ag_gemm(w: int, tiles_per_rank: int = 1, build=ag_gemm.build):
    """AG+GEMM with 64-row tiles, ``tiles_per_rank`` row blocks per rank; returns (shards, B per rank,
    C per rank)."""
    cfg = ag_gemm.Config(SMALL)
    rows = SMALL.tile_m * tiles_per_rank
    m, n, k = rows * w, 64, 64
    ranks = Ranks(w, seed=w + 10)
    shards = inputs(w + 20, w, (rows, k), "bf16")
    _, b = _operands(w + 30, w, m, n, k, "nk")
    a_sym = ranks.symmetric((m, k), DTYPES["bf16"], "a")
    ready = ranks.symmetric((-(-m // SMALL.tile_m) + 1,), np.uint32, "ready", fill=0)    # and the tile counter
    mach = ranks.world.machine
    outs = []
    for r in range(w):
        a_sym.allocs[r].write(shards[r], offset=r * rows * k * 2)
        out = mach.alloc(m * n * 2, name="c", rank=r)
        outs.append(out)
        ranks.launch(r, kernel(build, cfg), _threads(SMALL), layouts=dict(a=a_sym, ready=ready), grid=3,
                     smem=SMALL.smem_bytes, num_comm_sms=1, rows_per_rank=rows, row_bytes=k * 2,
                     tmap_c=ranks.tensor_map(out.base, DTYPES["bf16"], (m, n), SMALL.c_box),
                     **ranks.gemm_values(SMALL, a_sym.ptr(r), b[r], r, m, n, k))
    ranks.run()
    left = [int(ready.read(r)[-1]) for r in range(w)]
    assert left == [0] * w, f"tile counters after the launch: {left}"
    return shards, b, [out.read(DTYPES["bf16"], (m, n)) for out in outs]


@pytest.mark.parametrize("w, tiles", [(1, 1), (2, 1), (3, 1), (2, 2)])
def test_ag_gemm_smallest(w, tiles):
    shards, b, outs = run_ag_gemm(w, tiles)
    for r in range(w):
        assert_rel(outs[r], ag_gemm.reference(shards, b[r]), f"rank {r}")


@pytest.mark.parametrize("w", (1, 2, 3))
@pytest.mark.parametrize("mc", [False, True], ids=["unicast", "multicast"])
@pytest.mark.parametrize("m, n, grid", [(128, 128, 2), (384, 200, 3)], ids=["one_tile", "six_tiles"])
def test_gemm_ar_smallest(w, mc, m, n, grid):
    """One tile (ranks past 0 own none), or six with an edge column: compute and owned tiles drawn, the
    compute blocks joining the reduction; both counters left at 0."""
    cfg = gemm_ar.Config(AR_TILE, multicast=mc)
    k = 64
    ranks = Ranks(w, seed=w + 40, multicast=mc)
    a, b = _operands(w + 50, w, m, n, k, "nk")
    out = ranks.symmetric((m, n), DTYPES["bf16"], "c")
    tiles = -(-m // AR_TILE.tile_m) * -(-n // AR_TILE.tile_n)
    # a slot per (tile, rank, warpgroup), then the two task counters
    done = ranks.symmetric((tiles * w * AR_TILE.consumers + 2,), np.uint32, "done", fill=0)
    mach = ranks.world.machine
    for r in range(w):
        a_dev = mach.from_numpy(a[r], name="a", rank=r)
        ranks.launch(r, kernel(gemm_ar.build, cfg), _threads(AR_TILE), layouts=dict(c=out, done=done), grid=grid,
                     smem=AR_TILE.smem_bytes, num_comm_sms=1, m=m, n=n,
                     tmap_c=ranks.tensor_map(out.ptr(r), DTYPES["bf16"], (m, n), AR_TILE.c_box),
                     **ranks.gemm_values(AR_TILE, a_dev.base, b[r], r, m, n, k))
    ranks.run()
    ref = gemm_ar.reference(a, b)
    for r in range(w):
        assert_rel(out.read(r), ref, f"rank {r}")
        assert list(done.read(r)[-2:]) == [0, 0], f"rank {r}: task counters left at {done.read(r)[-2:]}"
