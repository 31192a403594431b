"""A fake device address space backed by numpy byte buffers.

Every allocation gets a distinct fake address (each rank its own 64 GiB region of global addresses,
so a pointer says whose memory it is); lookups are vectorised over a warp's lanes. The same class
models a cluster's shared memory: each CTA's window is one allocation at its own 32-bit base, so
``shared::cta`` addresses of CTA r are valid ``shared::cluster`` addresses too (``mapa`` moves
between windows). An allocation remembers which bytes were ever written (``written``), for the
uninitialised-read check.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from .errors import MemoryFault

GLOBAL_BASE = 0x7F00_0000_0000
RANK_STRIDE = 1 << 36
ALLOC_ALIGN = 256
SHARED_BASE = 0x1000_0000           # CTA r of a cluster: its window starts at SHARED_BASE + r * SHARED_STRIDE
SHARED_STRIDE = 1 << 24
POISON = 0xFF                       # fill of never-written bytes: NaN in every float type


@dataclass(eq=False)
class Allocation:
    base: int
    data: np.ndarray                # uint8
    name: str
    rank: int = 0
    written: np.ndarray = field(default=None)   # bool per byte
    mbarriers: dict = field(default_factory=dict)  # offset -> MBarrier (shared windows only)

    @property
    def nbytes(self) -> int:
        return self.data.size

    @property
    def end(self) -> int:
        return self.base + self.data.size

    def view(self, dtype, offset: int = 0, count: int | None = None) -> np.ndarray:
        """A live numpy view of the bytes as ``dtype``."""
        dtype = np.dtype(dtype)
        count = (self.nbytes - offset) // dtype.itemsize if count is None else count
        return self.data[offset:offset + count * dtype.itemsize].view(dtype)

    def write(self, values: np.ndarray, offset: int = 0) -> None:
        """Host write (marks the bytes written)."""
        raw = np.ascontiguousarray(values).reshape(-1).view(np.uint8)
        self.data[offset:offset + raw.size] = raw
        self.written[offset:offset + raw.size] = True

    def read(self, dtype, shape=None, offset: int = 0) -> np.ndarray:
        """Host read: a copy of the bytes as ``dtype`` with ``shape``."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape)) if shape is not None else None
        out = self.view(dtype, offset, count).copy()
        return out.reshape(shape) if shape is not None else out

    def __repr__(self) -> str:
        return f"<{self.name} rank {self.rank} at {self.base:#x}, {self.nbytes} bytes>"


class AddressSpace:
    """Allocations by fake address; ``locate`` maps a lane array of addresses to (allocation, offsets)."""

    def __init__(self, space: str = "global"):
        self.space = space
        self.allocations: list[Allocation] = []
        self._bases: list[int] = []
        self._next: dict[int, int] = {}
        self._bases_np = np.zeros(0, np.uint64)

    def alloc(self, nbytes: int, *, name: str = "buffer", rank: int = 0, base: int | None = None,
              fill: int | None = POISON, written: bool = False) -> Allocation:
        """``nbytes`` of device memory owned by ``rank``; bytes start as ``fill`` and unwritten."""
        if base is None:
            cursor = self._next.get(rank, GLOBAL_BASE + rank * RANK_STRIDE)
            base = cursor
            self._next[rank] = cursor + -(-max(nbytes, 1) // ALLOC_ALIGN) * ALLOC_ALIGN + ALLOC_ALIGN
        data = np.full(nbytes, fill if fill is not None else 0, np.uint8)
        a = Allocation(base, data, name, rank, np.full(nbytes, written, bool))
        i = bisect.bisect(self._bases, base)
        self._bases.insert(i, base)
        self.allocations.insert(i, a)
        self._bases_np = np.array(self._bases, np.uint64)
        return a

    def free(self, alloc: Allocation) -> None:
        """Forget ``alloc``: a later access to it faults (addresses are never handed out again)."""
        i = self.allocations.index(alloc)
        del self.allocations[i], self._bases[i]
        self._bases_np = np.array(self._bases, np.uint64)

    def from_numpy(self, array: np.ndarray, *, name: str = "array", rank: int = 0) -> Allocation:
        raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        a = self.alloc(raw.size, name=name, rank=rank)
        a.write(raw)
        return a

    def find(self, address: int) -> Allocation | None:
        i = bisect.bisect(self._bases, address) - 1
        if i >= 0 and address < self.allocations[i].end:
            return self.allocations[i]
        return None

    def locate(self, addrs: np.ndarray, size: int, describe) -> list[tuple[Allocation, np.ndarray, np.ndarray]]:
        """Group lanes by allocation: [(allocation, lane indices, byte offsets)]. Raises MemoryFault
        (message from ``describe(text, index of the lane)``) for an address outside every allocation, an access running
        past its end, or one not aligned to ``size``."""
        addrs = addrs.astype(np.uint64, copy=False)
        if not addrs.size:
            return []
        if size > 1 and np.any(addrs % np.uint64(min(size, 16))):
            i = int(np.nonzero(addrs % np.uint64(min(size, 16)))[0][0])
            raise MemoryFault(describe(f"misaligned {size}-byte {self.space} access at {int(addrs[i]):#x}", i))
        idx = np.searchsorted(self._bases_np, addrs, side="right").astype(np.int64) - 1
        first = idx[0]
        if first >= 0 and np.all(idx == first):
            a = self.allocations[first]
            off = (addrs - np.uint64(a.base)).astype(np.int64)
            if off.max() + size <= a.nbytes:
                return [(a, np.arange(addrs.size), off)]
        out = []
        for i in np.unique(idx):
            lanes = np.nonzero(idx == i)[0]
            a = self.allocations[i] if i >= 0 else None
            off = (addrs[lanes] - np.uint64(a.base)).astype(np.int64) if a is not None else None
            if a is None or off.max() + size > a.nbytes:
                i = int(lanes[0] if a is None else lanes[int(np.argmax(off))])
                raise MemoryFault(describe(self._fault_text(int(addrs[i]), size), i))
            out.append((a, lanes, off))
        return out

    def _fault_text(self, address: int, size: int) -> str:
        i = bisect.bisect(self._bases, address) - 1
        near = ""
        if i >= 0:
            a = self.allocations[i]
            near = f"; {address - a.base} bytes past the start of {a!r}"
        return f"out-of-bounds {size}-byte {self.space} access at {address:#x}{near}"

    def load(self, addrs: np.ndarray, size: int, describe, *, check_uninit: bool = False) -> np.ndarray:
        """Bytes ``[addr, addr + size)`` of every lane: uint8 array (lanes, size)."""
        out = np.empty((addrs.size, size), np.uint8)
        span = np.arange(size)
        for a, lanes, off in self.locate(addrs, size, describe):
            where = off[:, None] + span
            out[lanes] = a.data[where]
            if check_uninit and not a.written[where].all():
                from .errors import UninitializedRead
                lane = lanes[int(np.argmin(a.written[where].all(axis=1)))]
                raise UninitializedRead(describe(f"read of never-written {self.space} memory at "
                                                 f"{int(addrs[lane]):#x} in {a!r}", int(lane)))
        return out

    def store(self, addrs: np.ndarray, data: np.ndarray, describe) -> None:
        """Write ``data`` (uint8, (lanes, size)); lanes to the same bytes: the highest lane wins."""
        size = data.shape[1]
        span = np.arange(size)
        for a, lanes, off in self.locate(addrs, size, describe):
            where = off[:, None] + span
            a.data[where] = data[lanes]
            a.written[where] = True
