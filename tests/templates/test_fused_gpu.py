"""AG+GEMM, GEMM+RS and GEMM+AR on GPU 0 with 1 to 4 ranks (processes), against float64 numpy:
time-sliced or under MPS with SM shares, and at 1 rank beside work that holds half of the SMs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import mpi
from tests.helpers.gpu import rank_env, sharing_cases, sharing_env

PROGRAM = Path(__file__).resolve().parent / "programs" / "fused_program.py"


@pytest.mark.gpu
@pytest.mark.mpi
@pytest.mark.parametrize("ranks, shares, hog", sharing_cases([1, 2, 3, 4]))
def test_fused_kernels_match_numpy(gpu, ranks, shares, hog):
    env = rank_env(PKPTX_EXAMPLES="8" if hog else "18" if ranks < 4 else "12", **sharing_env(shares, hog))
    proc, results = mpi.run(ranks, PROGRAM, env=env, timeout=540)
    output = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(results) == list(range(ranks)), output
    for rank in range(ranks):
        outcome = results[rank]["fused"]
        assert outcome["cases"] > 0, output
        if outcome["failures"]:
            pytest.fail(f"rank {rank}: " + json.dumps(outcome["failures"][:3], indent=1)[:4000])
    assert proc.returncode == 0, output
