"""Run kernels on the CPU: an interpreter of the builder's instruction lists, a warp at a time,
vectorised over the 32 lanes with numpy, with several ranks in one process.

``run(kernel, grid, block, *args)`` launches one kernel on a fresh :class:`Machine` and runs it;
numpy arrays passed for pointer parameters are copied in and back. For memory that outlives a launch,
make a Machine, allocate on it, ``launch`` and ``run``; for several ranks, a :class:`World` (symmetric
buffers with peer tables over one Machine).
"""
from __future__ import annotations

from .errors import (DeadlockError, InterpError, MemoryFault, RaceError, StepLimitError, UninitializedRead,
                     UnsupportedError)
from .machine import Machine
from .memory import Allocation
from .world import Symmetric, World


def run(kernel, grid, block, *args, smem: int | None = None, cluster=None, machine: Machine | None = None,
        **options) -> Machine:
    """Interpret one launch; ``options`` go to :class:`Machine` (seed, quantum, check_uninit...)."""
    m = machine if machine is not None else Machine(**options)
    m.launch(kernel, grid, block, *args, smem=smem, cluster=cluster)
    return m.run()


__all__ = ["run", "Machine", "World", "Symmetric", "Allocation", "InterpError", "DeadlockError", "MemoryFault", "RaceError",
           "StepLimitError", "UninitializedRead", "UnsupportedError"]
