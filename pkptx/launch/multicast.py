"""NVLink multicast behind a safety gate.

A multicast object gives one address whose stores land on every rank's memory (and which
``multimem.*`` reduces over). It must never be created on the project's lent GPU machines, so the
only way to cuMulticastCreate (one call site, in :func:`_create`) goes through
:func:`multicast_policy`, which is closed when any of the usual opt-outs is set (checked first,
before any driver call) or when the device reports no multicast support. Kernels must give the
same results with the gate closed (unicast fallbacks).

Sequence when open: rank 0 creates the object and exports its fd; the fd travels to the other
ranks, which import it; every rank adds its device; host barrier; every rank binds its memory;
host barrier; every rank maps the object and sets access.
"""
from __future__ import annotations

import os

from ..errors import PkptxError
from .driver import call, driver
from .fdpass import exchange_fds
from .vmm import Transaction, export_fd, import_fd, map_readwrite, reserve
from .world import World, format_ranks

# (variable, value that closes the gate): pkptx's own switch, then NCCL's, PyTorch's, NVSHMEM's.
DISABLING_ENV = (
    ("PKPTX_DISABLE_MULTICAST", "1"),
    ("NCCL_NVLS_ENABLE", "0"),
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
    ("NVSHMEM_DISABLE_NVLS", "1"),
)


def multicast_policy(device_ordinal: int) -> tuple[bool, str]:
    """(allowed, reason) for multicast on GPU ``device_ordinal`` in this process.

    The environment is read first, so with an opt-out set no driver call is made at all.
    """
    for name, closing in DISABLING_ENV:
        if os.environ.get(name, "").strip() == closing:
            return False, f"{name}={closing} is set"
    attribute = driver().CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED
    device = call("cuDeviceGet", device_ordinal)
    if not call("cuDeviceGetAttribute", attribute, device):
        return False, f"CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED reads 0 on GPU {device_ordinal}"
    return True, f"GPU {device_ordinal} supports multicast and no opt-out is set"


def agree_multicast(world: World, device_ordinal: int, path: str) -> tuple[bool, str]:
    """Collective: (allowed, reason), the same on every rank; open only if open on every rank.

    Also closed for legacy IPC memory (it cannot be bound), for worlds spanning nodes (their
    fds do not travel) and when two ranks share a GPU (a device joins an object only once).
    """
    with world.step("multicast gate") as vote:
        if path != "vmm":
            allowed, reason = False, f"path={path!r} memory cannot be bound to a multicast object"
        elif world.local_size != world.size:
            allowed, reason = False, "the world spans several nodes; multicast here is single-node only"
        else:
            allowed, reason = multicast_policy(device_ordinal)
        gpu = call("cuDeviceGetUuid", call("cuDeviceGet", device_ordinal)).bytes if allowed else b""
        vote.value = (allowed, reason, bytes(gpu))
    votes = vote.values
    closed = {r: why for r, (ok, why, _) in enumerate(votes) if not ok}
    if closed:
        reasons = sorted(set(closed.values()))
        detail = reasons[0] if len(reasons) == 1 else "; ".join(f"rank {r}: {w}" for r, w in closed.items())
        return False, f"multicast closed on {format_ranks(closed)}: {detail}"
    owners: dict[bytes, int] = {}
    for r, (_, _, gpu) in enumerate(votes):
        if gpu in owners:
            return False, f"ranks {owners[gpu]} and {r} share one GPU; multicast needs one GPU per rank"
        owners[gpu] = r
    return True, votes[0][1]


def _prop(world: World, nbytes: int):
    cu = driver()
    prop = cu.CUmulticastObjectProp()
    prop.numDevices = world.size
    prop.size = nbytes
    prop.handleTypes = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    prop.flags = 0
    return prop


def multicast_granularity(world: World, device_ordinal: int, nbytes: int) -> int:
    """Recommended size multiple of a multicast object over this world (asks the gate first)."""
    _require_open(device_ordinal)
    flag = driver().CUmulticastGranularity_flags.CU_MULTICAST_GRANULARITY_RECOMMENDED
    return int(call("cuMulticastGetGranularity", _prop(world, nbytes), flag))


def _require_open(device_ordinal: int) -> None:
    allowed, reason = multicast_policy(device_ordinal)
    if not allowed:
        raise PkptxError(f"multicast requested while the gate is closed ({reason}); "
                         "use agree_multicast() and take the unicast path")


def _create(tx: Transaction, world: World, device_ordinal: int, nbytes: int):
    """The package's only cuMulticastCreate; it re-checks the gate right before creating."""
    _require_open(device_ordinal)
    handle = call("cuMulticastCreate", _prop(world, nbytes))
    tx.push("cuMemRelease (multicast object)", lambda: call("cuMemRelease", handle))
    return handle


def bind_multicast(tx: Transaction, world: World, device_ordinal: int, memory_handle,
                   nbytes: int, granularity: int) -> int:
    """Collective: a multicast object over every rank's ``memory_handle``; returns its address here.

    Only after :func:`agree_multicast` said yes on every rank; ``nbytes`` is a multiple of the
    multicast and memory granularities.
    """
    device = call("cuDeviceGet", device_ordinal)
    exported = []
    with world.step("multicast: rank 0 creates the object"):
        if world.rank == 0:
            mc = _create(tx, world, device_ordinal, nbytes)
            fd, fd_step = export_fd(tx, mc)
            exported = [fd]
    with world.step("multicast: pass the fd, import it and add every device"):
        received = exchange_fds(world, exported, what="multicast: passing the object's fd")
        if world.rank != 0:
            got = received[0]
            try:
                mc = import_fd(tx, got.fds[0], "multicast object")
            finally:
                got.close()
        call("cuMulticastAddDevice", mc, device)
    if world.rank == 0:
        tx.settle(fd_step)  # every rank imported it (the step above is a barrier)
    with world.step("multicast: bind every rank's memory"):
        call("cuMulticastBindMem", mc, 0, memory_handle, 0, nbytes, 0)
        tx.push("cuMulticastUnbind", lambda: call("cuMulticastUnbind", mc, device, 0, nbytes))
    with world.step("multicast: map the object"):
        ptr = reserve(tx, nbytes, granularity)
        map_readwrite(tx, ptr, nbytes, mc, device_ordinal)
    return ptr
