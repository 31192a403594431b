"""Collectives and fused ops captured into CUDA graphs (100 calls, replayed 3 times, on a non-blocking
stream; and inside torch.cuda.graph when torch is installed) must equal eager calls, at 1 to 4 ranks on
GPU 0 (time-sliced, or under MPS with SM shares); ring and Ulysses attention captured and replayed with
new inputs in the same buffers must equal eager calls and float64 attention; and after a rank refuses a
call, every waiting rank names it, the heap refuses calls until heap.reset(), and good calls work after
the reset; a rank that comes late is named by the others and names them."""
from __future__ import annotations

import json

import pytest

from tests.helpers import mpi
from tests.helpers.gpu import rank_env, sharing_cases, sharing_env

CASES = [c for c in sharing_cases([1, 2, 3, 4]) if not c.values[2]]     # a hog's 0.5 s timeout: not here


def _run(ranks, shares, *sections):
    """Every rank's reports of ``sections`` (one dict per rank; a dict per section when several)."""
    proc, results = mpi.run(ranks, "tests/templates/programs/graph_program.py", *sections,
                            env=rank_env(**sharing_env(shares, False)), timeout=110)
    output = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(results) == list(range(ranks)), output
    assert proc.returncode == 0, output
    if len(sections) == 1:
        return [results[r][sections[0]] for r in range(ranks)]
    return [{name: results[r][name] for name in sections} for r in range(ranks)]


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
def test_sp_attention_graph_replays_new_inputs_2rank(gpu):
    """2 ranks, time-sliced (the quick check's): each op's graph replayed 3 times, new inputs before each
    replay, every replay equal to an eager call on its inputs and to the float64 reference."""
    for rank, outcome in enumerate(_run(2, None, "sp")):
        assert outcome["cases"] == ["ring", "ulysses"], outcome
        if outcome["failures"]:
            pytest.fail(f"rank {rank}: " + json.dumps(outcome["failures"][:2], indent=1)[:4000])


@pytest.mark.gpu
@pytest.mark.mpi
def test_moe_dispatch_combine_graph_replays_new_routings_2rank(gpu):
    """2 ranks, time-sliced: dispatch, copy and combine captured; 3 replays with new tokens and routings,
    each combine equal to numpy's (a token's row times its summed top-k weights)."""
    for rank, outcome in enumerate(_run(2, None, "moe")):
        assert not outcome["failures"], f"rank {rank}: {outcome['failures'][:2]}"


@pytest.mark.gpu
@pytest.mark.mpi
def test_all_reduce_inside_torch_cuda_graph(gpu):
    outcome = _run(2, None, "torch")
    if "skipped" in outcome[0]:
        pytest.skip(outcome[0]["skipped"])
    assert all(not o["failures"] for o in outcome), outcome


@pytest.mark.gpu
@pytest.mark.mpi
def test_a_refused_call_and_a_late_rank_are_named_and_reset(gpu):
    """3 ranks, one run. Recovery: rank 1 refuses a call the others launch; they name rank 1, refuse
    calls until heap.reset(), and work after it. Late: rank 1 launches after the others gave up; they
    name rank 1, it names ranks 0 and 2, and a reset brings all back."""
    outcome = _run(3, None, "recovery", "late")
    recovery = [o["recovery"] for o in outcome]
    assert "op must be one of" in recovery[1]["refused"], recovery[1]
    for got in (recovery[0], recovery[2]):
        assert got["missing"] == [1], got
        assert "no signal from rank 1" in got["timeout"], got
        assert "heap.reset()" in got["poisoned"], got
    late = [o["late"] for o in outcome]
    assert late[0]["missing"] == [1] and late[2]["missing"] == [1], late
    assert late[1]["missing"] == [0, 2], late
    assert "no signal from ranks 0, 2" in late[1]["timeout"], late
    assert all(not o["failures"] for o in recovery + late), outcome
