"""A bookkeeping stand-in for the driver calls behind pkptx's symmetric memory, for CPU-only tests.

``FakeDriver().install()`` replaces *every* ``cu*`` function of ``cuda.bindings.driver``: the ones
below with fakes that keep books (handles, reservations, mappings, IPC openings), every other one
with a stub that records the call and raises. So nothing reaches a real driver while it is
installed, not even on a GPU machine. Exported "fds" are real memfds naming the exporting process
and handle, so fd passing between ranks is checked for real; ``live()`` and ``open_fake_fds()``
show what teardown forgot.
"""
from __future__ import annotations

import ctypes
import itertools
import os
import struct

from cuda.bindings import driver as cu

import pkptx.launch.driver as pkdriver

OK = cu.CUresult.CUDA_SUCCESS
INVALID = cu.CUresult.CUDA_ERROR_INVALID_VALUE
GRANULE = 2 << 20
_IPC = struct.Struct("!8sQQQ")  # magic, exporter pid, pointer, size
_EXPORT = struct.Struct("!QQQ16s")  # exporter pid, handle, size, kind
_MEMFD_NAME = "pkptx-fake"


class Forbidden(AssertionError):
    """A driver function that the test says must not be called was called."""


class FakeDriver:
    def __init__(self, *, multicast_supported: int = 0, forbid=(), fail=None, exit_in=None,
                 devices: int = 1):
        self.multicast_supported, self.devices = multicast_supported, devices
        self.forbid = set(forbid)  # names that raise Forbidden (and are recorded)
        self.fail = dict(fail or {})  # name -> call number (1-based) that returns OUT_OF_MEMORY
        self.exit_in = exit_in  # name whose first call ends the process, as a crash would
        self.calls: list[str] = []
        self.forbidden_calls: list[str] = []
        self.handles: dict[int, dict] = {}  # live generic handles
        self.reservations: dict[int, int] = {}  # base -> size
        self.mappings: dict[int, tuple[int, int]] = {}  # va -> (size, handle)
        self.allocations: dict[int, int] = {}  # cuMemAlloc ptr -> size
        self.opened: dict[int, tuple[int, int]] = {}  # IPC-opened ptr -> (exporter pid, ptr)
        self.written: dict[int, bytes] = {}  # cuMemcpyHtoD destinations -> bytes
        self.mc_devices: list[int] = []
        self.bound: list[tuple] = []
        self.retains = 0
        self._ids = itertools.count(1)
        self._va = itertools.count(0x7F00_0000_0000, 1 << 40)
        self._context = 0
        self._saved: dict[str, object] = {}

    # ------------------------------------------------------------------ installation
    def install(self) -> FakeDriver:
        for name in dir(cu):
            if name.startswith("cu") and callable(getattr(cu, name)):
                self._saved[name] = getattr(cu, name)
                fake = getattr(self, name, None) if name not in self.forbid else None
                setattr(cu, name, self._wrap(name, fake))
        self._saved_init = pkdriver._initialised
        pkdriver._initialised = False
        return self

    def uninstall(self) -> None:
        for name, fn in self._saved.items():
            setattr(cu, name, fn)
        self._saved.clear()
        pkdriver._initialised = self._saved_init

    def _wrap(self, name, fake):
        def call(*args):
            self.calls.append(name)
            if fake is None:
                self.forbidden_calls.append(name)
                raise Forbidden(f"{name} must not be called here")
            if name == self.exit_in:
                os._exit(0)
            if self.fail.get(name) == self.calls.count(name):
                return (cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY, None)
            return fake(*args)
        return call

    # ----------------------------------------------------------------------- queries
    def live(self) -> dict:
        books = {"handles": self.handles, "reservations": self.reservations,
                 "mappings": self.mappings, "allocations": self.allocations, "opened": self.opened}
        return {k: v for k, v in books.items() if v}

    @staticmethod
    def open_fake_fds() -> list[int]:
        out = []
        for entry in os.listdir("/proc/self/fd"):
            try:
                if _MEMFD_NAME in os.readlink(f"/proc/self/fd/{entry}"):
                    out.append(int(entry))
            except OSError:
                pass
        return out

    def source_of(self, va: int) -> dict:
        """Where the memory mapped (or IPC-opened) at ``va`` came from."""
        if va in self.opened:
            pid, ptr = self.opened[va]
            return {"pid": pid, "ptr": ptr}
        return self.handles[self.mappings[va][1]]

    # ----------------------------------------------------------- errors, init, devices
    def cuGetErrorName(self, code):
        return OK, cu.CUresult(code).name.encode()

    def cuGetErrorString(self, code):
        return OK, b"fake driver error"

    def cuInit(self, flags):
        return (OK,)

    def cuDeviceGetCount(self):
        return OK, self.devices

    def cuDeviceGet(self, ordinal):
        return OK, cu.CUdevice(ordinal)

    def cuDeviceGetAttribute(self, attribute, device):
        wanted = cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED
        return OK, self.multicast_supported if attribute == wanted else 0

    def cuDeviceGetUuid(self, device):
        uuid = cu.CUuuid()
        ctypes.memmove(uuid.getPtr(), struct.pack("!QQ", os.getpid(), int(device)), 16)
        return OK, uuid

    # ---------------------------------------------------------------------- contexts
    def cuCtxGetCurrent(self):
        return OK, cu.CUcontext(self._context)

    def cuCtxGetDevice(self):
        return OK, cu.CUdevice(0)

    def cuDevicePrimaryCtxRetain(self, device):
        self.retains += 1
        return OK, cu.CUcontext(0xC0)

    def cuDevicePrimaryCtxRelease(self, device):
        self.retains -= 1
        return (OK,)

    def cuCtxSetCurrent(self, context):
        self._context = int(context)
        return (OK,)

    def cuCtxPushCurrent(self, context):
        return (OK,)

    def cuCtxPopCurrent(self):
        return OK, cu.CUcontext(self._context)

    def cuCtxSynchronize(self):
        return (OK,)

    # --------------------------------------------------------------------------- VMM
    def cuMemGetAllocationGranularity(self, prop, option):
        return OK, GRANULE

    def _new_handle(self, **info) -> int:
        handle = next(self._ids)
        self.handles[handle] = dict(info, owner=os.getpid(), id=handle)
        return handle

    def cuMemCreate(self, size, prop, flags):
        fd_type = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        if size % GRANULE or prop.requestedHandleTypes != fd_type:
            return (INVALID, None)
        return OK, cu.CUmemGenericAllocationHandle(self._new_handle(kind="memory", size=size))

    def cuMemAddressReserve(self, size, alignment, addr, flags):
        base = next(self._va)
        self.reservations[base] = size
        return OK, cu.CUdeviceptr(base)

    def cuMemAddressFree(self, ptr, size):
        if self.reservations.get(int(ptr)) != size or any(
                int(ptr) <= va < int(ptr) + size for va in self.mappings):
            return (INVALID,)
        del self.reservations[int(ptr)]
        return (OK,)

    def cuMemMap(self, ptr, size, offset, handle, flags):
        inside = any(b <= int(ptr) and int(ptr) + size <= b + s for b, s in self.reservations.items())
        if not inside or int(handle) not in self.handles or int(ptr) in self.mappings:
            return (INVALID,)
        self.mappings[int(ptr)] = (size, int(handle))
        return (OK,)

    def cuMemSetAccess(self, ptr, size, descs, count):
        return (OK,) if int(ptr) in self.mappings and count == len(descs) else (INVALID,)

    def cuMemUnmap(self, ptr, size):
        if self.mappings.get(int(ptr), (None,))[0] != size:
            return (INVALID,)
        del self.mappings[int(ptr)]
        return (OK,)

    def cuMemRelease(self, handle):
        if self.handles.pop(int(handle), None) is None:
            return (INVALID,)
        return (OK,)

    def cuMemExportToShareableHandle(self, handle, handle_type, flags):
        info = self.handles.get(int(handle))
        if info is None:
            return (INVALID, None)
        fd = os.memfd_create(_MEMFD_NAME)
        os.write(fd, _EXPORT.pack(os.getpid(), int(handle), info["size"], info["kind"].encode()))
        return OK, fd

    def cuMemImportFromShareableHandle(self, fd, handle_type):
        pid, handle, size, kind = _EXPORT.unpack(os.pread(fd, _EXPORT.size, 0))
        kind = kind.rstrip(b"\0").decode()
        imported = self._new_handle(kind=f"imported {kind}", size=size, pid=pid, handle=handle)
        return OK, cu.CUmemGenericAllocationHandle(imported)

    # --------------------------------------------------------------------- multicast
    def cuMulticastGetGranularity(self, prop, option):
        return OK, GRANULE

    def cuMulticastCreate(self, prop):
        return OK, cu.CUmemGenericAllocationHandle(
            self._new_handle(kind="multicast", size=prop.size, devices=prop.numDevices))

    def cuMulticastAddDevice(self, handle, device):
        self.mc_devices.append(int(device))
        return (OK,) if int(handle) in self.handles else (INVALID,)

    def cuMulticastBindMem(self, mc, mc_offset, memory, mem_offset, size, flags):
        if int(mc) not in self.handles or int(memory) not in self.handles:
            return (INVALID,)
        self.bound.append((int(mc), int(memory), size))
        return (OK,)

    def cuMulticastUnbind(self, mc, device, mc_offset, size):
        self.bound = [b for b in self.bound if b[0] != int(mc)]
        return (OK,)

    # --------------------------------------------------------------------------- IPC
    def cuMemAlloc(self, size):
        ptr = next(self._va)
        self.allocations[ptr] = size
        return OK, cu.CUdeviceptr(ptr)

    def cuMemFree(self, ptr):
        return (OK,) if self.allocations.pop(int(ptr), None) is not None else (INVALID,)

    def cuIpcGetMemHandle(self, ptr):
        handle = cu.CUipcMemHandle()
        raw = _IPC.pack(b"fakeipc", os.getpid(), int(ptr), self.allocations[int(ptr)])
        ctypes.memmove(handle.getPtr(), raw, len(raw))
        return OK, handle

    def cuIpcOpenMemHandle(self, handle, flags):
        magic, pid, ptr, size = _IPC.unpack(ctypes.string_at(handle.getPtr(), _IPC.size))
        if magic != b"fakeipc\0" or pid == os.getpid():
            return (INVALID, None)
        va = next(self._va)
        self.opened[va] = (pid, ptr)
        return OK, cu.CUdeviceptr(va)

    def cuIpcCloseMemHandle(self, ptr):
        return (OK,) if self.opened.pop(int(ptr), None) is not None else (INVALID,)

    # ---------------------------------------------------------------------- memory ops
    def cuMemcpyHtoD(self, dst, src, nbytes):
        self.written[int(dst)] = ctypes.string_at(src, nbytes)
        return (OK,)

    def cuMemsetD32(self, ptr, value, count):
        self.written[int(ptr)] = struct.pack(f"{count}I", *([value] * count))
        return (OK,)
