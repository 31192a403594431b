"""The split-K fixup (pkptx.templates.split_k.reduce_slab) run on the CPU interpreter, with no GPU: one
block per (slab, K slice) publishes synthetic accumulators; whichever slice draws the last ticket must
write the sum over slices in slice order (the same float32 bits however the warps interleave), and
every counter must be back at 0 for the next launch."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pkptx.isa import Kernel, Param, address, f32, u32, u64
from pkptx.templates.split_k import reduce_slab, slab_bytes

TILE_N = 16                  # 8 accumulators a thread: two quads
REGS = TILE_N // 2


def fixup_kernel() -> Kernel:
    k = Kernel("split_fixup", [Param("parts", u64, pointer=True), Param("out", u64, pointer=True),
                               Param("ws", u64, pointer=True), Param("tickets", u64, pointer=True),
                               ("splits", u32)], max_threads=128)
    b = k.builder()
    parts, out, ws, tickets, splits = (b.load_param(n) for n in ("parts", "out", "ws", "tickets", "splits"))
    word = b.mov(u32, k.shared("ticket", 4, 4), name="ticket_word")
    tid, block = b.special("tid.x"), b.special("ctaid.x")
    slab, k_slice = b.div(u32, block, splits), b.rem(u32, block, splits)
    acc = b.regs(f32, REGS, name="acc")
    for i in range(REGS):        # parts[block][i][tid]
        index = b.mad(u32, b.mad(u32, block, REGS, i, mode="lo"), 128, tid, mode="lo")
        b.ld(f32, address(b.add(u64, parts, b.mul(u32, index, 4, mode="wide"))), space="global", into=acc[i])
    last = reduce_slab(b, acc, tile_n=TILE_N, slab=slab, k_slice=k_slice, splits=splits, workspace=ws,
                       tickets=tickets, wg_tid=tid, barrier_id=1, ticket_smem=word)
    with b.if_then(last):        # out[slab][i][tid]
        for i in range(REGS):
            index = b.mad(u32, b.mad(u32, slab, REGS, i, mode="lo"), 128, tid, mode="lo")
            b.st(f32, address(b.add(u64, out, b.mul(u32, index, 4, mode="wide"))), acc[i], space="global")
    b.ret()
    return k


KERNEL = fixup_kernel()


def run(parts: np.ndarray, splits: int, seed: int):
    slabs = parts.shape[0] // splits
    out = np.full((slabs, REGS, 128), np.nan, np.float32)
    ws = np.zeros(slabs * splits * slab_bytes(TILE_N) // 4, np.float32)
    tickets = np.zeros(slabs, np.uint32)
    KERNEL.interpret(slabs * splits, 128, parts, out, ws, tickets, splits, seed=seed)
    return out, tickets


@settings(max_examples=6, deadline=None)
@given(slabs=st.integers(1, 3), splits=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_last_slice_sums_in_slice_order_and_resets_the_counter(slabs, splits, seed):
    rng = np.random.default_rng(seed)
    parts = (rng.standard_normal((slabs * splits, REGS, 128)) * 1e3).astype(np.float32)
    out, tickets = run(parts, splits, seed)
    want = parts.reshape(slabs, splits, REGS, 128)[:, 0].copy()
    for s in range(1, splits):       # float32, one slice at a time: the device's order
        want = (want + parts.reshape(slabs, splits, REGS, 128)[:, s]).astype(np.float32)
    assert np.array_equal(out.view(np.uint32), want.view(np.uint32))
    assert not tickets.any()


@pytest.mark.parametrize("splits", [3])
def test_same_bits_whatever_the_interleaving(splits):
    parts = (np.random.default_rng(5).standard_normal((2 * splits, REGS, 128)) * 1e4).astype(np.float32)
    results = [run(parts, splits, seed)[0].tobytes() for seed in (0, 1, 2)]
    assert results[0] == results[1] == results[2]
