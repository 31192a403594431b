"""The interpreter's tensor map: the 128 parameter bytes of a ``CUtensorMap`` hold the encoder's own inputs
(:class:`pkptx.launch.tensormap.TiledSpec`: address, data type, dims, strides, box, swizzle, OOB fill), so
``cp.async.bulk.tensor`` reads the same geometry the driver would have encoded; and the shared-memory
swizzle that TMA writes and wgmma descriptors read (one function for both).

Layout of the model's 128 bytes: magic u32, rank u8, data-type index u8, swizzle bytes / 16 u8, OOB-NaN
u8, address u64, dims u64[5], strides u64[4], box u16[5] (all innermost first).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ..launch.tensormap import TensorMap, TiledSpec, describe_tiled
from .errors import UnsupportedError

MAGIC = 0x4D544B50            # "PKTM"
_DATA_TYPES = ("UINT8", "UINT16", "UINT32", "INT32", "UINT64", "INT64", "FLOAT16", "FLOAT32", "FLOAT64",
               "BFLOAT16")
_NUMPY = {"FLOAT16": np.float16, "FLOAT32": np.float32, "FLOAT64": np.float64, "BFLOAT16": ml_dtypes.bfloat16,
          "INT32": np.int32, "INT64": np.int64, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
          "UINT64": np.uint64}
_FORMAT = "<IBBBBQ5Q4Q5H"


def encode(spec: TiledSpec) -> bytes:
    """The model's 128 bytes for a checked spec (what ``cuTensorMapEncodeTiled`` is under the interpreter)."""
    if spec.interleave is not None or any(e != 1 for e in spec.element_strides):
        raise UnsupportedError("tensor maps with interleave or element strides other than 1 are not modelled")
    rank = len(spec.dims)
    pad = lambda values, n: tuple(values) + (0,) * (n - len(values))    # noqa: E731
    raw = struct.pack(_FORMAT, MAGIC, rank, _DATA_TYPES.index(spec.data_type), (spec.swizzle or 0) // 16,
                      spec.oob_fill == "nan", spec.ptr, *pad(spec.dims, 5), *pad(spec.strides, 4),
                      *pad(spec.box, 5))
    return raw.ljust(TensorMap.SIZE, b"\0")


def tiled(ptr: int, dtype, shape, box, *, strides_bytes=None, swizzle=None, oob_fill="none") -> TensorMap:
    """A TensorMap over interpreter memory (``ptr`` a fake device address), checked by the driver's rules."""
    spec = describe_tiled(int(ptr), dtype, shape, strides_bytes, box, swizzle=swizzle, oob_fill=oob_fill)
    return TensorMap(encode(spec), spec)


@dataclass(frozen=True)
class Box:
    """A decoded tensor map: the geometry one ``cp.async.bulk.tensor`` needs."""
    ptr: int
    dtype: np.dtype
    dims: tuple
    strides: tuple          # bytes, innermost first, the innermost being the element size
    box: tuple
    swizzle: int
    nan_fill: bool

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.box)) * self.dtype.itemsize

    def elements(self, coords) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(global byte offsets from ``ptr``, in-bounds mask, shared byte offsets from the tile start) of
        every box element, in box order; rows are padded to the swizzle span as TMA lays them out."""
        idx = np.indices(self.box[::-1]).reshape(len(self.box), -1)[::-1]        # innermost first
        pos = idx + np.array(coords, np.int64)[:, None]
        inside = ((pos >= 0) & (pos < np.array(self.dims, np.int64)[:, None])).all(axis=0)
        goff = (pos * np.array(self.strides, np.int64)[:, None]).sum(axis=0)
        item = self.dtype.itemsize
        row_bytes = self.box[0] * item
        pitch = max(self.swizzle, row_bytes) if self.swizzle else row_bytes
        rows = np.arange(idx.shape[1]) // self.box[0]
        soff = rows * pitch + idx[0] * item
        return goff, inside, soff


def decode(raw: np.ndarray, where: str) -> Box:
    """The model bytes back into a Box; anything else (a driver-encoded map) is refused."""
    fields = struct.unpack_from(_FORMAT, raw.tobytes())
    if fields[0] != MAGIC:
        raise UnsupportedError("the tensor-map operand does not hold an interpreter tensor map (build it with "
                               "pkptx.interp.tensormap.tiled, or under PKPTX_INTERPRET=1)", where)
    _, rank, dtype, swizzle, nan, ptr = fields[:6]
    dims, strides, box = fields[6:6 + rank], fields[11:11 + rank - 1], fields[15:15 + rank]
    dt = np.dtype(_NUMPY[_DATA_TYPES[dtype]])
    return Box(ptr, dt, dims, (dt.itemsize,) + strides, box, swizzle * 16, bool(nan))


def swizzle(addrs: np.ndarray, span: int) -> np.ndarray:
    """TMA/wgmma swizzle of shared addresses: the 16-byte unit within a ``span``-byte row is XORed with
    the row's index within its group of 8 rows (``span`` 0: no swizzle)."""
    if not span:
        return addrs
    units = span // 16 - 1
    return addrs ^ (((addrs >> 7) & units) << 4)
