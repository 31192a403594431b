"""Symmetric memory: one heap per rank, mapped into every rank, carved into same-offset buffers.

Mapping memory between processes costs milliseconds (export, fd passing, import, map), so it is
done once, for a heap reserved up front. Buffers of any shape and dtype are then carved out of it
at the same offset on every rank, with no further IPC: a buffer's address on rank i is rank i's
heap base plus the offset, which is what the parallel layout (local, peer i, multicast) needs.
"""
from __future__ import annotations

import contextlib
import math
import operator
from collections import Counter
from typing import Any, Callable, Iterator

import numpy as np

from ..errors import HeapStateError, PkptxError, WorldError
from .device import Device
from .driver import call
from .ipc import IpcHeapMemory
from .multicast import agree_multicast, bind_multicast, multicast_granularity
from .vmm import Transaction, VmmHeapMemory, allocation_granularity, round_up
from .world import World, format_ranks

PATHS = ("vmm", "ipc")
DEFAULT_ALIGN = 256  # TMA needs 16 B; 256 B keeps every buffer on its own cache-line group
IPC_ALIGN = 256  # cuMemAlloc returns at least this alignment
_TABLE_ALIGN = 16


def check_agreement(what: str, requests: list, describe: Callable[[Any], str] = repr) -> None:
    """Raise WorldError unless every rank's request (indexed by rank) is the same.

    The most common request (ties: the lowest rank's) counts as intended; the message names the
    other ranks and what each asked for. A request ``("invalid", text)`` is a rank's bad input.
    """
    keys = [repr(r) for r in requests]
    if len(set(keys)) == 1:
        if isinstance(requests[0], tuple) and requests[0][:1] == ("invalid",):
            raise WorldError(f"{what}: {requests[0][1]}")
        return
    counts = Counter(keys)
    intended = max(counts, key=lambda k: (counts[k], -keys.index(k)))
    groups: dict[str, list[int]] = {}
    for rank, key in enumerate(keys):
        groups.setdefault(key, []).append(rank)
    offenders = [r for r, k in enumerate(keys) if k != intended]
    lines = [f"  {format_ranks(ranks)}: {_describe(requests[ranks[0]], describe)}"
             for _, ranks in sorted(groups.items(), key=lambda kv: (kv[0] != intended, kv[1]))]
    raise WorldError(f"{what}: {format_ranks(offenders)} asked for something else than "
                     f"{format_ranks(groups[intended])}; every rank must make the same request, "
                     "in the same order:\n" + "\n".join(lines))


def _describe(request, describe: Callable[[Any], str]) -> str:
    if isinstance(request, tuple) and request[:1] == ("invalid",):
        return f"bad request: {request[1]}"
    return describe(request)


def agree(world: World, what: str, request, describe: Callable[[Any], str] = repr) -> None:
    """Collective :func:`check_agreement`: raises on every rank, with the same message."""
    check_agreement(what, world.allgather(request, what=what), describe)


