"""The fake driver of :mod:`mpi_programs.fake_cuda`, grown to load and launch kernels and to capture
streams into graphs, for CPU tests of the launch path and the host ops.

Capture follows the driver's rules: while a stream captures, a call the driver forbids (synchronous
copies, memsets, allocations and frees, context or stream synchronisation, module loading, any work on
the legacy stream, a stream-ordered free of memory the graph did not allocate) invalidates the capture
and is recorded in ``unsafe``; a launch into an invalidated capture fails with
CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, as on a GPU. ``launches`` records (grid, stream, params address,
the first 32 argument bytes) per launch; ``during_capture`` every call made while a capture was open.
"""
from __future__ import annotations

import ctypes
import importlib
import itertools

from cuda.bindings import driver as cu

from tests.launch.mpi_programs.fake_cuda import OK, FakeDriver
from pkptx.ops import common, launches, plan

launch, module, occupancy, pool, status = (importlib.import_module(f"pkptx.launch.{name}") for name in
                                           ("launch", "module", "occupancy", "pool", "status"))

A = cu.CUdevice_attribute
ATTRIBUTES = {A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: 9, A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: 0,
              A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: 132, A.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: 1024,
              A.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: 1024, A.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: 1024,
              A.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: 64, A.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: 2**31 - 1,
              A.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: 65535, A.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: 65535,
              A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: 232448,
              A.CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: 1, A.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: 50 << 20}
FORBIDDEN_IN_CAPTURE = {"cuCtxSynchronize", "cuStreamSynchronize", "cuStreamQuery", "cuEventQuery",
                        "cuEventSynchronize", "cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemsetD32", "cuMemAlloc",
                        "cuMemFree", "cuModuleLoadData", "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync",
                        "cuGraphExecDestroy", "cuGraphDestroy"}   # seen on the H200: a capture was invalidated
SAFE_IN_CAPTURE = {"cuLaunchKernelEx", "cuStreamIsCapturing", "cuCtxGetCurrent", "cuCtxGetDevice",
                   "cuMemsetD32Async", "cuMemsetD16Async", "cuMemsetD8Async"}


