"""Fused kernels against the non-overlapped composition of pkptx's own GEMM and collective, at the
paper's per-GPU shapes (pk-design 7), N in {2048, 4096, 8192, 16384}; bf16 in, fp32 accumulate.

- AG+GEMM: A (N x N) row-sharded, B_r (N/W x N): all_gather(A) then gemm, vs ag_gemm.
- GEMM+RS: A_r (N x N/W), B_r (N x N/W): gemm into a symmetric partial then reduce_scatter(dim 0), vs gemm_rs.
- GEMM+AR: the same shards: gemm then all_reduce, vs gemm_ar.
Where every rank has its own GPU, cuBLAS + NCCL (torch) one after the other is timed as well.

The sequential composition is timed as one unit, as a model runs it (its steps timed one by one and
summed are shown too: apart, ranks under MPS need not run them side by side). The unoverlapped share of
communication is (fused - gemm alone) / (collective alone): 0 means the
communication hid completely behind the GEMM, 1 means none of it did. Each fused result is checked
against the composition before it is timed. Run under MPI: ``python -m pkptx bench fused --ranks 4``.
With every rank on one GPU the figures measure protocol overhead, not NVLink.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from . import nccl
from .common import checked_ms, report, sharing
from .progress import progress


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--sizes", default="2048,4096,8192,16384")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--num-comm-sms", type=int, default=None,
                    help="communicator SMs of ag_gemm and gemm_ar (default: 8 for ag_gemm, gemm_ar's model)")
    args = ap.parse_args(argv)
    ag_sms = args.num_comm_sms or 8
    ar_sms = args.num_comm_sms or "model"
    import ml_dtypes

    import pkptx
    from ..launch import Device, Stream, SymmetricHeap, World, from_numpy
    world = World()
    ordinal = world.device_ordinal()
    Device(ordinal).set_current()
    dist = nccl.start(world, ordinal)
    stream, w, bf16 = Stream(), world.size, ml_dtypes.bfloat16
    sizes = [int(s) for s in args.sizes.split(",")]
    heap = SymmetricHeap(world, 6 * max(sizes) ** 2 * 2 + (256 << 20))   # the GEMM+RS step holds 5 N x N bf16 buffers at W=1
    rng = np.random.default_rng(7 + world.rank)
    rows = []

    def timed(fn):
        return checked_ms(fn, stream, repeats=args.repeats)

    def rel(x, y):
        x, y = x.astype(np.float64), y.astype(np.float64)
        return float(np.linalg.norm(x - y) / max(np.linalg.norm(y), 1e-30))

    def baseline(op: str, n: int, t_fused: float) -> list:
        """cuBLAS (torch.matmul) then NCCL (torch.distributed), one after the other, where NCCL runs."""
        if dist is None:
            return []
        import torch
        mk = lambda *shape: torch.randn(*shape, device="cuda", dtype=torch.bfloat16)  # noqa: E731
        if op == "ag_gemm":
            shard, full, b_t = mk(n // w, n), mk(n, n), mk(n // w, n)
            fn = lambda: (dist.all_gather_into_tensor(full, shard), torch.matmul(full, b_t.T))  # noqa: E731
        elif op == "gemm_rs":
            a_t, b_t, part, out_t = mk(n, n // w), mk(n, n // w), mk(n, n), mk(n // w, n)
            fn = lambda: (torch.matmul(a_t, b_t.T, out=part), dist.reduce_scatter_tensor(out_t, part))  # noqa
        else:
            a_t, b_t, part = mk(n, n // w), mk(n, n // w), mk(n, n)
            fn = lambda: (torch.matmul(a_t, b_t.T, out=part), dist.all_reduce(part))  # noqa: E731
        t = nccl.time_ms(fn, args.repeats)
        return [t, f"{t / t_fused:.3f}"]

    def record(op: str, n: int, err: float, t_fused: float, *, gemm, comm, comm_first=False) -> None:
        """A row: the composition timed as one unit (what a model runs), then its steps one by one."""
        t_seq = timed(lambda: (comm(), gemm()) if comm_first else (gemm(), comm()))
        t_gemm, t_comm = timed(gemm), timed(comm)
        rows.append([op, n, f"{err:.1e}", t_fused, t_seq, t_gemm, t_comm, f"{t_gemm + t_comm:.3f}",
                     f"{t_seq / t_fused:.3f}", f"{max(0.0, t_fused - t_gemm) / t_comm:.2f}"]
                    + baseline(op, n, t_fused))

    for n in progress(sizes, "fused sizes", show=world.rank == 0):
        if n % (128 * w):
            continue
        rand = lambda *shape: from_numpy(rng.standard_normal(shape, dtype=np.float32).astype(bf16))  # noqa: E731
        # ---- AG + GEMM
        shard, full = heap.alloc((n // w, n), bf16), heap.alloc((n, n), bf16)
        shard.local.copy_from_numpy(rng.standard_normal((n // w, n), dtype=np.float32).astype(bf16))
        b = rand(n // w, n)
        rows_r = slice(world.rank * (n // w), (world.rank + 1) * (n // w))
        full.local.copy_from_numpy(np.pad(shard.local.to_numpy(), ((rows_r.start, n - rows_r.stop), (0, 0))))
        world.barrier(what="ag inputs")
        fused_out = pkptx.ag_gemm(full, b, world, num_comm_sms=ag_sms, fused=True, stream=stream)
        gathered = heap.alloc((n, n), bf16)
        pkptx.all_gather(shard, world, dim=0, out=gathered, stream=stream)
        plain_out = pkptx.gemm(gathered.local, b, stream=stream)
        pkptx.synchronize(stream)
        err = rel(fused_out.to_numpy(), plain_out.to_numpy())
        t_fused = timed(lambda: pkptx.ag_gemm(full, b, world, out=fused_out, num_comm_sms=ag_sms, fused=True,
                                              stream=stream))
        record("ag_gemm", n, err, t_fused,
               gemm=lambda: pkptx.gemm(gathered.local, b, plain_out, stream=stream),
               comm=lambda: pkptx.all_gather(shard, world, dim=0, out=gathered, stream=stream), comm_first=True)
        for buf in (gathered, full, shard):
            buf.free()
        # ---- GEMM + RS and GEMM + AR share their shards
        a, b = rand(n, n // w), rand(n, n // w)
        partial = heap.alloc((n, n), bf16)
        rs_out, rs_plain = heap.alloc((n // w, n), np.float32), heap.alloc((n // w, n), bf16)
        ar_out = heap.alloc((n, n), bf16)
        world.barrier(what="rs inputs")
        pkptx.gemm_rs(a, b, world, out=rs_out, stream=stream, fused=True)
        pkptx.gemm(a, b, partial.local, stream=stream)
        pkptx.reduce_scatter(partial, world, dim=0, out=rs_plain, stream=stream)
        pkptx.synchronize(stream)
        err = rel(rs_out.local.to_numpy(), rs_plain.local.to_numpy())
        t_fused = timed(lambda: pkptx.gemm_rs(a, b, world, out=rs_out, stream=stream, fused=True))
        partial_gemm = lambda: pkptx.gemm(a, b, partial.local, stream=stream)  # noqa: E731
        record("gemm_rs", n, err, t_fused, gemm=partial_gemm,
               comm=lambda: pkptx.reduce_scatter(partial, world, dim=0, out=rs_plain, stream=stream))
        pkptx.gemm_ar(a, b, world, out=ar_out, num_comm_sms=ar_sms, fused=True, stream=stream)
        pkptx.gemm(a, b, partial.local, stream=stream)
        pkptx.all_reduce(partial, world, stream=stream)
        pkptx.synchronize(stream)
        err = rel(ar_out.local.to_numpy(), partial.local.to_numpy())
        t_fused = timed(lambda: pkptx.gemm_ar(a, b, world, out=ar_out, num_comm_sms=ar_sms, fused=True,
                                              stream=stream))
        record("gemm_ar", n, err, t_fused, gemm=partial_gemm,
               comm=lambda: pkptx.all_reduce(partial, world, stream=stream))
        for buf in (ar_out, rs_plain, rs_out, partial):
            buf.free()
    suffix, sharing_note = sharing(world)
    if world.rank == 0:
        gpus = Device.available()
        report(f"fused kernels vs gemm-then-collective, {w} rank(s) on {min(gpus, w)} GPU(s){suffix}",
               ["kernel", "N", "rel diff", "fused ms", "sequential ms", "gemm ms", "comm ms", "steps apart ms",
                "speedup", "unoverlapped comm"] + (["cuBLAS+NCCL ms", "vs cuBLAS+NCCL"] if dist is not None else []),
               rows,
               sharing_note + f"num_comm_sms: ag_gemm {ag_sms}, gemm_ar {ar_sms} (at 1 rank gemm_ar is the plain "
               "GEMM); sequential = GEMM and collective timed as one unit (speedup = sequential / fused); steps "
               "apart = each timed alone, summed; median of CUDA events, GPU time (a GPU spin before each repeat "
               "hides the host); shapes per GPU as in pk-design 7.",
               args.record)
    heap.close()
    world.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
