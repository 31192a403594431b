"""The device status words every pkptx kernel with bounded waits reports into.

Layout (u32): [0] status (0 ok, 1 a wait timed out), [1] rank, [2] flag id, [3] expected value,
[4] observed value, [5] block, [6] the first rank whose signal is missing (NO_PEER: unknown), [7] a
mask of the missing ranks below 32. The first thread to time out writes them and exits; the host reads
them after the kernel and raises :class:`DeviceTimeoutError` naming the ranks that never signalled.
"""
from __future__ import annotations

import numpy as np

from ..errors import DeviceTimeoutError, SettingError
from .array import DeviceArray, empty
from .timeouts import default_timeout_s, resolve_timeout_s, to_ns
from .world import format_ranks

WORDS = 8
MBARRIER_FLAG_ID = 0xFFFFFFFF      # pkptx.primitives.mbarrier.MBARRIER_FLAG_ID (launch does not import primitives)
BARRIER_FLAG_ID = 0xFFFFFFFE       # pkptx.templates.progress.BARRIER_FLAG_ID: the heap's barrier
NO_PEER = 0xFFFFFFFF               # pkptx.primitives.sync.NO_PEER
PEER_FLAG = 0x50000000             # pkptx.templates.kernels.ring_attention.PEER_FLAG: a wait on data of rank id & 0xFFFF
# The device waits' budget when nothing else says: the one timeout setting (pkptx.launch.timeouts); the
# ops take timeout= seconds (default: their world's), timeout_ns= for the old spelling.
DEFAULT_TIMEOUT_NS = to_ns(default_timeout_s())


def device_timeout_ns(world=None, timeout=None, timeout_ns=None, what: str = "timeout") -> int:
    """The budget of one op's device waits in ns: ``timeout`` (seconds) or ``timeout_ns``, else the
    world's timeout, else the default (``PKPTX_TIMEOUT_S``, else 60 s). Both given: SettingError."""
    if timeout is not None and timeout_ns is not None:
        raise SettingError(f"{what}: pass timeout= (seconds) or timeout_ns=, not both")
    if timeout_ns is not None:
        if isinstance(timeout_ns, bool) or not isinstance(timeout_ns, int) or timeout_ns <= 0:
            raise SettingError(f"{what}_ns={timeout_ns!r}: expected an int number of nanoseconds > 0")
        return timeout_ns
    return to_ns(resolve_timeout_s(timeout, world))


def missing_ranks(first: int, mask: int) -> list[int]:
    """The ranks a report names: the mask's bits, or the first missing rank alone (rank 32 and up)."""
    ranks = [r for r in range(32) if mask >> r & 1]
    return ranks or ([] if first == NO_PEER else [int(first)])


class DeviceStatus:
    def __init__(self, device=None):
        self.words: DeviceArray = empty((WORDS,), np.uint32, device=device)
        self.words.fill(0)
        self.device = device
        self.launch_words: dict = {}     # key -> words of launch state that a timeout leaves out of step

    def zeroed_words(self, key, count: int) -> DeviceArray:
        """``count`` u32 words under ``key`` (made and zeroed on first use) that kernels leave at 0 when
        they end; a timed-out launch may not, so :meth:`clear` zeroes them again."""
        words = self.launch_words.get(key)
        if words is None:
            words = self.launch_words[key] = empty((count,), np.uint32, device=self.device).fill(0)
        return words

    @property
    def ptr(self) -> int:
        return self.words.ptr

    def check(self, what: str = "kernel", timeout_ns: int | None = None) -> None:
        """Raise if a wait of the last kernel(s) timed out (synchronizes through the copy), then clear."""
        w = self.words.to_numpy()
        if w[0] == 0:
            return
        self.clear()
        budget = f" after {timeout_ns / 1e9:g} s" if timeout_ns else ""
        missing = missing_ranks(int(w[6]), int(w[7]))
        if w[2] == MBARRIER_FLAG_ID:
            error = DeviceTimeoutError(
                f"{what}: rank {w[1]} timed out{budget} in block {w[5]} waiting for an mbarrier phase of parity "
                f"{w[3]}: a TMA or bulk copy never completed (or its byte count was wrong)")
        elif missing:
            where = "at the heap's barrier" if w[2] == BARRIER_FLAG_ID else f"on flag {w[2]}"
            error = DeviceTimeoutError(
                f"{what}: rank {w[1]} timed out{budget} {where}: no signal from {format_ranks(missing)} "
                f"(waited for {w[3]}, saw {w[4]}; block {w[5]}); did {format_ranks(missing)} launch it?")
        elif w[2] & 0xFFFF0000 == PEER_FLAG:
            peer = w[2] & 0xFFFF
            error = DeviceTimeoutError(
                f"{what}: rank {w[1]} timed out{budget} waiting for rank {peer} (block {w[5]}): rank {peer} never "
                f"joined or its data never arrived (did every rank launch it?)")
            missing = [peer]
        else:
            error = DeviceTimeoutError(
                f"{what}: rank {w[1]} timed out{budget} waiting on flag {w[2]} for a value >= {w[3]} "
                f"(it saw {w[4]}; block {w[5]}): a peer never signalled (did every rank launch it?)")
        error.rank, error.missing = int(w[1]), missing
        raise error

    def clear(self) -> None:
        """Forget a recorded timeout (``SymmetricHeap.reset`` does, after the ranks resynchronised), and
        put the launch-state words back to 0."""
        self.words.fill(0)
        for words in self.launch_words.values():
            words.fill(0)


_by_device: dict[int, DeviceStatus] = {}


def device_status(device) -> DeviceStatus:
    """The status words of ``device`` (one per device and process)."""
    status = _by_device.get(device.ordinal)
    if status is None:
        status = _by_device[device.ordinal] = DeviceStatus(device)
    return status
