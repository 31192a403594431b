"""Device memory allocators, both stream-ordered.

:class:`DriverPool` is the driver's stream-ordered allocator (``cuMemAllocFromPoolAsync`` on a pool
of our own whose release threshold keeps freed memory for reuse instead of returning it at every
synchronisation). :class:`CachingPool` keeps ``cuMemAlloc`` blocks in per-stream free lists, which
costs one dict lookup per allocation. ``bench/bench_alloc.py`` compares them; the driver pool is the
default because it shares freed memory across streams safely.
"""
from __future__ import annotations

import threading

from ..errors import CudaError
from . import device as device_module
from .capture_state import capturing
from .device import Device, release
from .driver import call, driver

KEEP_ALL = 2**64 - 1   # release threshold: never give cached memory back on synchronisation


class DriverPool:
    """A ``CUmemoryPool`` on ``device``; ``release_threshold`` bytes stay cached after frees."""

    def __init__(self, device: Device | None = None, release_threshold: int = KEEP_ALL):
        cu = driver()
        self.device = (device or Device.current()).set_current()
        props = cu.CUmemPoolProps()
        props.allocType = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        props.handleTypes = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
        props.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        props.location.id = self.device.ordinal
        self.handle = call("cuMemPoolCreate", props)
        self._deferred: list[tuple[int, object]] = []
        call("cuMemPoolSetAttribute", self.handle, cu.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
             cu.cuuint64_t(release_threshold))

    def allocate(self, nbytes: int, stream) -> int:
        """A device address of ``nbytes`` usable in the order of ``stream`` (a CUstream)."""
        return int(call("cuMemAllocFromPoolAsync", max(nbytes, 1), self.handle, stream))

    def free(self, ptr: int, nbytes: int, stream) -> None:
        """Stream-ordered free; while ``stream`` is being captured into a graph the free waits (a free
        of memory the graph did not allocate would invalidate the capture) until the next free or the
        end of a :func:`pkptx.launch.capture`."""
        if device_module._exiting:  # at exit nothing is freed (release() says why)
            return
        try:
            defer = capturing(stream)
        except CudaError:           # the context is going away: release() decides what a free means then
            defer = False
        if defer:
            self._deferred.append((ptr, stream))
            return
        release("cuMemFreeAsync", ptr, stream)
        if self._deferred:
            self.flush_deferred()

    def flush_deferred(self) -> None:
        """Free what :meth:`free` kept back, on each pointer's stream, once that stream's capture ended."""
        waiting, self._deferred = self._deferred, []
        for ptr, stream in waiting:
            if capturing(stream):
                self._deferred.append((ptr, stream))
            else:
                release("cuMemFreeAsync", ptr, stream)

    def trim(self, keep_bytes: int = 0) -> None:
        """Give cached memory above ``keep_bytes`` back to the driver (after a synchronize)."""
        call("cuMemPoolTrimTo", self.handle, keep_bytes)

    def __del__(self):
        if getattr(self, "handle", None) is not None:
            handle, self.handle = self.handle, None
            release("cuMemPoolDestroy", handle)


def _bucket(nbytes: int) -> int:
    """Round up to a power of two (at least 512 B) below 1 MiB, else to a multiple of 1 MiB."""
    if nbytes <= 512:
        return 512
    if nbytes <= 1 << 20:
        return 1 << (nbytes - 1).bit_length()
    return (nbytes + (1 << 20) - 1) & ~((1 << 20) - 1)


class CachingPool:
    """``cuMemAlloc`` blocks reused by (stream, rounded size).

    A block freed on a stream is handed out again only on that stream, so stream order alone keeps
    the old user's kernels before the new user's: no events needed. On out-of-memory the cache is
    emptied (after a device synchronize) and the allocation retried once.
    """

    def __init__(self, device: Device | None = None):
        self.device = (device or Device.current()).set_current()
        self._free: dict[tuple[int, int], list[int]] = {}
        self._lock = threading.Lock()
        self.cached_bytes = 0

    def allocate(self, nbytes: int, stream) -> int:
        size = _bucket(nbytes)
        key = (int(stream), size)
        with self._lock:
            blocks = self._free.get(key)
            if blocks:
                self.cached_bytes -= size
                return blocks.pop()
        try:
            return int(call("cuMemAlloc", size))
        except CudaError as exc:
            if exc.name != "CUDA_ERROR_OUT_OF_MEMORY":
                raise
            self.trim()
            return int(call("cuMemAlloc", size))

    def free(self, ptr: int, nbytes: int, stream) -> None:
        size = _bucket(nbytes)
        with self._lock:
            self._free.setdefault((int(stream), size), []).append(ptr)
            self.cached_bytes += size

    def trim(self) -> None:
        """Free every cached block, after waiting for the device to finish with them."""
        self.device.synchronize()
        with self._lock:
            blocks = [p for lst in self._free.values() for p in lst]
            self._free.clear()
            self.cached_bytes = 0
        for ptr in blocks:
            release("cuMemFree", ptr)


_default_pools: dict[int, object] = {}
_pools_lock = threading.Lock()


def flush_deferred_frees() -> None:
    """Free every default pool's frees that waited for a capture to end."""
    for pool in list(_default_pools.values()):
        flush = getattr(pool, "flush_deferred", None)
        if flush is not None:
            flush()


def default_pool(device: Device):
    """The pool ``empty()`` uses on ``device`` (a :class:`DriverPool` unless replaced)."""
    pool = _default_pools.get(device.ordinal)
    if pool is None:
        with _pools_lock:
            pool = _default_pools.get(device.ordinal)
            if pool is None:
                pool = _default_pools[device.ordinal] = DriverPool(device)
    return pool


def set_default_pool(device: Device, pool) -> None:
    """Make ``pool`` (anything with ``allocate(nbytes, stream)`` / ``free(ptr, nbytes, stream)``)
    the one ``empty()`` uses on ``device``."""
    with _pools_lock:
        _default_pools[device.ordinal] = pool
