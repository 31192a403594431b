"""Symmetric buffers on a real GPU: 2 and 4 ranks, all on GPU 0, both mapping paths (vmm, ipc),
multicast requested but switched off for the launched ranks by PKPTX_DISABLE_MULTICAST=1.
Each rank checks every peer's copy through its peer views, exactly (mpi_programs/gpu_symmetric_program.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import mpi
from tests.helpers.gpu import rank_env, world_sizes

PROGRAM = Path(__file__).resolve().parent / "mpi_programs" / "gpu_symmetric_program.py"


@pytest.mark.gpu
@pytest.mark.mpi
@pytest.mark.parametrize("ranks", world_sizes([2, 4]))
def test_every_rank_reads_every_peer_exactly_on_one_gpu(gpu, ranks):
    env = rank_env(PKPTX_EXPECT_RANKS=str(ranks))
    proc, results = mpi.run(ranks, PROGRAM, env=env, timeout=300)
    output = proc.stdout[-4000:] + proc.stderr[-4000:]
    assert sorted(results) == list(range(ranks)), output
    for rank in range(ranks):
        assert results[rank]["setup"]["ok"], (rank, results[rank]["setup"], output)
        assert results[rank]["setup"]["device"] == 0
        for path in ("vmm", "ipc"):
            outcome = results[rank].get(path, {"ok": False, "problems": ["no report"]})
            assert outcome["ok"], (rank, path, "\n".join(outcome["problems"]))
            assert outcome["offsets"] == results[0][path]["offsets"]
    assert proc.returncode == 0, output
