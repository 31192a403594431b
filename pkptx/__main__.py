"""``python -m pkptx build [--out DIR] [--filter TEXT]``: build and assemble every kernel pkptx has.
``mpirun -n N python -m pkptx demo``: an all-reduce across N ranks on the GPU(s), checked against numpy.
``python -m pkptx doctor [--json]``: what works on this machine, one line per check, with the fix.
``python -m pkptx bench NAME [options]``: run a benchmark (``bench --help`` lists them).
``python -m pkptx mps start|stop|status``: the CUDA MPS daemon for ranks that share a GPU."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def _build(args) -> int:
    from .catalog import kernels
    rows, manifests = [], []
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    header = f"{'kernel':<44} {'target':<7} {'regs':>4} {'smem':>7} {'spill':>5} {'ptx':>6} {'build ms':>9}"
    print(header)
    print("-" * len(header))
    for kernel in kernels():
        if args.filter and args.filter not in kernel.name:
            continue
        t0 = time.perf_counter()
        compiled = kernel.compile(use_cache=not args.no_cache)
        ms = (time.perf_counter() - t0) * 1e3
        res = compiled.resources
        ptx_lines = compiled.ptx.count("\n")
        print(f"{kernel.name:<44} {compiled.arch:<7} {compiled.entry_registers:>4} {res.shared_bytes:>7} "
              f"{res.spills:>5} {ptx_lines:>6} {ms:>9.1f}")
        rows.append(kernel.name)
        if out:
            (out / f"{kernel.name}.ptx").write_text(compiled.ptx)
            (out / f"{kernel.name}.cubin").write_bytes(compiled.cubin.data)
            manifest = compiled.manifest()
            manifest.update(ptx=f"{kernel.name}.ptx", cubin=f"{kernel.name}.cubin")
            (out / f"{kernel.name}.json").write_text(json.dumps(manifest, indent=2) + "\n")
            manifests.append(manifest)
    if out:
        (out / "manifest.json").write_text(json.dumps({"kernels": manifests}, indent=2) + "\n")
    print(f"{len(rows)} kernel(s) built" + (f"; PTX, cubins and manifests in {out}" if out else ""))
    return 0 if rows else 1


def _demo(args) -> int:
    """One all-reduce across the ranks of ``mpirun -n N python -m pkptx demo``, checked against numpy."""
    import numpy as np
    import ml_dtypes
    from . import all_reduce, synchronize
    from .launch import Device, SymmetricHeap, World
    if not Device.available():
        print("pkptx demo needs a CUDA GPU (none answers here); `python -m pkptx build` needs none")
        return 1
    world = World()
    Device(world.device_ordinal()).set_current()
    n = args.elements
    with SymmetricHeap(world, 4 * n * 2 + (8 << 20)) as heap:
        rng = np.random.default_rng(args.seed)
        inputs = [rng.standard_normal(n, dtype=np.float32).astype(ml_dtypes.bfloat16) for _ in range(world.size)]
        src, dst = heap.alloc((n,), ml_dtypes.bfloat16), heap.alloc((n,), ml_dtypes.bfloat16)
        src.local.copy_from_numpy(inputs[world.rank])
        Device.current().synchronize()
        world.barrier(what="demo inputs")
        t0 = time.perf_counter()
        all_reduce(src, world, out=dst)
        synchronize(what="demo all_reduce")
        ms = (time.perf_counter() - t0) * 1e3
        want = np.sum([x.astype(np.float64) for x in inputs], axis=0)
        err = float(np.max(np.abs(dst.local.to_numpy().astype(np.float64) - want) / (np.abs(want) + world.size)))
        print(f"rank {world.rank}/{world.size}: all_reduce of {n} bf16 values in {ms:.2f} ms (first call, build "
              f"included), max relative error {err:.1e} {'ok' if err < 2 ** -7 else 'WRONG'}")
        dst.free()
        src.free()
    world.close()
    return 0 if err < 2 ** -7 else 1


def _doctor(args) -> int:
    from .doctor import main as doctor
    return doctor(args.argv)


def _bench(args) -> int:
    from .bench.cli import main as bench
    return bench(args.argv)


def _mps(args) -> int:
    from .bench.mpirun import mps_module
    mps = mps_module()
    if mps is None:
        print("pkptx mps: not available in this version (pkptx.launch.mps is missing)", file=sys.stderr)
        return 2
    return mps.main(args.argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="pkptx", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build and assemble every kernel; print one line per kernel")
    build.add_argument("--out", help="also write each kernel's PTX, cubin and JSON manifest here")
    build.add_argument("--filter", help="only kernels whose name contains this text")
    build.add_argument("--no-cache", action="store_true", help="assemble even when the cache has it")
    build.set_defaults(run=_build)
    demo = sub.add_parser("demo", help="an all-reduce across MPI ranks, checked (needs a GPU; run under mpirun)")
    demo.add_argument("--elements", type=int, default=1 << 20)
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(run=_demo)
    delegated = {"doctor": (_doctor, "check this machine: versions, driver, GPUs, P2P, multicast gate, IPC, MPS"),
                 "bench": (_bench, "run a benchmark, or re-plot a recorded one (bench --help)"),
                 "mps": (_mps, "start, stop or query the CUDA MPS daemon")}
    for name, (run, about) in delegated.items():       # every argument after the name goes to it
        sub.add_parser(name, help=about, add_help=False).add_argument("argv", nargs=argparse.REMAINDER)
    args, extra = parser.parse_known_args(argv)
    if args.command in delegated:
        args.argv = argv[argv.index(args.command) + 1:]
        return delegated[args.command][0](args)
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
