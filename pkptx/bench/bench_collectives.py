"""nccl-tests-style sweep of pkptx's collectives (all-reduce, all-gather, reduce-scatter, all-to-all):
sizes 8 B to 1 GiB by powers of two, algbw and busbw, a correctness check at every size, median of
CUDA-event timings.

Run under MPI, one process per rank: ``python -m pkptx bench collectives --ranks 4 [--record]``.
With several GPUs and torch.distributed available it also times NCCL on the same sizes; with all ranks
on one GPU it reports what pkptx achieves there (see the note it prints: not NVLink bandwidth).

Sizes follow nccl-tests: the all-reduce and all-to-all buffer, the all-gather output, the
reduce-scatter input. busbw = algbw x 2(n-1)/n for all-reduce, x (n-1)/n for the other three.
Inputs are small integers (exact in bf16 even when summed over 16 ranks), so every size is checked
exactly against numpy. Up to 4 KiB the host time of one call is measured too (every rank makes the
same calls, back to back, the queue drained between rounds): the goal is <= 8 us.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from . import nccl
from .common import GPU_ONLY_NS, host_us_interleaved, report, sharing
from .progress import progress

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
HOST_TIMED_BYTES = 4096          # sizes whose host time per call is measured (small: the goal is for them)
HOST_CALLS = 200
BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n}


def sizes(max_bytes: int, min_bytes: int = 8):
    s = min_bytes
    while s <= max_bytes:
        yield s
        s *= 2


def pattern(rank: int, n: int, dtype) -> np.ndarray:
    """Rank ``rank``'s input: integers in [-7, 7], a different sequence per rank."""
    return ((np.arange(n, dtype=np.int64) * 7 + rank * 3) % 15 - 7).astype(dtype)


