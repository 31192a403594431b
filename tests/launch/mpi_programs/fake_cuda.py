"""A stand-in for the driver calls behind pkptx's symmetric memory, for CPU-only tests.

``FakeDriver().install()`` replaces *every* ``cu*`` function of ``cuda.bindings.driver``: the ones
below with fakes, every other one with a stub that records the call and raises. So nothing reaches
a real driver while it is installed, not even on a GPU machine.

"Device memory" is host shared memory: an allocation is a memfd, a reservation is a PROT_NONE
range of this process's address space, cuMemMap maps the memfd there, and device addresses are
real host addresses, so copies are memmoves and a peer's write lands in the owner's memory. An
exported fd is a dup of the memfd, whose name records the exporting pid and handle; cuMemAlloc
memory is a file in /dev/shm, which a legacy IPC handle names. The books (``live()``,
``open_fake_fds()``) show what teardown forgot.
"""
from __future__ import annotations

import ctypes
import itertools
import mmap
import os
import re
import struct
import tempfile

from cuda.bindings import driver as cu

import pkptx.launch.driver as pkdriver
from pkptx.launch.device import Device

OK = cu.CUresult.CUDA_SUCCESS
INVALID = cu.CUresult.CUDA_ERROR_INVALID_VALUE
GRANULE = 2 << 20
_IPC = struct.Struct("!8sQ48s")  # magic, size, file name in _SHM
_SHM = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
_NAME = "pkptx-fake"
_NAMED = re.compile(rf".*{_NAME}-(\d+)-(\d+)")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FIXED, _MAP_NORESERVE = 0x10, 0x4000  # <sys/mman.h> on Linux; PROT_NONE is 0
_NONE = (0, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE)
_RW = mmap.PROT_READ | mmap.PROT_WRITE


def _mmap(addr: int, size: int, prot: int, flags: int, fd: int = -1) -> int:
    got = _libc.mmap(addr or None, size, prot, flags | (_MAP_FIXED if addr else 0), fd, 0)
    if got in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap failed")
    return got


class Forbidden(AssertionError):
    """A driver function that the test says must not be called was called."""


