"""The CUDA driver over the CPU interpreter: what :func:`pkptx.launch.driver.driver` is under
``PKPTX_INTERPRET=1``, so the launch layer (arrays, pools, streams, events, launches, tensor maps, the
host ops above it) runs unchanged on a machine without a GPU.

Device memory is one :class:`pkptx.interp.Machine`'s (fake addresses; bytes never written read 0xFF,
NaN in every float type); host pointers in copies are real addresses. Work runs when it is queued: a
launch interprets the kernel's builder instruction list (:meth:`CompiledKernel.builder_kernel`) to
the end before it returns, so every stream is in order, synchronising is free and a kernel's fault is
raised by the launch that made it. Events read the host clock: they time the interpreter, not a GPU.
The device answers as an H200 (:class:`pkptx.launch.config.DeviceLimits`). Types, enums and constants
are the bindings' own; a driver function not modelled here raises
:class:`pkptx.interp.UnsupportedError` naming it and the feature (graphs, symmetric memory, IPC...).
"""
from __future__ import annotations

import ctypes
import itertools
import time

import numpy as np

from ..interp import Machine, MemoryFault, UnsupportedError
from ..interp.cta import shared_layout
from ..interp.program import Program
from .config import DeviceLimits

CONTEXT = 1
THREADS_PER_SM, BLOCKS_PER_SM, REGS_PER_SM = 2048, 32, 65536      # an H200 SM, for the occupancy rule
SMEM_PER_SM, RESERVED_SMEM = 233472, 1024
_NOT_MODELLED = (
    (("Graph", "Capture"), "CUDA graphs and stream capture are not modelled"),
    (("cuMemCreate", "cuMemMap", "cuMemUnmap", "cuMemAddress", "cuMemSetAccess", "cuMemExport", "cuMemImport",
      "cuMemRelease", "cuMemGetAllocationGranularity"),
     "virtual memory management is not modelled, so neither are SymmetricHeap and the host ops over a "
     "World (run several ranks on a pkptx.interp.World instead)"),
    (("Ipc",), "IPC handles between processes are not modelled"),
    (("Multicast",), "multicast objects are not modelled here (pkptx.interp.World.symmetric(multicast=True) "
                     "models them)"),
    (("Peer", "P2P"), "peer access between devices is not modelled (the interpreter has one device)"),
)
_MODELLED = "it models one device, its memory, copies, memsets, streams, events, module loading and launches"


def not_modelled(name: str) -> UnsupportedError:
    """The error for a driver call (or a form of one) the interpreter's driver does not model."""
    detail = next((what for keys, what in _NOT_MODELLED if any(k in name for k in keys)), _MODELLED)
    return UnsupportedError(f"{name} is not supported under PKPTX_INTERPRET=1 (the CPU interpreter's driver): "
                            f"{detail}")


def _refuse(name: str):
    def call(*args):
        raise not_modelled(name)
    return call


def _host(address: int, nbytes: int) -> np.ndarray:
    """A live uint8 view of host memory."""
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))


