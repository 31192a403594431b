"""Cross-rank reduction of 16-byte vectors: ``reduce`` (result into the local copy) and ``all_reduce``
(result into every copy), each in a multimem form and a unicast form that gives the same result.

Sums accumulate in f32 for 16-bit types in both forms (``.acc::f32`` on multimem), rounded once.
"""
from __future__ import annotations

from ..errors import PTXBuildError
from ..isa import Builder, Imm, Reg, Vec, address, b16, b32, bf16, bf16x2, f16, f16x2, f32, ptx_type, u64
from .layout import BoundLayout

_OPS = {"sum": "add", "add": "add", "max": "max", "min": "min"}
_IDENTITY = {"add": 0.0, "max": float("-inf"), "min": float("inf")}
_PAIR = {"bf16": bf16x2, "f16": f16x2}


def _op(op) -> str:
    key = str(getattr(op, "value", op))
    if key not in _OPS:
        raise PTXBuildError(f"reduce op must be one of sum/max/min, got {op!r}")
    return _OPS[key]


def _to_f32(b: Builder, words: Vec, ty) -> list[Reg]:
    """The f32 values packed in 4 .b32 words (8 for 16-bit types: low half first)."""
    if ty is f32:
        return [b.mov(f32, w) for w in words]
    out = []
    for w in words:
        lo, hi = b.unpack(b16, w, 2, name="half")
        out += [b.cvt(f32, ty, lo), b.cvt(f32, ty, hi)]
    return out


def _from_f32(b: Builder, values: list[Reg], ty) -> Vec:
    if ty is f32:
        return Vec(tuple(b.mov(b32, v) for v in values))
    pair = _PAIR[ty.name]
    return Vec(tuple(b.cvt(pair, f32, values[i + 1], values[i], rnd="rn") for i in range(0, len(values), 2)))


def unicast_reduce(b: Builder, data: BoundLayout, offset: Reg, *, ty, op, world: Reg, rank: Reg,
                   write_all: bool, dst: BoundLayout | None = None) -> Vec:
    """Reduce the 16 bytes at ``offset`` over every rank with peer loads, in f32.

    PTX per rank r: ``ld.global.nc.u64 base, [peers + 8r]; ld.global.v4.b32 {..}, [base + off];``
    then (16-bit types) ``mov.b32 {lo, hi}, w; cvt.f32.bf16 ...``, ``add|max|min.f32``; finally
    ``cvt.rn.bf16x2.f32`` and ``st.global.v4.b32`` into the local copy or every copy. The caller owes
    the ordering: a barrier (acquire) before, so peers' data is complete, and one after ``write_all``
    before anyone reads the result. ``dst`` (default ``data``) receives the result: out of place.
    """
    dst = dst or data
    ty, kind = ptx_type(ty), _op(op)
    lanes = 4 if ty is f32 else 8
    acc = [b.mov(f32, Imm(_IDENTITY[kind], f32), name="acc") for _ in range(lanes)]
    for r in b.range(0, world, name="src"):
        words = b.ld(b32, address(b.add(u64, data.peer(b, r), offset)), space="global", vec=4, name="w")
        for a, x in zip(acc, _to_f32(b, words, ty)):
            getattr(b, kind)(f32, a, x, into=a)
    result = _from_f32(b, acc, ty)
    if write_all:
        for r in b.range(0, world, name="dst"):
            b.st(b32, address(b.add(u64, dst.peer(b, r), offset)), result, space="global")
    else:
        b.st(b32, address(b.add(u64, dst.peer(b, rank), offset)), result, space="global")
    return result


def multimem_reduce(b: Builder, data: BoundLayout, offset: Reg, *, ty, op, rank: Reg, write_all: bool,
                    dst: BoundLayout | None = None) -> Vec:
    """Reduce the 16 bytes at ``offset`` over every rank in the switch.

    PTX: ``multimem.ld_reduce.relaxed.sys.global.<op>{.acc::f32}.v4.<bf16x2|f16x2|f32> {..}, [mc + off];``
    then ``multimem.st.relaxed.sys.global.v4.<ty> [mc + off], {..}`` (``write_all``) or
    ``st.global.v4.b32 [local + off], {..}``. Reads through the multicast address and later accesses
    through the unicast one need ``fence.proxy.alias`` between them (the caller's). ``dst`` (default
    ``data``) receives the result.
    """
    dst = dst or data
    ty, kind = ptx_type(ty), _op(op)
    vec_ty = f32 if ty is f32 else _PAIR[ty.name]
    mc = address(b.add(u64, data.mc, offset))
    values = b.multimem_ld_reduce(kind, vec_ty, mc, sem="relaxed", scope="sys", vec=4,
                                  acc_f32=kind == "add" and ty is not f32)
    if write_all:
        b.multimem_st(vec_ty, address(b.add(u64, dst.mc, offset)), values, sem="relaxed", scope="sys")
    else:
        b.st(b32, address(b.add(u64, dst.peer(b, rank), offset)), values, space="global")
    return values


def reduce_vector(b: Builder, data: BoundLayout, offset: Reg, *, ty, op, world: Reg, rank: Reg,
                  write_all: bool, multicast: bool, dst: BoundLayout | None = None) -> Vec:
    """Primitive 3 (``write_all=False``) and 4 (``write_all=True``) for one 16-byte vector; multimem
    when ``multicast`` and the switch can do the op (it has no f32 min/max), else the unicast fallback."""
    if ty not in (bf16, f16, f32) and ptx_type(ty) not in (bf16, f16, f32):
        raise PTXBuildError(f"reduce_vector: ty must be bf16, f16 or f32, got {ty!r}")
    if multicast and not (ptx_type(ty) is f32 and _op(op) != "add"):
        return multimem_reduce(b, data, offset, ty=ty, op=op, rank=rank, write_all=write_all, dst=dst)
    return unicast_reduce(b, data, offset, ty=ty, op=op, world=world, rank=rank, write_all=write_all, dst=dst)