class FakeDriver:
    """The fake: options say what to forbid, which call fails (and when), where to crash."""

    def __init__(self, *, multicast_supported: int = 0, forbid=(), fail=None, exit_in=None,
                 devices: int = 1):
        self.multicast_supported, self.devices = multicast_supported, devices
        self.forbid = set(forbid)  # names that raise Forbidden (and are recorded)
        self.fail = dict(fail or {})  # name -> call number (1-based) that returns OUT_OF_MEMORY
        self.exit_in = exit_in  # name whose first call ends the process, as a crash would
        self.calls: list[str] = []
        self.forbidden_calls: list[str] = []
        self.handles: dict[int, dict] = {}  # live generic handles -> kind, size, fd, source
        self.reservations: dict[int, int] = {}  # base -> size
        self.mappings: dict[int, tuple[int, int]] = {}  # va -> (size, handle)
        self.allocations: dict[int, tuple[int, int, str]] = {}  # cuMemAlloc ptr -> (size, fd, name)
        self.opened: dict[int, tuple[int, str, int]] = {}  # IPC-opened ptr -> (pid, name, size)
        self.written: dict[int, bytes] = {}  # what cuMemcpyHtoD wrote, by destination
        self.bound: list[tuple] = []
        self._ids = itertools.count(1)
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
        # Device objects cache the driver's handles: keep the fake's apart from real ones
        self._saved_devices = dict(Device._instances)
        Device._instances.clear()
        return self

    def uninstall(self) -> None:
        for name, fn in self._saved.items():
            setattr(cu, name, fn)
        self._saved.clear()
        pkdriver._initialised = self._saved_init
        Device._instances.clear()
        Device._instances.update(self._saved_devices)

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
                if _NAME in os.readlink(f"/proc/self/fd/{entry}"):
                    out.append(int(entry))
            except OSError:
                pass
        return out

    def source_of(self, va: int) -> dict:
        """Which process (and handle or pointer there) the memory at ``va`` came from."""
        if va in self.opened:
            return {"pid": self.opened[va][0], "file": self.opened[va][1]}
        info = self.handles[self.mappings[va][1]]
        return {"pid": info["pid"], "handle": info["source"]}

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
        return OK, cu.CUcontext(0xC0)

    def cuCtxSetCurrent(self, context):
        self._context = int(context)
        return (OK,)

    def cuCtxPushCurrent(self, context):
        return (OK,)

    def cuCtxPopCurrent(self):
        return OK, cu.CUcontext(self._context)

    def cuCtxSynchronize(self):
        return (OK,)

    def cuStreamSynchronize(self, stream):
        return (OK,)

    # --------------------------------------------------------------------------- VMM
    def cuMemGetAllocationGranularity(self, prop, option):
        return OK, GRANULE

    def _new_handle(self, kind: str, size: int, fd: int | None, pid: int, source: int) -> int:
        handle = next(self._ids)
        self.handles[handle] = dict(kind=kind, size=size, fd=fd, pid=pid, source=source)
        return handle

    def cuMemCreate(self, size, prop, flags):
        fd_type = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        if size % GRANULE or prop.requestedHandleTypes != fd_type:
            return (INVALID, None)
        handle = next(self._ids)
        fd = os.memfd_create(f"{_NAME}-{os.getpid()}-{handle}")
        os.ftruncate(fd, size)
        self.handles[handle] = dict(kind="memory", size=size, fd=fd, pid=os.getpid(), source=handle)
        return OK, cu.CUmemGenericAllocationHandle(handle)

    def cuMemAddressReserve(self, size, alignment, addr, flags):
        base = _mmap(0, size, *_NONE)
        self.reservations[base] = size
        return OK, cu.CUdeviceptr(base)

    def cuMemAddressFree(self, ptr, size):
        if self.reservations.get(int(ptr)) != size or any(
                int(ptr) <= va < int(ptr) + size for va in self.mappings):
            return (INVALID,)
        del self.reservations[int(ptr)]
        _libc.munmap(int(ptr), size)
        return (OK,)

    def cuMemMap(self, ptr, size, offset, handle, flags):
        inside = any(b <= int(ptr) and int(ptr) + size <= b + s for b, s in self.reservations.items())
        info = self.handles.get(int(handle))
        if not inside or info is None or int(ptr) in self.mappings:
            return (INVALID,)
        if info["fd"] is None:  # a multicast object: private memory stands in for it
            _mmap(int(ptr), size, _RW, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        else:
            _mmap(int(ptr), size, _RW, mmap.MAP_SHARED, info["fd"])
        self.mappings[int(ptr)] = (size, int(handle))
        return (OK,)

    def cuMemSetAccess(self, ptr, size, descs, count):
        return (OK,) if int(ptr) in self.mappings and count == len(descs) else (INVALID,)

    def cuMemUnmap(self, ptr, size):
        if self.mappings.get(int(ptr), (None,))[0] != size:
            return (INVALID,)
        del self.mappings[int(ptr)]
        _mmap(int(ptr), size, *_NONE)  # back to a bare reservation
        return (OK,)

    def cuMemRelease(self, handle):
        info = self.handles.pop(int(handle), None)
        if info is None:
            return (INVALID,)
        if info["fd"] is not None:
            os.close(info["fd"])
        return (OK,)

    def cuMemExportToShareableHandle(self, handle, handle_type, flags):
        info = self.handles.get(int(handle))
        if info is None:
            return (INVALID, None)
        if info["fd"] is None:  # a multicast object: an fd that only names it
            return OK, os.memfd_create(f"{_NAME}-{os.getpid()}-{int(handle)}")
        return OK, os.dup(info["fd"])

    def cuMemImportFromShareableHandle(self, fd, handle_type):
        named = _NAMED.match(os.readlink(f"/proc/self/fd/{fd}"))
        size = os.fstat(fd).st_size
        kind = "imported memory" if size else "imported multicast"
        handle = self._new_handle(kind, size, os.dup(fd) if size else None, int(named[1]), int(named[2]))
        return OK, cu.CUmemGenericAllocationHandle(handle)

    # --------------------------------------------------------------------- multicast
    def cuMulticastGetGranularity(self, prop, option):
        return OK, GRANULE

    def cuMulticastCreate(self, prop):
        return OK, cu.CUmemGenericAllocationHandle(
            self._new_handle("multicast", prop.size, None, os.getpid(), 0))

    def cuMulticastAddDevice(self, handle, device):
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
        name = f"{_NAME}-{os.getpid()}-{next(self._ids)}"
        fd = os.open(os.path.join(_SHM, name), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.ftruncate(fd, size)
        ptr = _mmap(0, size, _RW, mmap.MAP_SHARED, fd)
        self.allocations[ptr] = (size, fd, name)
        return OK, cu.CUdeviceptr(ptr)

    def cuMemFree(self, ptr):
        size, fd, name = self.allocations.pop(int(ptr), (None, None, None))
        if size is None:
            return (INVALID,)
        _libc.munmap(int(ptr), size)
        os.close(fd)
        os.unlink(os.path.join(_SHM, name))
        return (OK,)

    def cuIpcGetMemHandle(self, ptr):
        size, _, name = self.allocations[int(ptr)]
        handle = cu.CUipcMemHandle()
        raw = _IPC.pack(b"fakeipc", size, name.encode())
        ctypes.memmove(handle.getPtr(), raw, len(raw))
        return OK, handle

    def cuIpcOpenMemHandle(self, handle, flags):
        magic, size, name = _IPC.unpack(ctypes.string_at(handle.getPtr(), _IPC.size))
        name = name.rstrip(b"\0").decode()
        pid = int(_NAMED.match(name)[1])
        if magic != b"fakeipc\0" or pid == os.getpid():
            return (INVALID, None)
        theirs = os.open(os.path.join(_SHM, name), os.O_RDWR)
        try:
            ptr = _mmap(0, size, _RW, mmap.MAP_SHARED, theirs)
        finally:
            os.close(theirs)
        self.opened[ptr] = (pid, name, size)
        return OK, cu.CUdeviceptr(ptr)

    def cuIpcCloseMemHandle(self, ptr):
        pid, _, size = self.opened.pop(int(ptr), (None, None, None))
        if pid is None:
            return (INVALID,)
        _libc.munmap(int(ptr), size)
        return (OK,)

    # ------------------------------------------------------------------------- copies
    def cuMemcpyHtoD(self, dst, src, nbytes):
        ctypes.memmove(int(dst), src, nbytes)
        self.written[int(dst)] = ctypes.string_at(int(dst), nbytes)
        return (OK,)

    def cuMemcpyHtoDAsync(self, dst, src, nbytes, stream):
        return self.cuMemcpyHtoD(dst, src, nbytes)

    def cuMemcpyDtoHAsync(self, dst, src, nbytes, stream):
        ctypes.memmove(dst, int(src), nbytes)
        return (OK,)

    def cuMemsetD32(self, ptr, value, count):
        ctypes.memmove(int(ptr), struct.pack(f"{count}I", *([value] * count)), 4 * count)
        return (OK,)

    def cuMemsetD8Async(self, ptr, value, count, stream):
        ctypes.memset(int(ptr), value, count)
        return (OK,)

    def cuMemsetD16Async(self, ptr, value, count, stream):
        ctypes.memmove(int(ptr), struct.pack(f"{count}H", *([value] * count)), 2 * count)
        return (OK,)

    def cuMemsetD32Async(self, ptr, value, count, stream):
        return self.cuMemsetD32(ptr, value, count)
