"""Tensor-map validation (no driver): random requests against a pure-Python model of the rules."""
from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pkptx.launch import TensorMapError, describe_tiled
from pkptx.launch import tensormap

DTYPES = ["uint8", "int8", "float16", "bfloat16", "float32", "int32", "float64", "int64", "float8_e4m3fn"]


def model(ptr, dtype, shape, strides, box, estr, swizzle, interleave, oob) -> list[str]:
    """The arguments a request gets wrong, as the regexes naming them in the error."""
    item = np.dtype(dtype).itemsize
    rank = len(shape)
    bad = []
    if not 1 <= rank <= 5:
        return [r"shape="]
    align = 32 if interleave == 32 else 16
    if ptr <= 0 or ptr % align:
        bad.append(r"global address")
    bad += [rf"shape\[{i}\]" for i, d in enumerate(shape) if not 1 <= d <= 2**32]
    if strides[-1] != item:
        bad.append(r"strides_bytes\[-1\]")
    bad += [rf"strides_bytes\[{i}\]" for i, s in enumerate(strides[:-1]) if s <= 0 or s % align or s >= 2**40]
    bad += [rf"box\[{i}\]" for i, b in enumerate(box) if not 1 <= b <= 256]
    inner = box[-1] * item
    if inner % 16 or (interleave is None and swizzle and inner > swizzle):
        bad.append(r"box\[-1\]")
    bad += [rf"element_strides\[{i}\]" for i, e in enumerate(estr) if not 1 <= e <= 8]
    if all(1 <= e <= 8 for e in estr):
        counts = [b if i == rank - 1 and interleave is None else -(-b // e) for i, (b, e) in enumerate(zip(box, estr))]
        if item * int(np.prod(counts, dtype=np.int64)) > 232448:
            bad.append(r"box=")
    if interleave is not None and rank < 3:
        bad.append(r"interleave=")
    if interleave == 32 and swizzle != 32:
        bad.append(r"swizzle=")
    if oob == "nan" and dtype not in ("float16", "bfloat16", "float32", "float64"):
        bad.append(r"oob_fill=")
    return bad


@st.composite
def requests(draw):
    dtype = draw(st.sampled_from(DTYPES))
    item = np.dtype(dtype).itemsize
    rank = draw(st.integers(1, 5))
    shape = draw(st.lists(st.integers(1, 5000 if rank <= 2 else 300), min_size=rank, max_size=rank))
    # mostly-legal strides: padded rows rounded to 16 bytes, sometimes broken
    strides, step = [item], item * shape[-1]
    for d in reversed(shape[:-1]):
        step = -(-step // 16) * 16 + draw(st.sampled_from([0, 0, 0, 0, 16, 8]))
        strides.insert(0, step)
        step *= d
    if draw(st.integers(0, 3)) == 3:          # hypothesis favours 0: keep the simple case legal
        strides[-1] = draw(st.sampled_from([item * 2, 0]))
    sizes = st.sampled_from([16, 32, 64, 128]) if not draw(st.booleans()) else st.sampled_from([1, 2, 8, 100, 256, 257])
    box = draw(st.lists(sizes, min_size=rank, max_size=rank))
    estr = [1] * rank if not draw(st.booleans()) else draw(st.lists(st.integers(0, 9), min_size=rank, max_size=rank))
    swizzle = draw(st.sampled_from([None, None, 32, 64, 128]))
    interleave = draw(st.sampled_from([None, None, None, 16, 32]))
    oob = draw(st.sampled_from(["none", "nan"]))
    ptr = draw(st.sampled_from([0x7F0000000000, 0x7F0000000010, 0x7F0000000020, 0x7F0000000000, 0x7F0000000008, 0]))
    return ptr, dtype, tuple(shape), tuple(strides), tuple(box), tuple(estr), swizzle, interleave, oob


@given(requests())
@example((0x10000, "float32", (64, 64), (256, 4), (16, 64), (1, 1), 128, None, "none"))   # 256 B > 128 B swizzle
@example((0x10000, "float32", (4, 8, 16), (512, 64, 4), (2, 4, 1), (1, 1, 1), None, 16, "none"))  # the H200 driver
@example((0x10000, "float32", (256, 256), (1024, 4), (256, 256), (1, 1), None, None, "none"))     # refuses both
def test_validation_matches_model(req):
    ptr, dtype, shape, strides, box, estr, swizzle, interleave, oob = req
    bad = model(*req)
    call = lambda: describe_tiled(ptr, dtype, shape, strides, box, estr, swizzle=swizzle,  # noqa: E731
                                  interleave=interleave, l2_promotion=None, oob_fill=oob)
    if not bad:
        spec = call()
        assert spec.dims == shape[::-1] and spec.box == box[::-1] and spec.element_strides == estr[::-1]
        assert spec.strides == strides[:-1][::-1]
        return
    with pytest.raises(TensorMapError) as info:
        call()
    message = str(info.value)
    assert any(re.search(rf"TensorMap {rx}", message) for rx in bad), (message, bad)


def test_defaults_are_c_order():
    spec = describe_tiled(0x1000, "bfloat16", (3, 40, 64), box=(1, 8, 64))
    assert spec.dims == (64, 40, 3)
    assert spec.strides == (128, 40 * 128)
    assert spec.data_type == "BFLOAT16" and spec.box_bytes == 8 * 64 * 2


def test_box_bytes_ignore_innermost_element_stride():
    spec = describe_tiled(0x1000, "float32", (64, 64), box=(16, 8), element_strides=(2, 4))
    assert spec.box_bytes == 8 * 4 * (16 // 2)


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(swizzle=48), "swizzle=48: expected one of None, 32, 64, 128"),
    (dict(interleave=8), "interleave=8"),
    (dict(l2_promotion=512), "l2_promotion=512"),
    (dict(oob_fill="zero"), "oob_fill='zero'"),
    (dict(box=(16,)), r"box=\(16,\): expected 2 values"),
    (dict(box=None), "box=None"),
    (dict(element_strides=(1, 1, 1)), "element_strides"),
    (dict(dtype="complex64"), "dtype=complex64"),
])
def test_argument_errors(kwargs, fragment):
    args = dict(ptr=0x1000, dtype="float32", shape=(64, 64), box=(16, 16))
    args.update(kwargs)
    with pytest.raises(TensorMapError, match=fragment):
        describe_tiled(args.pop("ptr"), args.pop("dtype"), args.pop("shape"), box=args.pop("box"), **args)


def test_swizzle_zero_means_none():
    assert describe_tiled(0x1000, "float32", (64, 64), box=(16, 64), swizzle=0).swizzle is None


@pytest.mark.parametrize("dtype, box, swizzle, smem", [
    ("float32", (8, 16), None, 8 * 16 * 4),
    ("bfloat16", (8, 64), 128, 8 * 128),           # rows as wide as the span: no padding
    ("uint8", (3, 16), 128, 3 * 128),              # 16-byte rows, 128-byte pitch (H200: bytes 0..303 written)
    ("float16", (37, 8), 32, 37 * 32),             # H200: bytes 0..1183 written
    ("uint8", (2, 5, 32), 64, 10 * 64),
])
def test_smem_bytes_pad_rows_to_the_swizzle_span(dtype, box, swizzle, smem):
    spec = describe_tiled(0x1000, dtype, (8, 64, 256)[-len(box):], box=box, swizzle=swizzle)
    assert spec.box_bytes == int(np.prod(box)) * np.dtype(dtype).itemsize
    assert spec.smem_bytes == smem


def test_rank_1_maps_pass_a_stride_array(monkeypatch):
    """cuTensorMapEncodeTiled refuses a NULL globalStrides even where rank 1 has no strides to give."""
    seen = {}

    class Map:
        def getPtr(self):
            return ctypes.addressof(buf)

    buf = ctypes.create_string_buffer(128)

    def fake_call(name, *args):
        seen[name] = args
        return Map()
    monkeypatch.setattr(tensormap, "call", fake_call)
    tensormap._encode(describe_tiled(0x1000, "float32", (1000,), box=(16,)))
    strides = seen["cuTensorMapEncodeTiled"][4]
    assert len(strides) == 1

