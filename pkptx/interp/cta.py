"""A thread block (CTA) and its cluster: the shared-memory window, named barriers, special registers."""
from __future__ import annotations

import numpy as np

from .errors import MemoryFault
from .memory import SHARED_BASE, SHARED_STRIDE, AddressSpace
from .warp import LANES, Warp


class Barrier:
    """A named CTA barrier (``bar.sync id``), or a cluster's (``barrier.cluster``): threads of ``owner``
    (a Cta or a Cluster) arrive; the generation counts completions."""

    def __init__(self, owner, machine):
        self.owner, self.machine = owner, machine
        self.arrived, self.generation, self.count = 0, 0, None

    def required(self) -> int:
        return self.count if self.count is not None else self.owner.live_threads

    def arrive(self, threads: int, count: int | None) -> int:
        generation = self.generation
        self.arrived += threads
        self.count = count
        self.check()
        return generation

    def check(self) -> None:
        if self.arrived and self.arrived >= self.required():
            self.arrived, self.count = 0, None
            self.generation += 1
            self.machine.epoch += 1
            checker = self.machine.checker
            if checker is not None:
                checker.bar_complete(self)


class Cluster:
    """CTAs that share distributed shared memory: each CTA's window lies in one address space."""

    def __init__(self, index: tuple, machine):
        self.index = index
        self.shared = AddressSpace("shared")
        self.ctas = []
        self.barrier = Barrier(self, machine)

    @property
    def live_threads(self) -> int:
        return sum(cta.live_threads for cta in self.ctas)


def _align(value: int, align: int) -> int:
    return -(-value // align) * align


def shared_layout(kernel, smem: int) -> tuple[dict, int, int]:
    """A block's shared window: (offset of each variable by name, the bytes the static variables span,
    the window's size with ``smem`` bytes of dynamic window after them)."""
    offsets, cursor = {}, 0
    for sym, nbytes, align in kernel.shared_symbols:
        cursor = _align(cursor, align)
        offsets[sym.name] = cursor
        cursor += nbytes
    static = cursor
    dynamic = kernel.dynamic_symbol
    if dynamic is not None:
        cursor = _align(cursor, dynamic[1])
        offsets[dynamic[0].name] = cursor
        cursor += smem
    return offsets, static, cursor


class Cta:
    def __init__(self, launch, ctaid: tuple, cluster: Cluster, cluster_rank: int, cluster_ctaid: tuple):
        self.launch, self.ctaid, self.cluster = launch, ctaid, cluster
        self.cluster_rank, self.cluster_ctaid = cluster_rank, cluster_ctaid
        offsets, _, cursor = shared_layout(launch.kernel, launch.smem)
        base = SHARED_BASE + cluster_rank * SHARED_STRIDE
        self.window = cluster.shared.alloc(max(cursor, 8), name=f"shared of block {ctaid}", rank=launch.rank,
                                           base=base)
        self.symbols = {name: off for name, off in offsets.items()}     # shared::cta addresses
        self._names = sorted(((off, name) for name, off in offsets.items()), reverse=True)
        self.barriers: dict[int, Barrier] = {}
        block = launch.block
        nthreads = block[0] * block[1] * block[2]
        self.live_threads = nthreads
        self.warps = []
        for i in range(-(-nthreads // LANES)):
            tids = np.arange(i * LANES, (i + 1) * LANES)
            self.warps.append(Warp(self, i, np.where(tids < nthreads, tids, -1)))

    # ------------------------------------------------------------------ used by ops
    def barrier(self, ident: int) -> Barrier:
        bar = self.barriers.get(ident)
        if bar is None:
            bar = self.barriers[ident] = Barrier(self, self.launch.machine)
        return bar

    def threads_exited(self, n: int) -> None:
        self.live_threads -= n
        for bar in self.barriers.values():
            bar.check()
        self.cluster.barrier.check()

    def symbol_address(self, name: str) -> int:
        if name in self.symbols:
            return self.symbols[name]
        return self.launch.param_address(name)

    def symbol_at(self, alloc, offset: int) -> str:
        """``name+off (block b)`` for a byte of a shared window."""
        for start, name in self._names:
            if start <= offset:
                return f"{name}+{offset - start} (rank {self.launch.rank} block {self.ctaid})" if offset > start \
                    else f"{name} (rank {self.launch.rank} block {self.ctaid})"
        return f"shared+{offset}"

    def resolve(self, addrs: np.ndarray) -> np.ndarray:
        """Shared addresses in the cluster's space: a ``shared::cta`` address (below SHARED_STRIDE, small
        as on a GPU, so descriptors and 14-bit fields hold it) is this CTA's; larger ones (from ``mapa``)
        name a CTA of the cluster."""
        addrs = addrs.astype(np.uint64, copy=False)
        return np.where(addrs < np.uint64(SHARED_STRIDE), addrs + np.uint64(self.window.base), addrs)

    def check_own_window(self, w, addrs: np.ndarray, size: int) -> None:
        lo, hi = self.window.base, self.window.end
        if (addrs < lo).any() or (addrs + np.uint64(size) > hi).any():
            bad = int(addrs[(addrs < lo) | (addrs + np.uint64(size) > hi)][0])
            raise MemoryFault(w.describe(f"shared::cta access at {bad:#x} outside this block's window "
                                         f"[{lo:#x}, {hi:#x})"))

    def special(self, name: str, warp) -> np.ndarray:
        """A special register's 32-lane value (clock registers are the warp's business)."""
        launch = self.launch
        bx, by, bz = launch.block
        t = np.maximum(warp.tids, 0)
        tid = {"x": t % bx, "y": t // bx % by, "z": t // (bx * by)}
        dims = dict(zip("xyz", launch.block))
        grid = dict(zip("xyz", launch.grid))
        cta = dict(zip("xyz", self.ctaid))
        cl = dict(zip("xyz", launch.cluster))
        cl_id = dict(zip("xyz", self.cluster.index))
        cl_cta = dict(zip("xyz", self.cluster_ctaid))
        n_cl = {c: grid[c] // cl[c] for c in "xyz"}
        lane = np.arange(LANES)
        table = {"tid": tid, "ntid": dims, "ctaid": cta, "nctaid": grid, "clusterid": cl_id, "nclusterid": n_cl,
                 "cluster_ctaid": cl_cta, "cluster_nctaid": cl}
        root, _, comp = name[1:].partition(".")
        if root in table and comp:
            value = table[root][comp]
        else:
            value = {"laneid": lane, "warpid": warp.index, "nwarpid": len(self.warps),
                     "smid": self.linear, "nsmid": launch.nblocks, "gridid": 0,
                     "cluster_ctarank": self.cluster_rank, "cluster_nctarank": int(np.prod(launch.cluster)),
                     "dynamic_smem_size": launch.smem, "total_smem_size": self.window.nbytes,
                     "lanemask_eq": 1 << lane, "lanemask_lt": (1 << lane) - 1, "lanemask_le": (2 << lane) - 1,
                     "lanemask_gt": 0xFFFFFFFF ^ ((2 << lane) - 1), "lanemask_ge": 0xFFFFFFFF ^ ((1 << lane) - 1),
                     "is_explicit_cluster": launch.explicit_cluster}[root]
        if root == "is_explicit_cluster":
            return np.full(LANES, bool(value))
        return (np.zeros(LANES, np.int64) + value).astype(np.uint32)

    @property
    def linear(self) -> int:
        gx, gy, _ = self.launch.grid
        x, y, z = self.ctaid
        return x + gx * (y + gy * z)
