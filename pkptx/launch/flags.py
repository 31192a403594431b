"""Flag arrays for signal/wait between ranks, with monotonic epochs; and a host barrier.

Counters only ever grow. Each use of a flag array (a device barrier, one round of signals) bumps
the host-side epoch, and device code waits until a counter reaches ``wait_value(...)``, compared as
a signed 32-bit difference so that wrap-around is harmless. Nothing is reset between uses, so there
is no reset kernel and no race between a reset and a late signal.

The device barrier is a kernel built with the PTX builder; what it needs comes from here:
``peer_table_ptr`` (or ``peer_ptrs``) to signal every rank, ``local_ptr`` to wait on, and the epoch.
"""
from __future__ import annotations

import numpy as np

from .driver import call
from .symmetric import SymmetricHeap
from .world import World

COUNTER_MODULUS = 1 << 32


class FlagArray:
    """``count`` uint32 counters on every rank (a SymmetricBuffer), zeroed once. Collective."""

    def __init__(self, heap: SymmetricHeap, count: int):
        self.buffer = heap.alloc((count,), np.uint32)
        self.count = self.buffer.shape[0]
        with heap.world.step("FlagArray: zero this rank's counters"):
            self.zero()
        self.epoch = 0

    def zero(self) -> None:
        """This rank's counters := 0, once no kernel runs (synchronous; not for inside a capture). Peers
        may signal again only after a host barrier that follows this on every rank."""
        with self.buffer.heap.current_context():
            call("cuCtxSynchronize")
            call("cuMemsetD32", self.buffer.local_ptr, 0, self.count)
            call("cuCtxSynchronize")
        self.epoch = 0

    def free(self) -> None:
        """Give the counters back to the heap (every rank in the same order, once no kernel uses them)."""
        self.buffer.free()

    def advance(self) -> int:
        """Begin the next use; returns its epoch (1, 2, ...). Every rank calls it in step."""
        self.epoch += 1
        return self.epoch

    def wait_value(self, per_epoch: int, epoch: int | None = None) -> int:
        """The counter value that means "epoch done" when each epoch adds ``per_epoch``.

        A barrier where every rank adds 1 on every rank has ``per_epoch = world size``.
        """
        return ((self.epoch if epoch is None else epoch) * per_epoch) % COUNTER_MODULUS

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
