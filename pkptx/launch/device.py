"""Devices, streams and events: thin owners of driver handles.

A :class:`Device` is one per ordinal per process and works in the device's primary context, the one
the CUDA runtime (torch, CuPy, JAX) also uses, so pointers and streams pass between them freely.
"""
from __future__ import annotations

import atexit
import threading
from functools import cached_property

from ..errors import CudaError, LaunchError
from .config import DeviceLimits
from .driver import call, driver

_GONE = ("CUDA_ERROR_DEINITIALIZED", "CUDA_ERROR_CONTEXT_IS_DESTROYED")
_exiting = False


@atexit.register
def _note_exit() -> None:
    global _exiting
    _exiting = True


def release(fn_name: str, *args) -> None:
    """Free a handle from a finaliser: checked, but quiet when the driver is already shut down.

    At interpreter exit nothing is freed: the process's memory and handles go with its context,
    and the driver bindings may already be half torn down.
    """
    if _exiting:
        return
    try:
        call(fn_name, *args)
    except CudaError as exc:
        if exc.name not in _GONE:
            raise


class Device:
    """GPU ``ordinal``; the same object is returned for the same ordinal.

    Attributes are read from the driver once. ``set_current()`` makes the primary context current
    on the calling thread; pkptx calls it wherever a context is needed.
    """
    _instances: dict[int, "Device"] = {}
    _lock = threading.Lock()

    def __new__(cls, ordinal: int = 0):
        dev = cls._instances.get(ordinal)
        if dev is not None:
            return dev
        with cls._lock:
            dev = cls._instances.get(ordinal)
            if dev is None:
                dev = super().__new__(cls)
                dev._setup(ordinal)
                cls._instances[ordinal] = dev
            return dev

    def _setup(self, ordinal: int) -> None:
        count = call("cuDeviceGetCount")
        if type(ordinal) is not int or not 0 <= ordinal < count:
            raise LaunchError(f"Device({ordinal!r}): expected an ordinal in 0..{count - 1} "
                              f"({count} devices visible)")
        self.ordinal = ordinal
        self.handle = call("cuDeviceGet", ordinal)
        self._context = None

    @classmethod
    def count(cls) -> int:
        return call("cuDeviceGetCount")

    @classmethod
    def available(cls) -> int:
        """How many GPUs answer: 0 (not an error) without a driver or a device."""
        try:
            return cls.count()
        except (CudaError, RuntimeError):     # RuntimeError: cuda.bindings finds no libcuda
            return 0

    @classmethod
    def current(cls) -> "Device":
        """The device of the calling thread's current context; device 0 (made current) if none. Asks
        cuCtxGetCurrent first, so that no failing driver call is made (compute-sanitizer reports those)."""
        current = call("cuCtxGetCurrent")
        if current is None or not int(current):
            return cls(0).set_current()
        return cls(int(call("cuCtxGetDevice")))

    @property
    def context(self):
        """The retained primary context (retained once, for the life of the process)."""
        if self._context is None:
            with self._lock:
                if self._context is None:
                    self._context = call("cuDevicePrimaryCtxRetain", self.handle)
        return self._context

    def set_current(self) -> "Device":
        call("cuCtxSetCurrent", self.context)
        return self

    def attribute(self, name: str) -> int:
        """``cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_<name>)``."""
        attr = getattr(driver().CUdevice_attribute, "CU_DEVICE_ATTRIBUTE_" + name)
        return call("cuDeviceGetAttribute", attr, self.handle)

    @cached_property
    def name(self) -> str:
        raw = call("cuDeviceGetName", 256, self.handle)
        return raw.split(b"\0", 1)[0].decode()

    @cached_property
    def pci_bus_id(self) -> str:
        """``domain:bus:device.function``, as nvidia-smi names the same GPU (whatever CUDA's ordinal)."""
        raw = call("cuDeviceGetPCIBusId", 64, self.handle)
        return raw.split(b"\0", 1)[0].decode()

    @cached_property
    def cc(self) -> tuple[int, int]:
        return (self.attribute("COMPUTE_CAPABILITY_MAJOR"), self.attribute("COMPUTE_CAPABILITY_MINOR"))

    @cached_property
    def sm_count(self) -> int:
        return self.attribute("MULTIPROCESSOR_COUNT")

    @cached_property
    def max_threads_per_block(self) -> int:
        return self.attribute("MAX_THREADS_PER_BLOCK")

    @cached_property
    def smem_per_block_optin(self) -> int:
        return self.attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")

    @cached_property
    def cluster_launch(self) -> bool:
        return bool(self.attribute("CLUSTER_LAUNCH"))

    @cached_property
    def l2_bytes(self) -> int:
        return self.attribute("L2_CACHE_SIZE")

    @cached_property
    def limits(self) -> DeviceLimits:
        """Everything :meth:`LaunchConfig.validate` checks, read once."""
        return DeviceLimits(
            name=self.name, cc=self.cc, sm_count=self.sm_count,
            max_threads_per_block=self.max_threads_per_block,
            max_block=tuple(self.attribute(f"MAX_BLOCK_DIM_{a}") for a in "XYZ"),
            max_grid=tuple(self.attribute(f"MAX_GRID_DIM_{a}") for a in "XYZ"),
            smem_per_block_optin=self.smem_per_block_optin,
            cluster_launch=self.cluster_launch, l2_bytes=self.l2_bytes)

    def synchronize(self) -> None:
        self.set_current()
        call("cuCtxSynchronize")

    def __repr__(self) -> str:
        return f"Device({self.ordinal})"


