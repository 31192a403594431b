"""Operand access compiled once per instruction: ``reader(operand, ty)`` returns ``f(warp)`` giving the
32 lanes' values as ``ty``; ``writer(operand, ty)`` returns ``f(warp, values, mask)``; ``address``
returns ``f(warp)`` giving 64-bit addresses.

A register holds 32 values of its width in whatever dtype of that width last wrote it (an ``add.f32``
leaves float32, an ``and.b32`` uint32), so a reader of the same type needs no view. Register arrays are
never changed in place, so they may be shared."""
from __future__ import annotations

import struct

import numpy as np

from ..isa.types import PtxType, ptx_type
from .decode import Operand
from .dtypes import from_storage, np_dtype, storage, to_storage
from .errors import UnsupportedError

LANES = 32


def immediate(text: str, ty: PtxType) -> np.ndarray:
    """The 32-lane array of an immediate as ``ty`` (hex floats ``0f``/``0d``, decimal integers wrap)."""
    if text.startswith("0f"):
        value = np.float32(struct.unpack(">f", bytes.fromhex(text[2:]))[0])
    elif text.startswith("0d"):
        value = np.float64(struct.unpack(">d", bytes.fromhex(text[2:]))[0])
    else:
        bits = max(ty.bits, 8) if ty.bits > 1 else 1
        if bits == 1:
            return np.full(LANES, bool(int(text)), np.bool_)
        raw = np.full(LANES, int(text) % (1 << bits), storage(bits))
        return raw.view(np_dtype(ty)) if ty.bits == bits else raw
    return np.full(LANES, value, value.dtype).astype(np_dtype(ty)) if ty.is_float else \
        np.full(LANES, value, value.dtype).view(storage(value.dtype.itemsize * 8))


def reader(op: Operand, ty: PtxType | str):
    ty = ptx_type(ty)
    if op.kind == "reg":
        name = op.name
        if op.type.bits == ty.bits and ty.bits > 1:
            dt = np_dtype(ty)

            def same_width(w):
                value = w.regs[name]
                return value if value.dtype is dt else value.view(dt)
            return same_width
        return lambda w: from_storage(w.regs[name], ty)
    if op.kind == "notreg":
        name = op.name
        return lambda w: ~w.regs[name]
    if op.kind == "imm":
        value = immediate(op.name, ty)
        return lambda w: value
    if op.kind == "special":
        name = op.name
        return lambda w: from_storage(w.special(name), ty)
    if op.kind == "sym":
        name = op.name
        return lambda w: from_storage(w.symbol_address(name), ty)
    raise UnsupportedError(f"operand {op} cannot be read as a .{ty} value")


def writer(op: Operand, ty: PtxType | str):
    ty = ptx_type(ty)
    if op.kind == "sink":
        return lambda w, value, mask: None
    if op.kind != "reg":
        raise UnsupportedError(f"operand {op} cannot be written")
    name, bits, dt = op.name, op.type.bits, np_dtype(ty)

    def write(w, value, mask):
        """``mask`` is the warp's live lanes (the common case, tested by identity) or a lane subset."""
        if value.dtype is not dt:
            value = value.astype(dt)
        raw = value if ty.bits == bits else to_storage(value, ty, bits)
        regs = w.regs
        if mask is w.live:
            regs[name] = raw
            return
        old = regs[name]
        regs[name] = np.where(mask, raw, old if old.dtype is raw.dtype else old.view(raw.dtype))
    return write


def address(op: Operand):
    """``[base + offset]`` -> f(warp) -> uint64 addresses (a 32-bit base is zero-extended)."""
    offset = np.uint64(op.offset % (1 << 64))
    base = op.base
    if base is None:
        value = np.full(LANES, offset, np.uint64)
        return lambda w: value
    if base.kind == "reg":
        name = base.name
        if base.type.bits == 64:
            return lambda w: w.regs[name].view(np.uint64) + offset
        return lambda w: w.regs[name].astype(np.uint64) + offset
    if base.kind == "sym":
        name = base.name
        return lambda w: w.symbol_address(name) + offset
    raise UnsupportedError(f"address base {base} is not a register or symbol")


def vector_items(op: Operand) -> tuple:
    """The operands a value slot stands for: a brace vector's items, or the operand itself."""
    return op.items if op.kind == "vec" else (op,)
