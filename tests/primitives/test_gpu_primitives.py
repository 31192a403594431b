"""Every primitive on a GPU, 1 to 4 ranks (processes on GPU 0), against numpy (programs/primitives_program.py).

One mpirun per (world size, section), so a primitive that breaks the CUDA context cannot hide the others.
Each test reads one section's outcome on every rank: how many hypothesis cases ran and which failed (the
case, and what differed or the traceback). Multicast stays off (PKPTX_DISABLE_MULTICAST=1): the unicast
forms are what these machines can run. ``PKPTX_PRIMITIVE_EXAMPLES`` overrides the cases per section;
``PKPTX_PRIMITIVE_RESULTS`` names a folder that receives every rank's raw report (for debugging).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers.gpu import world_sizes

SECTIONS = ["tma_store", "tma_load", "bulk", "signal_wait", "vector_reduce", "peer_access", "stage_ring"]
EXAMPLES = {1: 25, 2: 15, 3: 10, 4: 10}          # cases per section: the whole suite stays near 2 minutes
OVERRIDE = os.environ.get("PKPTX_PRIMITIVE_EXAMPLES")     # e.g. 3 for a smoke run

pytestmark = [pytest.mark.gpu, pytest.mark.mpi]


@pytest.mark.parametrize("section", SECTIONS)
@pytest.mark.parametrize("ranks", world_sizes([1, 2, 3, 4]), ids=lambda n: f"{n}rank")
def test_primitive_matches_numpy(mpi_run, ranks, section):
    proc, results = mpi_run(ranks, "primitives_program.py", section,
                            env={"PKPTX_EXAMPLES": OVERRIDE or str(EXAMPLES[ranks])}, timeout=240)
    keep = os.environ.get("PKPTX_PRIMITIVE_RESULTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / f"{section}-{ranks}.json").write_text(json.dumps(
            {"returncode": proc.returncode, "results": results, "stderr": proc.stderr[-4000:]}, indent=1, default=str))
    output = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(results) == list(range(ranks)), f"not every rank reported:\n{output}"
    for rank in range(ranks):
        got = results[rank].get(section)
        assert got is not None, f"rank {rank} never finished section {section}:\n{output}"
        assert got["cases"] > 0, f"rank {rank}: no case ran: {got}"
        assert not got["failures"], (f"rank {rank}: {len(got['failures'])} of {got['cases']} cases failed; the first:\n"
                                     + json.dumps(got["failures"][:2], indent=1, default=str)[:6000])
        assert results[rank]["setup"]["size"] == ranks
    assert proc.returncode == 0, output


def test_tma_through_an_unfenced_map_table(mpi_run):
    """p2p's contract: host-written tensor-map tables in global memory need no fence.proxy.tensormap
    (the other sections acquire the maps anyway; this one does not)."""
    proc, results = mpi_run(1, "primitives_program.py", "tma_unfenced", timeout=120)
    got = results.get(0, {}).get("tma_unfenced")
    assert got is not None, proc.stderr[-3000:]
    assert not got["failures"], got["failures"]


def test_rank1_tensor_map_encodes(gpu):
    """Regression: rank 1 once passed an empty globalStrides list, which the driver refuses."""
    import numpy as np

    from pkptx.launch import TensorMap, empty
    buf = empty((256,), np.float32)
    tmap = TensorMap.tiled(buf, box=(16,))
    assert len(tmap.data) == TensorMap.SIZE and any(tmap.data)
    assert tmap.spec.dims == (256,) and tmap.spec.strides == () and tmap.box_bytes == 64
    assert TensorMap.tiled(buf, box=(32,)).data != tmap.data       # the driver encoded the box it was given
