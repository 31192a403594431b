"""MoE kernels: grouped GEMM against torch._grouped_mm, and the expert-parallel layer half at every rank.

- grouped GEMM (one rank): ``pkptx.grouped_gemm`` and ``torch._grouped_mm`` (bf16, x (E·rows, K) times
  w (E, N, K) transposed) at the issue's shapes (experts, rows per expert, K = hidden, N = ffn):
  (8, 4096, 4096, 14336), (64, 1024, 7168, 2048), (256, 256, 7168, 2048); checked against each other.
- layer (any rank count; on one GPU run it under MPS): DeepSeek-V3 (top-8 of 256 experts, hidden 7168,
  ffn 2048) and Mixtral (top-2 of 8, 4096, 14336), experts split evenly, uniform random routing:
  ``moe_dispatch`` alone (its bandwidth: bytes each rank sends, over the time), sequential (dispatch,
  then ``grouped_gemm`` on the received rows), fused ``moe_dispatch_gemm`` (per ``num_comm_sms``), the
  grouped GEMM alone, and ``moe_combine`` (bytes each rank pulls, over the time). The fused result is
  checked against the sequential one before it is timed.

``python -m pkptx bench moe`` (one rank: both tables); ``--ranks 4 --mps`` (the layer at 4 ranks).
"""
from __future__ import annotations

import argparse
import sys

from .common import GPU_ONLY_NS, report, sharing
from .progress import progress

GROUPED_SHAPES = [(8, 4096, 4096, 14336), (64, 1024, 7168, 2048), (256, 256, 7168, 2048)]
MODELS = {"deepseek-v3": (8, 256, 7168, 2048), "mixtral": (2, 8, 4096, 14336)}     # top-k, experts, hidden, ffn


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--record", action="store_true", help="append the results to bench/RESULTS.md")
    ap.add_argument("--quick", action="store_true", help="fewer repeats, smaller token counts (a smoke run)")
    ap.add_argument("--tokens", type=int, default=2048, help="tokens per rank in the layer table")
    ap.add_argument("--num-comm-sms", default="4,8,16",
                    help="communicator blocks of the fused kernel (the op's default: a quarter of the SMs, at most 16)")
    ap.add_argument("--models", default="deepseek-v3,mixtral")
    ap.add_argument("--no-grouped", action="store_true", help="skip the grouped GEMM table")
    args = ap.parse_args(argv)
    from ..launch import Device, Stream, World
    world = World()
    Device(world.device_ordinal()).set_current()
    stream = Stream()
    repeats = 3 if args.quick else 10
    if world.size == 1 and not args.no_grouped:
        grouped_table(stream, repeats, args)
    layer_table(world, stream, repeats, args)
    world.close()
    return 0


def timer(stream, repeats):
    import pkptx
    from ..launch import time_cuda

    def timed(fn):
        t = time_cuda(fn, stream=stream, warmup=2, repeats=repeats, hold_ns=GPU_ONLY_NS).median_ms
        pkptx.synchronize(stream)
        return t
    return timed


