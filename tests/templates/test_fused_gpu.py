"""AG+GEMM, GEMM+RS and GEMM+AR on GPU 0 with 1 to 4 ranks (processes), against float64 numpy:
time-sliced or under MPS with SM shares, and at 1 rank beside work that holds half of the SMs."""
from __future__ import annotations

import pytest

from tests.helpers.gpu import rank_env, sharing_cases, sharing_env
from tests.helpers.mpi import run_program_cases


@pytest.mark.gpu
@pytest.mark.mpi
@pytest.mark.parametrize("ranks, shares, hog", sharing_cases([1, 2, 3, 4]))
def test_fused_kernels_match_numpy(gpu, ranks, shares, hog):
    env = rank_env(PKPTX_EXAMPLES="8" if hog else "18" if ranks < 4 else "12", **sharing_env(shares, hog))
    run_program_cases(ranks, "fused_program.py", "fused", env=env, timeout=540)
