"""Cross-rank reduction of one unit (16 bytes by default): :func:`reduce` (result into the local copy)
and :func:`all_reduce` (result into every copy), each in a multimem form and a unicast form that gives
the same result.

Sums accumulate in f32 for 16-bit types in both forms (``.acc::f32`` on multimem), rounded once. The
unicast form also takes narrower units (8, 4 or 2 bytes: the scalar path for rows whose length is not
a multiple of 16 bytes) and a destination offset different from the source's (reduce-scatter).
"""
from __future__ import annotations

from ..errors import PTXBuildError
from ..isa import Builder, Imm, Reg, Scope, Sem, address, b16, b32, bf16, bf16x2, f16, f16x2, f32, ptx_type, u64
from ..isa.instruction import locate
from .layout import BoundLayout
from .p2p import load_unit, store_unit

_OPS = {"sum": "add", "add": "add", "max": "max", "min": "min"}
_IDENTITY = {"add": 0.0, "max": float("-inf"), "min": float("inf")}
_PAIR = {"bf16": bf16x2, "f16": f16x2}


def _op(op) -> str:
    key = str(op)
    if key not in _OPS:
        raise locate(PTXBuildError(f"reduce op must be one of sum/max/min, got {op!r}"))
    return _OPS[key]


def _to_f32(b: Builder, words, ty) -> list[Reg]:
    """The f32 values in .b32 words (two 16-bit values per word, low half first) or in one .b16 word."""
    if ty is f32:
        return [b.mov(f32, w) for w in words]
    if words[0].type.bits == 16:
        return [b.cvt(f32, ty, words[0])]
    out = []
    for w in words:
        lo, hi = b.unpack(b16, w, 2, name="half")
        out += [b.cvt(f32, ty, lo), b.cvt(f32, ty, hi)]
    return out


def _from_f32(b: Builder, values: list[Reg], ty) -> list[Reg]:
    """The words to store: one per f32, one packed pair per two 16-bit values, or a lone 16-bit value."""
    if ty is f32:
        return [b.mov(b32, v) for v in values]
    if len(values) == 1:
        return [b.cvt(ty, f32, values[0], rnd="rn")]
    pair = _PAIR[ty.name]
    return [b.cvt(pair, f32, values[i + 1], values[i], rnd="rn") for i in range(0, len(values), 2)]


