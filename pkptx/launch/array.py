"""DeviceArray: a typed view of device memory, and its constructors.

Strides are in **elements** (as in DLPack and torch), not bytes; ``strides=None`` means C order.
An array keeps its ``owner`` alive (an allocation, a DLPack producer, a symmetric buffer...), and
frees nothing itself: memory from :func:`empty` goes back to its pool, stream-ordered on the stream
it was allocated on, when the last array using it is collected. Methods take ``stream=None`` to mean
the array's own stream.
"""
from __future__ import annotations

import operator
from math import prod

import ml_dtypes  # noqa: F401  (registers bfloat16 and float8 dtypes with numpy)
import numpy as np

from ..errors import PkptxError
from . import dlpack
from .device import Device, Event, Stream, as_stream
from .driver import call, driver, interpreted
from .pool import default_pool


class ArrayError(PkptxError, ValueError):
    """A DeviceArray request that cannot be done (shape, dtype, layout); raised before any copy."""


_KINDS = "biufc"
_ML_NAMES = ("bfloat16", "float8_e4m3fn", "float8_e5m2")


_dtypes: dict = {}   # accepted spellings -> dtype: np.dtype() costs more than the rest of empty()


def as_dtype(dtype) -> np.dtype:
    """A numpy dtype for ``dtype`` (numpy types and names, plus bfloat16/float8 from ml_dtypes)."""
    try:
        return _dtypes[dtype]
    except (KeyError, TypeError):
        pass
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or not (dt.kind in _KINDS or dt.name in _ML_NAMES) or dt.byteorder == ">":
        raise ArrayError(f"dtype={dtype!r}: expected a native-endian bool, integer, float or complex "
                         f"dtype, or one of {', '.join(_ML_NAMES)}")
    try:
        _dtypes[dtype] = dt
    except TypeError:
        pass
    return dt


def _shape(shape) -> tuple[int, ...]:
    if type(shape) is int and shape >= 0:
        return (shape,)
    dims = shape if isinstance(shape, (tuple, list)) else (shape,)
    try:
        out = tuple(operator.index(d) for d in dims)
    except TypeError:
        out = (-1,)
    if any(d < 0 for d in out):
        raise ArrayError(f"shape={shape!r}: expected an int or a tuple of ints >= 0")
    return out


def c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides in elements."""
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= max(d, 1)
    return tuple(reversed(out))


class Allocation:
    """Pool memory; returned to the pool, in ``stream``'s order, when collected."""
    __slots__ = ("ptr", "nbytes", "pool", "stream")

    def __init__(self, ptr: int, nbytes: int, pool, stream: Stream):
        self.ptr, self.nbytes, self.pool, self.stream = ptr, nbytes, pool, stream

    def __del__(self):
        if self.pool is not None:
            pool, self.pool = self.pool, None
            pool.free(self.ptr, self.nbytes, self.stream.cu)