def _normalize(shape, dtype, align, max_align: int) -> tuple[tuple[int, ...], np.dtype]:
    """The canonical (shape, dtype) of a buffer request, or PkptxError saying what is wrong."""
    try:
        dims = tuple(operator.index(d) for d in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    except TypeError:
        raise PkptxError(f"shape must be an int or a sequence of ints, not {shape!r}") from None
    if any(d < 0 for d in dims) or math.prod(dims) == 0:
        raise PkptxError(f"shape {dims} must have at least one element and no negative size")
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise PkptxError(f"dtype {dtype!r} is not a numpy dtype") from None
    if dt.hasobject or dt.itemsize == 0 or not dt.isnative:
        raise PkptxError(f"dtype {dt} cannot live in device memory (object, empty or byte-swapped)")
    if not isinstance(align, int) or align < _TABLE_ALIGN or align & (align - 1) or align > max_align:
        raise PkptxError(f"align={align!r} must be a power of two from {_TABLE_ALIGN} to {max_align}")
    return dims, dt


def _describe_request(request) -> str:
    shape, dtype, align = request
    return f"shape {shape} {dtype} (align {align})"


def check_alloc_request(world: World, shape, dtype, *, align: int = DEFAULT_ALIGN,
                        max_align: int = 2 << 20) -> tuple[tuple[int, ...], np.dtype]:
    """Collective: ``(shape, dtype)`` normalized, once every rank asked for the same buffer.

    Otherwise a WorldError on every rank names the ranks that differ and what each asked for.
    Needs no GPU: this is the check :meth:`SymmetricHeap.alloc` makes before touching memory.
    """
    try:
        dims, dt = _normalize(shape, dtype, align, max_align)
        mine = (dims, str(dt), align)
    except PkptxError as exc:
        mine = ("invalid", str(exc))
    agree(world, "SymmetricHeap.alloc", mine, _describe_request)
    return dims, dt


class _FirstFit:
    """Free byte ranges ``[start, end)`` of a heap, lowest first.

    Deterministic: the same calls in the same order give the same offsets on every rank.
    """

    def __init__(self, capacity: int):
        self.ranges = [[0, capacity]]

    def find(self, nbytes: int, align: int) -> int | None:
        for start, end in self.ranges:
            at = round_up(start, align)
            if at + nbytes <= end:
                return at
        return None

    def take(self, at: int, nbytes: int) -> None:
        index = next(i for i, (s, e) in enumerate(self.ranges) if s <= at and at + nbytes <= e)
        start, end = self.ranges[index]
        self.ranges[index:index + 1] = [r for r in ([start, at], [at + nbytes, end]) if r[0] < r[1]]

    def give(self, at: int, nbytes: int) -> None:
        merged: list[list[int]] = []
        for start, end in sorted(self.ranges + [[at, at + nbytes]]):
            if merged and merged[-1][1] == start:
                merged[-1][1] = end
            else:
                merged.append([start, end])
        self.ranges = merged

    @property
    def free_bytes(self) -> int:
        return sum(e - s for s, e in self.ranges)


def _bind_context(ordinal: int):
    """The context the heap lives in: the current one if it is on this GPU, else the GPU's
    primary context (pkptx's Device, retained for the life of the process), made current."""
    current = call("cuCtxGetCurrent")
    if current is not None and int(current):
        on = int(call("cuCtxGetDevice"))
        if on != ordinal:
            raise WorldError(f"the current CUDA context is on GPU {on}, but this rank's heap is for "
                             f"GPU {ordinal}; pass device={on} or make GPU {ordinal}'s context current")
        return current
    return Device(ordinal).set_current().context


class SymmetricHeap:
    """``nbytes`` of device memory on every rank, each rank's mapped into every process.

    Collective, and all ranks must pass the same ``nbytes``, ``path`` and ``multicast``.
    ``path="vmm"`` (cuMemCreate, fds passed over a socket) or ``"ipc"`` (cuMemAlloc + legacy IPC
    handles). With ``multicast=True`` a multicast object is bound over the heap only if the gate
    opens on every rank (see :mod:`pkptx.launch.multicast`); ``multicast_reason`` says why or why
    not. ``device``: this rank's GPU (ordinal or Device; default :meth:`World.device_ordinal`).
    ``base_ptrs[i]``: where this process sees rank i's heap. Every rank on one node.
    """

    def __init__(self, world: World, nbytes: int, *, path: str = "vmm", multicast: bool = False,
                 device: int | Device | None = None):
        self.world, self.closed = world, True
        try:
            size = operator.index(nbytes)
            if size <= 0 or path not in PATHS or not isinstance(multicast, bool):
                raise PkptxError(f"need nbytes > 0, path in {PATHS} and multicast a bool; got "
                                 f"nbytes={nbytes!r}, path={path!r}, multicast={multicast!r}")
            ordinal = (world.device_ordinal() if device is None
                       else operator.index(getattr(device, "ordinal", device)))
            mine = (size, path, multicast)
        except (TypeError, PkptxError) as exc:  # reported on every rank by agree()
            mine = ("invalid", f"{type(exc).__name__}: {exc}")
        if world.local_size != world.size:
            raise WorldError(f"SymmetricHeap needs every rank on one node; rank {world.rank} shares "
                             f"its node with {world.local_size} of {world.size} ranks")
        agree(world, "SymmetricHeap()", mine, lambda r: f"{r[0]} bytes, path={r[1]!r}, multicast={r[2]}")
        self.path, self.device = path, ordinal
        self.multicast_allowed, self.multicast_reason = (
            agree_multicast(world, self.device, path) if multicast else (False, "not requested"))
        self._tx = Transaction(f"SymmetricHeap(path={path!r}) on rank {world.rank}")
        with world.step(f"SymmetricHeap({path}): bind the CUDA context") as step:
            self._context = _bind_context(self.device)
            granule = allocation_granularity(self.device) if path == "vmm" else IPC_ALIGN
            if self.multicast_allowed:
                granule = math.lcm(granule, multicast_granularity(world, self.device, size))
            step.value = granule
        with self._tx as tx:  # from here on, a failure undoes exactly what was done
            granule = math.lcm(*step.values)
            self.nbytes, self._max_align = round_up(size, granule), granule
            if path == "vmm":
                memory = VmmHeapMemory(tx, world, self.device, self.nbytes, granule)
            else:
                memory = IpcHeapMemory(tx, world, self.nbytes)
            self.base_ptrs: list[int] = memory.ptrs
            self.multicast_base = (bind_multicast(tx, world, self.device, memory.handle,
                                                  self.nbytes, granule)
                                   if self.multicast_allowed else None)
            tx.push("cuCtxSynchronize (no kernel still uses the heap)", lambda: call("cuCtxSynchronize"))
        self._free = _FirstFit(self.nbytes)
        self._reset_hooks: list[Callable[[], None]] = []
        self._close_hooks: list[Callable[[], None]] = []
        self.poisoned: str | None = None
        self._forget = world.on_close(self.close)
        self.closed = False

    @contextlib.contextmanager
    def current_context(self) -> Iterator[None]:
        """The heap's CUDA context, current for the block (any thread, e.g. at exit)."""
        call("cuCtxPushCurrent", self._context)
        try:
            yield
        finally:
            call("cuCtxPopCurrent")

    def _check_open(self, what: str) -> None:
        if self.closed:
            raise PkptxError(f"{what}: this SymmetricHeap is closed")

    @property
    def free_bytes(self) -> int:
        return self._free.free_bytes

    def alloc(self, shape, dtype, *, align: int = DEFAULT_ALIGN) -> SymmetricBuffer:
        """Collective: a buffer of ``shape`` and ``dtype`` at the same offset on every rank.

        Every rank must ask for the same shape, dtype and align, and have freed the same buffers
        in the same order; otherwise every rank raises WorldError naming the ranks that differ.
        """
        self._check_open("SymmetricHeap.alloc")
        dims, dt = check_alloc_request(self.world, shape, dtype, align=align, max_align=self._max_align)
        nbytes = math.prod(dims) * dt.itemsize
        table_at = round_up(nbytes, _TABLE_ALIGN)
        block = table_at + 8 * self.world.size
        offset = self._free.find(block, align)
        with self.world.step("SymmetricHeap.alloc: place the buffer and write its peer table") as step:
            step.value = offset
            if offset is not None:
                table = np.array([base + offset for base in self.base_ptrs], dtype=np.uint64)
                with self.current_context():
                    call("cuMemcpyHtoD", self.base_ptrs[self.world.rank] + offset + table_at,
                         table.ctypes.data, table.nbytes)
        check_agreement("SymmetricHeap.alloc: heap offsets differ (were buffers freed in "
                        "different orders?)", step.values,
                        lambda o: "no room" if o is None else f"offset {o}")
        if offset is None:
            largest = max((e - s for s, e in self._free.ranges), default=0)
            raise PkptxError(f"SymmetricHeap.alloc: no room for shape {dims} {dt} ({block} bytes "
                             f"with its peer table) in a {self.nbytes}-byte heap; {self.free_bytes} "
                             f"bytes free, the largest range {largest}; make the heap bigger")
        self._free.take(offset, block)
        return SymmetricBuffer(self, offset, dims, dt, offset + table_at, block)

    # ------------------------------------------------------------------ device state of the ops
    def on_reset(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` (zero this rank's counters) inside :meth:`reset`, between its two barriers."""
        self._reset_hooks.append(hook)

    def on_close(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` (drop what lives in this heap) when the heap closes, before its memory goes."""
        self._close_hooks.append(hook)

    def poison(self, why: str) -> None:
        """Mark the heap's device counters as possibly out of step between ranks (a device wait timed
        out); the ops refuse it with HeapStateError until :meth:`reset`."""
        if self.poisoned is None:
            self.poisoned = why

    def check_usable(self, what: str) -> None:
        """Raise unless ops may run on this heap (open, and not poisoned)."""
        self._check_open(what)
        if self.poisoned is not None:
            raise HeapStateError(f"{what}: this SymmetricHeap's barrier counters may be out of step between "
                                 f"ranks after: {self.poisoned}. Call heap.reset() on every rank (collective), "
                                 "then call again")

    def reset(self, *, timeout: float | None = None) -> None:
        """Collective: bring every rank's device counters (barrier rounds, launch tickets, the fused ops'
        flags) back in step, after a DeviceTimeoutError or a call that some ranks refused while others
        launched. Bounded: each rank waits for its own kernels (their waits are bounded), the ranks meet
        (``timeout``, default the world's), zero their counters, and meet again before any rank may
        signal a peer. Buffers and plans stay; the heap is usable again on every rank."""
        self._check_open("SymmetricHeap.reset")
        with self.world.step("SymmetricHeap.reset: this rank's kernels have ended", timeout=timeout):
            with self.current_context():
                call("cuCtxSynchronize")
        with self.world.step("SymmetricHeap.reset: counters zeroed", timeout=timeout):
            for hook in self._reset_hooks:
                hook()
        self.poisoned = None

    def close(self) -> None:
        """Unmap peers, then release this rank's memory (IPC: after every peer closed its view)."""
        if self.closed:
            return
        self.closed = True
        self._forget()
        hooks, self._close_hooks, self._reset_hooks = self._close_hooks, [], []
        for hook in hooks:
            hook()
        with self.current_context():
            self._tx.close()

    def __enter__(self) -> SymmetricHeap:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.free_bytes} bytes free"
        return (f"SymmetricHeap({self.nbytes} bytes x {self.world.size} ranks, path={self.path!r}, "
                f"multicast={self.multicast_base is not None}, {state})")


