"""The pieces every GEMM-shaped kernel shares (plain GEMM, GEMM+RS, AG+GEMM, GEMM+AR): the grouped
persistent tile order, one k-block of wgmma from a stage, and the epilogue that
stages a warpgroup's accumulators in shared memory (128-byte swizzled 64-row sub-tiles) for TMA.

Shared-memory operand layouts (all written by TMA with 128-byte swizzle):
- A, and B given N x K ("nk"): K-major; a tile is rows of 128 bytes (64 16-bit or 128 fp8 elements),
  8-row groups 1024 bytes apart; a wgmma K step (16 16-bit or 32 fp8 elements) moves the descriptor 32
  bytes.
- B given K x N ("kn"): N-major; the tile is loaded as 64-column boxes of 64 K-rows each (8 KB); the
  descriptor's stride offset is the 1024 bytes between 8-row (K) groups, its leading offset the 8 KB
  between 64-column boxes; a K step of 16 moves it 16 rows (2048 bytes); wgmma transposes B.
"""
from __future__ import annotations

from ..isa import Builder, Reg, Vec, address, b32, f32, u32
from ..primitives.wgmma import advance, smem_desc, warp_quad
from .lcsc import Ctx

TILE_K = 64          # one 128-byte swizzle row of a 16-bit type
K_STEP = 16          # wgmma K for 16-bit inputs
STEP_BYTES = 32      # what one wgmma K step reads of a K-major row: 16 16-bit or 32 fp8 elements
FP8_TYPES = ("e4m3", "e5m2")
BOX_COLS = 64        # N-major B and C sub-tiles: 64 16-bit columns = 128 bytes
SUBTILE_ROWS = 64
NARROW_STEP = 16     # a swapped small-M problem's M rounds up to this (the widths its sweep measured)
N_STEP = 8           # wgmma's N step: the narrowest tile_n and its step
STAGING_BYTES = 16 * 1024   # per consumer warpgroup


def tile_of(ctx: Ctx, task, group_m: int, tiles_m=None):
    """Grouped tile order: ``group_m`` tile rows at a time, column by column within a group, so the
    blocks running at once share A rows and B columns in L2. ``tiles_m``: the tile rows (default: the
    parameter)."""
    b = ctx.b
    tiles_m, tiles_n = tiles_m or ctx.p.tiles_m, ctx.p.tiles_n
    per_group = b.mul(u32, tiles_n, group_m, mode="lo", name="per_group")
    group = b.div(u32, task, per_group, name="group")
    first_m = b.mul(u32, group, group_m, mode="lo", name="first_m")
    rows = b.min(u32, b.sub(u32, tiles_m, first_m), group_m, name="group_rows")
    inner = b.rem(u32, task, per_group, name="in_group")
    return (b.add(u32, first_m, b.rem(u32, inner, rows), name="tile_m"),
            b.div(u32, inner, rows, name="tile_n"))


def grouped_position(ctx: Ctx, tm, tn, group_m: int):
    """The inverse of :func:`tile_of`: the task (position in the grouped order) of tile (tm, tn)."""
    b = ctx.b
    tiles_m, tiles_n = ctx.p.tiles_m, ctx.p.tiles_n
    group = b.div(u32, tm, group_m, name="pos_group")
    first_m = b.mul(u32, group, group_m, mode="lo", name="pos_first_m")
    rows = b.min(u32, b.sub(u32, tiles_m, first_m), group_m, name="pos_rows")
    inner = b.mad(u32, tn, rows, b.sub(u32, tm, first_m), mode="lo", name="pos_inner")
    return b.mad(u32, group, b.mul(u32, tiles_n, group_m, mode="lo"), inner, mode="lo", name="grouped_position")


def k_block_elements(dtype: str) -> int:
    """K elements of one k-block (one 128-byte swizzle row): 64 of a 16-bit type, 128 of fp8, whose wgmma
    runs twice the FLOPs on the same bytes."""
    return 2 * TILE_K if dtype in FP8_TYPES else TILE_K


def mma_k_block(b: Builder, acc, a_tile: Reg, b_tile: Reg, *, n: int, dtype, b_layout: str, first) -> None:
    """The four wgmma of one 128-byte k-block (m64n<n>k16 for 16-bit inputs, m64n<n>k32 for fp8);
    ``first`` (a predicate) zeroes ``acc``.

    PTX: ``wgmma.fence; 4 x wgmma.mma_async.sync.aligned.m64n<n>k16.f32.<t>.<t> {acc}, descA, descB,
    p, 1, 1, 0, tB; wgmma.commit_group;`` (the caller waits; fp8 takes no transpose operands).
    """
    mma_k_block_chains(b, (((acc,), a_tile),), b_tile, n=n, dtype=dtype, b_layout=b_layout, first=first)


