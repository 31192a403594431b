"""Where the time of a small GEMM goes: CUDA-event time (what bench_gemm reports) beside the kernel's own
GPU duration (CUPTI, through torch.profiler), for ours and cuBLAS's, at shapes of a few microseconds.

Event time - kernel time is what the launch costs on the GPU (the kernel's start after the event, its
drain, the grid's completion); a gap between ours and cuBLAS's there is not in our K loop. Per shape:
the planner's pick and its tile turned on its side (``--every``: also the direct epilogue, fewer stages, no
k_split, two K slices), each checked against an fp32 product first. (A preferred shared-memory carveout at
its maximum, tried on 2026-12-08, changed nothing beyond the noise: bench/RESULTS.md.)

    python probe/gemm_small_probe.py [--shapes 512x512x512,...] [--repeats 40] [--every]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = [(512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048), (1024, 3072, 768), (777, 1288, 4096)]


def kernel_us(fn, repeats: int) -> dict[str, float]:
    """Median GPU duration (us) per kernel name over ``repeats`` calls of ``fn``."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            fn()
        torch.cuda.synchronize()
    times: dict[str, list[float]] = {}
    for event in prof.events():
        if event.device_type.name == "CUDA" and not event.name.startswith(("Memcpy", "Memset")):
            times.setdefault(event.name, []).append(event.time_range.elapsed_us())
    return {name: statistics.median(ts) for name, ts in times.items()}


def variants(pick, smem: int, every: bool):
    from pkptx.ops.gemm_plan import k_split_of, max_stages
    yield "pick", pick
    if pick.tile_m != pick.tile_n and pick.tile_n in (64, 128, 256) and not pick.swap and pick.splits == 1:
        yield "transposed tile", replace(pick, tile_m=pick.tile_n, tile_n=pick.tile_m,
                                         stages=min(pick.stages, max_stages(pick.tile_n, pick.tile_m, smem)),
                                         k_split=k_split_of(pick.tile_m, pick.tile_n))
    if not every:
        return
    if pick.epilogue == "tma" and not pick.swap:
        yield "direct", replace(pick, epilogue="direct",
                                stages=min(pick.stages, max_stages(pick.tile_m, pick.tile_n, smem, "direct")))
    if pick.stages > 4:
        yield "4 stages", replace(pick, stages=4)
    if pick.k_split > 1:
        yield "k_split 1", replace(pick, k_split=1)
    if pick.splits == 1 and not pick.stream_k and not pick.pingpong and pick.tile_m < 256:
        yield "2 K slices", replace(pick, splits=2)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=None, help="comma-separated MxNxK list")
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--every", action="store_true", help="also the direct epilogue, fewer stages, no k_split, K slices")
    args = ap.parse_args(argv)
    import torch

    from gemm_sweep_probe import setup
    from pkptx.bench.common import paired_ms
    from pkptx.ops.gemm import gemm
    from pkptx.ops.gemm_plan import plan

    shapes, dev, sms, smem, stream = setup(args.shapes, SHAPES)
    print(f"# {dev.name}, {sms} SMs; repeats {args.repeats}; us; ratio = cuBLAS / ours")
    print("shape | schedule | event ours | event cuBLAS | event ratio | kernel ours | kernel cuBLAS | kernel ratio"
          " | launch ours | launch cuBLAS | cuBLAS kernel")
    for m, n, k in shapes:
        a, b = (torch.randn(rows, k, device="cuda").to(torch.bfloat16) for rows in (m, n))
        c, theirs = (torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in range(2))
        ref = a.float() @ b.float().T
        pick = plan(m, n, k, "bf16", sm_count=sms, smem_limit=smem, k_major_b=True)
        cublas = lambda: torch.matmul(a, b.T, out=theirs)  # noqa: E731
        cublas_kernels = kernel_us(cublas, args.repeats)
        for what, cfg in variants(pick, smem, args.every):
            ours = lambda: gemm(a, b, c, config=cfg, stream=stream)  # noqa: E731
            c.fill_(float("nan"))
            ours()
            torch.cuda.synchronize()
            err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
            if not err < 2e-2:
                print(f"{m}x{n}x{k} | {cfg.label} ({what}) | WRONG: rel err {err:.1e}")
                continue
            ev_ours, ev_theirs = (1e3 * t for t in paired_ms(ours, cublas, stream, repeats=args.repeats))
            kernels = kernel_us(ours, args.repeats)
            k_ours = sum(kernels.values())
            k_theirs = sum(cublas_kernels.values())
            print(f"{m}x{n}x{k} | {cfg.label} ({what}) | {ev_ours:.2f} | {ev_theirs:.2f} | {ev_theirs / ev_ours:.3f} | "
                  f"{k_ours:.2f} | {k_theirs:.2f} | {k_theirs / k_ours:.3f} | {ev_ours - k_ours:.2f} | "
                  f"{ev_theirs - k_theirs:.2f} | {' + '.join(name[:60] for name in cublas_kernels)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
