"""Ping-pong GEMM schedules against the planned (cooperative) one: two consumer warpgroups take whole
tiles in turn, one's epilogue running under the other's K loop. ``/pp`` at 128 rows: each warpgroup
holds two 64-row accumulator chains (the tile's upper and lower halves, their wgmma interleaved); at 64
rows one chain (measured 10-25 % slower in the K loop on 2026-12-06). Per shape: cuBLAS, the planned
schedule, each candidate; C poisoned with NaN before each schedule's first run. Needs a GPU and torch.

    python probe/gemm_pingpong_probe.py [--repeats 9] [--shapes 8192x8192x1024,...]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = [(8192, 8192, 1024), (3000, 5000, 2000), (4096, 4096, 4096), (1024, 3072, 768), (6144, 2048, 4096),
          (2048, 2048, 16384), (4096, 14336, 4096), (8192, 8192, 8192), (256, 8192, 8192)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--shapes", default=None, help="comma-separated MxNxK list (default: the built-in list)")
    args = ap.parse_args(argv)
    import torch

    from pkptx.bench.common import event_ms
    from pkptx.launch import Device, Stream
    from pkptx.launch.occupancy import context_sm_count
    from pkptx.ops import gemm as op
    from pkptx.ops.gemm_plan import GemmConfig, max_stages, plan

    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    dev = Device.current()
    sms, smem = context_sm_count(dev), dev.smem_per_block_optin
    stream = Stream.wrap(torch.cuda.current_stream().cuda_stream)
    candidates = [GemmConfig(tm, tn, max_stages(tm, tn, smem, pingpong=True), pingpong=True)
                  for tm, tn in ((128, 128), (128, 192), (64, 256))] + [GemmConfig(128, 128, 6)]
    print(f"# {dev.name}, {sms} SMs; repeats {args.repeats}; median CUDA-event us")
    print("| shape | schedule | rel err | us | cuBLAS / this |")
    print("|---|---|---|---|---|")
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ b.float().T
        name = f"{m}x{n}x{k}"
        cublas = event_ms(lambda: torch.matmul(a, b.T, out=c), stream, repeats=args.repeats)
        print(f"| {name} | cuBLAS | - | {cublas * 1e3:.1f} | 1.000 |")
        chosen = plan(m, n, k, "bf16", sm_count=sms, smem_limit=smem)
        for cfg in [chosen] + [x for x in candidates if x != chosen]:
            c.fill_(float("nan"))
            op.gemm(a, b, c, stream=stream, config=cfg)
            err = ((c.float() - ref).norm() / ref.norm()).item()
            ours = event_ms(lambda: op.gemm(a, b, c, stream=stream, config=cfg), stream, repeats=args.repeats)
            mark = " (planned)" if cfg == chosen else ""
            print(f"| {name} | {cfg.label}{mark} | {err:.1e} | {ours * 1e3:.1f} | {cublas / ours:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
