"""Where the small and narrow GEMM schedules lose to cuBLAS: per shape, cuBLAS, pkptx.gemm as planned
(its blocks wait at exit for their TMA stores' writes, ``cp.async.bulk.wait_group 0``), the same schedule
whose blocks exit once the stores have read shared memory (``cp.async.bulk.wait_group.read 0``: nothing
signals after them, and the kernel's end makes the writes visible to the next kernel), and the schedule
with its k-blocks' wgmma on 2 and 4 accumulators (``k_split``, where the registers allow). The variants alternate, ``--rounds`` times, so clock drift falls on all. Needs a GPU
and torch.

    python probe/gemm_small_probe.py [--repeats 30] [--rounds 3] [--shapes 512x512x512,...]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = [(512, 512, 512), (1024, 1024, 1024), (16, 8192, 8192), (64, 4096, 16384), (128, 8192, 8192),
          (128, 16384, 4096), (256, 8192, 8192), (1024, 3072, 768), (777, 1288, 4096), (2048, 2048, 2048)]


def build_read_wait(cfg):
    """The planned kernel, its blocks exiting once their TMA stores have read shared memory."""
    from pkptx.templates.kernels import gemm as kernel
    direct = cfg.epilogue == "direct"
    t = kernel.template(cfg, f"gemm_readwait_{cfg.tile_m}x{cfg.tile_n}_s{cfg.stages}"
                             f"{'_sk' if cfg.split_k else ''}{'_d' if direct else ''}{'_pp' if cfg.pingpong else ''}"
                             f"{'_t' if cfg.transpose_c else ''}",
                        params=kernel.DIRECT_PARAMS if direct else (kernel.C_PARAM,), progress=False)
    store = kernel.store_direct(cfg) if direct else kernel.store_c(cfg)
    return t.build(**kernel.roles(cfg, store=store), epilogue=lambda ctx: ctx.b.bulk_wait_group(0, read=True))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shapes", default=None, help="comma-separated MxNxK list (default: the built-in list)")
    args = ap.parse_args(argv)
    import torch

    from dataclasses import replace

    from pkptx.bench.common import event_ms
    from pkptx.errors import PTXBuildError
    from pkptx.ops.common import load
    from pkptx.launch import Device, Stream
    from pkptx.launch.occupancy import context_sm_count
    from pkptx.ops import gemm as op
    from pkptx.ops import launches
    from pkptx.ops.gemm_plan import plan
    from pkptx.templates.kernels import gemm as kernel

    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    dev = Device.current()
    sms, smem = context_sm_count(dev), dev.smem_per_block_optin
    stream = Stream.wrap(torch.cuda.current_stream().cuda_stream)
    print(f"# {dev.name}, {sms} SMs; {args.rounds} rounds of {args.repeats} repeats; median of the rounds' "
          f"median CUDA-event us")
    print("| shape | schedule | variant | registers, local bytes | rel err | us | cuBLAS / this |")
    print("|---|---|---|---|---|---|---|")
    real_build = kernel.build
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ b.float().T
        planned = plan(m, n, k, "bf16", sm_count=sms, smem_limit=smem, allow_swap=True)
        variants = [("planned", planned, real_build), ("read-wait exit", planned, build_read_wait)]
        for k_split in (2, 4):
            cfg = replace(planned, k_split=k_split)
            try:
                cfg.kernel_config("bf16", "bf16", "nk")
            except PTXBuildError:
                continue
            variants.append((f"k_split {k_split}", cfg, real_build))
        times = {label: [] for label, _, _ in variants} | {"cuBLAS": []}
        info = {}
        for _ in range(args.rounds):
            times["cuBLAS"].append(event_ms(lambda: torch.matmul(a, b.T, out=c), stream, repeats=args.repeats))
            for label, cfg, build in variants:
                kernel.build = build
                try:
                    launches.clear()
                    c.fill_(float("nan"))
                    op.gemm(a, b, c, stream=stream, config=cfg)
                    err = ((c.float() - ref).norm() / ref.norm()).item()
                    fn = load(build, cfg.kernel_config("bf16", "bf16", "nk"), dev).function
                    info[label] = (f"{fn.num_regs}, {fn.local_bytes}", err)
                    times[label].append(event_ms(lambda: op.gemm(a, b, c, stream=stream, config=cfg), stream,
                                                 repeats=args.repeats))
                finally:
                    kernel.build = real_build
                    launches.clear()
        cublas = statistics.median(times["cuBLAS"])
        print(f"| {m}x{n}x{k} | - | cuBLAS | - | - | {cublas * 1e3:.2f} | 1.000 |")
        for label, cfg, _ in variants:
            t = statistics.median(times[label])
            regs, err = info[label]
            print(f"| {m}x{n}x{k} | {cfg.label} | {label} | {regs} | {err:.1e} | {t * 1e3:.2f} | {cublas / t:.3f} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
