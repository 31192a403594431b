"""Register moves and address conversions (PTX ISA 9.7.9.1, 9.7.9.7, 9.7.9.20-23)."""
from __future__ import annotations

import numpy as np

from ..isa.types import ptx_type
from .dtypes import np_dtype, storage
from .memory import SHARED_BASE, SHARED_STRIDE
from .ops_memory import GENERIC_SHARED
from .operands import LANES, reader, writer
from .errors import UnsupportedError


def mov(op, prog):
    """``mov d, a``; ``mov.bN d, {a, b, ..}`` packs; ``mov.bN {a, b, ..}, d`` unpacks (low part first)."""
    ty = op.type(0)
    dst, src = op.operands
    if src.kind == "vec":
        part = ptx_type(f"b{ty.bits // len(src.items)}")
        reads = [reader(item, part) for item in src.items]
        write = writer(dst, ty)
        dt = np_dtype(ty)
        return lambda w, mask: write(w, np.stack([r(w) for r in reads], axis=1).copy().view(dt).reshape(-1), mask)
    if dst.kind == "vec":
        part = ptx_type(f"b{ty.bits // len(dst.items)}")
        read = reader(src, ty)
        writes = [writer(item, part) for item in dst.items]
        pdt = storage(part.bits)

        def unpack(w, mask):
            parts = read(w).copy().view(pdt).reshape(LANES, -1)
            for i, write in enumerate(writes):
                write(w, np.ascontiguousarray(parts[:, i]), mask)
        return unpack
    read, write = reader(src, ty), writer(dst, ty)
    return lambda w, mask: write(w, read(w), mask)


def cvta(op, prog):
    ty = op.type(0)
    space, to = op.mods["space"], bool(op.mods.get("to"))
    read, write = reader(op.operands[1], ty), writer(op.operands[0], ty)
    if space in ("global", "param", "const"):
        return lambda w, mask: write(w, read(w), mask)
    if space.startswith("shared"):
        base = np.uint64(GENERIC_SHARED)
        if to:
            return lambda w, mask: write(w, read(w) - base, mask)
        return lambda w, mask: write(w, read(w) + base, mask)
    raise UnsupportedError(f"cvta .{space} is not modelled")


def prmt(op, prog):
    if op.mods.get("mode"):
        raise UnsupportedError(f"prmt .{op.mods['mode']} is not modelled")
    a, b, c = (reader(o, "b32") for o in op.operands[1:])
    write = writer(op.operands[0], "b32")

    def run(w, mask):
        pool = np.stack([a(w), b(w)], axis=1).copy().view(np.uint8).reshape(LANES, 8)
        sel = c(w)
        out = np.zeros(LANES, np.uint32)
        for i in range(4):
            nib = (sel >> np.uint32(4 * i)) & np.uint32(0xF)
            byte = pool[np.arange(LANES), (nib & 7).astype(np.int64)].astype(np.uint32)
            byte = np.where(nib & 8, np.where(byte & 0x80, 0xFF, 0), byte).astype(np.uint32)
            out |= byte << np.uint32(8 * i)
        write(w, out, mask)
    return run


def mapa(op, prog):
    """The same shared offset in CTA ``rank`` of the cluster."""
    ty = op.type(0)
    read, rank, write = reader(op.operands[1], ty), reader(op.operands[2], "u32"), writer(op.operands[0], ty)
    stride, base = np.uint64(SHARED_STRIDE), np.uint64(SHARED_BASE)

    def run(w, mask):
        a = read(w).astype(np.uint64)
        offset = a % stride                 # a shared::cta or shared::cluster address
        write(w, (base + rank(w).astype(np.uint64) * stride + offset).astype(np_dtype(ty)), mask)
    return run


def getctarank(op, prog):
    read, write = reader(op.operands[1], op.type(0)), writer(op.operands[0], "u32")
    return lambda w, mask: write(w, ((w.cta.resolve(read(w)) - np.uint64(SHARED_BASE)) //
                                     np.uint64(SHARED_STRIDE)).astype(np.uint32), mask)


def createpolicy(op, prog):
    write = writer(op.operands[0], "b64")
    zero = np.zeros(LANES, np.uint64)
    return lambda w, mask: write(w, zero, mask)


TABLE = {"mov": mov, "cvta": cvta, "prmt": prmt, "mapa": mapa, "getctarank": getctarank,
         "createpolicy": createpolicy}
