"""Under mpiexec -n 3 (CPU only): the last rank dies during setup; the others must name it in time.

argv: where ('world': it exits before World() is built; 'barrier': it exits once the world is built,
and the others, sent SIGUSR1 as MPICH's launcher sends it to the survivors of a rank killed by a signal,
wait at a barrier; 'heap': it exits inside SymmetricHeap, in cuMemCreate of the fake driver) and the
timeout in seconds. (A real SIGKILL is not used: MPICH 5's launcher then kills the survivors too, at
once or after its notice, whatever -disable-auto-cleanup says.) Survivors report and then simply end:
pkptx must keep them out of MPI_Finalize, which would wait for the dead rank forever. 'world' and
'barrier' rely on the exit path (status 1); 'heap' calls ``world.abort(3)``.
"""
from __future__ import annotations

import os
import signal
import sys
import time

from mpi4py import MPI

from pkptx.errors import WorldError
from pkptx.launch.symmetric import SymmetricHeap
from pkptx.launch.world import World
from tests.launch.mpi_programs.fake_cuda import FakeDriver
from tests.helpers.mpi import report, unlink_mpi_shared_memory

where, timeout = sys.argv[1], float(sys.argv[2])
rank = MPI.COMM_WORLD.Get_rank()
victim = MPI.COMM_WORLD.Get_size() - 1
if where == "world" and rank == victim:
    os._exit(0)
os.environ["PKPTX_DISABLE_MULTICAST"] = "1"
start = time.monotonic()
world = None
try:
    world = World(timeout=timeout)
    if where == "barrier":
        if rank == victim:
            os._exit(0)
        os.kill(os.getpid(), signal.SIGUSR1)
        world.barrier(what="after the kill")
    if where == "heap":
        FakeDriver(exit_in="cuMemCreate" if rank == victim else None).install()
        SymmetricHeap(world, 1 << 20)
    report(rank, where, error=None, seconds=time.monotonic() - start)
except WorldError as exc:
    report(rank, where, error=str(exc), seconds=time.monotonic() - start,
           broken=world.broken if world is not None else None)


unlink_mpi_shared_memory()
if where == "heap":
    world.abort(3)
