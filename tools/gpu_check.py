"""The whole GPU check in one call: the GPU tests (single-process and under mpirun), then the
benchmarks, then one short table. Run from the checkout on the GPU machine:

    PKPTX_DISABLE_MULTICAST=1 python3 tools/gpu_check.py [--quick] [--only tests|bench]

Each step has its own time limit, so one stuck step cannot eat the whole lease. Benchmarks append to
bench/RESULTS.md; it and an archive of every step's log go to $OUT (or probe/out) after each step.
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
TEST_GROUPS = [("gemm", "tests/templates/test_gemm_gpu.py", 90), ("copy", "tests/templates/test_copy_gpu.py", 60),
               ("launch", "tests/launch", 150),
               ("fused", "tests/templates/test_fused_gpu.py", 150),
               ("collectives", "tests/templates/test_collectives_gpu.py", 240), ("primitives", "tests/primitives", 200)]
BUDGET_ENV = "PKPTX_GPU_CHECK_STEPS"     # comma-separated step names to run (default: all)


def mpirun(ranks: int) -> list[str]:
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    return ["mpirun", *root, "--oversubscribe", "-n", str(ranks), "-x", "PYTHONPATH", "-x", "PKPTX_DISABLE_MULTICAST"]


def benches(quick: bool) -> list[tuple[str, list[str], int]]:
    q = ["--quick"] if quick else []
    return [("bench_launch", [sys.executable, "bench/bench_launch.py", "--record", *q], 150),
            ("bench_gemm", [sys.executable, "bench/bench_gemm.py", "--record", *q], 150),
            ("bench_tma", [sys.executable, "bench/bench_tma.py", "--record", *q], 100),
            ("bench_collectives -n 1", [*mpirun(1), sys.executable, "bench/bench_collectives.py", "--record",
                                        "--max-bytes", str(1 << (24 if quick else 28))], 120),
            ("bench_collectives -n 4", [*mpirun(4), sys.executable, "bench/bench_collectives.py", "--record",
                                        "--max-bytes", str(1 << (20 if quick else 24))], 150),
            ("bench_fused -n 1", [*mpirun(1), sys.executable, "bench/bench_fused.py", "--record",
                                  "--sizes", "2048" if quick else "2048,4096,8192,16384"], 150),
            ("bench_fused -n 2", [*mpirun(2), sys.executable, "bench/bench_fused.py", "--record",
                                  "--sizes", "2048" if quick else "2048,4096"], 150)]


def run(cmd: list[str], log: Path, timeout: int) -> tuple[int, str, float]:
    t0 = time.time()
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", PKPTX_DISABLE_MULTICAST="1")
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
    args = ap.parse_args()
    if os.environ.get("PKPTX_DISABLE_MULTICAST") != "1":
        print("refusing to run: set PKPTX_DISABLE_MULTICAST=1 on shared GPU machines")
        return 2
    out_dir = Path(os.environ.get("OUT", ROOT / "probe" / "out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    logs = Path(tempfile.mkdtemp(prefix="pkptx-gpu-check-"))
    rows = []
    wanted = set(filter(None, os.environ.get(BUDGET_ENV, "").split(",")))
    pick = (lambda name: not wanted or name in wanted)
    if args.only != "bench":
        for name, path, limit in TEST_GROUPS:
            if not pick(name):
                continue
            rc, out, secs = run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "-rs",
                                 path], logs / f"test_{name}.log", limit)
            rows.append((f"tests {name}", "ok" if rc == 0 else f"rc={rc}", pytest_summary(out), secs))
            print("| %s | %s | %s | %.0f |" % rows[-1], flush=True)
            save(out_dir, logs)
    if args.only != "tests":
        for name, cmd, limit in benches(args.quick):
            if not pick(name.split()[0]):
                continue
            rc, out, secs = run(cmd, logs / (name.replace(" -n ", "_n") + ".log"), limit)
            ratios = re.findall(r"\|\s*([0-9]+\.[0-9]+)\s*\|\s*$", out, flags=re.M)
            rows.append((name, "ok" if rc == 0 else f"rc={rc}", ("last column " + " ".join(ratios[-6:]))
                         if ratios else out.strip().splitlines()[-1][:90] if out.strip() else "", secs))
            print("| %s | %s | %s | %.0f |" % rows[-1], flush=True)
            save(out_dir, logs)
    print("\n| step | status | result | seconds |\n|---|---|---|---|")
    for name, status, result, secs in rows:
        print(f"| {name} | {status} | {result} | {secs:.0f} |")
    return 0 if all(r[1] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
