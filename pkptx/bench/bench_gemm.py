"""pkptx.gemm against cuBLAS (torch.matmul on the device) in the same run, bf16 in, fp32 accumulate,
bf16 out, C = A·Bᵀ with A (M x K) and B (N x K). Random data; each shape is checked against an fp32
torch product before it is timed. ``python -m pkptx bench gemm [--record] [--quick]``."""
from __future__ import annotations

import sys

from .common import event_ms, parse_args, report
from .progress import progress

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 16384, 2048), (8192, 8192, 1024), (2048, 2048, 16384)]


def main(argv=None) -> int:
    args = parse_args(__doc__, argv)
    import torch
    from ..launch import Device, Stream
    from ..ops.gemm import choose_config, gemm
    stream = Stream.wrap(torch.cuda.current_stream().cuda_stream)
    rows = []
    for m, n, k in progress(SHAPES[:2] if args.quick else SHAPES, "gemm shapes"):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        gemm(a, b, c, stream=stream)
        ref = a.float() @ b.float().T
        err = ((c.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            raise SystemExit(f"gemm {m}x{n}x{k}: relative error {err:.2e} (or NaN) against fp32; not timing it")
        repeats = 5 if args.quick else 30
        ours = event_ms(lambda: gemm(a, b, c, stream=stream), stream, repeats=repeats)
        theirs = event_ms(lambda: torch.matmul(a, b.T, out=c), stream, repeats=repeats)
        flop = 2 * m * n * k
        dev = Device.current()
        cfg = choose_config(m, n, k, "bf16", "bf16", sm_count=dev.sm_count, smem_limit=dev.smem_per_block_optin)
        rows.append([f"{m}x{n}x{k}", f"{cfg.tile_m}x{cfg.tile_n}/{cfg.stages}", f"{err:.1e}", ours,
                     flop / ours / 1e9, theirs, flop / theirs / 1e9, f"{theirs / ours:.3f}"])
    report("GEMM bf16: pkptx vs cuBLAS (torch.matmul)",
           ["M x N x K", "tile/stages", "rel err", "pkptx ms", "pkptx TFLOP/s", "cuBLAS ms", "cuBLAS TFLOP/s",
            "ratio"], rows, "Median of CUDA-event timings (GPU time: a GPU spin before each repeat hides the host); "
            "ratio = cuBLAS time / pkptx time (1.0 = parity).",
           args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
