"""The stream-K walk and fixup (pkptx.templates.stream_k) on the CPU interpreter, with no GPU: ``workers``
blocks walk their two segments each, as the GEMM's persistent blocks do; a live segment's synthetic
partial goes through ``settle``, and whoever completes a tile must write the f32 sum of its segments in
k order (the same bits however the warps interleave), with every counter back at 0."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pkptx.isa import Kernel, Param, address, f32, u32, u64
from pkptx.templates.stream_k import SEGMENTS_PER_WORKER, segment_of, settle
from pkptx.templates.split_k import slab_bytes

TILE_N = 16                  # 8 accumulators a thread: two quads
REGS = TILE_N // 2


def walk_kernel() -> Kernel:
    k = Kernel("stream_walk", [Param("parts", u64, pointer=True), Param("out", u64, pointer=True),
                               Param("ws", u64, pointer=True), Param("tickets", u64, pointer=True),
                               ("workers", u32), ("tiles", u32), ("k_blocks", u32)], max_threads=128)
    b = k.builder()
    parts, out, ws, tickets, workers, tiles, k_blocks = (
        b.load_param(n) for n in ("parts", "out", "ws", "tickets", "workers", "tiles", "k_blocks"))
    word = b.mov(u32, k.shared("ticket", 4, 4), name="ticket_word")
    tid, block = b.special("tid.x"), b.special("ctaid.x")
    for index in range(SEGMENTS_PER_WORKER):
        task = b.mad(u32, workers, index, block, mode="lo", name="task")
        seg = segment_of(b, task, dp_tiles=0, workers=workers, tiles=tiles, k_blocks=k_blocks)
        with b.if_then(b.setp("lt", u32, seg.kb_first, seg.kb_end), uniform=True):
            acc = b.regs(f32, REGS, name="acc")
            for i in range(REGS):        # parts[task][i][tid]
                at = b.mad(u32, b.mad(u32, task, REGS, i, mode="lo"), 128, tid, mode="lo")
                b.ld(f32, address(b.add(u64, parts, b.mul(u32, at, 4, mode="wide"))), space="global", into=acc[i])
            done = settle(b, acc, seg, tile_n=TILE_N, consumers=1, wg=0, workspace=ws, tickets=tickets, wg_tid=tid,
                          barrier_id=1, ticket_smem=word)
            with b.if_then(done, uniform=True):      # out[tile][i][tid]
                for i in range(REGS):
                    at = b.mad(u32, b.mad(u32, seg.tile, REGS, i, mode="lo"), 128, tid, mode="lo")
                    b.st(f32, address(b.add(u64, out, b.mul(u32, at, 4, mode="wide"))), acc[i], space="global")
    b.ret()
    return k


KERNEL = walk_kernel()


def segments(workers: int, tiles: int, k_blocks: int) -> dict[int, list[tuple[int, int]]]:
    """Per tile, (first k-block, task) of its live segments: the kernel's walk, in Python."""
    total, per_tile = tiles * k_blocks, {}
    for task in range(SEGMENTS_PER_WORKER * workers):
        index, worker = divmod(task, workers)
        lo, hi = worker * total // workers, (worker + 1) * total // workers
        tile = lo // k_blocks + index
        start, end = max(lo, tile * k_blocks), min(hi, (tile + 1) * k_blocks)
        if tile < tiles and start < end:
            per_tile.setdefault(tile, []).append((start, task))
    return per_tile


@settings(max_examples=8, deadline=None)
@given(workers=st.integers(1, 5), data=st.data(), seed=st.integers(0, 2**16))
def test_each_tile_is_the_sum_of_its_runs_in_k_order(workers, data, seed):
    tiles = data.draw(st.integers(1, workers), label="tiles")
    k_blocks = data.draw(st.integers(-(-workers // tiles), 7), label="k_blocks")
    rng = np.random.default_rng(seed)
    parts = (rng.standard_normal((SEGMENTS_PER_WORKER * workers, REGS, 128)) * 1e3).astype(np.float32)
    out = np.full((tiles, REGS, 128), np.nan, np.float32)
    tickets = np.zeros(workers, np.uint32)
    ws = np.zeros(2 * workers * slab_bytes(TILE_N) // 4, np.float32)
    KERNEL.interpret(workers, 128, parts, out, ws, tickets, workers, tiles, k_blocks, seed=seed)
    per_tile = segments(workers, tiles, k_blocks)
    assert sorted(per_tile) == list(range(tiles)), "every tile has a live segment"
    for tile, runs in per_tile.items():
        want = parts[sorted(runs)[0][1]].copy()
        for _, task in sorted(runs)[1:]:     # float32, one run at a time: the device's order
            want = (want + parts[task]).astype(np.float32)
        assert np.array_equal(out[tile].view(np.uint32), want.view(np.uint32)), f"tile {tile}, runs {sorted(runs)}"
    assert not tickets.any(), "every counter back at 0"
