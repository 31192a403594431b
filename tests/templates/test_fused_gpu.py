"""AG+GEMM, GEMM+RS and GEMM+AR on GPU 0 with 1 to 4 ranks (processes), against float64 numpy:
time-sliced or under MPS with SM shares, and at 1 rank beside work that holds half of the SMs."""
from __future__ import annotations

import json
import os
import sys

import pytest

from tests.helpers.gpu import rank_env, sharing_cases, sharing_env

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "launch"))
from mpi_programs import launcher  # noqa: E402


@pytest.mark.gpu
@pytest.mark.mpi
@pytest.mark.parametrize("ranks, shares, hog", sharing_cases([1, 2, 3, 4]))
def test_fused_kernels_match_numpy(gpu, ranks, shares, hog):
    if launcher.find_launcher() is None:
        pytest.skip("no mpiexec/mpirun to start the ranks")
    env = rank_env(PKPTX_EXAMPLES="8" if hog else "18" if ranks < 4 else "12", **sharing_env(shares, hog))
    proc, results = launcher.run(ranks, "../../templates/programs/fused_program.py", env=env, timeout=540)
    output = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(results) == list(range(ranks)), output
    for rank in range(ranks):
        outcome = results[rank]["fused"]
        assert outcome["cases"] > 0, output
        if outcome["failures"]:
            pytest.fail(f"rank {rank}: " + json.dumps(outcome["failures"][:3], indent=1)[:4000])
    assert proc.returncode == 0, output
