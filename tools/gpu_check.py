"""The whole GPU check in one call: the GPU tests (single-process and under mpirun), then the
benchmarks, then one short table. Run from the checkout on the GPU machine:

    PKPTX_DISABLE_MULTICAST=1 python3 tools/gpu_check.py [--quick] [--only tests|bench]

Benchmarks append to bench/RESULTS.md (and copy it to $OUT when that is set, so the results come back).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHES = ["bench/bench_launch.py", "bench/bench_gemm.py"]


def run(cmd: list[str], log: Path, timeout: int) -> tuple[int, str, float]:
    t0 = time.time()
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", PKPTX_DISABLE_MULTICAST="1")
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        out, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out, rc = f"{exc.stdout or ''}{exc.stderr or ''}\nTIMEOUT after {timeout} s", 124
    log.write_text(out)
    return rc, out, time.time() - t0


def pytest_summary(out: str) -> str:
    lines = [l for l in out.splitlines() if re.search(r"\d+ (passed|failed|error|skipped)", l)]
    return lines[-1].strip("= ") if lines else "no summary"


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
    rows = []
    if args.only != "bench":
        rc, out, secs = run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
                             "tests"], out_dir / "pytest_gpu.log", 1200)
        rows.append(("pytest -m gpu", "ok" if rc == 0 else f"rc={rc}", pytest_summary(out), secs))
    if args.only != "tests":
        for bench in BENCHES:
            cmd = [sys.executable, bench, "--record"] + (["--quick"] if args.quick else [])
            rc, out, secs = run(cmd, out_dir / (Path(bench).stem + ".log"), 900)
            ratios = re.findall(r"\|\s*([0-9.]+)\s*\|\s*$", out, flags=re.M)
            rows.append((bench, "ok" if rc == 0 else f"rc={rc}", "ratios " + " ".join(ratios[-8:]), secs))
    if (ROOT / "bench" / "RESULTS.md").exists() and "OUT" in os.environ:
        shutil.copy(ROOT / "bench" / "RESULTS.md", out_dir / "RESULTS.md")
    print("\n| step | status | result | seconds |\n|---|---|---|---|")
    for name, status, result, secs in rows:
        print(f"| {name} | {status} | {result} | {secs:.0f} |")
    return 0 if all(r[1] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
