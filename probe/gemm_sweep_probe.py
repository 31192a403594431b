"""Time every schedule the GEMM model weighs, per shape, against cuBLAS, to refit pkptx.ops.gemm_plan.

For each shape: cuBLAS (torch.matmul) once, then every candidate of ``gemm_plan.candidates`` over every
tile shape the kernel has, with the TMA epilogue and with the direct one (``/d``: C stored from
registers), and for M <= 48 the swapped ones (``/sw``), forced through ``gemm(..., config=...)``:
checked against an fp32 product (and, for split-K, the same bits on a second run), then timed. One line
per candidate: modelled and measured microseconds, TFLOP/s, cuBLAS time / ours, and ``*`` on the
model's choice; per shape, the model's pick against the fastest.
Stops starting new shapes after ``--budget`` seconds (default 100). Needs a GPU and torch.

``--fp8``: e4m3 inputs (unit scales) against torch._scaled_mm with fast accumulation. ``--tiles``: only
those tile shapes (and the model's pick), TMA epilogue only.

    python probe/gemm_sweep_probe.py [--budget 100] [--repeats 7] [--shapes 128x8192x8192,...] [--narrow 64x32,...]
                                     [--fp8] [--tiles 256x160,128x256,...]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = [(128, 8192, 8192), (2048, 2048, 16384), (1024, 3072, 768), (8192, 8192, 1024), (16, 8192, 8192),
          (64, 4096, 16384), (256, 8192, 8192), (1024, 1024, 32768), (3000, 5000, 2000), (512, 512, 512),
          (1024, 1024, 1024), (6144, 2048, 4096), (4096, 4096, 4096), (777, 1288, 4096)]


def setup(shapes_arg: str | None, default):
    """(shapes, device, SM count, shared memory per block, torch's current stream as a pkptx Stream) of a
    GEMM probe: the MxNxK list given, else ``default``."""
    import torch

    from pkptx.launch import Device, Stream
    from pkptx.launch.occupancy import context_sm_count
    shapes = [tuple(int(v) for v in s.split("x")) for s in shapes_arg.split(",")] if shapes_arg else default
    dev = Device.current()
    stream = Stream.wrap(torch.cuda.current_stream().cuda_stream)
    return shapes, dev, context_sm_count(dev), dev.smem_per_block_optin, stream


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=float, default=100.0, help="seconds after which no new shape starts")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--shapes", default=None, help="comma-separated MxNxK list (default: the built-in list)")
    ap.add_argument("--narrow", default="", help="comma-separated tile shapes narrower than 64 (e.g. 64x32), "
                                                 "unswapped, direct epilogue, weighed beside the candidates")
    ap.add_argument("--fp8", action="store_true", help="e4m3 inputs against torch._scaled_mm (fast accumulation)")
    ap.add_argument("--tiles", default="", help="comma-separated tile shapes to time (TMA epilogue), beside the pick")
    args = ap.parse_args(argv)
    import torch

    from pkptx.bench.common import event_ms
    from pkptx.ops.gemm import gemm
    from pkptx.ops.gemm_plan import TILE_RATE, GemmConfig, candidates, estimate_s, max_stages, plan, tile_rate

    shapes, dev, sms, smem, stream = setup(args.shapes, SHAPES)
    start = time.monotonic()
    print(f"# {dev.name}, {sms} SMs, {smem} B shared memory per block; repeats {args.repeats}")
    print("shape | schedule | model us | measured us | TFLOP/s | cuBLAS/ours | rel err | same bits")
    narrow = [tuple(int(v) for v in t.split("x")) for t in args.narrow.split(",") if t]
    only = {tuple(int(v) for v in t.split("x")) for t in args.tiles.split(",") if t}
    for tile in sorted(only - set(TILE_RATE)):  # a width between measured ones is weighed at their interpolated
        try:                                     # share; one outside them at 1.0 (a guess)
            tile_rate(*tile)
        except ValueError:
            print(f"# {tile[0]}x{tile[1]}: no share to interpolate, modelled at 1.0")
            TILE_RATE[tile] = 1.0
    extra = [GemmConfig(tm, tn, max_stages(tm, tn, smem, "direct"), epilogue="direct") for tm, tn in narrow]
    picks = []
    for m, n, k in shapes:
        if time.monotonic() - start > args.budget:
            print(f"# budget of {args.budget:.0f} s spent; shapes left out: {shapes[len(picks):]}")
            break
        dtype = "e4m3" if args.fp8 else "bf16"
        a, b = (torch.randn(rows, k, device="cuda").to(torch.float8_e4m3fn if args.fp8 else torch.bfloat16)
                for rows in (m, n))
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ b.float().T
        flop = 2 * m * n * k
        one = torch.ones(1, device="cuda")
        baseline = ((lambda: torch._scaled_mm(a, b.T, one, one, out_dtype=torch.bfloat16, use_fast_accum=True))
                    if args.fp8 else (lambda: torch.matmul(a, b.T, out=c)))
        cublas = event_ms(baseline, stream, repeats=args.repeats)
        chosen = plan(m, n, k, "bf16", sm_count=sms, smem_limit=smem, k_major_b=True, dtype=dtype)
        name = f"{m}x{n}x{k}"
        print(f"{name} | cuBLAS | - | {cublas * 1e3:.1f} | {flop / cublas / 1e9:.0f} | 1.000 | - | -")
        best = None
        weighed = candidates(m, n, k, sm_count=sms, smem_limit=smem, shapes=tuple(TILE_RATE) + tuple(only),
                             epilogues=("tma",) if only else ("tma", "direct"), k_major_b=True, dtype=dtype) + extra
        for cfg in [c for c in weighed if not only or (c.tile_m, c.tile_n) in only or c == chosen]:
            c.fill_(float("nan"))
            gemm(a, b, c, stream=stream, config=cfg)
            first = c.clone()
            err = ((first.float() - ref).norm() / ref.norm()).item()
            gemm(a, b, c, stream=stream, config=cfg)
            same = bool(torch.equal(first.view(torch.int16), c.view(torch.int16)))
            ours = event_ms(lambda cfg=cfg: gemm(a, b, c, stream=stream, config=cfg), stream, repeats=args.repeats)
            mark = "*" if cfg == chosen else ""
            print(f"{name} | {cfg.label}{mark} | {estimate_s(cfg, m, n, k, 2, sms, dtype) * 1e6:.1f} | {ours * 1e3:.1f} | "
                  f"{flop / ours / 1e9:.0f} | {cublas / ours:.3f} | {err:.1e} | {'yes' if same else 'NO'}")
            if best is None or ours < best[1]:
                best = (cfg, ours)
            if cfg == chosen:
                picked = ours
        picks.append((name, chosen.label, cublas / picked, best[0].label, cublas / best[1]))
        torch.cuda.empty_cache()
    print("\nshape | model's pick | cuBLAS/pick | fastest | cuBLAS/fastest")
    for row in picks:
        print(f"{row[0]} | {row[1]} | {row[2]:.3f} | {row[3]} | {row[4]:.3f}")
    print(f"# {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
