"""Collectives and fused ops captured into CUDA graphs (100 calls, replayed 3 times, on a non-blocking
stream; and inside torch.cuda.graph when torch is installed) must equal eager calls, at 1 to 4 ranks on
GPU 0 (time-sliced, or under MPS with SM shares); and after a rank refuses a call, every waiting rank
names it, the heap refuses calls until heap.reset(), and good calls work after the reset; a rank that
comes late is named by the others and names them."""
from __future__ import annotations

import json
import os
import sys

import pytest

from tests.helpers.gpu import rank_env, sharing_cases, sharing_env

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "launch"))
from mpi_programs import launcher  # noqa: E402

CASES = [c for c in sharing_cases([1, 2, 3, 4]) if not c.values[2]]     # a hog's 0.5 s timeout: not here


def _run(ranks, shares, section):
    if launcher.find_launcher() is None:
        pytest.skip("no mpiexec/mpirun to start the ranks")
    proc, results = launcher.run(ranks, "../../templates/programs/graph_program.py", section,
                                 env=rank_env(**sharing_env(shares, False)), timeout=110)
    output = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(results) == list(range(ranks)), output
    assert proc.returncode == 0, output
    return [results[r][section] for r in range(ranks)]


@pytest.mark.gpu
@pytest.mark.mpi
@pytest.mark.parametrize("ranks, shares, hog", CASES)
def test_captured_ops_replay_like_eager_calls(gpu, ranks, shares, hog):
    for rank, outcome in enumerate(_run(ranks, shares, "graphs")):
        assert len(outcome["cases"]) == 7
        if outcome["failures"]:
            pytest.fail(f"rank {rank}: " + json.dumps(outcome["failures"][:3], indent=1)[:4000])


@pytest.mark.gpu
@pytest.mark.mpi
def test_all_reduce_inside_torch_cuda_graph(gpu):
    outcome = _run(2, None, "torch")
    if "skipped" in outcome[0]:
        pytest.skip(outcome[0]["skipped"])
    assert all(not o["failures"] for o in outcome), outcome


@pytest.mark.gpu
@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_refused_call_then_reset(gpu, ranks):
    outcome = _run(ranks, None, "recovery")
    assert "op must be one of" in outcome[1]["refused"]
    for rank in [r for r in range(ranks) if r != 1]:
        got = outcome[rank]
        assert got["missing"] == [1], got
        assert "no signal from rank 1" in got["timeout"], got
        assert "heap.reset()" in got["poisoned"], got
    assert all(not o["failures"] for o in outcome), outcome


@pytest.mark.gpu
@pytest.mark.mpi
def test_a_late_rank_is_named_by_the_others_and_names_them(gpu):
    """Rank 1 of 3 launches after the others gave up: they name rank 1; it names ranks 0 and 2."""
    outcome = _run(3, None, "late")
    assert outcome[0]["missing"] == [1] and outcome[2]["missing"] == [1], outcome
    assert outcome[1]["missing"] == [0, 2], outcome
    assert "no signal from ranks 0, 2" in outcome[1]["timeout"], outcome
    assert all(not o["failures"] for o in outcome), outcome
