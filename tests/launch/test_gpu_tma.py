"""TMA round trip on a GPU: tensor-map load of 2-D boxes into shared memory and tensor-map store back
out, over random shapes, boxes, dtypes and swizzles; the copy must be bit-exact.

A failing launch leaves the CUDA context unusable, so every later example fails too and hypothesis
shrinks to the simplest layout: read the first failure, not the reported one."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pkptx.launch import DeviceArray, LoadedKernel, TensorMap, TensorMapError, empty, from_numpy
from tests.launch import kernels as K

pytestmark = pytest.mark.gpu
DTYPES = ["uint8", "float16", "bfloat16", "float32", "float64"]
MAX_TILE = 96 * 1024


@pytest.fixture(scope="module")
def tma_copy(gpu):
    return LoadedKernel.load(K.tma_copy_2d().compile(), gpu)


@st.composite
def layouts(draw):
    dtype = draw(st.sampled_from(DTYPES))
    item = np.dtype(dtype).itemsize
    swizzle = draw(st.sampled_from([None, 32, 64, 128]))
    cols = draw(st.integers(1, 64)) * (16 // item)          # rows stay 16-byte aligned
    rows = draw(st.integers(1, 400))
    widest = min(swizzle or 256 * item, 256 * item)          # innermost box bytes
    box_w = draw(st.integers(1, widest // 16)) * 16 // item
    box_h = draw(st.integers(1, min(256, MAX_TILE // (box_w * item))))
    return dtype, rows, cols, box_h, box_w, swizzle


@settings(max_examples=40, deadline=None)
@given(layout=layouts(), seed=st.integers(0, 2**32 - 1))
@example(layout=("uint8", 1, 16, 1, 16, None), seed=0)
@example(layout=("uint8", 5, 48, 3, 16, 128), seed=0)      # rows narrower than the swizzle span: the tile
@example(layout=("float16", 100, 96, 37, 8, 32), seed=0)   # takes rows x span bytes, not box_bytes (it once
@example(layout=("uint8", 7, 256, 5, 32, 64), seed=0)      # ran past the block's shared memory)
def test_tma_round_trip(tma_copy, layout, seed):
    dtype, rows, cols, box_h, box_w, swizzle = layout
    item = np.dtype(dtype).itemsize
    host = np.random.default_rng(seed).integers(0, 256, rows * cols * item, dtype=np.uint8)
    src = from_numpy(host.view(dtype).reshape(rows, cols))
    dst = empty((rows, cols), dtype)
    DeviceArray.from_pointer(dst.ptr, (dst.nbytes,), "uint8", owner=dst).fill(0xA5)
    load = TensorMap.tiled(src, box=(box_h, box_w), swizzle=swizzle)
    store = TensorMap.tiled(dst, box=(box_h, box_w), swizzle=swizzle)
    assert load.box_bytes == box_h * box_w * item
    assert load.smem_bytes == box_h * max(box_w * item, swizzle or 0)
    grid = (-(-cols // box_w), -(-rows // box_h))
    tma_copy[grid, 32, load.smem_bytes + K.TILE_SLACK](load, store, box_w, box_h, load.box_bytes)
    got = dst.to_numpy().view(np.uint8).reshape(-1)
    mismatch = np.flatnonzero(got != host)
    assert mismatch.size == 0, f"{mismatch.size} bytes differ, first at byte {mismatch[:4]}"


def test_tensor_map_errors_name_the_argument(gpu):
    arr = empty((64, 64), "float32")
    with pytest.raises(TensorMapError, match=r"box\[-1\]=64: the innermost box is 256 bytes; expected at most 128"):
        TensorMap.tiled(arr, box=(8, 64), swizzle=128)
    with pytest.raises(TensorMapError, match=r"box\[0\]=300"):
        TensorMap.tiled(arr, box=(300, 16))
    view = DeviceArray.from_pointer(arr.ptr + 4, (63, 63), "float32", strides=(64, 1), owner=arr)
    with pytest.raises(TensorMapError, match="global address"):
        TensorMap.tiled(view, box=(8, 16))


def test_tensor_map_over_a_raw_pointer(gpu):
    arr = from_numpy(np.arange(32 * 48, dtype=np.float32).reshape(32, 48))
    tmap = TensorMap.tiled(arr.ptr, "float32", (32, 48), box=(8, 16))
    assert len(tmap.data) == 128 and tmap.spec.dims == (48, 32) and tmap.spec.strides == (192,)
