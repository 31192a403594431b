"""Pure-Python model of how the LCSC template distributes work; the device code follows it exactly.

Blocks ``0 .. nblocks - num_comm - 1`` are compute workers, the last ``num_comm`` are communicators.
Each role walks ``range(offset, num_tasks, stride)``. A communicator that owns a rank's share of tiles
(e.g. GEMM+AR) uses offset ``world * worker + rank`` and stride ``world * comm_workers``.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Split:
    nblocks: int
    num_comm: int

    def __post_init__(self):
        if not 0 <= self.num_comm <= self.nblocks or self.nblocks < 1:
            raise ValueError(f"num_comm must be in 0..nblocks ({self.nblocks}), got {self.num_comm}")

    @property
    def compute_workers(self) -> int:
        return self.nblocks - self.num_comm

    def role(self, block: int) -> tuple[str, int]:
        """("compute" | "comm", worker index within the role) of a block."""
        first_comm = self.compute_workers
        return ("comm", block - first_comm) if block >= first_comm else ("compute", block)


def tasks(offset: int, stride: int, num_tasks: int) -> range:
    return range(offset, num_tasks, stride)


def compute_tasks(split: Split, block: int, num_tasks: int) -> range:
    role, worker = split.role(block)
    if role != "compute":
        return range(0)
    return tasks(worker, split.compute_workers, num_tasks)


def comm_tasks(split: Split, block: int, num_tasks: int, *, world: int = 1, rank: int = 0,
               rank_major: bool = False) -> range:
    role, worker = split.role(block)
    if role != "comm":
        return range(0)
    if rank_major:
        return tasks(world * worker + rank, world * split.num_comm, num_tasks)
    return tasks(worker, split.num_comm, num_tasks)


def owner(tile: int, world: int) -> int:
    """The rank that owns an output tile in reduce-scatter style kernels (round robin)."""
    return tile % world


def staggered(task: int, tiles: int, world: int, rank: int) -> int:
    """GEMM+RS: rank r walks the tile list from r/W of the way in, so owners are not hit at once."""
    return (task + (tiles // world) * rank) % tiles


def row_owner(row: int, rows_per_rank: int) -> int:
    """The rank that owns a row of a row-sharded matrix (GEMM+RS output, AG+GEMM input)."""
    return row // rows_per_rank


def own_rows_first(tile_m: int, tiles_m: int, blocks_per_rank: int, rank: int) -> int:
    """AG+GEMM: the tile row a rank computes in place of ``tile_m``, its own row blocks first."""
    return (tile_m + blocks_per_rank * rank) % tiles_m
