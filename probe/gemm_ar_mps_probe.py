"""Why does the fused GEMM + all-reduce lose to GEMM-then-all-reduce under MPS (#16: 0.65-0.75 at 4 ranks,
0.90-1.09 at 2, bench_fused at faf65ed)? Each rank times, at bench_fused's shapes (A N x N/W, B N x N/W):
the GEMM alone, the all-reduce alone, the two as one unit, and the fused kernel at the model's communicator
count and at 2, 4, 8, 16: does any split pay (then the model is wrong), or does none (then the kernel
loses time beyond its split: slab waits, flag polls, the joined tail)? The unit is also split by an event
between its two steps: which of them takes the time the unit costs beyond the steps timed apart? Run under MPS (``python -m pkptx mps
run --ranks N -- mpirun -n N python probe/gemm_ar_mps_probe.py``). Rank 0 prints every rank's median ms.
Not a test."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import pkptx  # noqa: E402
from pkptx.bench.common import GPU_ONLY_NS, checked_ms  # noqa: E402
from pkptx.launch import Device, Event, Stream, SymmetricHeap, World, from_numpy  # noqa: E402
from pkptx.launch.timing import hold  # noqa: E402
from pkptx.launch.occupancy import context_sm_count  # noqa: E402
from rank_table import print_rank_table  # noqa: E402
from pkptx.ops.gemm_plan import all_reduce_comm_sms  # noqa: E402

SIZES = [int(s) for s in os.environ.get("AR_PROBE_SIZES", "4096,8192").split(",")]
SPLITS = (2, 4, 8, 16)


def split_ms(first, second, stream, repeats: int = 10) -> tuple[float, float]:
    """Median ms of ``first()`` and of ``second()`` queued back to back as one unit (an event between
    them), after the same GPU hold as the other rows."""
    marks = [(Event(), Event(), Event()) for _ in range(repeats)]
    for start, middle, end in marks:
        hold(stream, GPU_ONLY_NS)
        start.record(stream)
        first()
        middle.record(stream)
        second()
        end.record(stream)
    pkptx.synchronize(stream)
    return (float(np.median([s.elapsed_ms(m) for s, m, _ in marks])),
            float(np.median([m.elapsed_ms(e) for _, m, e in marks])))


def main():
    world = World()
    Device(world.device_ordinal()).set_current()
    stream, w, bf16 = Stream(), world.size, ml_dtypes.bfloat16
    rng = np.random.default_rng(11 + world.rank)
    heap = SymmetricHeap(world, 4 * max(SIZES) ** 2 * 2 + (64 << 20))   # room beside the freed smaller sizes
    sms = context_sm_count()
    rows = {}
    timed = lambda fn: checked_ms(fn, stream, repeats=10)  # noqa: E731
    for n in SIZES:
        rand = lambda *shape: from_numpy(rng.standard_normal(shape, dtype=np.float32).astype(bf16))  # noqa: E731
        a, b = rand(n, n // w), rand(n, n // w)
        partial, ar_out = heap.alloc((n, n), bf16), heap.alloc((n, n), bf16)
        world.barrier(what="inputs")
        gemm = lambda: pkptx.gemm(a, b, partial.local, stream=stream)  # noqa: E731
        reduce = lambda: pkptx.all_reduce(partial, world, stream=stream)  # noqa: E731
        model = all_reduce_comm_sms(n, n, n // w, 2, w, sms, (128, 256))
        gemm(), reduce()
        pkptx.synchronize(stream)
        rows[f"N={n}: gemm"] = timed(gemm)
        rows[f"N={n}: all_reduce"] = timed(reduce)
        rows[f"N={n}: gemm then all_reduce"] = timed(lambda: (gemm(), reduce()))
        rows[f"N={n}: in the unit, gemm"], rows[f"N={n}: in the unit, all_reduce"] = split_ms(gemm, reduce, stream)
        if os.environ.get("AR_PROBE_AFTER"):    # is it the GEMM, a write of the buffer, or time busy before?
            spin_ns = int(rows[f"N={n}: gemm"] * 1e6)
            rows[f"N={n}: all_reduce after a GPU spin as long as the gemm"] = split_ms(
                lambda: hold(stream, spin_ns), reduce, stream)[1]
            scratch = rand(n, n)
            rows[f"N={n}: all_reduce after a copy into its buffer"] = split_ms(
                lambda: pkptx.bulk_copy(partial.local, scratch, stream=stream), reduce, stream)[1]
            rows[f"N={n}: all_reduce after a fill of its buffer"] = split_ms(
                lambda: partial.local.fill(0.5, stream=stream), reduce, stream)[1]
            rows[f"N={n}: all_reduce after an all_reduce"] = split_ms(reduce, reduce, stream)[1]
        for c in sorted({model, *SPLITS}):
            fused = lambda c=c: pkptx.gemm_ar(a, b, world, out=ar_out, num_comm_sms=c, fused=True, stream=stream)  # noqa
            fused()
            pkptx.synchronize(stream)
            if c == model:
                err = np.abs(ar_out.local.to_numpy().astype(np.float32) - partial.local.to_numpy().astype(np.float32))
                rows[f"N={n}: fused max |diff| vs composed"] = float(err.max())
            rows[f"N={n}: fused, {c} communicators{' (model)' if c == model else ''}"] = timed(fused)
        ar_out.free()
        partial.free()
    print_rank_table(world, rows, f"{w} ranks, {sms} SMs a rank; A and B N x N/{w} bf16")
    heap.close()
    world.close()


if __name__ == "__main__":
    main()