def mma_k_block_chains(b: Builder, chains, b_tile: Reg, *, n: int, dtype, b_layout: str, first) -> None:
    """One k-block for several 64-row chains of one warpgroup (``chains``: (accumulators, A rows) pairs
    that share the B tile), their wgmma interleaved step by step so the tensor cores always hold an
    independent product, in one commit group. A chain's 16-deep steps go to its accumulators in turn
    (more than one: k-split, so that consecutive wgmma of a narrow tile do not wait for one another;
    ``first`` zeroes each, and the caller sums them once the K loop is done)."""
    a_descs = [(accs, smem_desc(b, a_tile, name="a_desc")) for accs, a_tile in chains]
    if b_layout == "nk":
        b_desc, b_step, trans_b = smem_desc(b, b_tile, name="b_desc"), STEP_BYTES, 0
    else:
        b_desc = smem_desc(b, b_tile, leading_bytes=SUBTILE_ROWS * 128, name="b_desc")
        b_step, trans_b = K_STEP * 128, 1
    keep = b.not_("pred", first, name="keep")
    always = b.setp("eq", u32, 0, 0, name="always")
    b.wgmma_fence()
    for step in range(128 // STEP_BYTES):
        b_at = None
        for accs, a_desc in a_descs:
            a_at = advance(b, a_desc, STEP_BYTES * step)
            if b_at is None:
                b_at = advance(b, b_desc, b_step * step)
            b.wgmma(accs[step % len(accs)], a_at, b_at, n=n, dtype=f32, atype=dtype,
                    scale_d=keep if step < len(accs) else always, trans_b=trans_b)
    b.wgmma_commit_group()


def stage_accumulators(ctx: Ctx, acc, wg, staging: Reg, *, n: int, out_type: str, issue) -> None:
    """Write a warpgroup's 64 x n accumulators as ``out_type`` into its staging buffer, one 16 KB pass
    at a time, and after each pass let one thread hand the sub-tiles to TMA: ``issue(sub_tile_addr,
    column_offset)`` emits the store or reduce for a 64-row sub-tile (128-byte rows, swizzled).

    Ordering per pass: the issuing thread waits until TMA has read the previous pass
    (``cp.async.bulk.wait_group.read 0``), a named barrier frees the buffer, every thread writes and
    issues ``fence.proxy.async.shared::cta`` (generic writes -> async-proxy reads), a second named
    barrier, then the issue. The caller owes ``cp.async.bulk.wait_group 0`` before signalling anyone.
    """
    b = ctx.b
    out_bytes = 4 if out_type == "f32" else 2
    sub_cols = 128 // out_bytes
    pass_cols = STAGING_BYTES // (SUBTILE_ROWS * out_bytes)
    wg_tid = b.and_(b32, ctx.role_tid, 127, name="wg_tid")
    leader = b.setp("eq", u32, wg_tid, 0, name="staging_leader")
    barrier_id = b.add(u32, wg, 1, name="wg_barrier")
    frag_row, frag_col = warp_quad(b, wg_tid)
    lane_bytes = b.mul(u32, frag_col, out_bytes, mode="lo", name="lane_bytes")
    swizzle = b.and_(b32, frag_row, 7, name="row_swizzle")
    row_base = b.mad(u32, frag_row, 128, staging, mode="lo", name="row_base")
    for first_col in range(0, n, pass_cols):
        b.bulk_wait_group(0, read=True, pred=leader)
        b.bar_sync(barrier_id, 128)
        for chunk in range(first_col // 8, min(n, first_col + pass_cols) // 8):
            col = 8 * chunk - first_col
            byte = b.add(u32, lane_bytes, (col % sub_cols) * out_bytes, name="byte")
            unit = b.xor(b32, b.shr(u32, byte, 4), swizzle, name="unit")
            within = b.and_(b32, byte, 15, name="within")
            addr = b.add(u32, b.mad(u32, unit, 16, within, mode="lo"), row_base, name="st_addr")
            sub = (col // sub_cols) * SUBTILE_ROWS * 128
            for half in (0, 1):
                lo, hi = acc[4 * chunk + 2 * half], acc[4 * chunk + 2 * half + 1]
                dst = address(addr, sub + half * 8 * 128)
                if out_bytes == 4:
                    b.st(f32, dst, (lo, hi), space="shared")
                else:
                    b.st(b32, dst, b.cvt(f"{out_type}x2", f32, hi, lo, rnd="rn"), space="shared")
        b.fence_proxy_async("shared::cta")
        b.bar_sync(barrier_id, 128)
        with b.if_then(leader):
            for sub in range(min(pass_cols, n - first_col) // sub_cols):
                issue(b.add(u32, staging, sub * SUBTILE_ROWS * 128, name="sub_tile"), first_col + sub * sub_cols)
            b.bulk_commit_group()


def store_fragments(b: Builder, acc, wg_tid: Reg, *, n: int, out_type: str, c_ptr: Reg, row0: Reg, col0: Reg,
                    rows: Reg, cols: Reg) -> None:
    """Store a warpgroup's 64 x n accumulators straight from registers into row-major C (``rows`` x
    ``cols``, ``cols`` even) at (row0, col0), clipped to C: no shared memory and no wait for a TMA
    engine, so the tensor cores get the next tile sooner (at the price of 4- or 8-byte stores, half a
    sector each). Weak stores: the kernel's end publishes them.

    PTX per 8-column chunk c and half h: ``@ok st.global.b32 [p_h + 2*8c], {cvt.rn.bf16x2.f32}`` (f32:
    ``st.global.v2.f32``), ``p_h`` the lane's address in row ``row0 + frag_row + 8h``.
    """
    out_bytes = 4 if out_type == "f32" else 2
    frag_row, frag_col = warp_quad(b, wg_tid)
    row = b.add(u32, row0, frag_row, name="c_row")
    col = b.add(u32, col0, frag_col, name="c_col")
    cols_left = b.sub("s32", cols, col, name="cols_left")
    line = b.cvt("u64", u32, cols)
    first = b.mad("u64", b.add("u64", b.mul(u32, row, cols, mode="wide"), b.cvt("u64", u32, col)),
                  out_bytes, c_ptr, mode="lo", name="c_addr")
    for half in (0, 1):
        ok_row = b.setp("lt", u32, b.add(u32, row, 8 * half), rows, name="row_in_c")
        base = first if half == 0 else b.mad("u64", line, 8 * out_bytes, first, mode="lo", name="c_addr8")
        for chunk in range(n // 8):
            ok = b.setp("gt", "s32", cols_left, 8 * chunk, combine="and", c=ok_row, name="in_c")
            lo, hi = acc[4 * chunk + 2 * half], acc[4 * chunk + 2 * half + 1]
            dst = address(base, 8 * chunk * out_bytes)
            if out_bytes == 4:
                b.st(f32, dst, Vec((lo, hi)), space="global", pred=ok)
            else:
                b.st(b32, dst, b.cvt(f"{out_type}x2", f32, hi, lo, rnd="rn"), space="global", pred=ok)


def store_fragments_transposed(b: Builder, acc, wg_tid: Reg, *, n: int, out_type: str, c_ptr: Reg, row0: Reg,
                               col0: Reg, rows: Reg, cols: Reg) -> None:
    """Store a warpgroup's 64 x n accumulators of Cᵀ (``rows`` x ``cols``) at (row0, col0) transposed,
    into row-major C (``cols`` x ``rows``), clipped: the epilogue of a swapped problem (Cᵀ = B·Aᵀ for a
    small M), whose C is a few rows, so single-element stores cost little. A warp's store covers 8
    consecutive elements of 4 rows of C. Weak stores: the kernel's end publishes them.

    PTX per column j of the lane and half h: ``@ok st.global.b16 [c + ((col0 + j)·rows + row0 + r + 8h)·2],
    {cvt.rn.bf16.f32}`` (f32: ``st.global.f32``).
    """
    out_bytes = 4 if out_type == "f32" else 2
    frag_row, frag_col = warp_quad(b, wg_tid)
    row = b.add(u32, row0, frag_row, name="ct_row")
    col = b.add(u32, col0, frag_col, name="ct_col")
    cols_left = b.sub("s32", cols, col, name="ct_cols_left")
    line = b.mul(u32, rows, out_bytes, mode="wide", name="c_line")
    first = b.mad("u64", b.add("u64", b.mul(u32, col, rows, mode="wide"), b.cvt("u64", u32, row)),
                  out_bytes, c_ptr, mode="lo", name="ct_addr")
    ok_rows = [b.setp("lt", u32, b.add(u32, row, 8 * half), rows, name="ct_row_in_c") for half in (0, 1)]
    for chunk in range(n // 8):
        for pair in (0, 1):
            column = 8 * chunk + pair
            base = b.mad("u64", line, column, first, mode="lo", name="ct_col_addr") if column else first
            for half in (0, 1):
                ok = b.setp("gt", "s32", cols_left, column, combine="and", c=ok_rows[half], name="ct_in_c")
                value = acc[4 * chunk + 2 * half + pair]
                dst = address(base, 8 * half * out_bytes)
                if out_bytes == 4:
                    b.st(f32, dst, value, space="global", pred=ok)
                else:
                    b.st(out_type, dst, b.cvt(out_type, f32, value, rnd="rn"), space="global", pred=ok)
