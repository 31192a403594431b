"""Every primitive on a GPU, 1 to 4 ranks (processes on GPU 0), against numpy (programs/primitives_program.py).

One mpirun per world size runs every section; each test below reads one section's outcome: how many
hypothesis cases ran and which failed (with the case and what differed). Multicast stays off
(PKPTX_DISABLE_MULTICAST=1): the unicast forms are what these machines can run.
"""
from __future__ import annotations

import os

import pytest

SECTIONS = ["tma_store", "tma_load", "bulk", "signal_wait", "vector_reduce", "peer_access", "stage_ring"]
EXAMPLES = {1: 25, 2: 20, 3: 12, 4: 12}          # cases per section: the whole suite stays near 2 minutes
OVERRIDE = os.environ.get("PKPTX_PRIMITIVE_EXAMPLES")     # e.g. 3 for a smoke run

pytestmark = [pytest.mark.gpu, pytest.mark.mpi]


@pytest.fixture(scope="module", params=[1, 2, 3, 4], ids=lambda n: f"{n}rank")
def outcome(request, mpi_run):
    ranks = request.param
    proc, results = mpi_run(ranks, "primitives_program.py", env={"PKPTX_EXAMPLES": OVERRIDE or str(EXAMPLES[ranks])},
                            timeout=420)
    return ranks, proc, results


@pytest.mark.parametrize("section", SECTIONS)
def test_primitive_matches_numpy(outcome, section):
    ranks, proc, results = outcome
    output = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(results) == list(range(ranks)), f"not every rank reported:\n{output}"
    for rank in range(ranks):
        got = results[rank].get(section)
        assert got is not None, f"rank {rank} never finished section {section}:\n{output}"
        assert got["cases"] > 0, (rank, got)
        assert not got["failures"], (rank, f"{len(got['failures'])} failing cases", got["failures"][:3])


def test_every_rank_exited_cleanly(outcome):
    ranks, proc, results = outcome
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for rank in range(ranks):
        assert results[rank]["setup"]["size"] == ranks
