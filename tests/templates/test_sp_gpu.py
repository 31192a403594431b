"""Ring and Ulysses attention on GPU 0 with 1 to 4 ranks (processes): time-sliced or under MPS with SM
shares, and at 1 rank beside work that holds half of the SMs; each rank's shard against float64 numpy
and single-GPU pkptx.attention over the whole sequence (programs/sp_program.py). And a rank that never
joins: the others get a DeviceTimeoutError naming it, within the budget, not a hang."""
from __future__ import annotations

import json
import os

import pytest

from tests.helpers import mpi
from tests.helpers.gpu import rank_env, sharing_cases, sharing_env

PROGRAM = "tests/templates/programs/sp_program.py"
OPS = ("ring", "ulysses")


def _examples(default: str) -> str:
    """Hypothesis examples per op and run (besides the pinned ones): ``PKPTX_SP_EXAMPLES`` overrides."""
    return os.environ.get("PKPTX_SP_EXAMPLES", default)


def _check_cases(results, ranks, op, output):
    for rank in range(ranks):
        outcome = results[rank][op]
        assert outcome["cases"] > 0, output
        if outcome["failures"]:
            pytest.fail(f"rank {rank}: " + json.dumps(outcome["failures"][:3], indent=1)[:4000])


def _check_absent(results, ranks):
    absent = ranks - 1
    for rank in range(absent):
        got = results[rank]["absent"]
        assert "error" not in got, got["error"]
        assert got["raised"] == "DeviceTimeoutError", got
        assert f"waiting for rank {absent}" in got["message"], got["message"]
        assert got["elapsed_s"] < 5.0, got
    assert "error" not in results[absent]["absent"], results[absent]["absent"]


@pytest.mark.gpu
@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 4])
def test_quick(gpu, ranks):
    """Both ops on a few cases, then the last rank sitting out a ring call, in one mpirun (the short
    check): under MPS with equal shares when ``PKPTX_TEST_MPS=1``, else time-sliced."""
    shares = [100 // ranks] * ranks if os.environ.get("PKPTX_TEST_MPS") == "1" else None
    env = rank_env(PKPTX_EXAMPLES=_examples("1"), **sharing_env(shares, False))
    proc, results = mpi.run(ranks, PROGRAM, "ring,ulysses,absent-ring", env=env, timeout=300)
    output = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(results) == list(range(ranks)), output
    for op in OPS:
        _check_cases(results, ranks, op, output)
    _check_absent(results, ranks)
    assert proc.returncode == 0, output


@pytest.mark.gpu
@pytest.mark.mpi
@pytest.mark.parametrize("ranks, shares, hog", sharing_cases([1, 2, 3, 4]))
@pytest.mark.parametrize("op", OPS)
def test_sequence_parallel_attention_matches(gpu, op, ranks, shares, hog):
    env = rank_env(PKPTX_EXAMPLES=_examples("4" if hog else "10" if ranks <= 2 else "6"), **sharing_env(shares, hog))
    proc, results = mpi.run(ranks, PROGRAM, op, env=env, timeout=540)
    output = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(results) == list(range(ranks)), output
    _check_cases(results, ranks, op, output)
    assert proc.returncode == 0, output


@pytest.mark.gpu
@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("op", OPS)
def test_absent_rank_is_named(gpu, op, ranks):
    proc, results = mpi.run(ranks, PROGRAM, f"absent-{op}", env=rank_env(), timeout=240)
    output = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(results) == list(range(ranks)), output
    _check_absent(results, ranks)
    assert proc.returncode == 0, output
