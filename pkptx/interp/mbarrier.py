"""The mbarrier object (PTX ISA 9.7.12.15): expected arrivals, pending arrivals, transaction bytes and
the phase count. A phase completes when both the pending arrivals and the pending transaction bytes
reach zero; then the next phase starts with the expected count."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import InterpError


@dataclass(eq=False)
class MBarrier:
    name: str
    expected: int
    pending: int
    tx: int = 0
    phase: int = 0
    releases: list = None          # race checker: clocks released into the current phase

    def arrive(self, count: int = 1) -> int:
        """One arrival of ``count``; returns the state token (the phase arrived in)."""
        state = self.phase
        self.pending -= count
        if self.pending < 0:
            raise InterpError(f"mbarrier {self.name}: {-self.pending} more arrivals than the {self.expected} "
                              f"expected in phase {self.phase}")
        self._maybe_complete()
        return state

    def drop(self, count: int = 1) -> int:
        self.expected -= count
        return self.arrive(count)

    def expect(self, nbytes: int) -> None:
        self.tx += nbytes

    def complete(self, nbytes: int) -> None:
        self.tx -= nbytes
        self._maybe_complete()

    def _maybe_complete(self) -> None:
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.expected
            self.completed_releases, self.releases = self.releases, None

    completed_releases = None

    def parity_done(self, parity: int) -> bool:
        """``try_wait.parity``: the phase of that parity has completed (the current one differs)."""
        return (self.phase & 1) != (parity & 1)

    def state_done(self, state: int) -> bool:
        return self.phase > state

    def describe(self) -> str:
        return (f"mbarrier {self.name}: phase {self.phase} (parity {self.phase & 1}), {self.pending} of "
                f"{self.expected} arrivals pending, {self.tx} transaction bytes pending")


def lookup(w, addr: int, *, create: int | None = None, space: str = "shared::cta") -> MBarrier:
    """The mbarrier at shared address ``addr`` (``create``: mbarrier.init with that count)."""
    shared = w.cta.cluster.shared
    at = w.cta.resolve(np.array([addr], np.uint64))
    (alloc, _, off), = shared.locate(at, 8, w.describe)
    if space != "shared::cluster":
        w.cta.check_own_window(w, at, 8)
    offset = int(off[0])
    if create is not None:
        alloc.written[offset:offset + 8] = True
        mb = alloc.mbarriers[offset] = MBarrier(f"{w.cta.symbol_at(alloc, offset)}", create, create)
        return mb
    mb = alloc.mbarriers.get(offset)
    if mb is None:
        raise w.error(InterpError, f"mbarrier operation on shared address {addr:#x}, where no mbarrier.init ran")
    return mb
