"""CUDA virtual memory management (cuMem*): the mapping path that can share memory by fd.

Memory is created with cuMemCreate (POSIX-fd handle type, recommended granularity: 2 MiB on
Hopper), mapped into a reservation and made readable and writable; peers import the exported fd
and map it into their own reservations. Every step is recorded in a :class:`Transaction`, so a
failure halfway (or a later close) undoes exactly what was done, newest first.
"""
from __future__ import annotations

import os
import struct
import warnings
from typing import Callable

from ..errors import PkptxError, WorldError
from .driver import call, driver
from .fdpass import exchange_fds
from .world import World


class _Undo:
    __slots__ = ("what", "undo", "collective")

    def __init__(self, what: str, undo: Callable[[], None], collective: bool):
        self.what, self.undo, self.collective = what, undo, collective


class Transaction:
    """The undo steps of a multi-step setup, run in reverse order.

    Used as ``with tx:`` around the setup: an exception unwinds everything recorded so far and
    propagates. Otherwise the steps stay until :meth:`close`. Steps marked ``collective`` (host
    barriers at teardown) run only in a normal close, where every rank runs the same sequence,
    never while unwinding an error, where ranks no longer agree on how far they got.
    """

    def __init__(self, name: str):
        self.name = name
        self._steps: list[_Undo] = []

    def push(self, what: str, undo: Callable[[], None], *, collective: bool = False) -> _Undo:
        """Record how to undo a step that just succeeded."""
        step = _Undo(what, undo, collective)
        self._steps.append(step)
        return step

    def settle(self, step: _Undo) -> None:
        """Undo one recorded step now (e.g. close an fd once every peer holds its copy)."""
        self._steps.remove(step)
        step.undo()

    def _unwind(self, *, collective: bool) -> list[tuple[str, Exception]]:
        errors = []
        while self._steps:
            step = self._steps.pop()
            if step.collective and not collective:
                continue
            try:
                step.undo()
            except Exception as exc:  # undo everything else regardless
                errors.append((step.what, exc))
        return errors

    def close(self) -> None:
        """Undo every step, newest first; raise the first failure once all were tried."""
        errors = self._unwind(collective=True)
        if len(errors) == 1:
            raise errors[0][1]
        if errors:
            listing = "; ".join(f"{what}: {exc}" for what, exc in errors)
            raise PkptxError(f"{self.name}: {len(errors)} teardown steps failed: {listing}") from errors[0][1]

    def __len__(self) -> int:
        return len(self._steps)

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is not None:
            for what, error in self._unwind(collective=False):
                warnings.warn(f"{self.name}: while unwinding after {exc_type.__name__}, "
                              f"{what} failed too: {error}", RuntimeWarning, stacklevel=2)


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _fd_type():
    return driver().CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR


def allocation_prop(ordinal: int):
    """Pinned device memory on GPU ``ordinal`` that can be exported as a POSIX fd."""
    cu = driver()
    prop = cu.CUmemAllocationProp()
    prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = ordinal
    prop.requestedHandleTypes = _fd_type()
    return prop


def allocation_granularity(ordinal: int) -> int:
    """The recommended size and alignment multiple of such memory (2 MiB on Hopper)."""
    flag = driver().CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
    return int(call("cuMemGetAllocationGranularity", allocation_prop(ordinal), flag))


def create(tx: Transaction, ordinal: int, nbytes: int) -> int:
    handle = call("cuMemCreate", nbytes, allocation_prop(ordinal), 0)
    tx.push("cuMemRelease (local memory)", lambda: call("cuMemRelease", handle))
    return handle


def reserve(tx: Transaction, nbytes: int, alignment: int) -> int:
    base = int(call("cuMemAddressReserve", nbytes, alignment, 0, 0))
    tx.push("cuMemAddressFree", lambda: call("cuMemAddressFree", base, nbytes))
    return base


def map_readwrite(tx: Transaction, ptr: int, nbytes: int, handle, ordinal: int) -> None:
    """Map ``handle`` at ``ptr`` and let GPU ``ordinal`` read and write it."""
    cu = driver()
    call("cuMemMap", ptr, nbytes, 0, handle, 0)
    tx.push(f"cuMemUnmap {ptr:#x}", lambda: call("cuMemUnmap", ptr, nbytes))
    access = cu.CUmemAccessDesc()
    access.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    access.location.id = ordinal
    access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    call("cuMemSetAccess", ptr, nbytes, [access], 1)


def export_fd(tx: Transaction, handle) -> tuple[int, _Undo]:
    """An fd for ``handle``, and the step that closes it (settle it once every peer imported)."""
    fd = int(call("cuMemExportToShareableHandle", handle, _fd_type(), 0))
    return fd, tx.push(f"close exported fd {fd}", lambda: os.close(fd))


def import_fd(tx: Transaction, fd: int, what: str):
    """The handle behind a received fd; the fd itself stays the caller's to close."""
    handle = call("cuMemImportFromShareableHandle", fd, _fd_type())
    tx.push(f"cuMemRelease ({what})", lambda: call("cuMemRelease", handle))
    return handle


class VmmHeapMemory:
    """Every rank's allocation, mapped side by side in one reservation: slot r is rank r's memory.

    ``ptrs[r]`` is where this process sees rank r's memory, ``slot_bytes`` the size of each slot
    and ``handle`` the local allocation (what a multicast object binds). Collective.
    """

    def __init__(self, tx: Transaction, world: World, ordinal: int, slot_bytes: int, alignment: int):
        self.slot_bytes = slot_bytes
        with world.step("SymmetricHeap(vmm): create, map and export this rank's memory"):
            self.handle = create(tx, ordinal, slot_bytes)
            base = reserve(tx, slot_bytes * world.size, alignment)
            map_readwrite(tx, base + world.rank * slot_bytes, slot_bytes, self.handle, ordinal)
            fd, fd_step = export_fd(tx, self.handle)
        received = {}

        def close_received_fds() -> None:
            for got in received.values():
                got.close()

        close_received = tx.push("close received fds", close_received_fds)
        with world.step("SymmetricHeap(vmm): pass the fds, import and map every peer's memory"):
            received.update(exchange_fds(world, [fd], payload=struct.pack("!Q", slot_bytes),
                                         what="SymmetricHeap(vmm): passing memory fds"))
            expected = set(range(world.size)) - {world.rank}
            if set(received) != expected:
                raise WorldError(f"fds came from ranks {sorted(received)}, expected {sorted(expected)}")
            for peer, got in sorted(received.items()):
                if len(got.fds) != 1 or got.payload != struct.pack("!Q", slot_bytes):
                    raise WorldError(f"rank {peer} sent {len(got.fds)} fd(s) and payload "
                                     f"{got.payload.hex()}, expected 1 fd for {slot_bytes} bytes")
                peer_handle = import_fd(tx, got.fds[0], f"rank {peer}'s memory")
                map_readwrite(tx, base + peer * slot_bytes, slot_bytes, peer_handle, ordinal)
            tx.settle(close_received)
        tx.settle(fd_step)  # the step above was the barrier after every import
        self.ptrs = [base + r * slot_bytes for r in range(world.size)]

