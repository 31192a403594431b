"""DeviceArray.fill_bits (a raw bit pattern per element) and fill (a value), over the fake driver
whose device memory is host memory, checked against numpy; argument errors need no driver at all."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.launch.mpi_programs.fake_cuda import FakeDriver
from pkptx.launch import ArrayError, DeviceArray

DTYPES = [np.uint8, np.int8, np.bool_, np.float16, ml_dtypes.bfloat16, np.int16, np.float32, np.int32, np.uint32,
          np.float64, np.int64, np.complex64, np.complex128, ml_dtypes.float8_e4m3fn]
UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@pytest.fixture(scope="module")
def fake():
    driver = FakeDriver().install()
    yield driver
    driver.uninstall()


def on_host(shape, dtype, offset: int = 0):
    """(host bytes, a DeviceArray over them at byte ``offset``): the fake's device memory is host memory."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape))
    store = np.full(n * dtype.itemsize + offset + 16, 0xA5, np.uint8)
    return store, DeviceArray.from_pointer(store.ctypes.data + offset, shape, dtype)


def expected_bits(pattern: int, dtype, n: int) -> bytes:
    """numpy's reference: the pattern as an unsigned int of the element width, stored n times."""
    itemsize = np.dtype(dtype).itemsize
    words = max(itemsize // 8, 1)
    mask = (1 << (8 * itemsize)) - 1
    chunks = [(pattern & mask) >> (64 * i) & ((1 << 64) - 1) for i in range(words)]
    element = np.array(chunks, UNSIGNED[min(itemsize, 8)]).tobytes()
    return element * n


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(DTYPES), st.integers(0, 40), st.sampled_from([0, 1, 2, 4]), st.data())
@example(np.float32, 5, 0, None).via("0x3F800000: 1.0f, not periodic below 4 bytes")
def test_fill_bits_writes_the_pattern_and_nothing_else(fake, dtype, n, offset, data):
    bits = 8 * np.dtype(dtype).itemsize
    pattern = 0x3F800000 if data is None else data.draw(st.integers(-(1 << (bits - 1)), (1 << bits) - 1))
    store, arr = on_host((n,), dtype, offset)
    arr.fill_bits(pattern)
    size = n * np.dtype(dtype).itemsize
    assert store[offset:offset + size].tobytes() == expected_bits(pattern, dtype, n)
    assert (store[:offset] == 0xA5).all() and (store[offset + size:] == 0xA5).all()


def test_fill_bits_is_not_fill(fake):
    store, arr = on_host((3,), np.float32)
    arr.fill_bits(1)
    assert store[:12].view(np.uint32).tolist() == [1, 1, 1]          # the smallest subnormal
    arr.fill(1)
    assert store[:12].view(np.float32).tolist() == [1.0, 1.0, 1.0]
    half = on_host((2, 2), ml_dtypes.bfloat16)
    half[1].fill_bits(0x7FC0)
    assert np.isnan(half[0][:8].view(ml_dtypes.bfloat16)).all()


@given(st.sampled_from(DTYPES), st.floats(allow_nan=False, width=16))
def test_fill_writes_the_value_as_numpy_converts_it(fake, dtype, value):
    store, arr = on_host((7,), dtype, 2)
    try:
        reference = np.repeat(np.array(value, dtype), 7)      # numpy's scalar conversion, 7 times
    except (OverflowError, ValueError):
        with pytest.raises(ArrayError, match="not representable"):
            arr.fill(value)
        return
    arr.fill(value)
    assert store[2:2 + reference.nbytes].tobytes() == reference.tobytes()


@pytest.mark.parametrize("dtype,bad,match", [
    (np.uint8, 256, r"pattern=0x100\): expected an int in \[-128, 0xff\], a bit pattern of 8 bits"),
    (np.int16, -(1 << 15) - 1, r"expected an int in \[-32768, 0xffff\]"),
    (np.float32, 1 << 32, r"of 32 bits \(the width of float32\)"),
    (np.float32, 1.0, r"pattern=1.0\): expected an int bit pattern of 32 bits"),
    (np.float64, True, r"pattern=True\): expected an int bit pattern of 64 bits"),
    (np.float16, "0x1", r"expected an int bit pattern of 16 bits"),
])
def test_bad_patterns_are_refused_before_any_driver_call(dtype, bad, match):
    arr = DeviceArray.from_pointer(0x1000, (4,), dtype)     # never dereferenced: no driver is installed
    with pytest.raises(ArrayError, match=match):
        arr.fill_bits(bad)


def test_strided_arrays_are_refused():
    arr = DeviceArray.from_pointer(0x1000, (4, 4), np.float32, strides=(8, 2))
    with pytest.raises(ArrayError, match=r"fill_bits: the array has strides \(8, 2\)"):
        arr.fill_bits(0)
