"""How much of a GEMM's time is the epilogue and the tail the tensor cores wait for: per shape, cuBLAS,
pkptx.gemm as planned, and variants of the same schedule (``--variants``, default all):
- ``l2``: its tensor maps asking for L2 promotion (``l2=256``: a TMA load pulls 256-byte L2 lines; pkptx
  asks for none);
- ``store``: built with a store hook that stores nothing (wrong C, same K loop, same tile order), and
  with the tiles staged in shared memory but not stored (which half of the epilogue costs);
- ``k_split``: a k-block's wgmma over 1, 2 and 4 accumulators (``GemmConfig.k_split``, where the
  registers allow), but the planned count (gemm_plan.k_split_of);
- ``pair``: two blocks an SM (stages cut so two fit, twice the K slices, k_split 1 and the legal 2 and 4):
  a one-wave schedule of few tiles (small M, swapped) keeps twice the loads in flight per SM, and the
  slices of a tile use the SMs its single block leaves idle;
- ``stages``: the planned schedule on fewer and on more stages than planned, up to what shared memory holds
  (the planner caps them at 8, 12 for a swapped tile): does keeping more of B in flight pay where the
  bandwidth is higher (H200)?
The staging, ping-pong and stmatrix variants measured on 2026-12-06 are in bench/RESULTS.md (their code, on a
branch, did not survive). Needs a GPU and torch.

    python probe/gemm_epilogue_probe.py [--repeats 9] [--shapes 8192x8192x1024,...] [--variants k_split,pair]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = [(8192, 8192, 1024), (3000, 5000, 2000), (4096, 4096, 4096), (6144, 2048, 4096), (1024, 3072, 768),
          (8192, 8192, 8192), (16, 8192, 8192), (128, 8192, 8192), (2048, 2048, 16384)]


def promoted(tensor_map_class, l2: int):
    """TensorMap.tiled with ``l2_promotion=l2`` unless given (restore with the returned original)."""
    original = tensor_map_class.__dict__["tiled"]
    plain = original.__get__(None, tensor_map_class)

    def tiled(*args, **kwargs):
        kwargs.setdefault("l2_promotion", l2)
        return plain(*args, **kwargs)

    tensor_map_class.tiled = staticmethod(tiled)
    return original


def build_without_store(cfg):
    """The GEMM kernel whose warpgroups drop their finished tiles (the K loop and tile order unchanged)."""
    from pkptx.isa import f32
    from pkptx.templates.kernels import gemm as kernel
    t = kernel.template(cfg, f"gemm_nostore_{cfg.tile_m}x{cfg.tile_n}_s{cfg.stages}", params=(kernel.C_PARAM,),
                        progress=False)

    def keep_alive(ctx, acc, tm, tn, wg, staging):
        """Sum the accumulators and trap on a value no product here makes: the K loop's results stay
        live (with no use at all, ptxas drops the wgmma), nothing is stored."""
        b = ctx.b
        total = acc[0]
        for value in acc.items[1:]:
            total = b.add(f32, total, value, name="acc_sum")
        b.trap(pred=b.setp("eq", f32, total, 1.2345e38, name="never"))

    return t.build(**kernel.roles(cfg, store=keep_alive))


def build_staging_only(cfg):
    """The GEMM kernel whose warpgroups stage their tiles in shared memory as usual but hand nothing to
    TMA: the epilogue's shared-memory half without the stores."""
    from pkptx.templates.gemm_parts import stage_accumulators
    from pkptx.templates.kernels import gemm as kernel
    t = kernel.template(cfg, f"gemm_staged_{cfg.tile_m}x{cfg.tile_n}_s{cfg.stages}", params=(kernel.C_PARAM,),
                        progress=False)

    def stage(ctx, acc, tm, tn, wg, staging):
        stage_accumulators(ctx, acc, wg, staging, n=cfg.tile_n, out_type=cfg.out_dtype, issue=lambda sub, off: None)

    return t.build(**kernel.roles(cfg, store=stage))