class SymmetricBuffer:
    """A buffer of one shape and dtype on every rank, at the same heap offset.

    ``local`` and ``peer(i)`` are DeviceArray views (peer(rank) is local); ``peer_ptrs[i]`` the
    address of rank i's copy in this process; ``peer_table`` a device array of those addresses
    (u64, for kernels); ``multicast_ptr`` the multicast address, or None when the gate was closed.
    """

    def __init__(self, heap: SymmetricHeap, offset: int, shape: tuple[int, ...], dtype: np.dtype,
                 table_offset: int, block: int):
        self.heap, self.offset, self.shape, self.dtype = heap, offset, shape, dtype
        self.nbytes = math.prod(shape) * dtype.itemsize
        self.peer_ptrs = [base + offset for base in heap.base_ptrs]
        self.local_ptr = self.peer_ptrs[heap.world.rank]
        self.peer_table_ptr = heap.base_ptrs[heap.world.rank] + table_offset
        self.multicast_ptr = None if heap.multicast_base is None else heap.multicast_base + offset
        self._block = block
        self.freed = False

    @property
    def rank(self) -> int:
        return self.heap.world.rank

    @property
    def size(self) -> int:
        return self.heap.world.size

    def _view(self, ptr: int, shape: tuple[int, ...], dtype, what: str):
        if self.freed or self.heap.closed:
            raise PkptxError(f"{what}: the buffer was freed or its heap closed")
        from .array import DeviceArray

        return DeviceArray.from_pointer(ptr, shape, dtype, owner=self)

    @property
    def local(self):
        """This rank's copy."""
        return self.peer(self.rank)

    def peer(self, i: int):
        """Rank i's copy, as mapped into this process."""
        if not 0 <= i < self.size:
            raise WorldError(f"peer({i}): no such rank; the world has ranks 0..{self.size - 1}")
        return self._view(self.peer_ptrs[i], self.shape, self.dtype, f"peer({i})")

    @property
    def peer_table(self):
        """Every rank's address of this buffer, in this rank's device memory (u64[size])."""
        return self._view(self.peer_table_ptr, (self.size,), np.uint64, "peer_table")

    def free(self) -> None:
        """Give the space back to the heap; every rank must free the same buffers in the same order."""
        if not self.freed and not self.heap.closed:
            self.freed = True
            self.heap._free.give(self.offset, self._block)

    def __repr__(self) -> str:
        return (f"SymmetricBuffer(shape={self.shape}, dtype={self.dtype}, offset={self.offset}, "
                f"rank={self.rank}/{self.size}, multicast={self.multicast_ptr is not None})")
