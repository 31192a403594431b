"""Under mpiexec -n 3 (CPU only): the last rank dies during setup; the others must name it in time.

argv: where ('world': before World() is built; 'heap': inside SymmetricHeap, in cuMemCreate of
the fake driver) and the timeout in seconds. Survivors report, then leave without MPI_Finalize,
which would wait for the dead rank forever.
"""
from __future__ import annotations

import contextlib
import os
import sys
import time

from mpi4py import MPI

from fake_cuda import FakeDriver
from launcher import report
from pkptx.errors import WorldError
from pkptx.launch.symmetric import SymmetricHeap
from pkptx.launch.world import World

where, timeout = sys.argv[1], float(sys.argv[2])
rank = MPI.COMM_WORLD.Get_rank()
victim = MPI.COMM_WORLD.Get_size() - 1
if where == "world" and rank == victim:
    os._exit(0)
os.environ["PKPTX_DISABLE_MULTICAST"] = "1"
start = time.monotonic()
try:
    world = World(timeout=timeout)
    if where == "heap":
        FakeDriver(exit_in="cuMemCreate" if rank == victim else None).install()
        SymmetricHeap(world, 1 << 20)
    report(rank, where, error=None, seconds=time.monotonic() - start)
except WorldError as exc:
    report(rank, where, error=str(exc), seconds=time.monotonic() - start)


def unlink_mpi_shared_memory() -> None:
    """Nobody can finalize this job, so nobody would remove its shared-memory segments: the
    survivors unlink those they map (unlinking twice is harmless), leaving /dev/shm clean."""
    with open("/proc/self/maps") as maps:
        paths = {line.split(None, 5)[-1].strip() for line in maps if " /dev/shm/" in line}
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path.removesuffix(" (deleted)"))


unlink_mpi_shared_memory()
os._exit(0)
