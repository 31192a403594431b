"""The device status words every pkptx kernel with bounded waits reports into.

Layout (u32): [0] status (0 ok, 1 a wait timed out), [1] rank, [2] flag id, [3] expected value,
[4] observed value, [5] block. The first thread to time out writes them and exits; the host reads them
after the kernel and raises :class:`DeviceTimeoutError` naming the rank, flag and value.
"""
from __future__ import annotations

import os

import numpy as np

from ..errors import DeviceTimeoutError
from .array import DeviceArray, empty
from .timeouts import ENV as TIMEOUT_ENV, default_timeout_s, to_ns

WORDS = 8
MBARRIER_FLAG_ID = 0xFFFFFFFF      # pkptx.primitives.mbarrier.MBARRIER_FLAG_ID (launch does not import primitives)
PEER_FLAG = 0x50000000             # pkptx.templates.kernels.ring_attention.PEER_FLAG: a wait on data of rank id & 0xFFFF
# Device waits' budget: PKPTX_TIMEOUT_S when set (pkptx.launch.timeouts), else 10 s; ops take timeout_ns=.
DEFAULT_TIMEOUT_NS = to_ns(default_timeout_s()) if os.environ.get(TIMEOUT_ENV) else 10 * 10**9


class DeviceStatus:
    def __init__(self, device=None):
        self.words: DeviceArray = empty((WORDS,), np.uint32, device=device)
        self.words.fill(0)

    @property
    def ptr(self) -> int:
        return self.words.ptr

    def check(self, what: str = "kernel", timeout_ns: int | None = None) -> None:
        """Raise if a wait of the last kernel(s) timed out (synchronizes through the copy), then clear."""
        w = self.words.to_numpy()
        if w[0] == 0:
            return
        self.words.fill(0)
        budget = f" after {timeout_ns / 1e9:g} s" if timeout_ns else ""
        if w[2] == MBARRIER_FLAG_ID:
            raise DeviceTimeoutError(
                f"{what}: rank {w[1]} timed out{budget} in block {w[5]} waiting for an mbarrier phase of parity "
                f"{w[3]}: a TMA or bulk copy never completed (or its byte count was wrong)")
        if w[2] & 0xFFFF0000 == PEER_FLAG:
            peer = w[2] & 0xFFFF
            raise DeviceTimeoutError(
                f"{what}: rank {w[1]} timed out{budget} waiting for rank {peer} (block {w[5]}): rank {peer} never "
                f"joined or its data never arrived (did every rank launch it?)")
        raise DeviceTimeoutError(
            f"{what}: rank {w[1]} timed out{budget} waiting on flag {w[2]} for a value >= {w[3]} "
            f"(it saw {w[4]}; block {w[5]}): a peer never signalled (did every rank launch it?)")


_by_device: dict[int, DeviceStatus] = {}


def device_status(device) -> DeviceStatus:
    """The status words of ``device`` (one per device and process)."""
    status = _by_device.get(device.ordinal)
    if status is None:
        status = _by_device[device.ordinal] = DeviceStatus(device)
    return status