def unicast_reduce(b: Builder, data: BoundLayout, offset, *, ty, op, world: Reg, rank: Reg,
                   write_all: bool, dst: BoundLayout | None = None, dst_offset=None, width: int = 16):
    """Reduce the ``width`` bytes at ``offset`` over every rank with peer loads, in f32.

    PTX per rank r: ``ld.global.nc.u64 base, [peers + 8r]; ld.global.v4.b32 {..}, [base + off];``
    (``.v2.b32``, ``.b32`` or ``.b16`` for 8-, 4- or 2-byte units) then (16-bit types)
    ``mov.b32 {lo, hi}, w; cvt.f32.bf16 ...``, ``add|max|min.f32``; finally ``cvt.rn.bf16x2.f32`` (or
    ``cvt.rn.bf16.f32`` for a lone value) and ``st.global.v4.b32`` into the local copy or every copy.
    The caller owes the ordering: a barrier (acquire) before, so peers' data is complete, and one after
    ``write_all`` before anyone reads the result. ``dst`` (default ``data``) receives the result at
    ``dst_offset`` (default ``offset``): out of place, or another place (reduce-scatter).

    ``offset`` may be a tuple of offsets (distinct units; ``dst_offset`` then a tuple or None): per rank
    every unit's load is issued before any sum, and every store comes after every load, so the loads
    are in flight together (a store between them would have to wait: it might alias). Returns the
    result words (a list per unit for a tuple).
    """
    batch = isinstance(offset, (tuple, list))
    offsets = tuple(offset) if batch else (offset,)
    dst = dst or data
    dst_offsets = offsets if dst_offset is None else (tuple(dst_offset) if batch else (dst_offset,))
    ty, kind = ptx_type(ty), _op(op)
    if width < ty.bits // 8:
        raise locate(PTXBuildError(f"unicast_reduce: a {width}-byte unit cannot hold a .{ty.name} value"))
    accs = [[b.mov(f32, Imm(_IDENTITY[kind], f32), name="acc") for _ in range(8 * width // ty.bits)]
            for _ in offsets]
    for r in b.range(0, world, name="src"):
        base = data.peer(b, r) if batch else None
        words = [load_unit(b, b.add(u64, base if batch else data.peer(b, r), off), width, name="w")
                 for off in offsets]
        for acc, unit in zip(accs, words):
            for a, x in zip(acc, _to_f32(b, unit, ty)):
                getattr(b, kind)(f32, a, x, into=a)
    results = [_from_f32(b, acc, ty) for acc in accs]
    for r in (b.range(0, world, name="dst") if write_all else (rank,)):
        base = dst.peer(b, r) if batch else None
        for result, off in zip(results, dst_offsets):
            store_unit(b, b.add(u64, base if batch else dst.peer(b, r), off), result, width)
    return results if batch else results[0]


def multimem_reduce(b: Builder, data: BoundLayout, offset, *, ty, op, rank: Reg, write_all: bool,
                    dst: BoundLayout | None = None, dst_offset=None):
    """Reduce the 16 bytes at ``offset`` over every rank in the switch.

    PTX: ``multimem.ld_reduce.relaxed.sys.global.<op>{.acc::f32}.v4.<bf16x2|f16x2|f32> {..}, [mc + off];``
    then ``multimem.st.relaxed.sys.global.v4.<ty> [mc + off], {..}`` (``write_all``) or
    ``st.global.v4.b32 [local + off], {..}``. Reads through the multicast address and later accesses
    through the unicast one need ``fence.proxy.alias`` between them (the caller's). ``dst`` (default
    ``data``) receives the result at ``dst_offset`` (default ``offset``). A tuple of offsets issues
    every load before the first store, as in :func:`unicast_reduce`.
    """
    batch = isinstance(offset, (tuple, list))
    offsets = tuple(offset) if batch else (offset,)
    dst = dst or data
    dst_offsets = offsets if dst_offset is None else (tuple(dst_offset) if batch else (dst_offset,))
    ty, kind = ptx_type(ty), _op(op)
    vec_ty = f32 if ty is f32 else _PAIR[ty.name]
    values = [b.multimem_ld_reduce(kind, vec_ty, address(b.add(u64, data.mc, off)), sem=Sem.RELAXED, scope=Scope.SYS,
                                   vec=4, acc_f32=kind == "add" and ty is not f32) for off in offsets]
    for value, off in zip(values, dst_offsets):
        if write_all:
            b.multimem_st(vec_ty, address(b.add(u64, dst.mc, off)), value, sem=Sem.RELAXED, scope=Scope.SYS)
        else:
            b.st(b32, address(b.add(u64, dst.peer(b, rank), off)), value, space="global")
    return values if batch else values[0]


def reduce_vector(b: Builder, data: BoundLayout, offset, *, ty, op, world: Reg, rank: Reg,
                  write_all: bool, multicast: bool, dst: BoundLayout | None = None,
                  dst_offset=None, width: int = 16):
    """Primitive 3 (``write_all=False``) and 4 (``write_all=True``) for one unit of ``width`` bytes
    (or a tuple of units, their loads in flight together); multimem when ``multicast``, the unit is 16
    bytes and the switch can do the op (it has no f32 min/max), else the unicast fallback."""
    if not isinstance(ty, (str, type(f32))) or ptx_type(ty) not in (bf16, f16, f32):
        raise locate(PTXBuildError(f"reduce_vector: ty must be bf16, f16 or f32, got {ty!r}"))
    if multicast and width == 16 and not (ptx_type(ty) is f32 and _op(op) != "add"):
        return multimem_reduce(b, data, offset, ty=ty, op=op, rank=rank, write_all=write_all, dst=dst,
                               dst_offset=dst_offset)
    return unicast_reduce(b, data, offset, ty=ty, op=op, world=world, rank=rank, write_all=write_all, dst=dst,
                          dst_offset=dst_offset, width=width)


def reduce(b: Builder, data: BoundLayout, offset, *, ty, op, world: Reg, rank: Reg, multicast: bool,
           dst: BoundLayout | None = None, dst_offset=None, width: int = 16):
    """Primitive 3: the unit(s) at ``offset`` reduced over every rank, into this rank's copy of ``dst``
    (default ``data``): :func:`reduce_vector` with ``write_all=False``."""
    return reduce_vector(b, data, offset, ty=ty, op=op, world=world, rank=rank, write_all=False,
                         multicast=multicast, dst=dst, dst_offset=dst_offset, width=width)


def all_reduce(b: Builder, data: BoundLayout, offset, *, ty, op, world: Reg, rank: Reg, multicast: bool,
               dst: BoundLayout | None = None, dst_offset=None, width: int = 16):
    """Primitive 4: the unit(s) at ``offset`` reduced over every rank, into every rank's copy of ``dst``
    (default ``data``): :func:`reduce_vector` with ``write_all=True``."""
    return reduce_vector(b, data, offset, ty=ty, op=op, world=world, rank=rank, write_all=True,
                         multicast=multicast, dst=dst, dst_offset=dst_offset, width=width)
