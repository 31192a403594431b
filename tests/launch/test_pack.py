"""Argument packing, read back the way the driver reads it: through the void* array."""
from __future__ import annotations

import ctypes
import re
import struct
import threading

import ml_dtypes
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pkptx.errors import LaunchError, PkptxError
from pkptx.isa import types as T
from pkptx.isa.values import Param
from pkptx.launch import DeviceArray, Packer, TensorMap, describe_tiled, dlpack

INT_TYPES = [T.u8, T.u16, T.u32, T.u64, T.s8, T.s16, T.s32, T.s64, T.b8, T.b16, T.b32, T.b64]
CODES = {8: "B", 16: "H", 32: "I", 64: "Q"}


def int_range(ty) -> tuple[int, int]:
    if ty.kind == "u":
        return 0, (1 << ty.bits) - 1
    if ty.kind == "s":
        return -(1 << (ty.bits - 1)), (1 << (ty.bits - 1)) - 1
    return -(1 << (ty.bits - 1)), (1 << ty.bits) - 1       # .b: signed or unsigned


def read_back(packer: Packer, address: int) -> list[bytes]:
    """What the driver copies: params[i] points at size_i bytes."""
    ptrs = (ctypes.c_void_p * len(packer.params)).from_address(address)
    return [ctypes.string_at(ptrs[i], p.size) for i, p in enumerate(packer.params)]


@st.composite
def int_params_and_values(draw):
    types = draw(st.lists(st.sampled_from(INT_TYPES), min_size=1, max_size=8))
    params = [Param(f"p{i}", t) for i, t in enumerate(types)]
    values = [draw(st.integers(*int_range(t))) for t in types]
    return params, values


@given(int_params_and_values())
def test_ints_round_trip(case):
    params, values = case
    packer = Packer(params, "k")
    raw = read_back(packer, packer.pack(values))
    for p, v, b in zip(params, values, raw):
        assert int.from_bytes(b, "little") == v & ((1 << p.type.bits) - 1)


@given(int_params_and_values(), st.data())
def test_out_of_range_int_names_the_param(case, data):
    params, values = case
    i = data.draw(st.integers(0, len(params) - 1))
    lo, hi = int_range(params[i].type)
    values[i] = data.draw(st.sampled_from([lo - 1, hi + 1, hi + 2**70]))
    with pytest.raises(LaunchError, match=rf"argument {i} 'p{i}' \(\.{params[i].type.name}\).*expected an int in \[{lo}, {hi}\]"):
        Packer(params, "k").pack(values)


def test_float_params_are_not_ints():
    packer = Packer([Param("n", T.u32)], "k")
    with pytest.raises(LaunchError, match="argument 0 'n'"):
        packer.pack([1.5])


@given(st.floats(allow_nan=False, width=32), st.floats(allow_nan=False), st.floats(allow_nan=False, width=16))
def test_floats_round_trip(f32, f64, f16):
    params = [Param("a", T.f32), Param("b", T.f64), Param("c", T.f16), Param("d", T.bf16)]
    packer = Packer(params, "k")
    raw = read_back(packer, packer.pack([f32, f64, f16, f16]))     # f16 values all fit bf16's range
    assert struct.unpack("<f", raw[0])[0] == f32
    assert struct.unpack("<d", raw[1])[0] == f64
    assert struct.unpack("<e", raw[2])[0] == f16
    assert raw[3] == np.array(f16, ml_dtypes.bfloat16).tobytes()


def test_f32_overflow_and_strings_are_labelled():
    packer = Packer([Param("x", T.f32)], "scale")
    for bad in (1e300, "1.0", None):
        with pytest.raises(LaunchError, match=r"kernel 'scale': argument 0 'x' \(\.f32\)"):
            packer.pack([bad])


class FakeCai:
    def __init__(self, ptr):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": (1,), "typestr": "<f4", "version": 3}


