"""Launch shapes, checked against the device and the kernel before any driver call.

A driver launch that fails says ``CUDA_ERROR_INVALID_VALUE`` and nothing else; every rule the driver
would apply is checked here first so the error names the argument, the value and what was expected.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from math import prod

from ..errors import LaunchError

PORTABLE_CLUSTER = 8       # largest cluster every sm_90 part runs
NON_PORTABLE_CLUSTER = 16  # with CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
DEFAULT_SMEM = 48 * 1024   # above this a kernel needs the opt-in attribute


@dataclass(frozen=True)
class DeviceLimits:
    """The device properties launch validation needs, as plain values.

    :class:`pkptx.launch.Device` fills one from the driver; tests build one by hand. The defaults
    are an H200's.
    """
    name: str = "NVIDIA H200"
    cc: tuple[int, int] = (9, 0)
    sm_count: int = 132
    max_threads_per_block: int = 1024
    max_block: tuple[int, int, int] = (1024, 1024, 64)
    max_grid: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    smem_per_block_optin: int = 232448
    cluster_launch: bool = True
    l2_bytes: int = 60 * 1024 * 1024


def required_block(kernel) -> tuple[int, int, int] | None:
    """The one block shape ``kernel`` (a CompiledKernel) may be launched with, or None when any block
    within its bounds will do.

    The one place that reads this fact: ``kernel.required_block`` where the kernel states it, else
    its ``.reqntid`` (``block`` with ``block_exact``). A kernel that declares only ``.maxntid`` but
    whose loops assume that many threads must state ``required_block``."""
    exact = getattr(kernel, "required_block", None)
    if exact is None and getattr(kernel, "block_exact", False):
        exact = kernel.block
    return None if exact is None else _dim3(tuple(exact), "kernel required_block")


def _dim3(value, what: str) -> tuple[int, int, int]:
    """``n`` or a 1-3 tuple of positive ints, as a 3-tuple padded with ones."""
    dims = value if isinstance(value, (tuple, list)) else (value,)
    try:
        out = tuple(operator.index(d) for d in dims if not isinstance(d, bool))
    except TypeError:
        out = ()
    if len(out) != len(dims) or not 1 <= len(out) <= 3 or min(out) < 1:
        raise LaunchError(f"LaunchConfig.{what}={value!r}: expected a positive int or a tuple of "
                          "1 to 3 positive ints")
    return out + (1,) * (3 - len(out))


@dataclass(frozen=True)
class LaunchConfig:
    """One launch shape. ``grid`` counts blocks (not clusters), as the driver does.

    ``dynamic_smem=None`` means the kernel's own requirement (``CompiledKernel.dynamic_smem``).
    ``non_portable_cluster`` allows clusters of up to 16 blocks on parts that run them.
    The hash is computed once, because launches look configs up in a cache on every call.
    """
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    cluster: tuple[int, int, int] | None = None
    dynamic_smem: int | None = None
    non_portable_cluster: bool = False
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "grid", _dim3(self.grid, "grid"))
        object.__setattr__(self, "block", _dim3(self.block, "block"))
        if self.cluster is not None:
            object.__setattr__(self, "cluster", _dim3(self.cluster, "cluster"))
        smem = self.dynamic_smem
        if smem is not None and (type(smem) is not int or smem < 0):
            raise LaunchError(f"LaunchConfig.dynamic_smem={smem!r}: expected None or an int >= 0 (bytes)")
        object.__setattr__(self, "_hash", hash((self.grid, self.block, self.cluster, smem,
                                                self.non_portable_cluster)))

    def __hash__(self) -> int:
        return self._hash

    @property
    def threads(self) -> int:
        return prod(self.block)

    def smem_for(self, kernel=None) -> int:
        """The dynamic shared memory this launch requests, in bytes."""
        if self.dynamic_smem is not None:
            return self.dynamic_smem
        return getattr(kernel, "dynamic_smem", 0) if kernel is not None else 0

    def validate(self, limits: DeviceLimits, kernel=None, *, max_threads: int | None = None,
                 static_smem: int | None = None) -> None:
        """Raise :class:`LaunchError` unless ``limits``' device can run this launch of ``kernel``.

        ``kernel`` is a ``CompiledKernel`` (its ``.reqntid``/``.maxntid``, cluster and shared
        memory needs); ``max_threads`` and ``static_smem`` come from the loaded function when known.
        """
        name = f" of kernel '{kernel.entry}'" if kernel is not None else ""
        where = f"LaunchConfig{name} on {limits.name}"
        self._check_grid_block(limits, where)
        if kernel is not None:
            self._check_kernel_block(kernel, where)
        if max_threads is not None and self.threads > max_threads:
            raise LaunchError(f"{where}: block={self.block} has {self.threads} threads; expected at most "
                              f"{max_threads}, the most this kernel runs with its register use")
        self._check_smem(limits, kernel, where, static_smem)
        self._check_cluster(limits, kernel, where)

    def _check_grid_block(self, limits: DeviceLimits, where: str) -> None:
        for what, dims, top in (("grid", self.grid, limits.max_grid), ("block", self.block, limits.max_block)):
            for axis, d, m in zip("xyz", dims, top):
                if d > m:
                    raise LaunchError(f"{where}: {what}.{axis}={d}; expected at most {m}")
        if self.threads > limits.max_threads_per_block:
            raise LaunchError(f"{where}: block={self.block} has {self.threads} threads; expected at most "
                              f"{limits.max_threads_per_block}")

    def _check_kernel_block(self, kernel, where: str) -> None:
        exact = required_block(kernel)
        if exact is not None:
            if self.block != exact:
                raise LaunchError(f"{where}: block={self.block}; expected exactly {exact}, the block the kernel "
                                  "is written for (its roles and loops assume that many threads)")
            return
        bound = getattr(kernel, "block", None)
        if bound is not None and self.threads > prod(bound):
            raise LaunchError(f"{where}: block={self.block} has {self.threads} threads; expected at most "
                              f"{prod(bound)}, the kernel's .maxntid {tuple(bound)}")

    def _check_smem(self, limits: DeviceLimits, kernel, where: str, static_smem: int | None) -> None:
        need = getattr(kernel, "dynamic_smem", 0) if kernel is not None else 0
        smem = self.smem_for(kernel)
        if smem < need:
            raise LaunchError(f"{where}: dynamic_smem={smem}; expected at least {need} bytes, what the kernel needs")
        if static_smem is None:
            resources = getattr(kernel, "resources", None)
            static_smem = getattr(resources, "shared_bytes", 0) if resources is not None else 0
        room = limits.smem_per_block_optin - static_smem
        if smem > room:
            extra = f" ({static_smem} bytes are static)" if static_smem else ""
            raise LaunchError(f"{where}: dynamic_smem={smem}; expected at most {room} bytes, the opt-in "
                              f"shared memory per block of {limits.smem_per_block_optin}{extra}")

    def effective_cluster(self, kernel=None) -> tuple[int, int, int] | None:
        """The cluster shape the launch runs with: its own, or the kernel's ``.reqnctapercluster``."""
        if self.cluster is not None:
            return self.cluster
        declared = getattr(kernel, "cluster", None) if kernel is not None else None
        return _dim3(tuple(declared), "kernel cluster") if declared else None

    def _check_cluster(self, limits: DeviceLimits, kernel, where: str) -> None:
        cluster = self.effective_cluster(kernel)
        if cluster is None:
            return
        if not limits.cluster_launch:
            raise LaunchError(f"{where}: cluster={cluster} but the device cannot launch clusters "
                              f"(compute capability {limits.cc}); expected cluster=None")
        declared = getattr(kernel, "cluster", None) if kernel is not None else None
        if declared and self.cluster is not None and self.cluster != _dim3(tuple(declared), "kernel cluster"):
            raise LaunchError(f"{where}: cluster={self.cluster}; expected {tuple(declared)}, the kernel's "
                              ".reqnctapercluster (or cluster=None)")
        top = NON_PORTABLE_CLUSTER if self.non_portable_cluster else PORTABLE_CLUSTER
        if prod(cluster) > top:
            how = "" if self.non_portable_cluster else " (up to 16 with non_portable_cluster=True)"
            raise LaunchError(f"{where}: cluster={cluster} has {prod(cluster)} blocks; expected at most {top}{how}")
        for axis, g, c in zip("xyz", self.grid, cluster):
            if g % c:
                raise LaunchError(f"{where}: grid.{axis}={g} is not a multiple of cluster.{axis}={c}; "
                                  "expected the grid (in blocks) to divide into whole clusters")
