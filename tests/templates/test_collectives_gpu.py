"""Collectives on GPU 0 with 1 to 4 ranks (processes), against numpy references (float64 for
reductions, bit-exact for copies): time-sliced or under MPS with SM shares, and at 1 rank beside work
that holds half of the SMs (tests.helpers.gpu.sharing_cases). One mpirun per (collective, case), so a
hang in one collective cannot hide the others' results."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import mpi
from tests.helpers.gpu import rank_env, sharing_cases, sharing_env

PROGRAM = Path(__file__).resolve().parent / "programs" / "collectives_program.py"

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


@pytest.mark.gpu
@pytest.mark.mpi
@pytest.mark.parametrize("ranks, shares, hog", sharing_cases([1, 2, 3, 4]))
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_collective_matches_numpy(gpu, collective, ranks, shares, hog):
    env = rank_env(PKPTX_EXAMPLES="4" if hog else "12" if ranks <= 2 else "6", **sharing_env(shares, hog))
    proc, results = mpi.run(ranks, PROGRAM, collective, env=env, timeout=540)
    output = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(results) == list(range(ranks)), output
    for rank in range(ranks):
        outcome = results[rank][collective]
        assert outcome["cases"] > 0, output
        assert not outcome["failures"], (rank, outcome["failures"][:3])
    assert proc.returncode == 0, output
