"""DLPack capsules by hand with ctypes, so pkptx exchanges arrays with torch, CuPy and JAX without
depending on any of them.

Two layouts are spoken: the versioned ``DLManagedTensorVersioned`` (capsule ``"dltensor_versioned"``,
DLPack >= 1.0) and the legacy ``DLManagedTensor`` (capsule ``"dltensor"``). A consumer renames the
capsule to ``"used_..."`` and later calls the tensor's deleter; an unconsumed capsule calls the
deleter itself when it is collected. Nothing here knows about DeviceArray (array.py builds on it).
"""
from __future__ import annotations

import ctypes
import threading

import ml_dtypes
import numpy as np

from ..errors import PkptxError

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST = 1, 2, 3
KDL_CUDA_MANAGED = 13
VERSION = (1, 0)

NAME_LEGACY, USED_LEGACY = b"dltensor", b"used_dltensor"
NAME_VERSIONED, USED_VERSIONED = b"dltensor_versioned", b"used_dltensor_versioned"


class DLPackError(PkptxError, BufferError):
    """A DLPack exchange that cannot be done (wrong device, dtype or protocol version)."""


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


# (DLDataTypeCode, bits) <-> numpy dtype; codes from dlpack.h (7-17 are DLPack 1.1's fp8/fp6/fp4).
def _code_table() -> dict[np.dtype, tuple[int, int]]:
    kinds = {0: (np.int8, np.int16, np.int32, np.int64), 1: (np.uint8, np.uint16, np.uint32, np.uint64),
             2: (np.float16, np.float32, np.float64), 5: (np.complex64, np.complex128), 6: (np.bool_,)}
    table = {np.dtype(t): (code, np.dtype(t).itemsize * 8) for code, ts in kinds.items() for t in ts}
    table[np.dtype(ml_dtypes.bfloat16)] = (4, 16)
    table[np.dtype(ml_dtypes.float8_e4m3fn)] = (10, 8)
    table[np.dtype(ml_dtypes.float8_e5m2)] = (12, 8)
    return table


_CODES = _code_table()
_DTYPES = {v: k for k, v in _CODES.items()}


def dlpack_dtype(dtype: np.dtype) -> tuple[int, int, int]:
    """``(code, bits, lanes)`` for a numpy dtype, or DLPackError."""
    try:
        code, bits = _CODES[np.dtype(dtype)]
    except KeyError:
        raise DLPackError(f"dtype {dtype} has no DLPack type code; expected one of "
                          f"{', '.join(sorted(str(d) for d in _CODES))}") from None
    return code, bits, 1


def numpy_dtype(code: int, bits: int, lanes: int) -> np.dtype:
    dtype = _DTYPES.get((code, bits))
    if dtype is None or lanes != 1:
        raise DLPackError(f"DLPack dtype (code={code}, bits={bits}, lanes={lanes}) has no numpy "
                          "equivalent here; expected lanes=1 and one of " + ", ".join(str(d) for d in _CODES))
    return dtype


_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
# The destructor sees a capsule that is being freed: take it as a raw pointer, never a py_object.
_is_valid_raw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_get_pointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))

# Exported tensors alive in some consumer: struct address -> (struct, shape, strides, keep-alive).
_exports: dict[int, tuple] = {}
_exports_lock = threading.Lock()


def _delete_export(address: int) -> None:
    with _exports_lock:
        _exports.pop(address, None)


_DELETER = DELETER(_delete_export)


def _capsule_destructor(capsule: int) -> None:
    """Free the tensor of a capsule nobody consumed (its name is still the unused one)."""
    for name in (NAME_VERSIONED, NAME_LEGACY):
        if _is_valid_raw(capsule, name):
            _delete_export(_get_pointer_raw(capsule, name))
            return


_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_capsule_destructor)


