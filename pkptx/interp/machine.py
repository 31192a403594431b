"""The machine: one global address space shared by every rank, the launches of all ranks, the seeded
scheduler that interleaves their warps, pending asynchronous copies, the virtual clock and the
no-progress (deadlock) detector."""
from __future__ import annotations

import heapq
import time

import numpy as np

from .errors import DeadlockError, StepLimitError
from .launch import Launch
from .memory import AddressSpace
from .multimem import Multicast
from .races import RaceChecker
from .report import waiting


class Machine:
    """``Machine(seed=0)``; ``alloc``/``from_numpy`` memory; ``launch(kernel, grid, block, *args,
    rank=r)`` per rank; ``run()``. ``quantum``: most ops a warp runs before the scheduler picks again
    (the count drawn per turn from 1..quantum); ``async_delay``: most warp-ops an async copy takes.
    ``ns_per_step``: how far ``%globaltimer`` advances per executed warp-op. ``check_uninit``: reads of
    never-written memory raise; ``check_races``: the happens-before race checker (:mod:`.races`)."""

    def __init__(self, *, seed: int = 0, quantum: int = 64, async_delay: int = 200, max_steps: int = 50_000_000,
                 ns_per_step: int = 1, check_uninit: bool = False, check_races: bool = False):
        self.rng = np.random.default_rng(seed)
        self.quantum, self.async_delay, self.max_steps = quantum, async_delay, max_steps
        self.ns_per_step, self.check_uninit = ns_per_step, check_uninit
        self.global_space = AddressSpace("global")
        self.multicast = Multicast()
        self.launches: list[Launch] = []
        self.steps = 0
        self.epoch = 0
        self.elapsed = 0.0
        self._async: list = []
        self._seq = 0
        self.checker = RaceChecker() if check_races else None

    @property
    def clock_ns(self) -> int:
        return self.steps * self.ns_per_step

    # ------------------------------------------------------------------ memory and launches
    def alloc(self, nbytes: int, *, name: str = "buffer", rank: int = 0, **kw):
        return self.global_space.alloc(nbytes, name=name, rank=rank, **kw)

    def from_numpy(self, array, *, name: str = "array", rank: int = 0):
        return self.global_space.from_numpy(array, name=name, rank=rank)

    def launch(self, kernel, grid, block, *args, smem=None, cluster=None, rank: int = 0) -> Launch:
        launch = Launch(self, kernel, grid, block, args, smem=smem, cluster=cluster, rank=rank)
        self.launches.append(launch)
        return launch

    # ------------------------------------------------------------------ asynchronous work
    def later(self, complete, note: str) -> None:
        """Run ``complete()`` after a random number of steps (an async copy landing)."""
        due = self.steps + int(self.rng.integers(0, self.async_delay + 1))
        heapq.heappush(self._async, (due, self._seq, complete, note))
        self._seq += 1

    def _land(self, until: int | None) -> bool:
        landed = False
        while self._async and (until is None or self._async[0][0] <= until):
            _, _, complete, _ = heapq.heappop(self._async)
            complete()
            self.epoch += 1
            landed = True
            if until is None:
                break
        return landed

    # ------------------------------------------------------------------ scheduling
    def run(self) -> "Machine":
        """Run every launched kernel to completion, interleaving the warps of all ranks. A run that
        raises leaves nothing behind: its blocks and pending copies never resume in a later run."""
        start = time.perf_counter()
        if self.checker is not None:
            self.checker.start_run()
        try:
            self._schedule([w for launch in self.launches for cta in launch.ctas for w in cta.warps
                            if not w.finished])
        except BaseException:
            self.launches, self._async = [], []
            raise
        for launch in self.launches:
            launch.finish()
        self.elapsed += time.perf_counter() - start
        self.launches = []
        return self

    def _schedule(self, warps: list) -> None:
        rng, quantum = self.rng, self.quantum
        with np.errstate(all="ignore"):
            while warps:
                self._land(self.steps)
                runnable = [w for w in warps if w.spinning != self.epoch and w.resume()]
                if not runnable:
                    if self._land(None):
                        continue
                    raise DeadlockError(waiting(self, warps))
                w = runnable[int(rng.integers(len(runnable)))] if len(runnable) > 1 else runnable[0]
                w.run(int(rng.integers(1, quantum + 1)))
                if w.finished:
                    warps = [x for x in warps if not x.finished]
                if self.steps > self.max_steps:
                    raise StepLimitError(f"more than {self.max_steps} warp-instructions executed; a wait that never "
                                         f"polls memory, or an endless loop?\n" + waiting(self, warps))
        while self._async:
            self._land(None)

    @property
    def rate(self) -> float:
        """Warp-instructions per second so far."""
        return self.steps / self.elapsed if self.elapsed else 0.0
