"""pkptx.gemm against cuBLAS (torch.matmul on the device) in the same run, bf16 in, fp32 accumulate,
bf16 out, C = A·Bᵀ with A (M x K) and B (N x K), over a sweep of shapes: the issue #16 five, square
512-16384, small M (decode-like), K-heavy, LLM projections and odd tails. Random data; each shape is
checked against an fp32 torch product before it is timed (a wrong one is reported, not timed, and the
exit status is 1). Prints the geometric mean and the worst of
the ratios. ``python -m pkptx bench gemm [--record] [--quick] [--fp8]`` (``--quick``: three shapes;
``--fp8``: e4m3 inputs with per-tensor scales against torch._scaled_mm)."""
from __future__ import annotations

import argparse
import math
import sys

from .common import event_ms, paired_ms, report
from .progress import progress

SHAPES = [
    # the shapes of issue #16
    (4096, 4096, 4096), (8192, 8192, 8192), (16384, 16384, 2048), (8192, 8192, 1024), (2048, 2048, 16384),
    (6144, 2048, 4096), (1024, 3072, 768), (128, 8192, 8192),
    # square
    (512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048), (16384, 16384, 16384),
    # small M, N and K in 4096-16384
    (16, 8192, 8192), (64, 4096, 16384), (128, 16384, 4096), (256, 8192, 8192),
    # K-heavy: M·N <= 4096², K >= 16384
    (1024, 1024, 32768), (4096, 4096, 16384), (512, 4096, 32768),
    # LLM projections
    (4096, 14336, 4096), (8192, 4096, 14336), (16384, 5120, 5120), (8192, 28672, 4096),
    # tails: M, N not multiples of any tile
    (3000, 5000, 2000), (777, 1288, 4096),
]
QUICK = [(4096, 4096, 4096), (2048, 2048, 16384), (128, 8192, 8192)]


def summary(ratios: dict[str, float]) -> str:
    """The geometric mean of cuBLAS time / pkptx time, and the worst shape."""
    if not ratios:
        return "no shape timed"
    geo = math.exp(sum(math.log(r) for r in ratios.values()) / len(ratios))
    worst = min(ratios, key=ratios.get)
    return f"geometric mean {geo:.3f} over {len(ratios)} shapes; worst {ratios[worst]:.3f} at {worst}"


def fp8_operands(torch, m: int, n: int, k: int):
    """(a, b, scale_a, scale_b) for an fp8 run: e4m3 A (M x K) and B (N x K) from normal data scaled into
    e4m3's range, and one-element f32 scales on the GPU (pkptx takes all four through DLPack)."""
    a = (torch.randn(m, k, device="cuda") * 16).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda") * 16).to(torch.float8_e4m3fn)
    scale_a, scale_b = (torch.tensor([1 / 16], device="cuda", dtype=torch.float32) for _ in range(2))
    return a, b, scale_a, scale_b


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--record", action="store_true", help="append the results to bench/RESULTS.md")
    ap.add_argument("--quick", action="store_true", help="three shapes, fewer repeats (a smoke run)")
    ap.add_argument("--fp8", action="store_true", help="e4m3 inputs with per-tensor scales, bf16 out, against "
                                                       "torch._scaled_mm (fast accumulation, as the kernel's)")
    args = ap.parse_args(argv)
    import torch
    from ..launch import Device, Stream
    from ..launch.occupancy import context_sm_count
    from ..ops.gemm import gemm, plan
    stream = Stream.wrap(torch.cuda.current_stream().cuda_stream)
    dev = Device.current()
    rows, ratios, wrong = [], {}, []
    for m, n, k in progress(QUICK if args.quick else SHAPES, "gemm shapes"):
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        if args.fp8:
            a, b, scale_a, scale_b = fp8_operands(torch, m, n, k)
            ours_fn = lambda: gemm(a, b, c, scale_a=scale_a, scale_b=scale_b, stream=stream)  # noqa: E731
            theirs_fn = None if (m | n | k) % 16 else (                  # _scaled_mm takes multiples of 16
                lambda: torch._scaled_mm(a, b.T, scale_a, scale_b, out_dtype=torch.bfloat16, use_fast_accum=True))
            ref_scale = (scale_a * scale_b).item()
        else:
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            ours_fn = lambda: gemm(a, b, c, stream=stream)                  # noqa: E731
            theirs_fn = lambda: torch.matmul(a, b.T, out=c)                 # noqa: E731
            ref_scale = 1.0
        ours_fn()
        ref = (a.float() @ b.float().T) * ref_scale
        err = ((c.float() - ref).norm() / ref.norm()).item()
        del ref
        cfg = plan(m, n, k, "bf16", sm_count=context_sm_count(dev), smem_limit=dev.smem_per_block_optin,
                   k_major_b=True, dtype="e4m3" if args.fp8 else "bf16")
        name = f"{m}x{n}x{k}"
        if not err < 1e-2:          # a wrong result is reported, never timed; the sweep goes on
            rows.append([name, cfg.label, f"WRONG {err:.1e}", "-", "-", "-", "-", "-"])
            wrong.append(name)
            continue
        repeats = 5 if args.quick else 30
        flop = 2 * m * n * k
        if theirs_fn is None:
            ours = event_ms(ours_fn, stream, repeats=repeats)
            rows.append([name, cfg.label, f"{err:.1e}", ours, flop / ours / 1e9, "not a multiple of 16", "-", "-"])
            continue
        ours, theirs = paired_ms(ours_fn, theirs_fn, stream, repeats=repeats)
        ratios[name] = theirs / ours
        rows.append([name, cfg.label, f"{err:.1e}", ours, flop / ours / 1e9, theirs, flop / theirs / 1e9,
                     f"{theirs / ours:.3f}"])
    verdict = summary(ratios) + (f"; WRONG results (not timed): {', '.join(wrong)}" if wrong else "")
    print(verdict)
    title, baseline = (("GEMM fp8 e4m3, per-tensor scales, bf16 out: pkptx vs cuBLAS (torch._scaled_mm, fast "
                        "accumulation)", "torch._scaled_mm") if args.fp8 else
                       ("GEMM bf16: pkptx vs cuBLAS (torch.matmul)", "torch.matmul"))
    report(title,
           ["M x N x K", "tile/stages", "rel err", "pkptx ms", "pkptx TFLOP/s", "cuBLAS ms", "cuBLAS TFLOP/s",
            "ratio"], rows, "Median of CUDA-event timings, ours and cuBLAS's repeats taken in turn (GPU time: a GPU "
            "spin before each repeat hides the host); "
            f"ratio = cuBLAS ({baseline}) time / pkptx time (1.0 = parity); tile/stages: tile_m x tile_n / stages "
            f"(/kS: S K slices, deterministic split-K); {verdict}.",
           args.record)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
