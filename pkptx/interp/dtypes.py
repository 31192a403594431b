"""PTX types as numpy dtypes: registers keep raw bits (bool / uint8..uint64); an instruction views them
as its own type (``s32`` -> int32, ``bf16`` -> ml_dtypes.bfloat16, ...)."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..isa.types import PtxType

_BY_NAME = {
    "pred": np.bool_, "b8": np.uint8, "u8": np.uint8, "s8": np.int8,
    "b16": np.uint16, "u16": np.uint16, "s16": np.int16, "f16": np.float16, "bf16": ml_dtypes.bfloat16,
    "b32": np.uint32, "u32": np.uint32, "s32": np.int32, "f32": np.float32, "tf32": np.float32,
    "f16x2": np.uint32, "bf16x2": np.uint32,
    "b64": np.uint64, "u64": np.uint64, "s64": np.int64, "f64": np.float64,
    "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2,
}
_STORAGE = {1: np.bool_, 8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
_SIGNED = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}
HALVES = {"f16x2": np.float16, "bf16x2": ml_dtypes.bfloat16}


def np_dtype(ty: PtxType | str):
    return np.dtype(_BY_NAME[ty if isinstance(ty, str) else ty.name])


def storage(bits: int):
    """The raw-bits dtype of a register ``bits`` wide."""
    return np.dtype(_STORAGE[bits])


def signed(bits: int):
    return np.dtype(_SIGNED[bits])


def to_storage(value: np.ndarray, ty: PtxType, reg_bits: int) -> np.ndarray:
    """``value`` (dtype of ``ty``) as the raw bits of a ``reg_bits`` register: a view when the widths
    match; zero- or sign-extended (``s`` types) when the register is wider (``ld.s8`` into a .s32)."""
    if ty.bits == reg_bits:
        return value.view(_STORAGE[reg_bits]) if value.dtype != np.bool_ else value
    raw = value.view(_STORAGE[ty.bits])
    if ty.kind == "s":
        return raw.view(_SIGNED[ty.bits]).astype(_SIGNED[reg_bits]).view(_STORAGE[reg_bits])
    return raw.astype(_STORAGE[reg_bits])


def from_storage(raw: np.ndarray, ty: PtxType) -> np.ndarray:
    """Raw register bits viewed as ``ty``; a wider register is truncated to ``ty``'s width."""
    want = _STORAGE.get(ty.bits, np.uint64)
    if raw.dtype.itemsize * 8 != ty.bits and raw.dtype != np.bool_:
        raw = raw.view(_STORAGE[raw.dtype.itemsize * 8]).astype(want)
    return raw.view(_BY_NAME[ty.name]) if ty.bits > 1 else raw


def split_halves(raw32: np.ndarray, ty: PtxType) -> tuple[np.ndarray, np.ndarray]:
    """A packed .f16x2/.bf16x2 register as (low, high) halves of the element type."""
    pair = raw32.view(np.uint16).reshape(-1, 2)
    half = HALVES[ty.name]
    return pair[:, 0].view(half), pair[:, 1].view(half)


def join_halves(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    pair = np.stack([lo.view(np.uint16), hi.view(np.uint16)], axis=1)
    return np.ascontiguousarray(pair).view(np.uint32).reshape(-1)
