"""``python -m pkptx bench NAME [--ranks N [--mps]] [--out DIR] [options of NAME]``: run a benchmark from
the installed package; ``python -m pkptx bench NAME --from FILE --out DIR``: re-plot a recorded result.

The benchmark prints its tables (Markdown, nccl-tests style). ``--ranks N`` starts it as N ranks under
``mpirun``/``mpiexec``; ``--mps`` starts a private MPS daemon first and gives each rank its share of
the GPU. ``--out DIR`` writes every table as CSV, all of them as ``results.json``, and PNG plots
(matplotlib, ``pip install 'pkptx[plot]'``). ``--from`` reads ``results.json`` or a Markdown file of
``## title`` sections (bench/RESULTS.md) and re-plots the newest table of each title this benchmark
writes (``--match TEXT`` keeps only sections whose heading or date line holds TEXT). Any other option
goes to the benchmark (``pkptx bench NAME --help`` lists them).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import BenchError, PkptxError
from . import mpirun, results
from .plot import PlotSpec, plot, pyplot
from .progress import PROGRESS_ENV, enabled

FORWARDED_ENV = ("PYTHONPATH", "PKPTX_DISABLE_MULTICAST", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                 "NVSHMEM_DISABLE_NVLS", "PKPTX_CACHE_DIR", "PKPTX_CACHE", "CUDA_VISIBLE_DEVICES", "PKPTX_COMMIT")


@dataclass(frozen=True)
class Bench:
    """A benchmark: its module in pkptx.bench, what it measures, a pattern its table titles start with
    (how --from finds them), how to plot them, whether it runs as MPI ranks and whether it needs a GPU."""
    module: str
    about: str
    titles: str
    plot: PlotSpec | None = None
    mpi: bool = False
    gpu: bool = True


BENCHES = {
    "collectives": Bench("bench_collectives", "all-reduce, all-gather, reduce-scatter, all-to-all, 8 B to 1 GiB",
                         r"(all_reduce|all_gather|reduce_scatter|all_to_all) ",
                         PlotSpec("bytes", ("busbw GB/s", "NCCL busbw GB/s"), "busbw GB/s", "sizes"), mpi=True),
    "gemm": Bench("bench_gemm", "pkptx.gemm against cuBLAS, bf16 or fp8 (needs torch)", r"GEMM (bf16|fp8)",
                  PlotSpec("M x N x K", ("pkptx TFLOP/s", "cuBLAS TFLOP/s"), "TFLOP/s", "bars")),
    "fused": Bench("bench_fused", "AG+GEMM, GEMM+RS, GEMM+AR against GEMM then collective", r"fused kernels",
                   PlotSpec("N", ("fused ms", "sequential ms", "cuBLAS+NCCL ms"), "ms", "sizes", "kernel", ylog=True),
                   mpi=True),
    "attention": Bench("bench_attention", "pkptx.attention against torch SDPA, cuDNN and flash (needs torch)",
                       r"attention bf16", PlotSpec("B x H x S x D", ("pkptx TFLOP/s", "cuDNN TFLOP/s", "flash TFLOP/s"),
                                                   "TFLOP/s", "bars")),
    "moe": Bench("bench_moe", "grouped GEMM against torch._grouped_mm; MoE dispatch, fused dispatch+GEMM, combine",
                 r"(grouped GEMM bf16|MoE layer half)", mpi=True),
    "copy": Bench("bench_tma", "TMA against register and copy-engine copies on one GPU", r"Copies on one GPU",
                  PlotSpec("bytes", ("TMA GB/s", "reg GB/s", "CE GB/s"), "GB/s", "sizes")),
    "launch": Bench("bench_launch", "host cost of one launch; bulk copy against cuMemcpy",
                    r"(Launch overhead|Bulk copy)"),
    "alloc": Bench("bench_alloc", "allocate + free per allocator", r"Allocation"),
    "sp": Bench("bench_sp", "ring and Ulysses attention against collective-then-attention", r"sequence-parallel attention",
                PlotSpec("tokens", ("fused ms", "sequential ms"), "ms", "sizes", "op", ylog=True), mpi=True),
    "build": Bench("bench_build", "emit and assemble a 1000-instruction kernel (no GPU)", r"Build and assemble",
                   gpu=False),
}

def parser() -> argparse.ArgumentParser:
    listing = "\n".join(f"  {name:<12} {b.about}" + (" (MPI)" if b.mpi else "") for name, b in BENCHES.items())
    ap = argparse.ArgumentParser(prog="pkptx bench", add_help=False, allow_abbrev=False,
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 description=__doc__.split("\n\n")[0], epilog=f"benchmarks:\n{listing}")
    ap.add_argument("name", nargs="?", help="which benchmark (listed below)")
    ap.add_argument("-h", "--help", action="store_true", help="this help, and the benchmark's own options")
    ap.add_argument("--ranks", type=int, help="start the benchmark as this many MPI ranks")
    ap.add_argument("--mps", action="store_true", help="with --ranks: share the GPU through a private MPS daemon")
    ap.add_argument("--out", help="write CSV, results.json and PNG plots here")
    ap.add_argument("--from", dest="source", metavar="FILE", help="re-plot a recorded result file (no run)")
    ap.add_argument("--match", help="with --from: only sections whose heading or date line holds this text")
    return ap


def select(records: list[results.Record], bench: Bench, match: str | None) -> list[results.Record]:
    """The newest record of each title ``bench`` writes (the last in the file), in file order."""
    newest: dict[str, results.Record] = {}
    for record in records:
        if re.match(bench.titles, record.title) and (not match or match in record.title or match in record.where):
            newest.pop(record.title, None)
            newest[record.title] = record
    return list(newest.values())


def write(records: list[results.Record], bench: Bench, out: Path) -> bool:
    """CSV and JSON of ``records`` and their plots in ``out``; prints every path; False if a plot failed."""
    paths, failures = results.write_tables(records, out), []
    try:
        if bench.plot is not None:
            pyplot()
            for record, stem in zip(records, results.stems(records)):
                try:
                    paths.append(plot(record, bench.plot, out / f"{stem}.png"))
                except BenchError as exc:
                    failures.append(exc)
    except BenchError as exc:     # no matplotlib: the tables are written all the same
        failures.append(exc)
    print(f"wrote {len(paths)} file(s) in {out}: " + ", ".join(p.name for p in paths))
    for exc in failures:
        print(f"pkptx bench: no plot: {exc}", file=sys.stderr)
    return not failures


def replot(name: str, args, rest: list[str]) -> int:
    from .common import table
    bench = BENCHES[name]
    if rest:
        raise BenchError(f"--from re-plots a recorded file; the benchmark options {' '.join(rest)} need a run")
    if not args.out:
        raise BenchError("--from needs --out DIR: where the CSV, JSON and PNG files go")
    records = select(results.load(args.source), bench, args.match)
    if not records:
        raise BenchError(f"--from {args.source}: no table of `{name}` in it (titles starting with "
                         f"{bench.titles!r}{', holding ' + repr(args.match) if args.match else ''})")
    for record in records:
        print(f"\n{record.title}\n{record.where}\n{table(list(record.headers), [list(r) for r in record.rows])}")
    return 0 if write(records, bench, Path(args.out)) else 1


def run_ranks(bench: Bench, args, rest: list[str], sink: str, mps) -> int:
    """The benchmark as ``args.ranks`` ranks under the MPI launcher (and a private MPS daemon, with
    ``mps`` the helper module, else None)."""
    env = dict(os.environ, **{results.OUT_ENV: sink})
    if PROGRESS_ENV not in env and enabled(sys.stderr):
        env[PROGRESS_ENV] = "1"
    names = tuple(n for n in (results.OUT_ENV, PROGRESS_ENV, *FORWARDED_ENV) if n in env)
    argv = [sys.executable, "-m", f"pkptx.bench.{bench.module}", *rest]
    launcher = mpirun.find()
    if mps is None:
        return subprocess.run(mpirun.command(launcher, args.ranks, argv, names), env=env).returncode
    with mps.daemon() as daemon:                  # each rank's variables give it its share of the GPU
        shares = [daemon.env(share_percent=share) for share in mps.shares(args.ranks)]
        return subprocess.run(mpirun.command(launcher, args.ranks, argv, names, shares), env=env).returncode


@contextlib.contextmanager
def as_program(name: str, sink: str | None = None):
    """Run a benchmark's main here as ``pkptx bench NAME`` (what its usage and errors call it), its
    tables also written to ``sink``; both restored afterwards."""
    argv, before = sys.argv, os.environ.get(results.OUT_ENV)
    sys.argv = [f"pkptx bench {name}"]
    if sink is not None:
        os.environ[results.OUT_ENV] = sink
    try:
        yield importlib.import_module(f"pkptx.bench.{BENCHES[name].module}")
    finally:
        sys.argv = argv
        if before is None:
            os.environ.pop(results.OUT_ENV, None)
        else:
            os.environ[results.OUT_ENV] = before


def require_gpu(name: str) -> None:
    """A BenchError saying why, before a benchmark that needs a GPU starts on a machine without one."""
    from ..doctor import probe
    machine = probe()
    if BENCHES[name].gpu and not machine.gpus:
        raise BenchError(f"needs a CUDA GPU, and none answers here ({machine.no_gpu}); `pkptx bench build` "
                         "runs without one, `pkptx doctor` checks this machine")


def run(name: str, args, rest: list[str]) -> int:
    bench = BENCHES[name]
    if args.ranks is not None and not bench.mpi:
        raise BenchError(f"--ranks: `{name}` runs in one process; the MPI benchmarks are "
                         + ", ".join(n for n, b in BENCHES.items() if b.mpi))
    if args.ranks is not None and args.ranks < 1:
        raise BenchError(f"--ranks {args.ranks}: expected a whole number of ranks >= 1")
    if args.mps and args.ranks is None:
        raise BenchError("--mps shares one GPU among the ranks of --ranks N; give --ranks")
    mps = mpirun.mps_module() if args.mps else None
    if args.mps and mps is None:
        raise BenchError("--mps needs pkptx.launch.mps (the MPS daemon helper), which is not in this version")
    require_gpu(name)
    with tempfile.TemporaryDirectory(prefix="pkptx-bench-") as sink:
        if args.ranks is not None:
            rc = run_ranks(bench, args, rest, sink, mps)
        else:
            with as_program(name, sink) as module:
                rc = module.main(rest) or 0
        records = results.read_records(Path(sink))
    if args.out and records:                      # written even when the run failed later
        plotted = write(records, bench, Path(args.out))
        return rc or (0 if plotted else 1)
    if args.out:
        print("pkptx bench: the benchmark reported no table; nothing written", file=sys.stderr)
    return rc


def main(argv=None) -> int:
    ap = parser()
    args, rest = ap.parse_known_args(sys.argv[1:] if argv is None else argv)
    name = args.name
    if args.help or name is None:
        ap.print_help()
        if name in BENCHES:
            print(f"\noptions of `{name}` (passed through):")
            with as_program(name) as module, contextlib.suppress(SystemExit):
                module.main(["--help"])
        return 0 if args.help else 2
    try:
        if name not in BENCHES:
            raise BenchError(f"no benchmark `{name}`; expected one of {', '.join(BENCHES)}")
        return replot(name, args, rest) if args.source else run(name, args, rest)
    except ModuleNotFoundError as exc:
        print(f"pkptx bench {name}: needs the Python package {exc.name!r}, which is not installed", file=sys.stderr)
    except PkptxError as exc:
        print(f"pkptx bench {name}: {exc}", file=sys.stderr)
    return 2
