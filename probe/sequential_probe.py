"""Why is bench_sp's sequential composition (all_gather of K/V, then attention, timed as one unit) so much slower
than its two steps timed one by one? Each rank times, at the ring's shape (B=4, H=16, D=128, its shard of
``SEQ_PROBE_TOKENS`` queries against all keys): the attention alone, ranks taking turns (the others wait on
the host); the attention on every rank at once (queued back to back, as bench_sp's step); the same with a tiny
all_gather before each repeat (ranks in step); the gather of K/V alone; and gather then attention (bench_sp's
sequential); ring_attention in step; the attention in step on fewer SMs (its grid cut to the share less 8, and
to half: is it bound by the memory the ranks share?). Run under MPS (``python -m pkptx mps run --ranks N --
mpirun -n N python probe/sequential_probe.py``). Rank 0 prints every rank's median ms. Not a test."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import pkptx  # noqa: E402
from pkptx.bench.common import checked_ms  # noqa: E402
from pkptx.launch import Device, Stream, SymmetricHeap, World, empty, from_numpy  # noqa: E402
from pkptx.launch.occupancy import context_sm_count  # noqa: E402
from rank_table import print_rank_table  # noqa: E402
from pkptx.ops import attention as attention_op  # noqa: E402

TOKENS = int(os.environ.get("SEQ_PROBE_TOKENS", 24576))


def main():
    world = World()
    Device(world.device_ordinal()).set_current()
    stream, w, bf16 = Stream(), world.size, ml_dtypes.bfloat16
    batch, s, h, d = 4, TOKENS // w, 16, 128
    rng = np.random.default_rng(5 + world.rank)
    rand = lambda *shape: rng.standard_normal(shape, dtype=np.float32).astype(bf16)  # noqa: E731
    heap = SymmetricHeap(world, 6 * batch * TOKENS * h * d * 2 // w + 3 * batch * TOKENS * h * d * 2 + (64 << 20))
    q, out = from_numpy(rand(batch, s, h, d)), empty((batch, s, h, d), bf16)
    k_shard, v_shard = heap.alloc((batch, s, h, d), bf16), heap.alloc((batch, s, h, d), bf16)
    k_full, v_full = heap.alloc((batch, TOKENS, h, d), bf16), heap.alloc((batch, TOKENS, h, d), bf16)
    tiny, tiny_all = heap.alloc((1, 256), np.float32), heap.alloc((w, 256), np.float32)
    k_shard.local.copy_from_numpy(rand(batch, s, h, d))
    v_shard.local.copy_from_numpy(rand(batch, s, h, d))
    world.barrier(what="inputs")

    def gather():
        pkptx.all_gather(k_shard, world, dim=1, out=k_full, stream=stream)
        pkptx.all_gather(v_shard, world, dim=1, out=v_full, stream=stream)

    def attend():
        pkptx.attention(q, k_full.local, v_full.local, out=out, stream=stream)

    def line_up():
        pkptx.all_gather(tiny, world, dim=0, out=tiny_all, stream=stream)

    def in_step():
        line_up()
        attend()

    timed = lambda fn: checked_ms(fn, stream, repeats=5)  # noqa: E731
    gather()
    attend()
    pkptx.synchronize(stream)
    rows = {}
    turns = []
    for turn in range(w):
        world.barrier(what="turn")
        if turn == world.rank:
            turns.append(timed(attend))
        world.barrier(what="turn done")
    rows["attention, ranks in turn"] = turns[0]
    world.barrier(what="together")
    rows["attention, all ranks queued at once"] = timed(attend)
    world.barrier(what="in step")
    rows["tiny all_gather + attention (in step)"] = timed(in_step)
    rows["tiny all_gather alone"] = timed(lambda: pkptx.all_gather(tiny, world, dim=0, out=tiny_all, stream=stream))
    ring_out = empty((batch, s, h, d), bf16)
    ring = lambda: pkptx.ring_attention(q, k_shard.local, v_shard.local, world, out=ring_out, stream=stream)  # noqa
    ring()
    rows["tiny all_gather + ring_attention (fused)"] = timed(lambda: (line_up(), ring()))
    sms = context_sm_count()
    for blocks in (sms - 8, sms // 2):
        attention_op.grid_size = lambda kernel, tasks, blocks=blocks: blocks
        narrow = empty((batch, s, h, d), bf16)            # a new operand: a new prepared launch, new grid
        attend_narrow = lambda: pkptx.attention(q, k_full.local, v_full.local, out=narrow, stream=stream)  # noqa
        rows[f"tiny all_gather + attention on {blocks} of {sms} SMs"] = timed(lambda: (line_up(), attend_narrow()))
    rows["all_gather K and V"] = timed(gather)
    rows["all_gather K and V, then attention"] = timed(lambda: (gather(), attend()))
    print_rank_table(world, rows, f"{w} ranks, B={batch}, H={h}, D={d}, {s} queries x {TOKENS} keys a rank")
    heap.close()
    world.close()


if __name__ == "__main__":
    main()
