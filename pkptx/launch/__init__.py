"""Running pkptx kernels: devices, memory, launches, tensor maps, graphs, timing.

The only pkptx package that talks to the CUDA driver (through :mod:`pkptx.launch.driver`).
Importing it needs no GPU; the first call that does needs one, unless ``PKPTX_INTERPRET=1``: then the
driver is the CPU interpreter's (:mod:`pkptx.launch.interpreted`).
"""
from .array import ArrayError, DeviceArray, as_dtype, device_pointer, empty, from_dlpack, from_numpy
from .config import DeviceLimits, LaunchConfig
from .device import Device, Event, Stream, device_synchronize
from .dlpack import DLPackError
from .flags import FlagArray, host_barrier
from .graph import Capture, Graph, capture
from .launch import LoadedKernel, Packer, PreparedLaunch, launch
from .module import Function, get_function
from .multicast import multicast_policy
from .pool import CachingPool, DriverPool, default_pool, set_default_pool
from .symmetric import SymmetricBuffer, SymmetricHeap
from .tensormap import TensorMap, TensorMapError, TiledSpec, describe_tiled
from .timing import Timing, evict_l2, time_cuda, time_cuda_alternating
from .world import World

__all__ = [
    "ArrayError", "DeviceArray", "as_dtype", "device_pointer", "empty", "from_dlpack", "from_numpy",
    "DeviceLimits", "LaunchConfig",
    "Device", "Event", "Stream", "device_synchronize",
    "DLPackError",
    "Capture", "Graph", "capture",
    "LoadedKernel", "Packer", "PreparedLaunch", "launch",
    "Function", "get_function",
    "CachingPool", "DriverPool", "default_pool", "set_default_pool",
    "TensorMap", "TensorMapError", "TiledSpec", "describe_tiled",
    "Timing", "evict_l2", "time_cuda", "time_cuda_alternating",
    "World", "SymmetricHeap", "SymmetricBuffer", "FlagArray", "host_barrier", "multicast_policy",
]
