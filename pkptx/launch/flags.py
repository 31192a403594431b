"""Flag arrays for signal/wait between ranks; and a host barrier.

Counters only ever grow: device code waits until a counter reaches the value of the current use,
compared as a signed 32-bit difference so that wrap-around is harmless. Nothing is reset between
uses, so there is no reset kernel and no race between a reset and a late signal. Which use is current
is device state too (:mod:`pkptx.templates.progress`: the heap's epoch, or a launch count kept in a word
of the kernel's own array), never a host-side number, so a captured graph replays correctly.

Kernels take the arrays as peer tables: ``peer_table_ptr`` (or ``peer_ptrs``) to signal every rank,
``local_ptr`` to wait on.
"""
from __future__ import annotations

import numpy as np

from .driver import call
from .symmetric import SymmetricHeap
from .world import World

class FlagArray:
    """``count`` uint32 counters on every rank (a SymmetricBuffer), zeroed once. Collective."""

    def __init__(self, heap: SymmetricHeap, count: int):
        self.buffer = heap.alloc((count,), np.uint32)
        self.count = self.buffer.shape[0]
        with heap.world.step("FlagArray: zero this rank's counters"):
            self.zero()

    def zero(self) -> None:
        """This rank's counters := 0, once no kernel runs (synchronous; not for inside a capture). Peers
        may signal again only after a host barrier that follows this on every rank."""
        with self.buffer.heap.current_context():
            call("cuCtxSynchronize")
            call("cuMemsetD32", self.buffer.local_ptr, 0, self.count)
            call("cuCtxSynchronize")

    def free(self) -> None:
        """Give the counters back to the heap (every rank in the same order, once no kernel uses them)."""
        self.buffer.free()

    @property
    def local_ptr(self) -> int:
        return self.buffer.local_ptr

    @property
    def peer_ptrs(self) -> list[int]:
        return self.buffer.peer_ptrs

    @property
    def peer_table_ptr(self) -> int:
        return self.buffer.peer_table_ptr

    @property
    def multicast_ptr(self) -> int | None:
        return self.buffer.multicast_ptr


def host_barrier(world: World, *, synchronize: bool = True, what: str = "host barrier",
                 timeout: float | None = None) -> None:
    """Every rank meets on the host; with ``synchronize``, only once its device work is done.

    So after it, each rank may read what any peer's kernels wrote. Needs the context current.
    """
    with world.step(what, timeout=timeout):
        if synchronize:
            call("cuCtxSynchronize")