class LaunchFakeDriver(FakeDriver):
    def __init__(self, **options):
        super().__init__(**options)
        self.launches: list[tuple] = []
        self.unsafe: list[str] = []
        self.during_capture: list[str] = []
        self.capturing: dict[int, bool] = {}        # stream handle -> still valid
        self.graph_launches = 0
        self._keep: dict[int, object] = {}
        self._next = itertools.count(0x1000, 0x10)

    def _wrap(self, name, fake):
        inner = super()._wrap(name, fake)

        def call(*args):
            if self.capturing and name not in ("cuStreamBeginCapture", "cuStreamEndCapture"):
                self.during_capture.append(name)
                if name in FORBIDDEN_IN_CAPTURE:
                    self._invalidate(name)
            return inner(*args)
        return call

    def _invalidate(self, why: str) -> None:
        self.unsafe.append(why)
        for stream in self.capturing:
            self.capturing[stream] = False

    def _handle(self, kind):
        return kind(next(self._next))

    def cuuint64_t(self, value):
        return self._saved["cuuint64_t"](value)

    def cuuint32_t(self, value):
        return self._saved["cuuint32_t"](value)

    def cuTensorMapEncodeTiled(self, *args):
        return OK, cu.CUtensorMap()          # 128 zero bytes: the fake launches nothing

    # ------------------------------------------------------------------- devices, modules
    def cuDeviceGetAttribute(self, attribute, device):
        return OK, ATTRIBUTES.get(attribute, 0)

    def cuDeviceGetName(self, length, device):
        return OK, b"Fake H200"

    def cuCtxGetExecAffinity(self, kind):
        return (cu.CUresult.CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, None)

    def cuModuleLoadData(self, image):
        return OK, self._handle(cu.CUmodule)

    def cuModuleGetFunction(self, module, name):
        return OK, self._handle(cu.CUfunction)

    def cuFuncLoad(self, fn):
        return (OK,)

    def cuFuncGetAttribute(self, attribute, fn):
        F = cu.CUfunction_attribute
        return OK, {F.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: 1024}.get(attribute, 0)

    def cuFuncSetAttribute(self, fn, attribute, value):
        return (OK,)

    def cuOccupancyMaxActiveBlocksPerMultiprocessor(self, fn, threads, smem):
        return OK, 1

    # ------------------------------------------------------------------- streams, pools
    def cuStreamCreateWithPriority(self, flags, priority):
        return OK, self._handle(cu.CUstream)

    def cuStreamDestroy(self, stream):
        return (OK,)

    def cuMemPoolCreate(self, props):
        return OK, self._handle(cu.CUmemoryPool)

    def cuMemPoolSetAttribute(self, pool, attribute, value):
        return (OK,)

    def cuMemPoolDestroy(self, pool):
        return (OK,)

    def cuMemAllocFromPoolAsync(self, nbytes, pool, stream):
        buf = ctypes.create_string_buffer(nbytes + 256)
        ptr = -ctypes.addressof(buf) % 256 + ctypes.addressof(buf)
        self._keep[ptr] = buf
        if int(stream) in self.capturing:
            self._keep[ptr] = (buf, "graph")
        return OK, cu.CUdeviceptr(ptr)

    def cuMemFreeAsync(self, ptr, stream):
        kept = self._keep.pop(int(ptr), None)
        graph_memory = isinstance(kept, tuple)
        if int(stream) in self.capturing and not graph_memory:
            self._invalidate("cuMemFreeAsync of memory the graph did not allocate")
            return (cu.CUresult.CUDA_ERROR_INVALID_VALUE,)
        return (OK,)

    def cuMemsetD32Async(self, ptr, value, count, stream):
        if int(stream) in self.capturing:
            return (OK,)                          # a memset node: runs at replay
        if self.capturing and int(stream) == 0:
            self._invalidate("legacy-stream work during a capture")
        return super().cuMemsetD32Async(ptr, value, count, stream)

    # ---------------------------------------------------------------------------- capture
    def cuStreamBeginCapture(self, stream, mode):
        self.capturing[int(stream)] = True
        return (OK,)

    def cuStreamIsCapturing(self, stream):
        S = cu.CUstreamCaptureStatus
        state = self.capturing.get(int(stream))
        status = S.CU_STREAM_CAPTURE_STATUS_NONE if state is None else (
            S.CU_STREAM_CAPTURE_STATUS_ACTIVE if state else S.CU_STREAM_CAPTURE_STATUS_INVALIDATED)
        return OK, status

    def cuStreamEndCapture(self, stream):
        valid = self.capturing.pop(int(stream), None)
        if not valid:
            return (cu.CUresult.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, None)
        return OK, self._handle(cu.CUgraph)

    def cuGraphInstantiate(self, graph, flags):
        return OK, self._handle(cu.CUgraphExec)

    def cuGraphLaunch(self, executable, stream):
        self.graph_launches += 1
        return (OK,)

    def cuGraphDestroy(self, graph):
        return (OK,)

    def cuGraphExecDestroy(self, executable):
        return (OK,)

    # ---------------------------------------------------------------------------- launches
    def cuLaunchKernelEx(self, config, fn, params, extra):
        stream = int(config.hStream)
        if stream in self.capturing and not self.capturing[stream]:
            return (cu.CUresult.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,)
        if self.capturing and stream == 0:
            self._invalidate("legacy-stream launch during a capture")
        first = ctypes.c_void_p.from_address(params).value
        self.launches.append((config.gridDimX, stream, params, ctypes.string_at(first, 32),
                              stream in self.capturing))
        return (OK,)


CACHES = (common._loaded, launch._loaded, status._by_device, pool._default_pools, module._modules,
          module._functions, occupancy._sm_counts, occupancy._per_sm, launches._tensor_maps, launches._launches, plan._states)


def forget_fake_handles() -> None:
    """Empty every cache that may hold the fake's handles, so real GPU tests in the same process never
    meet them (call before installing and after uninstalling)."""
    for cache in CACHES:
        cache.clear()
    plan._unchecked.clear()
