"""nccl-tests-style sweep of pkptx's collectives: sizes 8 B to 1 GiB by powers of two, algbw and busbw,
a correctness check at every size, median of CUDA-event timings.

Run under MPI, one process per rank: ``mpirun -n 4 python bench/bench_collectives.py [--record]``.
With several GPUs and torch.distributed available it also times NCCL on the same buffers; with all
ranks on one GPU it reports what pkptx achieves (protocol overhead, not NVLink bandwidth).
busbw follows nccl-tests: all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n, all-to-all (n-1)/n.
"""
from __future__ import annotations

import argparse

import numpy as np

import common  # noqa: F401  (puts the checkout on sys.path)
from common import report

BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n}


def sizes(max_bytes: int, min_bytes: int = 8):
    s = min_bytes
    while s <= max_bytes:
        yield s
        s *= 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--max-bytes", type=int, default=1 << 30)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    args = ap.parse_args()
    import ml_dtypes
    from pkptx.launch import Device, Stream, SymmetricHeap, World, time_cuda
    from pkptx.ops import collectives
    dtype = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32}[args.dtype]
    import nccl
    world = World()
    ordinal = world.device_ordinal()
    Device(ordinal).set_current()
    dist = nccl.start(world, ordinal)
    stream = Stream()
    item = np.dtype(dtype).itemsize
    heap = SymmetricHeap(world, 2 * args.max_bytes + (64 << 20))
    rows, rng = [], np.random.default_rng(1234)
    for nbytes in sizes(args.max_bytes, max(8, item)):
        n = nbytes // item
        src, dst = heap.alloc((n,), dtype), heap.alloc((n,), dtype)
        inputs = [rng.standard_normal(n, dtype=np.float32).astype(dtype) for _ in range(world.size)] \
            if n <= (1 << 22) else None
        if inputs is not None:
            src.local.copy_from_numpy(inputs[world.rank])
        else:                       # large: a rank-dependent constant keeps the check cheap and exact
            src.local.copy_from_numpy(np.full(n, world.rank + 1, dtype=dtype))
        Device.current().synchronize()
        world.barrier(what="inputs ready")
        algorithm = "one_shot" if nbytes <= (1 << 20) else "two_shot"

        def run():
            collectives.all_reduce(src, world, out=dst, algorithm=algorithm, stream=stream)
        run()
        collectives.synchronize(stream, what=f"all_reduce {nbytes} B")
        result = dst.local.to_numpy().astype(np.float64)
        want = (np.sum([x.astype(np.float64) for x in inputs], axis=0) if inputs is not None
                else np.full(n, world.size * (world.size + 1) / 2))
        ok = bool(np.all(np.abs(result - want) <= 2 ** -7 * (np.abs(want) + world.size)))
        world.barrier(what="checked")
        t = time_cuda(run, stream=stream, warmup=2, repeats=args.repeats).median_ms
        collectives.synchronize(stream, what="timed all_reduce")
        algbw = nbytes / (t * 1e-3) / 1e9
        row = [nbytes, n, algorithm, t * 1e3, algbw, algbw * BUS_FACTOR["all_reduce"](world.size),
               "ok" if ok else "WRONG"]
        if dist is not None:
            import torch
            tensor = torch.ones(n, dtype={2: torch.bfloat16 if args.dtype == "bf16" else torch.float16,
                                          4: torch.float32}[item], device="cuda")
            t_nccl = nccl.time_ms(lambda: dist.all_reduce(tensor), args.repeats)
            row += [t_nccl * 1e3, nbytes / (t_nccl * 1e-3) / 1e9 * BUS_FACTOR["all_reduce"](world.size),
                    f"{t_nccl / t:.3f}"]
        rows.append(row)
        dst.free()
        src.free()
        world.barrier(what="size done")
    if world.rank == 0:
        gpus = Device.available()
        note = ("All ranks on one GPU: these figures measure pkptx's protocol overhead, not NVLink."
                if gpus < world.size else "")
        headers = ["bytes", "elements", "algorithm", "time us", "algbw GB/s", "busbw GB/s", "check"]
        if dist is not None:
            headers += ["NCCL us", "NCCL busbw GB/s", "NCCL time / pkptx time"]
        report(f"all_reduce {args.dtype}, {world.size} rank(s) on {gpus} GPU(s)", headers, rows,
               note + " Median of CUDA-event timings" + ("; NCCL through torch.distributed in the same run."
                                                        if dist is not None else "; NCCL needs a GPU per rank."),
               args.record)
    heap.close()
    world.close()


if __name__ == "__main__":
    main()
