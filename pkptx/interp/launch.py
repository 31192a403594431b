"""One kernel launch on one rank: the decoded program, the packed parameters and the grid of CTAs."""
from __future__ import annotations

import numpy as np

from ..errors import LaunchError
from .cta import Cluster, Cta
from .dtypes import np_dtype
from .memory import Allocation
from .program import Program


def dims(value, what: str) -> tuple:
    value = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(value) <= 3 or any(not isinstance(v, (int, np.integer)) or v < 1 for v in value):
        raise LaunchError(f"{what} must be 1 to 3 positive ints, got {value!r}")
    return tuple(int(v) for v in value) + (1,) * (3 - len(value))


class Launch:
    def __init__(self, machine, kernel, grid, block, args, *, smem: int | None = None, cluster=None, rank: int = 0):
        self.machine, self.kernel, self.rank = machine, kernel, rank
        self.grid, self.block = dims(grid, "grid"), dims(block, "block")
        self.explicit_cluster = cluster is not None or kernel.cluster is not None
        self.cluster = dims(cluster or kernel.cluster or 1, "cluster")
        if any(g % c for g, c in zip(self.grid, self.cluster)):
            raise LaunchError(f"grid {self.grid} is not a multiple of the cluster shape {self.cluster}")
        if kernel.req_threads and self.block != kernel.req_threads:
            raise LaunchError(f"kernel {kernel.name} is written for a block of exactly {kernel.req_threads} "
                              f"(.reqntid), got block {self.block}")
        limit = kernel.max_threads
        if limit and np.prod(self.block) > np.prod(limit):
            raise LaunchError(f"kernel {kernel.name} allows {int(np.prod(limit))} threads per block, block "
                              f"{self.block} has {int(np.prod(self.block))}")
        self.smem = kernel.dynamic_smem if smem is None else smem
        self.program = Program.of(kernel)
        self.copy_back = []
        self.params, self.param_offsets = self._pack(args)
        self.nblocks = int(np.prod(self.grid))
        self.ctas = self._ctas()

    def _pack(self, args) -> tuple[Allocation, dict]:
        params = self.kernel.params
        if len(args) != len(params):
            raise LaunchError(f"kernel {self.kernel.name} takes {len(params)} arguments "
                              f"({', '.join(p.name for p in params)}), got {len(args)}")
        offsets, cursor = {}, 0
        for p in params:
            cursor = -(-cursor // p.alignment) * p.alignment
            offsets[p.name] = cursor
            cursor += p.size
        buf = self.machine.global_space.alloc(max(cursor, 8), name=f"params of {self.kernel.name}",
                                              rank=self.rank, fill=0)
        for p, value in zip(params, args):
            buf.write(self._param_bytes(p, value), offsets[p.name])
        return buf, offsets

    def _param_bytes(self, p, value) -> np.ndarray:
        if p.is_bytes or isinstance(value, bytes):          # bytes: the value as packed for the driver
            raw = np.frombuffer(bytes(value), np.uint8) if not isinstance(value, np.ndarray) else \
                value.reshape(-1).view(np.uint8)
            if raw.size != p.size:
                raise LaunchError(f"parameter {p.name} is {p.size} bytes, got {raw.size}")
            return raw
        if isinstance(value, Allocation):
            value = value.base
        elif isinstance(value, np.ndarray):
            alloc = self.machine.global_space.from_numpy(value, name=p.name, rank=self.rank)
            self.copy_back.append((value, alloc))
            value = alloc.base
        dt = np_dtype(p.type)
        if p.type.is_float:
            return np.array([value], dt).view(np.uint8)
        return np.array([int(value) % (1 << p.type.bits)], np.uint64).astype(dt).view(np.uint8)

    def param_address(self, name: str) -> int:
        return self.params.base + self.param_offsets[name]

    def _ctas(self) -> list[Cta]:
        gx, gy, gz = self.grid
        cx, cy, cz = self.cluster
        clusters, ctas = {}, []
        for z in range(gz):
            for y in range(gy):
                for x in range(gx):
                    key = (x // cx, y // cy, z // cz)
                    cl = clusters.get(key) or clusters.setdefault(key, Cluster(key, self.machine))
                    local = (x % cx, y % cy, z % cz)
                    rank = local[0] + cx * (local[1] + cy * local[2])
                    cta = Cta(self, (x, y, z), cl, rank, local)
                    cl.ctas.append(cta)
                    ctas.append(cta)
        return ctas

    def finish(self) -> None:
        """Copy device results back into the numpy arrays passed as pointer arguments."""
        for array, alloc in self.copy_back:
            flat = array.reshape(-1).view(np.uint8)
            flat[:] = alloc.data[:flat.size]