def make_capsule(ptr: int, shape: tuple, strides: tuple, dtype: np.dtype, device_id: int, keep,
                 *, versioned: bool, device_type: int = KDL_CUDA):
    """A capsule describing ``ptr`` (strides in elements). ``keep`` stays alive until the
    consumer calls the deleter, so the memory cannot be freed under it."""
    ndim = len(shape)
    c_shape = (ctypes.c_int64 * max(ndim, 1))(*shape)
    c_strides = (ctypes.c_int64 * max(ndim, 1))(*strides)
    code, bits, lanes = dlpack_dtype(dtype)
    managed = DLManagedTensorVersioned() if versioned else DLManagedTensor()
    t = managed.dl_tensor
    t.data, t.ndim, t.byte_offset = ptr or None, ndim, 0
    t.device = DLDevice(device_type, device_id)
    t.dtype = DLDataType(code, bits, lanes)
    t.shape = ctypes.cast(c_shape, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(c_strides, ctypes.POINTER(ctypes.c_int64))
    managed.deleter = _DELETER
    if versioned:
        managed.version = DLPackVersion(*VERSION)
        managed.flags = 0
    address = ctypes.addressof(managed)
    managed.manager_ctx = address
    with _exports_lock:
        _exports[address] = (managed, c_shape, c_strides, keep)
    return _api.PyCapsule_New(address, NAME_VERSIONED if versioned else NAME_LEGACY,
                              ctypes.cast(_DESTRUCTOR, ctypes.c_void_p))


class Imported:
    """A consumed DLPack tensor; calls the producer's deleter when collected."""

    def __init__(self, address: int, deleter, producer):
        self._address, self._deleter, self._producer = address, deleter, producer

    def __del__(self):
        if self._deleter:
            deleter, self._deleter = self._deleter, None
            deleter(self._address)


def consume(capsule, producer) -> tuple[int, tuple, tuple | None, np.dtype, int, int, Imported]:
    """Take ownership of a DLPack capsule: ``(ptr, shape, strides|None, dtype, device_type,
    device_id, owner)``; ``owner`` (holding ``producer``) releases the tensor when collected."""
    if _api.PyCapsule_IsValid(capsule, NAME_VERSIONED):
        address = _api.PyCapsule_GetPointer(capsule, NAME_VERSIONED)
        managed = DLManagedTensorVersioned.from_address(address)
        if managed.version.major != VERSION[0]:
            raise DLPackError(f"DLPack capsule of version {managed.version.major}.{managed.version.minor}; "
                              f"expected major version {VERSION[0]}")
        used = USED_VERSIONED
    elif _api.PyCapsule_IsValid(capsule, NAME_LEGACY):
        address = _api.PyCapsule_GetPointer(capsule, NAME_LEGACY)
        managed = DLManagedTensor.from_address(address)
        used = USED_LEGACY
    else:
        raise DLPackError(f"{capsule!r} is not an unused DLPack capsule; expected a capsule named "
                          "'dltensor_versioned' or 'dltensor'")
    t = managed.dl_tensor
    dtype = numpy_dtype(t.dtype.code, t.dtype.bits, t.dtype.lanes)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else None
    ptr = (t.data or 0) + t.byte_offset
    _api.PyCapsule_SetName(capsule, used)
    fn = ctypes.cast(managed.deleter, ctypes.c_void_p).value   # copied: the struct dies with the deleter
    owner = Imported(address, DELETER(fn) if fn else None, producer)
    return ptr, shape, strides, dtype, t.device.device_type, t.device.device_id, owner


def cuda_device(obj, what: str) -> tuple[int, int]:
    """``obj.__dlpack_device__()`` when it is CUDA or CUDA managed memory, else a DLPackError
    saying where ``obj`` lives (``what`` names the request, e.g. ``"from_dlpack"``)."""
    device_type, device_id = obj.__dlpack_device__()
    if device_type not in (KDL_CUDA, KDL_CUDA_MANAGED):
        host = "host memory; copy it to the device first (pkptx.launch.from_numpy), " if (
            device_type in (KDL_CPU, KDL_CUDA_HOST)) else ""
        raise DLPackError(f"{what}: {type(obj).__name__} lives on DLPack device type {device_type} ({host}"
                          f"expected CUDA ({KDL_CUDA}) or CUDA managed ({KDL_CUDA_MANAGED}) memory)")
    return device_type, device_id


def data_pointer(obj) -> int:
    """The device address of a DLPack producer's data, for passing it as a kernel pointer.

    The capsule is left unconsumed, so it frees its tensor as soon as it is collected; the
    pointer stays valid because ``obj`` itself still owns the memory.
    """
    try:
        capsule = obj.__dlpack__(max_version=VERSION)
    except TypeError:
        capsule = obj.__dlpack__()
    for name, cls in ((NAME_VERSIONED, DLManagedTensorVersioned), (NAME_LEGACY, DLManagedTensor)):
        if _api.PyCapsule_IsValid(capsule, name):
            t = cls.from_address(_api.PyCapsule_GetPointer(capsule, name)).dl_tensor
            return (t.data or 0) + t.byte_offset
    raise DLPackError(f"{type(obj).__name__}.__dlpack__() returned no DLPack capsule")