class DeviceArray:
    """``shape``/``dtype``/``strides`` (elements) over device address ``ptr``."""
    __slots__ = ("ptr", "shape", "dtype", "strides", "owner", "device", "stream", "__weakref__")

    def __init__(self, ptr: int, shape, dtype, strides=None, owner=None, device: Device | None = None,
                 stream: Stream | None = None):
        if type(ptr) is not int or ptr < 0:
            raise ArrayError(f"ptr={ptr!r}: expected a device address as an int >= 0")
        self.ptr, self.shape, self.dtype = ptr, _shape(shape), as_dtype(dtype)
        if strides is None:
            self.strides = c_strides(self.shape)
        else:
            try:
                self.strides = tuple(operator.index(st) for st in strides)
            except TypeError:
                self.strides = None
            if self.strides is None or len(self.strides) != len(self.shape):
                raise ArrayError(f"strides={strides!r}: expected {len(self.shape)} strides (in elements) "
                                 f"for shape {self.shape}")
        self.owner, self.device, self.stream = owner, device, stream

    @classmethod
    def _trusted(cls, ptr: int, shape: tuple, dtype: np.dtype, strides: tuple, owner, device, stream):
        """Construct from values already checked (the allocation path skips re-validation)."""
        self = object.__new__(cls)
        self.ptr, self.shape, self.dtype, self.strides = ptr, shape, dtype, strides
        self.owner, self.device, self.stream = owner, device, stream
        return self

    @classmethod
    def from_pointer(cls, ptr: int, shape, dtype, strides=None, owner=None, device: Device | None = None):
        """Wrap memory someone else owns (never freed here); ``owner`` is kept alive with the view."""
        return cls(ptr, shape, dtype, strides, owner, device)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def is_contiguous(self) -> bool:
        return all(st == c or d == 1 for d, st, c in zip(self.shape, self.strides, c_strides(self.shape)))

    def _span_elements(self) -> int:
        """Elements from the first to one past the last one the view touches."""
        if self.size == 0:
            return 0
        if any(st < 0 for st in self.strides):
            raise ArrayError(f"strides={self.strides}: negative strides are not supported")
        return sum((d - 1) * st for d, st in zip(self.shape, self.strides)) + 1

    def _stream(self, stream) -> Stream:
        return as_stream(stream if stream is not None else self.stream)

    def to_numpy(self, stream=None) -> np.ndarray:
        """A host copy (waits for the copy, so the result is ready)."""
        s = self._stream(stream)
        span = self._span_elements()
        host = np.empty(span, self.dtype)
        if span:
            call("cuMemcpyDtoHAsync", host.ctypes.data, self.ptr, span * self.itemsize, s.cu)
            s.synchronize()
        if self.is_contiguous:
            return host.reshape(self.shape)
        view = np.lib.stride_tricks.as_strided(host, self.shape, tuple(st * self.itemsize for st in self.strides))
        return view.copy()

    def copy_from_numpy(self, arr, stream=None) -> "DeviceArray":
        """Copy a host array of the same shape and dtype in (no implicit casting)."""
        src = np.ascontiguousarray(arr)
        if src.shape != self.shape or src.dtype != self.dtype:
            raise ArrayError(f"copy_from_numpy: got shape {src.shape} dtype {src.dtype}; expected shape "
                             f"{self.shape} dtype {self.dtype}")
        self._need_contiguous("copy_from_numpy")
        if src.size:
            call("cuMemcpyHtoDAsync", self.ptr, src.ctypes.data, src.nbytes, self._stream(stream).cu)
        return self

    def fill(self, value, stream=None) -> "DeviceArray":
        """Set every element to ``value``, converted to the array's dtype (``fill(1)`` on float32
        writes 1.0); for a raw bit pattern use :meth:`fill_bits`."""
        self._need_contiguous("fill")
        try:
            raw = np.array(value, dtype=self.dtype).tobytes()
        except (ValueError, OverflowError, TypeError) as exc:
            raise ArrayError(f"fill({value!r}): not representable as {self.dtype}: {exc}") from None
        return self._fill_raw(raw, stream)

    def fill_bits(self, pattern: int, stream=None) -> "DeviceArray":
        """Set every element's bits to ``pattern``, an int of the element's width (``itemsize`` bytes,
        little-endian as the GPU stores it): ``fill_bits(0x7FC0)`` on bfloat16 writes a quiet NaN,
        ``fill_bits(-1)`` all ones. Negative patterns are two's complement."""
        bits = 8 * self.itemsize
        if type(pattern) is not int and not isinstance(pattern, np.integer):
            raise ArrayError(f"fill_bits(pattern={pattern!r}): expected an int bit pattern of {bits} bits "
                             f"(the width of {self.dtype})")
        pattern = int(pattern)
        if not -(1 << (bits - 1)) <= pattern < 1 << bits:
            raise ArrayError(f"fill_bits(pattern={pattern:#x}): expected an int in [{-(1 << (bits - 1))}, "
                             f"{(1 << bits) - 1:#x}], a bit pattern of {bits} bits (the width of {self.dtype})")
        self._need_contiguous("fill_bits")
        return self._fill_raw((pattern & ((1 << bits) - 1)).to_bytes(self.itemsize, "little"), stream)

    def _fill_raw(self, raw: bytes, stream) -> "DeviceArray":
        """Every element := the ``itemsize`` bytes ``raw``: a cuMemsetD8/16/32 when they repeat with
        that period (and the address allows it), else a copy of a host array."""
        if self.size == 0:
            return self
        s = self._stream(stream)
        for width, fn in ((1, "cuMemsetD8Async"), (2, "cuMemsetD16Async"), (4, "cuMemsetD32Async")):
            if len(raw) % width == 0 and raw == raw[:width] * (len(raw) // width) and self.ptr % width == 0:
                call(fn, self.ptr, int.from_bytes(raw[:width], "little"), self.nbytes // width, s.cu)
                return self
        return self.copy_from_numpy(np.frombuffer(raw * self.size, self.dtype).reshape(self.shape), s)

    def _need_contiguous(self, what: str) -> None:
        if not self.is_contiguous:
            raise ArrayError(f"{what}: the array has strides {self.strides} (elements); expected a "
                             f"C-contiguous array {c_strides(self.shape)}")

    def device_ordinal(self) -> int:
        """The ordinal of the GPU holding the memory (asked from the driver if not known)."""
        if self.device is not None:
            return self.device.ordinal
        attr = driver().CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
        return int(call("cuPointerGetAttribute", attr, self.ptr))

    def __dlpack_device__(self) -> tuple[int, int]:
        return (dlpack.KDL_CUDA, self.device_ordinal())

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export zero-copy. ``stream`` is the consumer's (None/1: legacy default, 2: per-thread,
        -1: no synchronisation); work queued on this array's stream is made to precede it."""
        if copy:
            raise dlpack.DLPackError("copy=True: pkptx exports device arrays zero-copy only")
        if interpreted():
            raise dlpack.DLPackError("__dlpack__ under PKPTX_INTERPRET=1: the array is the CPU interpreter's "
                                     "memory, not CUDA memory; copy it out with to_numpy()")
        device = self.__dlpack_device__()
        if dl_device is not None and tuple(dl_device) != device:
            raise dlpack.DLPackError(f"dl_device={tuple(dl_device)}: this array lives on {device}")
        if stream is not None and stream != -1:
            consumer = 0 if stream in (0, 1) else int(stream)
            mine = self._stream(None)
            if consumer != mine.handle:
                Stream.wrap(consumer).wait(Event(timing=False).record(mine))
        versioned = max_version is not None and tuple(max_version)[0] >= dlpack.VERSION[0]
        return dlpack.make_capsule(self.ptr, self.shape, self.strides, self.dtype, device[1], self,
                                   versioned=versioned)

    def __repr__(self) -> str:
        layout = "" if self.is_contiguous else f", strides={self.strides}"
        return f"DeviceArray(0x{self.ptr:x}, shape={self.shape}, dtype={self.dtype}{layout})"


def empty(shape, dtype, device: Device | None = None, stream=None) -> DeviceArray:
    """An uninitialised C-contiguous array from the device's default pool, ordered on ``stream``."""
    shape, dtype = _shape(shape), as_dtype(dtype)
    s = as_stream(stream)
    explicit = device or s.device
    dev = explicit.set_current() if explicit else Device.current()
    nbytes = prod(shape) * dtype.itemsize
    pool = default_pool(dev)
    ptr = pool.allocate(nbytes, s.cu)
    return DeviceArray._trusted(ptr, shape, dtype, c_strides(shape), Allocation(ptr, nbytes, pool, s), dev, s)


def from_numpy(arr, stream=None, device: Device | None = None) -> DeviceArray:
    """A device copy of a host array."""
    src = np.asarray(arr)
    return empty(src.shape, src.dtype, device, stream).copy_from_numpy(src, stream)


def from_dlpack(obj, stream=None) -> DeviceArray:
    """Zero-copy view of a CUDA DLPack producer (torch, CuPy, JAX...), which is kept alive.

    ``stream`` is the stream the view will be used on; the producer orders its pending work before it.
    """
    if isinstance(obj, DeviceArray):
        return obj
    if not hasattr(obj, "__dlpack__"):
        raise ArrayError(f"from_dlpack: {type(obj).__name__} has no __dlpack__")
    dlpack.cuda_device(obj, "from_dlpack")
    s = as_stream(stream)
    proto = 1 if s.handle == 0 else s.handle
    try:
        capsule = obj.__dlpack__(stream=proto, max_version=dlpack.VERSION)
    except TypeError:
        capsule = obj.__dlpack__(stream=proto)
    ptr, shape, strides, dtype, _, dev_id, owner = dlpack.consume(capsule, obj)
    return DeviceArray(ptr, shape, dtype, strides, owner, Device(dev_id), s)


def device_pointer(obj) -> int:
    """The device address of ``obj``: a DeviceArray, an int, anything with
    ``__cuda_array_interface__``, or a DLPack producer of CUDA (or CUDA managed) memory; host
    arrays (numpy, CPU tensors) are refused with a DLPackError saying where they live."""
    if type(obj) is DeviceArray:
        return obj.ptr
    if isinstance(obj, int) and not isinstance(obj, bool):
        return obj
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        return int(cai["data"][0])
    if hasattr(obj, "__dlpack__"):
        dlpack.cuda_device(obj, "device_pointer")
        return dlpack.data_pointer(obj)
    raise ArrayError(f"{type(obj).__name__} is not device memory; expected a DeviceArray, an int address, "
                     "or an object with __cuda_array_interface__ or __dlpack__")