def device_synchronize() -> None:
    """Wait for all work in the current context. It checks no kernel status: :func:`pkptx.synchronize`
    waits and then raises the DeviceTimeoutError a bounded wait recorded."""
    call("cuCtxSynchronize")


class Stream:
    """A CUDA stream: owned (created here, destroyed with the object) or wrapped (borrowed).

    ``Stream.default()`` is the legacy default stream (handle 0), which synchronises with every
    blocking stream; owned streams are blocking unless ``non_blocking=True``, so work ordered on
    torch's or CuPy's default stream stays ordered with pkptx work.
    """
    __slots__ = ("handle", "cu", "device", "_owned", "_keep")
    _default: "Stream | None" = None

    def __init__(self, device: Device | None = None, *, non_blocking: bool = False, priority: int = 0):
        cu = driver()
        self.device = (device or Device.current()).set_current()
        flags = cu.CUstream_flags.CU_STREAM_NON_BLOCKING if non_blocking else cu.CUstream_flags.CU_STREAM_DEFAULT
        self.cu = call("cuStreamCreateWithPriority", int(flags), priority)
        self.handle = int(self.cu)
        self._owned, self._keep = True, None

    @classmethod
    def wrap(cls, obj, device: Device | None = None) -> "Stream":
        """Borrow a stream: a :class:`Stream`, an int handle, a ``CUstream``, any object with
        ``__cuda_stream__`` (returning ``(version, handle)``) or with an int ``cuda_stream`` (a
        ``torch.cuda.Stream``, e.g. the capture stream inside ``torch.cuda.graph``). ``obj`` is kept alive."""
        if isinstance(obj, Stream):
            return obj
        if hasattr(obj, "__cuda_stream__"):
            proto = obj.__cuda_stream__()
            if not (isinstance(proto, tuple) and len(proto) == 2):
                raise LaunchError(f"{type(obj).__name__}.__cuda_stream__() returned {proto!r}; "
                                  "expected (version, handle)")
            handle = int(proto[1])
        elif isinstance(getattr(obj, "cuda_stream", None), int):
            handle = obj.cuda_stream
        elif isinstance(obj, int) and not isinstance(obj, bool):
            handle = obj
        elif isinstance(obj, driver().CUstream):
            handle = int(obj)
        else:
            raise LaunchError(f"stream={obj!r}: expected a pkptx Stream, None, an int handle, a CUstream "
                              "or an object with __cuda_stream__ or cuda_stream")
        self = object.__new__(cls)
        self.handle, self.cu = handle, driver().CUstream(handle)
        self.device, self._owned, self._keep = device, False, obj
        return self

    @classmethod
    def default(cls) -> "Stream":
        """The legacy default stream (handle 0) of the current context."""
        if cls._default is None:
            cls._default = cls.wrap(0)
        return cls._default

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)

    def __int__(self) -> int:
        return self.handle

    def synchronize(self) -> None:
        call("cuStreamSynchronize", self.cu)

    def wait(self, event: "Event") -> None:
        """Make later work on this stream wait for ``event``."""
        call("cuStreamWaitEvent", self.cu, event.cu, 0)

    def record(self, event: "Event | None" = None) -> "Event":
        event = event or Event(timing=False)
        return event.record(self)

    def __del__(self):
        if getattr(self, "_owned", False):
            self._owned = False
            release("cuStreamDestroy", self.cu)

    def __repr__(self) -> str:
        return f"Stream(0x{self.handle:x}{', owned' if self._owned else ''})"


def as_stream(stream) -> Stream:
    """``None`` -> the default stream; a :class:`Stream` as is; anything else wrapped."""
    if stream is None:
        return Stream.default()
    if type(stream) is Stream:
        return stream
    return Stream.wrap(stream)


def stream_handle(stream) -> int:
    """The raw handle of ``stream`` (a Stream, an int handle, None for the legacy default stream, or
    anything :func:`as_stream` takes): what a launch is queued on and what launch caches are keyed by.
    It is on every launch's path, so the common kinds are tested first and wrap nothing."""
    kind = type(stream)
    return stream.handle if kind is Stream else stream if kind is int else 0 if stream is None else \
        as_stream(stream).handle


class Event:
    """A CUDA event. ``timing=False`` makes record/wait cheaper when no time is read."""
    __slots__ = ("cu",)

    def __init__(self, timing: bool = True):
        flags = driver().CUevent_flags
        self.cu = call("cuEventCreate", int(flags.CU_EVENT_DEFAULT if timing else flags.CU_EVENT_DISABLE_TIMING))

    def record(self, stream=None) -> "Event":
        call("cuEventRecord", self.cu, as_stream(stream).cu)
        return self

    def synchronize(self) -> None:
        call("cuEventSynchronize", self.cu)

    def elapsed_ms(self, end: "Event") -> float:
        """Milliseconds from this event to ``end`` (both recorded and complete)."""
        return call("cuEventElapsedTime", self.cu, end.cu)

    def __del__(self):
        if getattr(self, "cu", None) is not None:
            cu, self.cu = self.cu, None
            release("cuEventDestroy", cu)
