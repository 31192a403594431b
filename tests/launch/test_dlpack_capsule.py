"""The hand-built DLPack structs and capsules, checked against numpy (a real DLPack producer and
consumer that works on CPU memory), so no GPU is needed."""
from __future__ import annotations

import gc

import ml_dtypes
import numpy as np
import pytest

from pkptx.launch import dlpack

KDL_CPU = 1


class HostExport:
    """Exports a numpy array's memory through pkptx's capsule code, as a CPU tensor."""

    def __init__(self, arr: np.ndarray, legacy: bool = False):
        self.arr, self.legacy = arr, legacy

    def __dlpack_device__(self):
        return (KDL_CPU, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        versioned = not self.legacy and max_version is not None and max_version[0] >= 1
        strides = tuple(s // self.arr.itemsize for s in self.arr.strides)
        return dlpack.make_capsule(self.arr.ctypes.data, self.arr.shape, strides, self.arr.dtype, 0, self.arr,
                                   versioned=versioned, device_type=KDL_CPU)


@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "int16", "uint8", "float64", "complex64", "bool"])
def test_numpy_consumes_our_capsule(dtype, legacy):
    src = (np.arange(24) % 7).astype(dtype).reshape(4, 6)
    before = len(dlpack._exports)
    producer = HostExport(src, legacy)
    view = np.from_dlpack(producer)
    assert view.ctypes.data == src.ctypes.data and view.dtype == src.dtype
    np.testing.assert_array_equal(view, src)
    assert len(dlpack._exports) == before + 1
    del view
    gc.collect()
    assert len(dlpack._exports) == before          # numpy called our deleter


def test_strided_export():
    base = np.arange(48, dtype=np.float32).reshape(6, 8)
    src = base[::2, 1::3]
    view = np.from_dlpack(HostExport(src))
    np.testing.assert_array_equal(view, src)


@pytest.mark.parametrize("versioned", [True, False])
def test_unconsumed_capsule_frees_its_tensor(versioned):
    before = len(dlpack._exports)
    capsule = HostExport(np.zeros(3)).__dlpack__(max_version=(1, 0) if versioned else None)
    assert len(dlpack._exports) == before + 1
    del capsule
    gc.collect()
    assert len(dlpack._exports) == before


@pytest.mark.parametrize("max_version", [(1, 0), None])
def test_consume_numpy_capsule(max_version):
    src = np.arange(12, dtype=np.int32).reshape(3, 4)[:, 1:]
    capsule = src.__dlpack__(max_version=max_version) if max_version else src.__dlpack__()
    ptr, shape, strides, dtype, dev_type, dev_id, owner = dlpack.consume(capsule, src)
    assert ptr == src.ctypes.data and shape == (3, 3) and dtype == np.int32
    assert strides == (4, 1) and (dev_type, dev_id) == (KDL_CPU, 0)
    with pytest.raises(dlpack.DLPackError, match="not an unused DLPack capsule"):
        dlpack.consume(capsule, src)                 # renamed to used_...: cannot be consumed twice
    del owner
    gc.collect()


def test_data_pointer_leaves_no_export_behind():
    src = np.ones(5)
    assert dlpack.data_pointer(src) == src.ctypes.data


@pytest.mark.parametrize("dtype", [np.float16, np.int64, np.uint32, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
                                   ml_dtypes.float8_e5m2])
def test_dtype_codes_round_trip(dtype):
    assert dlpack.numpy_dtype(*dlpack.dlpack_dtype(np.dtype(dtype))) == np.dtype(dtype)


def test_unknown_dtype_codes():
    with pytest.raises(dlpack.DLPackError, match="lanes=4"):
        dlpack.numpy_dtype(2, 32, 4)
    with pytest.raises(dlpack.DLPackError, match="no DLPack type code"):
        dlpack.dlpack_dtype(np.dtype("datetime64[s]"))
