"""Several ranks in one process: one :class:`Machine` holds every rank's memory (each rank its own fake
address region, so a pointer says whose memory it is), symmetric buffers with their peer tables, and the
launches of all ranks, which ``run`` interleaves warp by warp (seeded) until every kernel ends.

``World(4)``; ``buf = world.symmetric((n,), np.float32)``; ``buf.write(r, x)``; ``world.launch(r, kernel,
grid, block, *args)`` for each rank; ``world.run()``; ``buf.read(r)``.
"""
from __future__ import annotations

import numpy as np

from .machine import Machine
from .memory import POISON


class Symmetric:
    """The same shape and dtype on every rank, at the same offset of each rank's region; each rank's
    peer table (u64 addresses of every rank's copy, rank order) lies in that rank's memory."""

    def __init__(self, world: "World", shape, dtype, name: str, fill: int | None, multicast: bool):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        padded = max(-(-self.nbytes // 16) * 16, 16)      # as the heap pads: kernels move 16-byte vectors
        m = world.machine
        self.allocs = [m.alloc(padded, name=name, rank=r, fill=POISON if fill is None else fill,
                               written=fill is not None) for r in range(world.size)]
        for a in self.allocs:
            a.written[self.nbytes:] = True              # the padding holds whatever it holds
        ptrs = np.array([a.base for a in self.allocs], np.uint64)
        self.tables = [m.from_numpy(ptrs, name=f"{name} peer table", rank=r) for r in range(world.size)]
        self.mc = m.multicast.bind(self.allocs) if multicast else 0     # the multicast address, or 0

    def ptr(self, rank: int) -> int:
        return self.allocs[rank].base

    def peer_table(self, rank: int) -> int:
        return self.tables[rank].base

    def write(self, rank: int, values) -> None:
        values = np.ascontiguousarray(values, self.dtype)
        if values.shape != self.shape:
            raise ValueError(f"rank {rank}: expected shape {self.shape}, got {values.shape}")
        self.allocs[rank].write(values)

    def read(self, rank: int) -> np.ndarray:
        return self.allocs[rank].read(self.dtype, self.shape)


class World:
    """``size`` ranks sharing one Machine (``options`` go to it: seed, quantum, check_uninit...)."""

    def __init__(self, size: int, **options):
        self.size = size
        self.machine = Machine(**options)

    def symmetric(self, shape, dtype, *, name: str = "symmetric", fill: int | None = None,
                  multicast: bool = False) -> Symmetric:
        """A buffer on every rank; ``fill`` a byte value (None: never written, the NaN poison);
        ``multicast``: also a multicast address (``.mc``) for the ``multimem`` instructions."""
        return Symmetric(self, shape, dtype, name, fill, multicast)

    def launch(self, rank: int, kernel, grid, block, *args, smem=None, cluster=None):
        return self.machine.launch(kernel, grid, block, *args, smem=smem, cluster=cluster, rank=rank)

    def run(self) -> Machine:
        return self.machine.run()