class Export:
    """A DLPack producer of 4 floats at a made-up address on ``device_type`` (never dereferenced)."""

    def __init__(self, ptr: int, device_type: int):
        self.ptr, self.device_type = ptr, device_type

    def __dlpack_device__(self):
        return (self.device_type, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return dlpack.make_capsule(self.ptr, (4,), (1,), np.dtype(np.float32), 0, self,
                                   versioned=max_version is not None, device_type=self.device_type)


def test_pointers_from_arrays_ints_cai_and_cuda_dlpack():
    args = [DeviceArray.from_pointer(0x7000, (2, 2), "float32"), 0x1234500, FakeCai(0xABC000),
            Export(0x5000, dlpack.KDL_CUDA), Export(0x6000, dlpack.KDL_CUDA_MANAGED), 0, 2**64 - 1]
    types = [T.u64, T.u64, T.u64, T.b64, T.u64, T.u64, T.u64]
    packer = Packer([Param(f"p{i}", t, pointer=True) for i, t in enumerate(types)], "k")
    raw = read_back(packer, packer.pack(args))
    assert [int.from_bytes(b, "little") for b in raw] == [0x7000, 0x1234500, 0xABC000, 0x5000, 0x6000, 0, 2**64 - 1]


@pytest.mark.parametrize("host", [np.arange(4, dtype=np.float32), Export(0x5000, dlpack.KDL_CPU),
                                  Export(0x5000, dlpack.KDL_CUDA_HOST)], ids=["numpy", "cpu", "cuda_host"])
def test_host_array_for_a_pointer_is_refused_naming_the_param(host):
    packer = Packer([Param("n", T.u32), Param("x", T.u64, pointer=True)], "scale")
    with pytest.raises(LaunchError, match=r"kernel 'scale': argument 1 'x' \(\.u64\).*expected device memory"
                                          r".*host memory; copy it to the device first"):
        packer.pack([4, host])


@pytest.mark.parametrize("bad", [-1, 2**64, "0x10", 1.0, True, object(), Export(0x5000, 8)])
def test_bad_pointer_is_labelled(bad):
    packer = Packer([Param("n", T.u32), Param("out", T.u64, pointer=True)], "k")
    with pytest.raises(LaunchError, match=r"argument 1 'out' \(\.u64\).*expected device memory: a DeviceArray"):
        packer.pack([1, bad])


@pytest.mark.parametrize("ty", [T.u32, T.s32, T.b32, T.u16, T.f64])
def test_pointer_params_must_be_64_bit(ty):
    with pytest.raises(PkptxError, match=r"pointer=True needs type \.u64 or \.b64"):
        Packer([Param("n", T.u32), Param("p", ty, pointer=True)], "k")


SMALL_FLOATS = {T.bf16: ml_dtypes.bfloat16}      # fp8 kernel parameters do not exist (Param refuses them)


@given(st.sampled_from(sorted(SMALL_FLOATS, key=str)), st.floats(allow_nan=True, allow_infinity=False))
@example(T.bf16, 3.4e38).via("rounds to inf")
def test_small_floats_pack_their_encoding_or_are_out_of_range(ty, value):
    dtype = SMALL_FLOATS[ty]
    packer = Packer([Param("x", ty)], "k")
    encoded = np.array(value, dtype)
    if np.isnan(value) or np.isfinite(encoded):
        assert read_back(packer, packer.pack([value]))[0] == encoded.tobytes()
    else:
        largest = float(ml_dtypes.finfo(dtype).max)
        with pytest.raises(LaunchError, match=rf"argument 0 'x' \(\.{ty.name}\).*finite values up to {re.escape(f'{largest:g}')}"):
            packer.pack([value])


@pytest.mark.parametrize("ty,accepted", [(T.bf16, True), (T.f16, True)])
def test_infinity_only_where_the_format_has_one(ty, accepted):
    packer = Packer([Param("x", ty)], "k")
    if accepted:
        packer.pack([float("-inf")])
    else:
        with pytest.raises(LaunchError, match=rf"argument 0 'x' \(\.{ty.name}\)"):
            packer.pack([float("inf")])


def test_tensor_map_params_are_128_bytes_at_64_byte_alignment():
    params = [Param("n", T.u32), Param("tmap", T.b8, count=128, align=64), Param("m", T.u16)]
    packer = Packer(params, "k")
    assert packer.offsets == (0, 64, 192)
    spec = describe_tiled(0x10000, "float32", (64, 64), None, (16, 16))
    tmap = TensorMap(bytes(range(128)), spec)
    address = packer.pack([7, tmap, 9])
    ptrs = (ctypes.c_void_p * 3).from_address(address)
    assert ptrs[1] % 64 == 0
    assert read_back(packer, address) == [(7).to_bytes(4, "little"), bytes(range(128)), (9).to_bytes(2, "little")]
    assert read_back(packer, packer.pack([7, bytearray(128), 9]))[1] == bytes(128)


@pytest.mark.parametrize("bad", [b"\0" * 127, b"\0" * 129, 5])
def test_wrong_size_bytes_param(bad):
    packer = Packer([Param("tmap", T.b8, count=128, align=64)], "k")
    with pytest.raises(LaunchError, match=r"argument 0 'tmap' \(\.b8\[128\]\).*expected a TensorMap or 128 bytes"):
        packer.pack([bad])


def test_argument_count():
    packer = Packer([Param("x", T.u64, pointer=True), Param("n", T.u32)], "axpy")
    with pytest.raises(LaunchError, match=r"got 1 arguments; expected 2 \(x, n\)"):
        packer.pack([0])


def test_no_params():
    packer = Packer([], "empty")
    assert packer.pack(()) == 0


@given(st.lists(st.sampled_from(INT_TYPES + [T.f32, T.f64, T.f16]), max_size=10))
def test_layout_is_naturally_aligned(types):
    packer = Packer([Param(f"p{i}", t) for i, t in enumerate(types)], "k")
    for off, t in zip(packer.offsets, types):
        assert off % t.bytes == 0
    assert all(a + t.bytes <= b for a, b, t in zip(packer.offsets, packer.offsets[1:], types))


def test_threads_get_their_own_buffers():
    packer = Packer([Param("v", T.u32)], "k")
    seen, both_packed = {}, threading.Barrier(2)

    def worker(v):
        address = packer.pack([v])
        both_packed.wait()          # both threads alive, each with its packed buffer
        seen[v] = (address, read_back(packer, address)[0])
        both_packed.wait()

    threads = [threading.Thread(target=worker, args=(v,)) for v in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen[1][0] != seen[2][0]
    assert [int.from_bytes(seen[v][1], "little") for v in (1, 2)] == [1, 2]


def test_pred_param_rejected_at_construction():
    with pytest.raises(PkptxError, match="cannot be .pred"):
        Packer([Param("p", T.pred)], "k")
