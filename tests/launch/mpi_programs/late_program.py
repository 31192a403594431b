"""Under mpiexec -n 3 (CPU only): rank 2 comes to a host barrier after ranks 0 and 1 gave up on it.

argv: the timeout in seconds. Ranks 0 and 1 time out, report, and stay a while (so their notices
are surely there when rank 2 comes); rank 2 arrives after 2.5 timeouts and must raise, not pass.
Every rank then simply ends (pkptx keeps lost worlds out of MPI_Finalize: status 1).
"""
from __future__ import annotations

import sys
import time

from pkptx.errors import WorldError
from pkptx.launch.world import World
from tests.helpers.mpi import report, unlink_mpi_shared_memory

timeout = float(sys.argv[1])
world = World(timeout=timeout)
world.barrier(what="everyone here")
late = world.rank == 2
if late:
    time.sleep(2.5 * timeout)
start = time.monotonic()
try:
    world.barrier(what="late barrier")
    report(world.rank, "late", error=None, seconds=time.monotonic() - start)
except WorldError as exc:
    report(world.rank, "late", error=str(exc), seconds=time.monotonic() - start)
try:
    world.allgather(world.rank, what="after")
    report(world.rank, "after", error=None)
except WorldError as exc:
    report(world.rank, "after", error=str(exc))
if not late:
    time.sleep(2 * timeout)
unlink_mpi_shared_memory()
