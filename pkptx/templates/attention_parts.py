"""The pieces of the attention kernel that do not depend on its task order: the shared-memory tile
layout of Q, K and V, the masked online softmax on wgmma accumulator fragments, and the P·V product
with P from registers. Each emitting function's docstring shows the PTX it produces; the pure-Python
functions at the end model the index maps and the block schedule so CPU tests can check them.

Shared memory (all written by TMA in 8 KB boxes of 64 rows x 64 16-bit columns, 128-byte swizzle):
- Q of one consumer warpgroup: its 64 rows, one box per 64 head-dim columns (``db``), boxes 8 KB apart.
  The A operand of S = Q·Kᵀ, K-major, exactly the GEMM's A tile (gemm_parts).
- K of one stage: per ``db`` a tile of ``block_k`` rows x 64 columns (the boxes of 64 rows stacked), so
  key row r sits at ``r * 128``: the GEMM's "nk" B tile with N = block_k.
- V of one stage: per 64 keys (``kk``) the ``head_dim / 64`` boxes side by side, 8 KB apart: the GEMM's
  "kn" B tile (N-major, leading offset 8 KB between 64-column boxes, a K step of 16 keys = 2048 bytes);
  wgmma transposes it.

Fragments (PTX ISA 9.7.15.5.1, m64nNk16): accumulator register ``4*c + 2*h + p`` of a thread holds row
``16*warp + lane/4 + 8*h``, column ``8*c + 2*(lane%4) + p`` (:func:`pkptx.primitives.wgmma.fragment_coords`).
The A operand of a k16 step ``t`` in registers: .b32 register ``j`` holds row ``lane/4 + 8*(j%2)``,
columns ``16*t + 8*(j//2) + 2*(lane%4) + {0, 1}`` (low half first). So A register ``j`` of step ``t`` is
the pair of accumulators ``8*t + 2*j`` and ``8*t + 2*j + 1`` of S, packed (:func:`p_operand_pairs`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import PTXBuildError
from ..isa import Builder, Reg, Vec, f32, s32, u32
from ..isa.instruction import locate
from ..primitives.wgmma import advance, fragment_coords, smem_desc

ROWS = 64                 # query rows per consumer warpgroup (one m64 wgmma)
BOX_ROWS = 64             # TMA box rows
BOX_COLS = 64             # TMA box columns: 64 16-bit values = one 128-byte swizzle span
BOX_BYTES = BOX_ROWS * BOX_COLS * 2
K_STEP = 16
SUM_COLS = 8              # O's extra columns that sum P when V gets a box of ones beside it (one n8 step)
NEG_INF = float("-inf")
LN2 = 0.6931471805599453


def q_box_offset(wg: int, db: int, head_dim: int) -> int:
    """Byte offset of Q's box for consumer warpgroup ``wg`` and head-dim columns ``64*db``."""
    return (wg * (head_dim // BOX_COLS) + db) * BOX_BYTES


def k_box_offset(db: int, kk: int, block_k: int) -> int:
    """Byte offset in a K stage of the box of keys ``64*kk..`` and columns ``64*db..``: the boxes of one
    ``db`` stack, so key r of that tile sits at ``k_box_offset(db, 0) + 128*r``."""
    return db * block_k * 128 + kk * BOX_BYTES


def v_box_offset(db: int, kk: int, head_dim: int) -> int:
    """Byte offset in a V stage of the box of keys ``64*kk..`` and columns ``64*db..``: per ``kk`` the
    column boxes side by side, BOX_BYTES apart (the descriptor's leading offset)."""
    return (kk * (head_dim // BOX_COLS) + db) * BOX_BYTES


def quad_reduce(b: Builder, op: str, value: Reg, *, name: str) -> Reg:
    """Combine ``value`` over the 4 lanes of a quad (the lanes holding one accumulator row).

    PTX: ``shfl.sync.bfly.b32 t, v, 1, 31, -1; <op>.f32 v, v, t;`` then the same with 2.
    """
    for delta in (1, 2):
        other = b.shfl("bfly", value, delta, 31, name=f"{name}_lane")
        value = getattr(b, op)(f32, value, other, name=name)
    return value


def tree(b: Builder, op: str, values: list, *, name: str) -> Reg:
    """``op`` (``max`` or ``add``) over ``values`` as a balanced tree of .f32 instructions."""
    values = list(values)
    while len(values) > 1:
        values = [getattr(b, op)(f32, values[i], values[i + 1], name=name) if i + 1 < len(values)
                  else values[i] for i in range(0, len(values), 2)]
    return values[0]


def half_regs(acc, n: int, half: int) -> list:
    """The accumulators of one of a thread's two rows (``half`` 0: lane/4, 1: lane/4 + 8)."""
    return [acc[reg] for reg, row, _ in fragment_coords(n) if row == 8 * half]


def mask_columns(b: Builder, acc, n: int, limits) -> None:
    """Set to -inf every score whose column (within the block, relative to the lane's first column)
    is not below ``limits[half]`` (.s32): the keys past the sequence end or the causal diagonal.

    PTX per accumulator: ``setp.gt.s32 ok, limit, col; selp.f32 s, s, 0fFF800000, ok;``.
    """
    for reg, row, col in fragment_coords(n):
        ok = b.setp("gt", s32, limits[row // 8], col, name="key_ok")
        b.selp(f32, acc[reg], NEG_INF, ok, into=acc[reg])


@dataclass(frozen=True)
class Correction:
    """What one block of the online softmax asks of O: per row (half) the factor 2^(m_old - m) and,
    with a threshold, the warp-uniform predicate ``needed`` (None: always rescale)."""
    factors: list
    needed: Reg | None = None


def online_softmax(b: Builder, s_acc, *, n: int, scale_log2: Reg, row_max, row_sum,
                   threshold: float = 0.0) -> Correction:
    """One block of the online softmax, in place: ``s_acc`` (raw scores) becomes P = 2^(s·c - m),
    ``row_max`` (in scaled log2 units) and the lane's partial ``row_sum`` are updated (the sum is
    completed across the quad only at the end; ``row_sum=None``: P·V sums P, see :func:`pv_block`).
    A row with no unmasked key so far keeps m = -inf and uses 0 in its place, so its P and correction
    are 0, not NaN. O is left alone (a P·V product may still be accumulating into it): the caller
    applies the returned :class:`Correction` with :func:`rescale`.

    ``threshold`` > 0 keeps a stale maximum while no row of the warp has grown by more than it (P then
    stays below 2^threshold, exact in f32 and in P's 16-bit type), so O is rescaled only in the
    blocks where some row's maximum jumps: the first ones. The result is the same softmax; m used for
    P and for the sum always agree, and LSE = m + log2(l) holds for any m.

    PTX per row: a ``max.f32`` tree, :func:`quad_reduce`, ``mul.f32``/``max.f32`` for the candidate
    m, (threshold: ``sub.f32`` and ``setp.gt.f32`` (``.or``) per row, ``vote.sync.any.pred``, ``selp.f32``),
    ``setp.eq.f32``/``selp.f32`` for the -inf guard, ``ex2.approx.ftz.f32`` of ``m_old - m``, then per
    score ``fma.rn.f32 x, s, c, -m; ex2.approx.ftz.f32 s, x;``, an ``add.f32`` tree and ``fma.rn.f32``
    of the sum.
    """
    def candidate(half):
        """The row's running maximum with this block's (scaled) maximum."""
        block_max = quad_reduce(b, "max", tree(b, "max", half_regs(s_acc, n, half), name="blk_max"), name="blk_max")
        return b.max(f32, row_max[half], b.mul(f32, block_max, scale_log2), name="new_max")

    candidates, needed = (None, None), None
    if threshold > 0:
        candidates = [candidate(half) for half in (0, 1)]
        grows = b.setp("gt", f32, b.sub(f32, candidates[0], row_max[0]), threshold, name="max_grows")
        grows = b.setp("gt", f32, b.sub(f32, candidates[1], row_max[1]), threshold, combine="or", c=grows,
                       name="max_grows")
        needed = b.vote("any", grows, name="rescale_needed")
        candidates = [b.selp(f32, m, old, needed, name="new_max") for m, old in zip(candidates, row_max)]
    factors = []
    for half in (0, 1):
        new_max = candidates[half] if threshold > 0 else candidate(half)
        scores = half_regs(s_acc, n, half)
        empty = b.setp("eq", f32, new_max, NEG_INF, name="row_empty")
        base = b.selp(f32, 0.0, new_max, empty, name="max_used")
        factor = b.ex2(f32, b.sub(f32, row_max[half], base), ftz=True, name="corr")
        neg_base = b.neg(f32, base, name="neg_max")
        for s in scores:
            b.ex2(f32, b.fma(f32, s, scale_log2, neg_base, rnd="rn"), ftz=True, into=s)
        if row_sum is not None:
            total = tree(b, "add", scores, name="blk_sum")
            b.fma(f32, row_sum[half], factor, total, rnd="rn", into=row_sum[half])
        b.mov(f32, new_max, into=row_max[half])
        factors.append(factor)
    return Correction(factors, needed)


def rescale(b: Builder, o_acc, d: int, correction: Correction) -> None:
    """O's two rows times their factors, skipped (a warp-uniform branch) when not ``needed``.
    PTX: ``mul.f32 o, o, c;`` per accumulator."""
    def scale():
        for half in (0, 1):
            for o in half_regs(o_acc, d, half):
                b.mul(f32, o, correction.factors[half], into=o)

    if correction.needed is None:
        scale()
        return
    with b.if_then(correction.needed, uniform=True):
        scale()


def p_operand_pairs(n: int):
    """For each k16 step t of P·V and A register j: the accumulator indices (low, high) it packs."""
    return [[(8 * t + 2 * j, 8 * t + 2 * j + 1) for j in range(4)] for t in range(n // K_STEP)]


def p_operand(b: Builder, s_acc, n: int, dtype: str, *, into: list | None = None) -> list:
    """P as wgmma A operands: per k16 step, 4 packed registers (written into ``into``'s when given:
    registers that carry P from one loop iteration to the next).

    PTX per register: ``cvt.rn.<dtype>x2.f32 a, s_high, s_low;`` (the high half is the first source).
    """
    pairs = p_operand_pairs(n)
    if into is None:
        return [Vec(tuple(b.cvt(f"{dtype}x2", f32, s_acc[hi], s_acc[lo], rnd="rn", name="p")
                          for lo, hi in step)) for step in pairs]
    for step, regs in zip(pairs, into):
        for (lo, hi), reg in zip(step, regs.items):
            b.cvt(f"{dtype}x2", f32, s_acc[hi], s_acc[lo], rnd="rn", into=reg)
    return into


def pv_block(b: Builder, o_acc, p_regs: list, v_tile: Reg, *, n: int, d: int, dtype: str,
             ones: Reg | None = None) -> None:
    """O += P·V for one block of ``n`` keys: V's stage tile at ``v_tile`` (see the module docstring).

    ``ones`` (d = 64 only): the shared address of a 64-row box of 16-bit ones. Each descriptor's leading
    offset then reaches from its V box to that box, which serves as V's next 64 columns: the product is
    m64n<d+8>, and O's last SUM_COLS columns accumulate the row sums of P (as rounded for the product),
    rescaled with O, instead of an add tree per block in the softmax.

    PTX: ``wgmma.fence; n/16 x wgmma.mma_async.sync.aligned.m64n<d>k16.f32.<t>.<t> {o}, {p_t},
    descV + 2048*(t%4), 1, 1, 1, 1; wgmma.commit_group;`` (the caller waits).
    """
    if ones is not None and d != BOX_COLS:
        raise locate(PTXBuildError(f"pv_block: the ones box stands for V's second 64 columns, so d must be "
                                   f"{BOX_COLS}, got {d}"))
    b.wgmma_fence()
    for kk in range(n // BOX_ROWS):
        tile = b.add(u32, v_tile, v_box_offset(0, kk, d), name="v_sub") if kk else v_tile
        leading = (v_box_offset(1, 0, d) - v_box_offset(0, 0, d) if ones is None
                   else b.sub(u32, ones, tile, name="to_ones"))
        desc = smem_desc(b, tile, leading_bytes=leading, name="v_desc")
        for step in range(BOX_ROWS // K_STEP):
            b.wgmma(o_acc, p_regs[kk * (BOX_ROWS // K_STEP) + step], advance(b, desc, step * K_STEP * 128),
                    n=d + (SUM_COLS if ones is not None else 0), dtype=f32, atype=dtype, scale_d=1, trans_b=1)
    b.wgmma_commit_group()


# ------------------------------------------------------------------ models of the emitted index maps
def kv_end(first_row: int, rows: int, seq_q: int, seq_k: int, diag: int) -> int:
    """Keys a block of query rows [first_row, first_row + rows) needs: key j is visible to row i when
    ``j < seq_k`` and ``j <= i + diag`` (diag = seq_k - seq_q when causal, seq_k otherwise)."""
    return max(0, min(seq_k, min(first_row + rows, seq_q) + diag))


def key_limit(row: int, seq_k: int, diag: int) -> int:
    """Row ``row`` sees keys ``0 <= j < key_limit`` (possibly none)."""
    return min(seq_k, row + diag + 1)