class InterpretedDriver:
    """The ``cu*`` calls pkptx makes, answered from one interpreter Machine (see the module text)."""

    def __init__(self, limits: DeviceLimits = DeviceLimits(name="pkptx interpreter (CPU), as an H200")):
        from cuda.bindings import driver as cu
        self._cu, self.limits, self.machine = cu, limits, Machine()
        self._ok = cu.CUresult.CUDA_SUCCESS
        self._ids = itertools.count(0x1000)       # above the special stream handles 0, 1, 2
        self._allocations: dict = {}        # device address -> interpreter Allocation
        self._modules: dict = {}            # module handle -> (CompiledKernel, builder Kernel)
        self._functions: dict = {}          # function handle -> (CompiledKernel, builder Kernel)
        self._events: dict = {}             # event handle -> host time recorded (s), or None
        self._attributes = {
            "COMPUTE_CAPABILITY_MAJOR": limits.cc[0], "COMPUTE_CAPABILITY_MINOR": limits.cc[1],
            "MULTIPROCESSOR_COUNT": limits.sm_count, "MAX_THREADS_PER_BLOCK": limits.max_threads_per_block,
            **{f"MAX_BLOCK_DIM_{a}": d for a, d in zip("XYZ", limits.max_block)},
            **{f"MAX_GRID_DIM_{a}": d for a, d in zip("XYZ", limits.max_grid)},
            "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": limits.smem_per_block_optin,
            "CLUSTER_LAUNCH": int(limits.cluster_launch), "L2_CACHE_SIZE": limits.l2_bytes, "MULTICAST_SUPPORTED": 0}

    def __getattr__(self, name: str):
        value = getattr(self._cu, name)
        if name.startswith("cu") and callable(value) and not isinstance(value, type):
            return _refuse(name)
        return value

    def _new(self, kind):
        return kind(next(self._ids))

    # ------------------------------------------------------------------ errors, devices, contexts
    def cuInit(self, flags):
        return (self._ok,)

    def cuGetErrorName(self, code):
        return self._ok, self._cu.CUresult(code).name.encode()

    def cuGetErrorString(self, code):
        return self._ok, b"reported by the CPU interpreter's driver (PKPTX_INTERPRET=1)"

    def cuDeviceGetCount(self):
        return self._ok, 1

    def cuDeviceGet(self, ordinal):
        return self._ok, self._cu.CUdevice(ordinal)

    def cuDeviceGetName(self, length, device):
        return self._ok, self.limits.name.encode()

    def cuDeviceGetAttribute(self, attribute, device):
        name = attribute.name.removeprefix("CU_DEVICE_ATTRIBUTE_")
        if name not in self._attributes:
            raise UnsupportedError(f"device attribute {name} is not modelled under PKPTX_INTERPRET=1; the "
                                   f"interpreter's device has {', '.join(self._attributes)}")
        return self._ok, self._attributes[name]

    def cuDevicePrimaryCtxRetain(self, device):
        return self._ok, self._cu.CUcontext(CONTEXT)

    def cuCtxGetCurrent(self):
        return self._ok, self._cu.CUcontext(CONTEXT)      # one device, its context current on every thread

    def cuCtxGetDevice(self):
        return self._ok, self._cu.CUdevice(0)

    def cuCtxSetCurrent(self, context):
        return (self._ok,)

    def cuCtxSynchronize(self):
        return (self._ok,)

    def cuCtxGetExecAffinity(self, kind):
        return self._cu.CUresult.CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, None     # the whole device

    # ------------------------------------------------------------------ streams and events
    def cuStreamCreateWithPriority(self, flags, priority):
        return self._ok, self._new(self._cu.CUstream)

    def cuStreamDestroy(self, stream):
        return (self._ok,)

    def cuStreamSynchronize(self, stream):
        return (self._ok,)

    def cuStreamWaitEvent(self, stream, event, flags):
        return (self._ok,)

    def cuStreamIsCapturing(self, stream):
        return self._ok, self._cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE

    def cuEventCreate(self, flags):
        event = self._new(self._cu.CUevent)
        self._events[int(event)] = None
        return self._ok, event

    def cuEventRecord(self, event, stream):
        self._events[int(event)] = time.perf_counter()
        return (self._ok,)

    def cuEventSynchronize(self, event):
        return (self._ok,)

    def cuEventElapsedTime(self, start, end):
        t0, t1 = self._events.get(int(start)), self._events.get(int(end))
        if t0 is None or t1 is None:
            return self._cu.CUresult.CUDA_ERROR_INVALID_HANDLE, None
        return self._ok, (t1 - t0) * 1e3

    def cuEventDestroy(self, event):
        self._events.pop(int(event), None)
        return (self._ok,)

    # ------------------------------------------------------------------ memory
    def cuMemPoolCreate(self, props):
        return self._ok, self._new(self._cu.CUmemoryPool)

    def cuMemPoolSetAttribute(self, pool, attribute, value):
        return (self._ok,)

    def cuMemPoolTrimTo(self, pool, keep_bytes):
        return (self._ok,)

    def cuMemPoolDestroy(self, pool):
        return (self._ok,)

    def cuMemAlloc(self, nbytes):
        alloc = self.machine.alloc(int(nbytes), name=f"device memory ({nbytes} bytes)")
        self._allocations[alloc.base] = alloc
        return self._ok, self._cu.CUdeviceptr(alloc.base)

    def cuMemAllocFromPoolAsync(self, nbytes, pool, stream):
        return self.cuMemAlloc(nbytes)

    def cuMemFree(self, ptr):
        alloc = self._allocations.pop(int(ptr), None)
        if alloc is None:
            return (self._cu.CUresult.CUDA_ERROR_INVALID_VALUE,)
        self.machine.global_space.free(alloc)
        return (self._ok,)

    def cuMemFreeAsync(self, ptr, stream):
        return self.cuMemFree(ptr)

    def _device(self, ptr, nbytes: int, what: str):
        """(allocation, offset) of device bytes [ptr, ptr + nbytes), which must lie in one allocation."""
        ptr = int(ptr)
        alloc = self.machine.global_space.find(ptr)
        if alloc is None or ptr + nbytes > alloc.end:
            inside = f"; {alloc!r} ends {alloc.end - ptr} bytes after it" if alloc is not None else ""
            raise MemoryFault(f"{what}: {nbytes} bytes at {ptr:#x} are not device memory of the interpreter{inside}")
        return alloc, ptr - alloc.base

    def cuMemcpyHtoDAsync(self, dst, src, nbytes, stream):
        if nbytes:
            alloc, off = self._device(dst, nbytes, "cuMemcpyHtoDAsync destination")
            alloc.write(_host(int(src), nbytes), off)
        return (self._ok,)

    def cuMemcpyDtoHAsync(self, dst, src, nbytes, stream):
        if nbytes:
            alloc, off = self._device(src, nbytes, "cuMemcpyDtoHAsync source")
            _host(int(dst), nbytes)[:] = alloc.data[off:off + nbytes]
        return (self._ok,)

    def cuMemcpyDtoDAsync(self, dst, src, nbytes, stream):
        if nbytes:
            source, soff = self._device(src, nbytes, "cuMemcpyDtoDAsync source")
            target, doff = self._device(dst, nbytes, "cuMemcpyDtoDAsync destination")
            target.write(source.data[soff:soff + nbytes].copy(), doff)
        return (self._ok,)

    def _memset(self, ptr, value, count, dtype, what: str):
        values = np.full(int(count), int(value), dtype)
        if values.size:
            alloc, off = self._device(ptr, values.nbytes, what)
            alloc.write(values, off)
        return (self._ok,)

    def cuMemsetD8Async(self, ptr, value, count, stream):
        return self._memset(ptr, value, count, np.uint8, "cuMemsetD8Async")

    def cuMemsetD16Async(self, ptr, value, count, stream):
        return self._memset(ptr, value, count, np.uint16, "cuMemsetD16Async")

    def cuMemsetD32Async(self, ptr, value, count, stream):
        return self._memset(ptr, value, count, np.uint32, "cuMemsetD32Async")

    def cuPointerGetAttribute(self, attribute, ptr):
        if attribute != self._cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
            raise not_modelled(f"cuPointerGetAttribute({attribute.name})")
        self._device(ptr, 1, "cuPointerGetAttribute")
        return self._ok, 0

    # ------------------------------------------------------------------ modules and launches
    def cuModuleLoadData(self, image):
        builder = getattr(image, "builder_kernel", None)
        kernel = builder() if builder is not None else None
        if kernel is None:
            what = f"kernel '{image.entry}'" if builder is not None else "a cubin or PTX image"
            raise UnsupportedError(f"cuModuleLoadData of {what} under PKPTX_INTERPRET=1: the interpreter runs the "
                                   "builder's instruction list, so load a CompiledKernel that pkptx built in this "
                                   "process (Kernel.compile() or pkptx.toolchain.build_cached)")
        Program.of(kernel)          # an instruction the interpreter does not model is refused now, at load
        module = self._new(self._cu.CUmodule)
        self._modules[int(module)] = (image, kernel)
        return self._ok, module

    def cuModuleGetFunction(self, module, name):
        compiled, kernel = self._modules[int(module)]
        if name.decode() != kernel.name:
            return self._cu.CUresult.CUDA_ERROR_NOT_FOUND, None
        fn = self._new(self._cu.CUfunction)
        self._functions[int(fn)] = (compiled, kernel)
        return self._ok, fn

    def cuFuncLoad(self, fn):
        return (self._ok,)

    def cuFuncSetAttribute(self, fn, attribute, value):
        return (self._ok,)

    def cuFuncGetAttribute(self, attribute, fn):
        compiled, kernel = self._functions[int(fn)]
        declared = kernel.req_threads or kernel.max_threads
        values = {"MAX_THREADS_PER_BLOCK": int(np.prod(declared)) if declared else self.limits.max_threads_per_block,
                  "SHARED_SIZE_BYTES": shared_layout(kernel, 0)[1], "NUM_REGS": compiled.entry_registers,
                  "LOCAL_SIZE_BYTES": compiled.resources.stack_bytes}
        name = attribute.name.removeprefix("CU_FUNC_ATTRIBUTE_")
        if name not in values:
            raise not_modelled(f"cuFuncGetAttribute({attribute.name})")
        return self._ok, values[name]

    def cuOccupancyMaxActiveBlocksPerMultiprocessor(self, fn, threads, smem):
        """The occupancy calculator's rule on an H200 SM: threads (whole warps), shared memory (1 KB
        reserved per block) and registers (256 per warp at a time)."""
        compiled, kernel = self._functions[int(fn)]
        warps = -(-int(threads) // 32)
        regs_per_warp = -(-max(compiled.entry_registers, 1) * 32 // 256) * 256
        shared = shared_layout(kernel, 0)[1] + int(smem) + RESERVED_SMEM
        return self._ok, min(BLOCKS_PER_SM, THREADS_PER_SM // (32 * warps), SMEM_PER_SM // shared,
                            REGS_PER_SM // (regs_per_warp * warps))

    def cuLaunchKernelEx(self, config, fn, params, extra):
        """Interpret the launch to its end; ``params`` is the ``void*`` array of the packed arguments."""
        _, kernel = self._functions[int(fn)]
        slots = (ctypes.c_void_p * len(kernel.params)).from_address(params) if kernel.params else ()
        args = [ctypes.string_at(slots[i], p.size) for i, p in enumerate(kernel.params)]
        cluster = None
        for attr in (config.attrs[:config.numAttrs] if config.numAttrs else ()):
            if attr.id != self._cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
                raise not_modelled(f"cuLaunchKernelEx with launch attribute {attr.id.name}")
            cluster = (attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z)
        launch = self.machine.launch(kernel, (config.gridDimX, config.gridDimY, config.gridDimZ),
                                     (config.blockDimX, config.blockDimY, config.blockDimZ), *args,
                                     smem=config.sharedMemBytes, cluster=cluster)
        try:
            self.machine.run()
        finally:
            self.machine.global_space.free(launch.params)
        return (self._ok,)
