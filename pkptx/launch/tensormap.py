"""TMA tensor maps (``cuTensorMapEncodeTiled``), checked in Python before the driver sees them.

Shapes, strides and boxes are given in numpy order (outermost first, like ``DeviceArray.shape``);
the driver's innermost-first order is produced here. A :class:`TensorMap` is passed to a kernel by
value: its 128 bytes go into a ``.param .align 64 .b8 name[128]`` parameter.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import numpy as np

from ..errors import LaunchError
from .array import DeviceArray, as_dtype, from_dlpack
from .driver import call, driver, interpreted

SWIZZLES = (None, 32, 64, 128)
INTERLEAVES = (None, 16, 32)
L2_PROMOTIONS = (None, 64, 128, 256)
OOB_FILLS = ("none", "nan")
MAX_RANK, MAX_BOX, MAX_ELEMENT_STRIDE = 5, 256, 8
MAX_BOX_BYTES = 232448      # 227 KB, a block's opt-in shared memory: the H200 driver refused a 256 KB box


class TensorMapError(LaunchError):
    """A tensor-map request the driver would refuse; the message names the argument."""


_FLOAT_TYPES = {"float16": "FLOAT16", "bfloat16": "BFLOAT16", "float32": "FLOAT32", "float64": "FLOAT64"}


def _tma_type(dtype: np.dtype) -> str:
    """The CU_TENSOR_MAP_DATA_TYPE_* name: IEEE floats and bf16 as such, everything else as raw bits."""
    if dtype.name in _FLOAT_TYPES:
        return _FLOAT_TYPES[dtype.name]
    if dtype.kind == "i" and dtype.itemsize in (4, 8):
        return f"INT{dtype.itemsize * 8}"
    if dtype.itemsize in (1, 2, 4, 8) and dtype.kind != "c":
        return f"UINT{dtype.itemsize * 8}"
    raise TensorMapError(f"TensorMap dtype={dtype}: expected an 8/16/32/64-bit integer or float dtype")


@dataclass(frozen=True)
class TiledSpec:
    """A validated tiled tensor map, in the driver's order (innermost dimension first)."""
    ptr: int
    dtype: np.dtype
    data_type: str          # CU_TENSOR_MAP_DATA_TYPE_<data_type>
    dims: tuple[int, ...]
    strides: tuple[int, ...]    # bytes, rank - 1 of them (the innermost is the element size)
    box: tuple[int, ...]
    element_strides: tuple[int, ...]
    swizzle: int | None
    interleave: int | None
    l2_promotion: int | None
    oob_fill: str

    @property
    def box_bytes(self) -> int:
        """Bytes one box load writes to shared memory (the mbarrier transaction count)."""
        n = self.dtype.itemsize
        for i, (b, e) in enumerate(zip(self.box, self.element_strides)):
            ignored = i == 0 and self.interleave is None   # TMA ignores the innermost element stride
            n *= b if ignored else -(-b // e)
        return n

    @property
    def smem_bytes(self) -> int:
        """Bytes of shared memory one box occupies, from the (suitably aligned) tile address on.

        Without swizzle this is :attr:`box_bytes`. With a swizzle, TMA lays every innermost row out
        at the swizzle span's pitch, so a row narrower than the span still takes the whole span
        (measured on an H200: a 3 x 16-byte box with 128-byte swizzle writes its 48 bytes across
        the first 304 bytes of the tile; non-interleaved maps only, interleaved ones are assumed to
        follow the same rule). Size the tile from this, the transaction count from :attr:`box_bytes`.
        """
        if self.swizzle is None:
            return self.box_bytes
        first = self.box[0] if self.interleave is None else -(-self.box[0] // self.element_strides[0])
        row = first * self.dtype.itemsize
        return self.box_bytes // row * max(self.swizzle, row)


def _ints(value, what: str, rank: int | None = None) -> tuple[int, ...]:
    vals = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in vals):
        raise TensorMapError(f"TensorMap {what}={value!r}: expected ints")
    if rank is not None and len(vals) != rank:
        raise TensorMapError(f"TensorMap {what}={value!r}: expected {rank} values, one per dimension of shape")
    return tuple(int(v) for v in vals)


def _choice(value, what: str, options: tuple):
    if value == 0 and None in options:
        value = None
    if value not in options:
        raise TensorMapError(f"TensorMap {what}={value!r}: expected one of {', '.join(map(repr, options))}")
    return value


def describe_tiled(ptr: int, dtype, shape, strides_bytes=None, box=None, element_strides=None, *,
                   swizzle=None, interleave=None, l2_promotion=None, oob_fill="none") -> TiledSpec:
    """Check every rule of ``cuTensorMapEncodeTiled`` that can be checked without a GPU."""
    dtype = as_dtype(dtype)
    shape = _ints(shape, "shape")
    rank = len(shape)
    if not 1 <= rank <= MAX_RANK:
        raise TensorMapError(f"TensorMap shape={shape}: expected 1 to {MAX_RANK} dimensions")
    item = dtype.itemsize
    if strides_bytes is None:
        strides_bytes = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) * item for i in range(rank))
    strides = _ints(strides_bytes, "strides_bytes", rank)
    if box is None:
        raise TensorMapError("TensorMap box=None: expected the box shape, one size per dimension")
    box = _ints(box, "box", rank)
    estr = _ints(element_strides if element_strides is not None else (1,) * rank, "element_strides", rank)
    swizzle = _choice(swizzle, "swizzle", SWIZZLES)
    interleave = _choice(interleave, "interleave", INTERLEAVES)
    l2_promotion = _choice(l2_promotion, "l2_promotion", L2_PROMOTIONS)
    oob_fill = _choice(oob_fill, "oob_fill", OOB_FILLS)
    data_type = _tma_type(dtype)

    align = 32 if interleave == 32 else 16
    if type(ptr) is not int or ptr <= 0 or ptr % align:
        raise TensorMapError(f"TensorMap global address {ptr!r}: expected a nonzero device address that is "
                             f"a multiple of {align} bytes")
    for i, d in enumerate(shape):
        if not 1 <= d <= 2**32:
            raise TensorMapError(f"TensorMap shape[{i}]={d}: expected 1 to 2**32 elements")
    if strides[-1] != item:
        raise TensorMapError(f"TensorMap strides_bytes[-1]={strides[-1]}: expected {item}, the element size "
                             "(the innermost dimension must be contiguous)")
    stride_align = 32 if interleave == 32 else 16
    for i, st in enumerate(strides[:-1]):
        if st <= 0 or st % stride_align or st >= 2**40:
            raise TensorMapError(f"TensorMap strides_bytes[{i}]={st}: expected a positive multiple of "
                                 f"{stride_align} bytes below 2**40")
    for i, b in enumerate(box):
        if not 1 <= b <= MAX_BOX:
            raise TensorMapError(f"TensorMap box[{i}]={b}: expected 1 to {MAX_BOX} elements")
    inner_bytes = box[-1] * item
    if inner_bytes % 16:        # documented without interleave; the driver also refuses it interleaved
        raise TensorMapError(f"TensorMap box[-1]={box[-1]}: the innermost box is {inner_bytes} bytes; "
                             "expected a multiple of 16 bytes")
    if interleave is None and swizzle is not None and inner_bytes > swizzle:
        raise TensorMapError(f"TensorMap box[-1]={box[-1]}: the innermost box is {inner_bytes} bytes; expected "
                             f"at most {swizzle} bytes, the swizzle={swizzle} span")
    for i, e in enumerate(estr):
        if not 1 <= e <= MAX_ELEMENT_STRIDE:
            raise TensorMapError(f"TensorMap element_strides[{i}]={e}: expected 1 to {MAX_ELEMENT_STRIDE}")
    box_bytes = item
    for i, (b, e) in enumerate(zip(box, estr)):
        box_bytes *= b if i == rank - 1 and interleave is None else -(-b // e)
    if box_bytes > MAX_BOX_BYTES:
        raise TensorMapError(f"TensorMap box={box}: one box is {box_bytes} bytes; expected at most "
                             f"{MAX_BOX_BYTES}, the most shared memory a block can have")
    if interleave is not None and rank < 3:
        raise TensorMapError(f"TensorMap interleave={interleave}: expected a tensor of rank >= 3 "
                             f"(shape has {rank} dimensions)")
    if interleave == 32 and swizzle != 32:
        raise TensorMapError(f"TensorMap swizzle={swizzle}: expected 32 with interleave=32")
    if oob_fill == "nan" and dtype.kind != "f" and dtype.name != "bfloat16":
        raise TensorMapError(f"TensorMap oob_fill='nan': expected a floating-point dtype, got {dtype}")
    return TiledSpec(ptr, dtype, data_type, shape[::-1], strides[-2::-1], box[::-1], estr[::-1],
                     swizzle, interleave, l2_promotion, oob_fill)


@dataclass(frozen=True)
class TensorMap:
    """An encoded CUtensorMap: ``data`` holds its 128 bytes; ``owner`` keeps the tensor alive."""
    data: bytes
    spec: TiledSpec
    owner: object = field(default=None, compare=False, repr=False)

    SIZE = 128

    @classmethod
    def tiled(cls, array_or_ptr, dtype=None, shape=None, strides_bytes=None, box=None, element_strides=None,
              *, swizzle=None, interleave=None, l2_promotion=None, oob_fill="none") -> "TensorMap":
        """Encode a tiled map over a DeviceArray (or DLPack producer) or a raw address.

        With an array, ``dtype``, ``shape`` and ``strides_bytes`` default to the array's own;
        with an int address, ``dtype`` and ``shape`` are required (strides default to C order).
        """
        owner = array_or_ptr
        if isinstance(array_or_ptr, int) and not isinstance(array_or_ptr, bool):
            ptr = array_or_ptr
            if dtype is None or shape is None:
                raise TensorMapError("TensorMap.tiled(ptr, ...): expected dtype= and shape= with a raw address")
        else:
            arr = array_or_ptr if isinstance(array_or_ptr, DeviceArray) else from_dlpack(array_or_ptr)
            ptr = arr.ptr
            dtype = arr.dtype if dtype is None else dtype
            shape = arr.shape if shape is None else shape
            if strides_bytes is None:
                strides_bytes = tuple(st * arr.itemsize for st in arr.strides)
            owner = arr
        spec = describe_tiled(ptr, dtype, shape, strides_bytes, box, element_strides, swizzle=swizzle,
                              interleave=interleave, l2_promotion=l2_promotion, oob_fill=oob_fill)
        return cls(_encode(spec), spec, owner)

    @property
    def box_bytes(self) -> int:
        """The mbarrier transaction count of one box load (see :attr:`TiledSpec.box_bytes`)."""
        return self.spec.box_bytes

    @property
    def smem_bytes(self) -> int:
        """Shared memory one box occupies, swizzle padding included (see :attr:`TiledSpec.smem_bytes`)."""
        return self.spec.smem_bytes


def _encode(spec: TiledSpec) -> bytes:
    if interpreted():                       # the interpreter's model of the same inputs
        from ..interp.tensormap import encode
        return encode(spec)
    cu = driver()
    rank = len(spec.dims)
    swz = "NONE" if spec.swizzle is None else f"{spec.swizzle}B"
    ilv = "NONE" if spec.interleave is None else f"{spec.interleave}B"
    l2 = "NONE" if spec.l2_promotion is None else f"L2_{spec.l2_promotion}B"
    oob = "NONE" if spec.oob_fill == "none" else "NAN_REQUEST_ZERO_FMA"
    tmap = call("cuTensorMapEncodeTiled",
                getattr(cu.CUtensorMapDataType, "CU_TENSOR_MAP_DATA_TYPE_" + spec.data_type), rank, spec.ptr,
                [cu.cuuint64_t(d) for d in spec.dims],
                [cu.cuuint64_t(s) for s in spec.strides or (0,)],     # rank 1: a valid (unused) array, not NULL
                [cu.cuuint32_t(b) for b in spec.box], [cu.cuuint32_t(e) for e in spec.element_strides],
                getattr(cu.CUtensorMapInterleave, "CU_TENSOR_MAP_INTERLEAVE_" + ilv),
                getattr(cu.CUtensorMapSwizzle, "CU_TENSOR_MAP_SWIZZLE_" + swz),
                getattr(cu.CUtensorMapL2promotion, "CU_TENSOR_MAP_L2_PROMOTION_" + l2),
                getattr(cu.CUtensorMapFloatOOBfill, "CU_TENSOR_MAP_FLOAT_OOB_FILL_" + oob))
    return ctypes.string_at(tmap.getPtr(), TensorMap.SIZE)
