"""The multi-GPU measurement run (issue 9), in one device call on a machine with several GPUs, one
process per GPU, multicast off (PKPTX_DISABLE_MULTICAST=1; NCCL_NVLS_ENABLE=0 is set for NCCL too):

1. the GPU test suite at the real world size (every MPI test also runs at world = number of GPUs);
2. the collectives sweep, nccl-tests style, against NCCL (torch.distributed) in the same run;
3. AG+GEMM, GEMM+RS and GEMM+AR at the paper's shapes against pkptx's own GEMM-then-collective and
   cuBLAS + NCCL one after the other, with the unoverlapped share of communication;
4. the results appended to bench/RESULTS.md (and copied to $OUT).

``PKPTX_DISABLE_MULTICAST=1 python3 -m pkptx.bench.multigpu [--quick]`` (from the checkout)
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="smaller sweeps")
    args = ap.parse_args(argv)
    if os.environ.get("PKPTX_DISABLE_MULTICAST") != "1":
        print("refusing to run: set PKPTX_DISABLE_MULTICAST=1")
        return 2
    from ..launch import Device
    gpus = Device.available()
    if gpus < 2:
        print(f"pkptx.bench.multigpu needs several GPUs; this machine has {gpus}")
        return 2
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", NCCL_NVLS_ENABLE="0",
               TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1",
               PKPTX_TEST_DEVICES=",".join(map(str, range(gpus))), PKPTX_TEST_WORLD=str(gpus))
    mpirun = ["mpirun", *(["--allow-run-as-root"] if os.geteuid() == 0 else []), "--oversubscribe", "-n", str(gpus)]
    for name in ("PYTHONPATH", "PKPTX_DISABLE_MULTICAST", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                 "NVSHMEM_DISABLE_NVLS"):
        mpirun += ["-x", name]
    steps = [
        ("tests", [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests"], 1800),
        ("collectives", [*mpirun, sys.executable, "-m", "pkptx.bench.bench_collectives", "--record",
                         "--max-bytes", str(1 << (26 if args.quick else 30))], 900),
        ("fused", [*mpirun, sys.executable, "-m", "pkptx.bench.bench_fused", "--record",
                   "--sizes", "2048,4096" if args.quick else "2048,4096,8192,16384"], 900),
    ]
    results = []
    for name, cmd, limit in steps:
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=limit)
            out, rc = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired:
            out, rc = f"TIMEOUT after {limit} s", 124
        print(out[-4000:])
        results.append((name, rc))
    if "OUT" in os.environ and (ROOT / "bench" / "RESULTS.md").exists():
        shutil.copy(ROOT / "bench" / "RESULTS.md", Path(os.environ["OUT"]) / "RESULTS.md")
    print("\n".join(f"{name}: {'ok' if rc == 0 else f'rc={rc}'}" for name, rc in results))
    return 0 if all(rc == 0 for _, rc in results) else 1


if __name__ == "__main__":
    sys.exit(main())