def grouped_table(stream, repeats, args) -> None:
    import torch

    import pkptx
    from ..launch import Stream
    torch_stream = Stream.wrap(torch.cuda.current_stream().cuda_stream)
    timed = timer(torch_stream, repeats)
    rows = []
    for e, per, k, n in progress(GROUPED_SHAPES[:1] if args.quick else GROUPED_SHAPES, "grouped shapes"):
        x = torch.randn(e * per, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16)
        offs = torch.arange(1, e + 1, device="cuda", dtype=torch.int32) * per
        out = torch.full((e * per, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        theirs_out = torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
        pkptx.grouped_gemm(x, w, offs, out=out, stream=torch_stream)
        torch.cuda.synchronize()
        err = ((out.float() - theirs_out.float()).norm() / theirs_out.float().norm()).item()
        if not err < 1e-2:
            raise SystemExit(f"grouped_gemm {e}x{per}x{k}x{n}: relative difference {err:.2e} (or NaN) to "
                             "torch._grouped_mm; not timing it")
        ours = timed(lambda: pkptx.grouped_gemm(x, w, offs, out=out, stream=torch_stream))
        theirs = timed(lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs))
        flop = 2 * e * per * k * n
        rows.append([f"{e}x{per}x{k}x{n}", f"{err:.1e}", ours, flop / ours / 1e9, theirs, flop / theirs / 1e9,
                     f"{theirs / ours:.3f}"])
    report("grouped GEMM bf16: pkptx vs torch._grouped_mm",
           ["experts x rows x K x N", "rel diff", "pkptx ms", "pkptx TFLOP/s", "torch ms", "torch TFLOP/s", "ratio"],
           rows, "Median of CUDA-event timings (a GPU spin before each repeat hides the host); ratio = torch time / "
           "pkptx time (1.0 = parity); w is E x N x K, passed to torch transposed.", args.record)


def _my_rows(world, all_ids, slots, local: int):
    """The rows this rank received, in one fixed order of (sender, token, k): a pair's row depends on
    arrival order, so two dispatches of the same tokens place them differently."""
    import numpy as np
    every = world.allgather(slots, what="moe slots")
    mine = [sl[ids // local == world.rank] for ids, sl in zip(all_ids, every)]
    return np.concatenate(mine).astype(np.int64)


def layer_table(world, stream, repeats, args) -> None:
    """Inputs are made on the GPU (torch), so a rank's weights (GBs at DeepSeek-V3 shapes) never
    cross the host."""
    import ml_dtypes
    import torch

    import pkptx
    from ..launch import SymmetricHeap, from_dlpack
    timed = timer(stream, repeats)
    w = world.size
    tokens = 256 if args.quick else args.tokens
    comms = [int(c) for c in args.num_comm_sms.split(",")]
    torch.manual_seed(11 + world.rank)
    rows = []
    models = [m for m in args.models.split(",") if MODELS[m][1] % w == 0]
    heap = SymmetricHeap(world, max(2 * w * tokens * MODELS[m][0] * MODELS[m][2] * 2 for m in models) + (64 << 20))
    for name in progress(models, "moe models", show=world.rank == 0):
        topk, experts, hidden, ffn = MODELS[name]
        local = experts // w
        capacity = w * tokens * topk
        rand = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16) / 8      # noqa: E731
        x, w1, w2 = rand(tokens, hidden), rand(local, ffn, hidden), rand(local, hidden, ffn)
        ids = torch.rand(tokens, experts, device="cuda").argsort(dim=1)[:, :topk].to(torch.int32).contiguous()
        wt = torch.rand(tokens, topk, device="cuda")
        h_seq, h_fused = (torch.empty(capacity, ffn, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        x, w1, w2, ids, wt = (from_dlpack(t) for t in (x, w1, w2, ids, wt))
        hs, hf = from_dlpack(h_seq), from_dlpack(h_fused)
        y = heap.alloc((capacity, hidden), ml_dtypes.bfloat16)
        torch.cuda.synchronize()
        world.barrier(what="moe inputs")

        def sequential():
            d = pkptx.moe_dispatch(x, ids, wt, world, experts, heap=heap, stream=stream)
            pkptx.grouped_gemm(d.recv, w1, d.offsets, out=hs, stream=stream)
            return d

        d = sequential()
        pkptx.synchronize(stream)
        received = int(d.offsets.to_numpy()[-1])
        all_ids = world.allgather(ids.to_numpy(), what="moe ids")
        seq_rows = _my_rows(world, all_ids, d.slots.to_numpy(), local)
        errs = []
        for c in comms:
            f, _ = pkptx.moe_dispatch_gemm(x, ids, wt, w1, world, experts, heap=heap, out=hf, num_comm_sms=c,
                                           stream=stream)
            pkptx.synchronize(stream)
            fused_rows = _my_rows(world, all_ids, f.slots.to_numpy(), local)
            got = h_fused[torch.as_tensor(fused_rows, device="cuda")].float()
            want = h_seq[torch.as_tensor(seq_rows, device="cuda")].float()
            errs.append(((got - want).norm() / want.norm().clamp_min(1e-30)).item() if received else 0.0)
        if not max(errs, default=0.0) <= 1e-2:
            raise SystemExit(f"moe {name}: fused differs from dispatch then grouped_gemm by {errs}; not timing it")
        t_dispatch = timed(lambda: pkptx.moe_dispatch(x, ids, wt, world, experts, heap=heap, stream=stream))
        t_seq = timed(sequential)
        t_gemm = timed(lambda: pkptx.grouped_gemm(d.recv, w1, d.offsets, out=hs, stream=stream))
        pkptx.grouped_gemm(hs, w2, d.offsets, out=y.local, stream=stream)
        t_combine = timed(lambda: pkptx.moe_combine(y, d, world, stream=stream))
        sent = tokens * topk * hidden * 2
        flop = 2 * received * ffn * hidden
        for c, err in zip(comms, errs):
            t_fused = timed(lambda: pkptx.moe_dispatch_gemm(x, ids, wt, w1, world, experts, heap=heap, out=hf,
                                                            num_comm_sms=c, stream=stream))
            rows.append([name, tokens, c, f"{err:.1e}", t_dispatch, sent / t_dispatch / 1e6, t_gemm,
                         flop / t_gemm / 1e9, t_seq, t_fused, f"{t_seq / t_fused:.3f}", t_combine,
                         sent / t_combine / 1e6])
        y.free()
    heap.close()
    suffix, note = sharing(world)
    if world.rank == 0:
        report(f"MoE layer half bf16, {w} rank(s){suffix}",
               ["model", "tokens/rank", "comm SMs", "rel diff", "dispatch ms", "dispatch GB/s", "gemm ms",
                "gemm TFLOP/s", "sequential ms", "fused ms", "speedup", "combine ms", "combine GB/s"], rows,
               note + "Rank 0's figures; uniform random top-k routing; sequential = moe_dispatch then grouped_gemm, "
               "fused = moe_dispatch_gemm (route launch included in both); GB/s = bytes this rank sends (dispatch) "
               "or pulls (combine) over the time; median of CUDA events.", args.record)


if __name__ == "__main__":
    sys.exit(main())