class Case:
    """One collective at one size: its buffers, its launch, the expected result and the NCCL twin."""

    def __init__(self, name: str, heap, world, n: int, dtype):
        w, r = world.size, world.rank
        self.name, self.world, self.n = name, world, n
        shard = n // w
        in_n, out_n = {"all_reduce": (n, n), "all_gather": (shard, n), "reduce_scatter": (n, shard),
                       "all_to_all": (n, n)}[name]
        self.src, self.dst = heap.alloc((in_n,), dtype), heap.alloc((out_n,), dtype)
        self.src.local.copy_from_numpy(pattern(r, in_n, dtype))
        self.dst.local.fill(np.nan)     # poison
        inputs = lambda: [pattern(s, in_n, np.float64) for s in range(w)]   # noqa: E731
        if name == "all_reduce":
            self.want = lambda: np.sum(inputs(), axis=0)
        elif name == "all_gather":
            self.want = lambda: np.concatenate(inputs())
        elif name == "reduce_scatter":
            self.want = lambda: np.sum(inputs(), axis=0)[r * shard:(r + 1) * shard]
        else:
            self.want = lambda: np.concatenate([x[r * shard:(r + 1) * shard] for x in inputs()])

    def run(self, stream) -> None:
        from ..ops import collectives
        src, dst, world = self.src, self.dst, self.world
        if self.name == "all_reduce":
            collectives.all_reduce(src, world, out=dst, stream=stream)
        elif self.name == "all_gather":
            collectives.all_gather(src, world, dim=0, out=dst, stream=stream)
        elif self.name == "reduce_scatter":
            collectives.reduce_scatter(src, world, dim=0, out=dst, stream=stream)
        else:
            collectives.all_to_all(src, world, scatter_dim=0, gather_dim=0, out=dst, stream=stream)

    def correct(self) -> bool:
        return bool(np.array_equal(self.dst.local.to_numpy().astype(np.float64), self.want()))

    def nccl_ms(self, dist, repeats: int, torch_dtype) -> float:
        import torch
        w, n = self.world.size, self.n
        big, other, small = (torch.ones(size, dtype=torch_dtype, device="cuda") for size in (n, n, n // w))
        fn = {"all_reduce": lambda: dist.all_reduce(big),
              "all_gather": lambda: dist.all_gather_into_tensor(big, small),
              "reduce_scatter": lambda: dist.reduce_scatter_tensor(small, big),
              "all_to_all": lambda: dist.all_to_all_single(other, big)}[self.name]
        return nccl.time_ms(fn, repeats)

    def free(self) -> None:
        self.dst.free()
        self.src.free()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--max-bytes", type=int, default=1 << 30)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--collectives", default=",".join(COLLECTIVES))
    args = ap.parse_args(argv)
    import ml_dtypes
    from ..launch import Device, Stream, SymmetricHeap, World, time_cuda
    from ..ops import collectives
    dtype = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32}[args.dtype]
    world = World()
    ordinal = world.device_ordinal()
    Device(ordinal).set_current()
    dist = nccl.start(world, ordinal)
    torch_dtype = None
    if dist is not None:
        import torch
        torch_dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    stream = Stream()
    item = np.dtype(dtype).itemsize
    heap = SymmetricHeap(world, 2 * args.max_bytes + (64 << 20))
    gpus = Device.available()
    for name in args.collectives.split(","):
        rows = []
        for nbytes in progress(list(sizes(args.max_bytes, max(8, item))), name, show=world.rank == 0):
            n = nbytes // item // world.size * world.size      # every rank's shard equal
            if n == 0:
                continue
            case = Case(name, heap, world, n, dtype)
            Device.current().synchronize()
            world.barrier(what=f"{name} inputs ready")
            case.run(stream)
            collectives.synchronize(stream, what=f"{name} {nbytes} B")
            ok = case.correct()
            world.barrier(what="checked")
            t = time_cuda(lambda: case.run(stream), stream=stream, warmup=2, repeats=args.repeats,
                          hold_ns=GPU_ONLY_NS).median_ms
            t_call = time_cuda(lambda: case.run(stream), stream=stream, warmup=0, repeats=args.repeats).median_ms
            host = (host_us_interleaved([lambda: case.run(stream)], HOST_CALLS, rounds=3)[0]
                    if nbytes <= HOST_TIMED_BYTES else None)
            collectives.synchronize(stream, what=f"timed {name}")
            size = n * item
            algbw = size / (t * 1e-3) / 1e9
            row = [size, n, t * 1e3, t_call * 1e3, "-" if host is None else f"{host:.2f}", algbw,
                   algbw * BUS_FACTOR[name](world.size), "ok" if ok else "WRONG"]
            if dist is not None:
                t_nccl = case.nccl_ms(dist, args.repeats, torch_dtype)
                row += [t_nccl * 1e3, size / (t_nccl * 1e-3) / 1e9 * BUS_FACTOR[name](world.size),
                        f"{t_nccl / t:.3f}"]
            rows.append(row)
            case.free()
            world.barrier(what="size done")
        suffix, sharing_note = sharing(world)
        if world.rank == 0:
            headers = ["bytes", "elements", "time us", "call us", "host us/call", "algbw GB/s", "busbw GB/s", "check"]
            if dist is not None:
                headers += ["NCCL us", "NCCL busbw GB/s", "NCCL time / pkptx time"]
            note = (sharing_note + "Median of CUDA-event timings; time: GPU time (a GPU spin before each repeat hides the host), "
                    "algbw from it; call: from the Python call on an idle GPU, host overhead included; host us/call: "
                    f"Python time per call, {HOST_CALLS} calls back to back (goal <= 8 us); " +
                    ("NCCL through torch.distributed in the same run." if dist is not None else
                     "no NCCL column: NCCL needs a GPU per rank."))
            report(f"{name} {args.dtype}, {world.size} rank(s) on {min(gpus, world.size)} GPU(s){suffix}", headers,
                   rows, note, args.record)
    heap.close()
    world.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
