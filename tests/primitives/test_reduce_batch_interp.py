"""reduce_vector over a tuple of units (the GEMM+AR communicators' batched form), on the CPU
interpreter with a world of 3 copies in one machine: every unit gets the f32 sum over copies, rounded
once, written to every copy; the single-unit form gives the same bits. No GPU needed."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from pkptx.interp import Machine
from pkptx.isa import Kernel, u32
from pkptx.primitives.layout import ParallelLayout
from pkptx.primitives.tile import reduce_vector

BATCH, THREADS, WORLD = 4, 64, 3
C = ParallelLayout("c")


def kernel(batched: bool) -> Kernel:
    k = Kernel(f"reduce_batch_{batched}", [*C.params(), ("world", u32), ("rank", u32)], max_threads=THREADS)
    b = k.builder()
    data = C.bind(b)
    world, rank = b.load_param("world"), b.load_param("rank")
    tid = b.special("tid.x")
    offsets = tuple(b.mul(u32, b.add(u32, tid, j * THREADS), 16, mode="wide") for j in range(BATCH))
    if batched:
        reduce_vector(b, data, offsets, ty="bf16", op="sum", world=world, rank=rank, write_all=True, multicast=False)
    else:
        for off in offsets:
            reduce_vector(b, data, off, ty="bf16", op="sum", world=world, rank=rank, write_all=True,
                          multicast=False)
    b.ret()
    return k


@pytest.mark.parametrize("batched", [True, False])
def test_batched_all_reduce_matches_numpy(batched):
    rng = np.random.default_rng(3)
    copies = [rng.standard_normal(BATCH * THREADS * 8).astype(ml_dtypes.bfloat16) for _ in range(WORLD)]
    m = Machine(seed=1)
    bufs = [m.from_numpy(c, name=f"c{r}", rank=r) for r, c in enumerate(copies)]
    table = m.from_numpy(np.array([buf.base for buf in bufs], np.uint64), name="peers")
    m.launch(kernel(batched), 1, THREADS, table, 0, WORLD, 0)
    m.run()
    total = sum(c.astype(np.float32) for c in copies).astype(ml_dtypes.bfloat16)
    for buf in bufs:
        assert np.array_equal(buf.read(np.uint16), total.view(np.uint16))
