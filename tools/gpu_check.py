"""The whole GPU check in one call: the GPU tests (single-process and under mpirun), then the
benchmarks, then one short table. Run from the checkout on the GPU machine:

    PKPTX_DISABLE_MULTICAST=1 python3 tools/gpu_check.py [--quick] [--only tests|bench] [--mps [--mps-total P]]
        [--steps a,b]

Each step has its own time limit, so one stuck step cannot eat the whole lease. Benchmarks append to
bench/RESULTS.md; it and an archive of every step's log go to $OUT (or probe/out) after each step.

``--mps``: everything runs under a private MPS daemon (pkptx.launch.mps), so the ranks of a multi-rank
step run at once, each on an equal SM share (the tests add 2 ranks at 30/70); the daemon is stopped at
the end, also after a failure, and the script checks that it is gone. Without it, ranks sharing the GPU
are time-sliced. ``--mps-total P``: the benchmarks' equal shares add up to P percent of the SMs (default
pkptx.launch.mps.SHARED_TOTAL, 80: at 4 ranks x 25 % one rank's kernel at a time ran about twice as long
while the others waited, at 4 x 20 % none did; probe/gemm_ar_mps_probe.py, bench/RESULTS.md 2026-12-07).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# (step, test file, time limit, pytest -k expression or None): one step per group; the -k steps are the
# quick subsets of the multi-rank files (the whole files take minutes each).
TEST_GROUPS = [("gemm", "tests/templates/test_gemm_gpu.py", 120, None),
               ("copy", "tests/templates/test_copy_gpu.py", 60, None),
               ("attention", "tests/templates/test_attention_gpu.py", 150, None),
               ("launch", "tests/launch", 150, None),
               ("fused", "tests/templates/test_fused_gpu.py", 300, None),
               ("fused_2rank", "tests/templates/test_fused_gpu.py", 150, "2rank and not mps"),
               ("fused_mps", "tests/templates/test_fused_gpu.py", 200, "2rank-mps50"),   # under --mps
               ("collectives", "tests/templates/test_collectives_gpu.py", 400, None),
               ("collectives_2rank", "tests/templates/test_collectives_gpu.py", 150, "2rank and not mps"),
               ("primitives", "tests/primitives", 200, None),
               ("sp", "tests/templates/test_sp_gpu.py", 400, None),
               ("sp_quick", "tests/templates/test_sp_gpu.py", 90, "quick"),
               ("moe", "tests/templates/test_moe_gpu.py", 300, None),
               ("moe_quick", "tests/templates/test_moe_gpu.py", 90, "grouped_gemm or (layer and 2rank and not mps)"),
               ("graph", "tests/templates/test_graph_gpu.py", 300, None),
               ("graph_quick", "tests/templates/test_graph_gpu.py", 180, "2rank and not mps or refused")]
SANITIZED = [("sanitizer", ["compute-sanitizer", "--tool", "memcheck", "--error-exitcode", "3", sys.executable,
                            "probe/attention_smoke.py", "--small"], 300),   # memcheck on a small case
             ("sanitizer_gemm", ["compute-sanitizer", "--tool", "memcheck", "--error-exitcode", "3", sys.executable,
                                 "probe/gemm_smoke.py"], 300)]
BUDGET_ENV = "PKPTX_GPU_CHECK_STEPS"     # comma-separated step names to run (default: all)


FORWARDED = ("PYTHONPATH", "PKPTX_DISABLE_MULTICAST", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY",
             "PKPTX_MPS_SHARES")


def mpirun(ranks: int) -> list[str]:
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    forward = [arg for name in FORWARDED for arg in ("-x", name)]
    return ["mpirun", *root, "--oversubscribe", "-n", str(ranks), *forward]


def benches(quick: bool, mps: bool, mps_total: int | None) -> list[tuple[str, list[str], int, dict]]:
    """(name, command, time limit, extra environment) per benchmark step. Under MPS the multi-rank
    steps run at 2 and 4 ranks on equal SM shares adding up to ``mps_total`` percent."""
    q = ["--quick"] if quick else []
    plots = Path(os.environ.get("OUT", ROOT / "probe" / "out")) / "bench"      # the CLI's CSV, JSON and PNG
    share = (lambda n: {"PKPTX_MPS_SHARES": ",".join([str(mps_total // n)] * n)}) if mps else (lambda n: {})
    coll = lambda n, top: (f"bench_collectives -n {n}", [*mpirun(n), sys.executable, "-m", "pkptx.bench.bench_collectives",  # noqa
                                                         "--record", "--max-bytes", str(1 << top)], 150, share(n))
    fused = lambda n, sizes: (f"bench_fused -n {n}", [*mpirun(n), sys.executable, "-m", "pkptx.bench.bench_fused", "--record",  # noqa
                                                      "--sizes", "2048" if quick else sizes], 200, share(n))
    short = ["--ring-lengths", "3072", "--ulysses-lengths", "3072"] if quick else []
    sp = lambda n: (f"bench_sp -n {n}", [*mpirun(n), sys.executable, "-m", "pkptx.bench.bench_sp", "--record", *short],  # noqa
                    300, share(n))
    moe = lambda n: (f"bench_moe -n {n}", [*mpirun(n), sys.executable, "-m", "pkptx.bench.bench_moe", "--record",  # noqa
                                           "--no-grouped", *q], 300, share(n))
    multi = ([coll(2, 20 if quick else 28), coll(4, 20 if quick else 28), fused(2, "2048,4096,8192"),
              fused(4, "2048,4096,8192"), sp(2), sp(4), moe(2), moe(4)] if mps
             else [coll(4, 20 if quick else 24), fused(2, "2048,4096")])
    return [("doctor", [sys.executable, "-m", "pkptx", "doctor"], 120, {}),
            ("bench_attention", [sys.executable, "-m", "pkptx.bench.bench_attention", "--record", *q], 300, {}),
            ("bench_launch", [sys.executable, "-m", "pkptx.bench.bench_launch", "--record", *q], 150, {}),
            ("bench_gemm", [sys.executable, "-m", "pkptx", "bench", "gemm", "--out", str(plots / "gemm"), "--record",
                            *q], 300, {}),
            ("bench_gemm_fp8", [sys.executable, "-m", "pkptx", "bench", "gemm", "--out", str(plots / "gemm_fp8"),
                                "--record", "--fp8", *q], 300, {}),
            ("bench_gemm_quick", [sys.executable, "-m", "pkptx", "bench", "gemm", "--out", str(plots / "gemm_quick"),
                                  "--record", "--quick"], 120, {}),
            ("bench_tma", [sys.executable, "-m", "pkptx.bench.bench_tma", "--record", *q], 100, {}),
            ("bench_moe", [sys.executable, "-m", "pkptx.bench.bench_moe", "--record", *q], 200, {}),
            coll(1, 24 if quick else 28), fused(1, "2048,4096,8192,16384"), *multi]


_END: float | None = None      # --total-s


def run(cmd: list[str], log: Path, timeout: int, extra_env: dict | None = None) -> tuple[int, str, float]:
    t0 = time.time()
    if _END is not None:
        timeout = int(min(timeout, _END - t0))
        if timeout < 10:
            log.write_text("skipped: the --total-s budget is spent\n")
            return 125, "skipped: --total-s budget spent", 0.0
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", PKPTX_DISABLE_MULTICAST="1",
               **(extra_env or {}))
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        out, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        out, rc = out + f"\nTIMEOUT after {timeout} s", 124
    log.write_text(out)
    return rc, out, time.time() - t0


def pytest_summary(out: str) -> str:
    lines = [l for l in out.splitlines() if re.search(r"\d+ (passed|failed|error|skipped|deselected)", l)]
    return lines[-1].strip("= ") if lines else out.strip().splitlines()[-1][:100] if out.strip() else "no output"


def save(out_dir: Path, logs: Path) -> None:
    """After every step (a later one may be cut off): every log in one archive, and RESULTS.md, in
    ``out_dir`` (the device tool brings back only a few files)."""
    with tarfile.open(out_dir / "logs.tar.gz", "w:gz") as tar:
        for log in sorted(logs.iterdir()):
            tar.add(log, arcname=log.name)
    if (ROOT / "bench" / "RESULTS.md").exists():
        shutil.copy(ROOT / "bench" / "RESULTS.md", out_dir / "RESULTS.md")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=("tests", "bench"))
    ap.add_argument("--mps", action="store_true", help="run everything under a private MPS daemon")
    ap.add_argument("--mps-total", type=int, default=None, choices=range(8, 101), metavar="P",
                    help="the benchmarks' MPS shares add up to P percent of the SMs (default: mps.SHARED_TOTAL)")
    ap.add_argument("--steps", help=f"comma-separated step names (default: ${BUDGET_ENV}, else all)")
    ap.add_argument("--total-s", type=float, default=None,
                    help="wall-clock budget for all steps: each step's limit is cut to what is left, and a step "
                         "with under 10 s left is skipped (so the table and logs always come back)")
    args = ap.parse_args()
    global _END
    _END = time.time() + args.total_s if args.total_s else None
    if os.environ.get("PKPTX_DISABLE_MULTICAST") != "1":
        print("refusing to run: set PKPTX_DISABLE_MULTICAST=1 on shared GPU machines")
        return 2
    out_dir = Path(os.environ.get("OUT", ROOT / "probe" / "out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    logs = Path(tempfile.mkdtemp(prefix="pkptx-gpu-check-"))
    wanted = list(dict.fromkeys(filter(None, (args.steps or os.environ.get(BUDGET_ENV, "")).split(","))))
    rows: list[tuple] = []
    if not args.mps:
        steps(args, wanted, rows, logs, out_dir)
    else:
        sys.path.insert(0, str(ROOT))
        from pkptx.launch import mps
        args.mps_total = args.mps_total or mps.SHARED_TOTAL
        daemon = mps.Daemon()
        try:
            daemon.start()
            os.environ.update(daemon.env(), PKPTX_TEST_MPS="1")
            steps(args, wanted, rows, logs, out_dir)
        finally:
            try:
                daemon.stop()
            except mps.MpsError as exc:
                print(exc)
            gone = not daemon.alive
            rows.append(("mps daemon", "ok" if gone else "rc=1", "stopped, no process left" if gone else "STILL RUNNING",
                         0.0))
            for name in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY", "PKPTX_TEST_MPS"):
                os.environ.pop(name, None)
    print("\n| step | status | result | seconds |\n|---|---|---|---|")
    for name, status, result, secs in rows:
        print(f"| {name} | {status} | {result} | {secs:.0f} |")
    save(out_dir, logs)
    return 0 if all(r[1] == "ok" for r in rows) else 1


def plan(args) -> list[tuple]:
    """Every step as (name, log name, command, time limit, extra environment, summarise)."""
    tests = [(name, f"test_{name}", [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
                                     "-rs", path, *(["-k", select] if select else [])], limit, {}, pytest_summary)
             for name, path, limit, select in TEST_GROUPS if (ROOT / path).exists()]
    sanitized = [(name, name, cmd, limit, {}, sanitizer_summary) for name, cmd, limit in SANITIZED]
    bench = [(name, name.replace(" -n ", "_n"), cmd, limit, extra, bench_summary)
             for name, cmd, limit, extra in benches(args.quick, args.mps, args.mps_total)]
    return ([] if args.only == "bench" else tests + sanitized) + ([] if args.only == "tests" else bench)


def sanitizer_summary(out: str) -> str:
    summary = re.findall(r"ERROR SUMMARY: \d+ errors?", out)
    return summary[-1] if summary else out.strip()[-90:]


def bench_summary(out: str) -> str:
    clock = r"(?:\s*[0-9n/a*]+\s*/\s*[0-9n/a*]+\s*\|)?"     # bench_attention's SM clock column, after the ratio
    speedups = speedup_column(out)
    if speedups:
        return "speedup " + " ".join(speedups[-8:])
    ratios = re.findall(r"\|\s*([0-9]+\.[0-9]+)\s*\|" + clock + r"\s*$", out, flags=re.M)
    if ratios:
        return "last column " + " ".join(ratios[-6:])
    return out.strip().splitlines()[-1][:90] if out.strip() else ""


def speedup_column(out: str) -> list[str]:
    """The "speedup" cells of every markdown table in ``out`` (the fused benchmarks' verdict, which is not
    their last column)."""
    cells, column = [], None
    for line in out.splitlines():
        if not line.startswith("|"):
            column = None
            continue
        row = [cell.strip() for cell in line.strip("|").split("|")]
        if column is None:
            column = row.index("speedup") if "speedup" in row else -1
        elif column >= 0 and not line.startswith("|-") and column < len(row):
            cells.append(row[column])
    return cells


def steps(args, wanted: list, rows: list, logs: Path, out_dir: Path) -> None:
    """Run the steps: all of them in the plan's order, or those named in ``wanted`` in that order (a
    benchmark answers to its first word and to its log name, e.g. bench_collectives_n2)."""
    everything = plan(args)
    if wanted:
        chosen = [step for want in wanted for step in everything if want in (step[0], step[0].split()[0], step[1])]
    else:
        chosen = [step for step in everything if "-k" not in step[2]]    # whole files, not their subsets
    for name, log_name, cmd, limit, extra, summarise in chosen:
        rc, out, secs = run(cmd, logs / f"{log_name}.log", limit, extra)
        rows.append((name if summarise is not pytest_summary else f"tests {name}", "ok" if rc == 0 else f"rc={rc}",
                     summarise(out), secs))
        print("| %s | %s | %s | %.0f |" % rows[-1], flush=True)
        save(out_dir, logs)


if __name__ == "__main__":
    sys.exit(main())
