"""The legacy mapping path: cuMemAlloc memory shared through 64-byte cuIpcGetMemHandle handles.

Works on every driver and needs no fd passing (the handles are plain bytes, fine over MPI), but
such memory can never be bound to a multicast object, and its owner must not free it while a peer
still has it open, so teardown waits for every peer between closing and freeing.
"""
from __future__ import annotations

import ctypes

from ..errors import WorldError
from .driver import call, driver
from .vmm import Transaction
from .world import World

HANDLE_BYTES = 64


def handle_to_bytes(handle) -> bytes:
    """The 64 raw bytes of a CUipcMemHandle (read through its address: works across bindings versions)."""
    return ctypes.string_at(handle.getPtr(), HANDLE_BYTES)


def handle_from_bytes(raw: bytes):
    """A CUipcMemHandle holding ``raw``."""
    if len(raw) != HANDLE_BYTES:
        raise WorldError(f"an IPC memory handle has {HANDLE_BYTES} bytes, this one {len(raw)}")
    handle = driver().CUipcMemHandle()
    ctypes.memmove(handle.getPtr(), raw, HANDLE_BYTES)
    return handle


class IpcHeapMemory:
    """This rank's cuMemAlloc block plus every peer's, opened by IPC handle. Collective.

    ``ptrs[r]`` is where this process sees rank r's memory.
    """

    def __init__(self, tx: Transaction, world: World, nbytes: int):
        with world.step("SymmetricHeap(ipc): allocate and export this rank's memory") as step:
            ptr = int(call("cuMemAlloc", nbytes))
            tx.push("cuMemFree", lambda: call("cuMemFree", ptr))
            tx.push("barrier: every peer closed its view of this rank's memory",
                    lambda: world.barrier(what="SymmetricHeap(ipc) teardown: closing peers' views"),
                    collective=True)
            step.value = handle_to_bytes(call("cuIpcGetMemHandle", ptr))
        lazy = driver().CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
        self.ptrs = []
        with world.step("SymmetricHeap(ipc): open every peer's handle"):
            for peer, raw in enumerate(step.values):
                if peer == world.rank:
                    self.ptrs.append(ptr)
                    continue
                opened = int(call("cuIpcOpenMemHandle", handle_from_bytes(raw), lazy))
                tx.push(f"cuIpcCloseMemHandle (rank {peer})",
                        lambda opened=opened: call("cuIpcCloseMemHandle", opened))
                self.ptrs.append(opened)