VARIANTS = ("l2", "store", "k_split", "pair", "stages")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--shapes", default=None, help="comma-separated MxNxK list (default: the built-in list)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    args = ap.parse_args(argv)
    variants = set(args.variants.split(","))
    import torch
    from dataclasses import replace

    from pkptx.bench.common import event_ms
    from pkptx.launch import Device, Stream
    from pkptx.launch.tensormap import TensorMap
    from pkptx.launch.occupancy import blocks_per_sm, context_sm_count
    from pkptx.ops import gemm as op
    from pkptx.ops import launches
    from pkptx.ops.common import load
    from pkptx.ops.gemm_plan import plan
    from pkptx.templates.kernels import gemm as kernel

    def fresh():
        launches.clear()
        launches._tensor_maps.clear()

    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    dev = Device.current()
    sms, smem = context_sm_count(dev), dev.smem_per_block_optin
    stream = Stream.wrap(torch.cuda.current_stream().cuda_stream)
    print(f"# {dev.name}, {sms} SMs; repeats {args.repeats}; median CUDA-event us; share = 1 - this / planned")
    print("| shape | schedule | rel err | us | cuBLAS / this | share |")
    print("|---|---|---|---|---|---|")
    real_build = kernel.build
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ b.float().T
        name = f"{m}x{n}x{k}"
        cublas = event_ms(lambda: torch.matmul(a, b.T, out=c), stream, repeats=args.repeats)
        print(f"| {name} | cuBLAS | - | {cublas * 1e3:.1f} | 1.000 | - |")
        cfg = plan(m, n, k, "bf16", sm_count=sms, smem_limit=smem, k_major_b=True)

        def timed(label, build=real_build, l2=None, planned=None, stores=True, schedule=cfg):
            """Median us of ``schedule`` with ``build``'s kernel (and tensor maps promoting ``l2``); rel err
            of C where the kernel ``stores`` it; the share of ``planned`` us it saves."""
            original = promoted(TensorMap, l2) if l2 else None
            kernel.build = build
            try:
                fresh()
                c.fill_(float("nan"))
                op.gemm(a, b, c, stream=stream, config=schedule)
                err = ((c.float() - ref).norm() / ref.norm()).item() if stores else None
                t = event_ms(lambda: op.gemm(a, b, c, stream=stream, config=schedule), stream, repeats=args.repeats)
            finally:
                kernel.build = real_build
                if original is not None:
                    TensorMap.tiled = original
                fresh()
            share = "-" if planned is None else f"{1 - t / planned:.3f}"
            print(f"| {name} | {schedule.label} {label} | {'-' if err is None else f'{err:.1e}'} | {t * 1e3:.1f} | "
                  f"{cublas / t:.3f} | {share} |", flush=True)
            return t

        ours = timed("(planned)")
        for l2 in (128, 256) if "l2" in variants else ():
            timed(f"l2={l2}", l2=l2, planned=ours)
        if cfg.splits == 1 and cfg.epilogue == "tma" and "store" in variants:
            timed("without store", build_without_store, planned=ours, stores=False)
            timed("staged, not stored", build_staging_only, planned=ours, stores=False)
        for k_split in sorted({1, 2, 4} - {cfg.k_split}) if "k_split" in variants else ():
            try:
                op.check_config(replace(cfg, k_split=k_split), m, n, k, "bf16", "bf16", "nk")
            except op.GemmArgumentError:       # too many accumulator registers
                continue
            timed(f"k_split {k_split}", planned=ours, schedule=replace(cfg, k_split=k_split))
        for stages in (cfg.stages - 2, cfg.stages + 4, cfg.stages + 8, cfg.stages + 12) if "stages" in variants else ():
            try:
                op.check_config(replace(cfg, stages=stages), m, n, k, "bf16", "bf16", "nk")
            except op.GemmArgumentError:       # more than shared memory holds
                continue
            timed(f"stages {stages}", planned=ours, schedule=replace(cfg, stages=stages))
        for k_split in (1, 2, 4) if "pair" in variants else ():
            paired = replace(cfg, splits=2 * cfg.splits, k_split=k_split)
            try:
                fitted = op.check_config(paired, m, n, k, "bf16", "bf16", "nk")
                while paired.stages > 2 and 2 * (fitted.smem_bytes + 1024) > smem:
                    paired = replace(paired, stages=paired.stages - 1)
                    fitted = op.check_config(paired, m, n, k, "bf16", "bf16", "nk")
            except op.GemmArgumentError:       # an illegal k_split or too few k-blocks
                continue
            built = load(kernel.build, fitted, dev)
            resident = blocks_per_sm(built, built.threads, built.compiled.dynamic_smem)
            timed(f"{resident} blocks an SM", planned=ours, schedule=paired)
    return 0


if __name__ == "__main__":
    sys.exit(main())
