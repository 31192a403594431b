"""Grouped GEMM: ``out[rows of group g] = x[rows of group g] · W_gᵀ`` (or ``· W_g``) for every group in
one persistent launch, with the group sizes read on the GPU (no host sync). The compute side of the
MoE kernels: expert g's tokens are the rows ``[offsets[g-1], offsets[g])`` of x (``offsets[-1] = 0``,
torch._grouped_mm's convention); groups may be empty or any size.

It composes the GEMM's parts (:mod:`..gemm_parts`, :func:`gemm.roles`): the consumer warpgroups and the
ring are the plain GEMM's; the tile walk and the loads differ.

- *Tile walk.* Each block first builds, in shared memory, the prefix sums of the groups' 128-row tile
  counts (warp 0, 32 groups per step, a ``shfl.up`` scan). Tasks walk the concatenated tile rows in
  the GEMM's L2-grouped order; a binary search over the prefix table gives a tile row's group and its
  first row ``start_g + 128 j``.
- *Loads.* A (T x K) through a 2-D map at the tile's first row (rows of the next group may ride along;
  they only feed output rows that are never stored). W through a 3-D map (E, N, K) or (E, K, N), so
  the expert is a coordinate and TMA zero-fills past each expert's own N and K.
- *Stores.* TMA clips only at the tensor's edge, not at a group's end, so a 64-row slab that lies
  entirely inside its group is TMA-stored as in the GEMM, and the slab holding a group's last rows is
  written from the registers with per-row (and per-column, for N's tail) predicated stores. That costs
  one slab per group at most, and no tensor map built on the GPU.

Offsets are clamped to ``[0, T]`` on the GPU (and a group ending before it starts is empty), so bad
offsets cost results, not memory safety.
"""
from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass, replace

import numpy as np

from ...errors import PTXBuildError
from ...isa import Param, address, b32, f32, s32, u32, u64
from ...primitives.tma import tensor_map_param
from ...primitives.wgmma import warp_quad
from ..gemm_parts import tile_of
from ..lcsc import Buffer
from . import gemm

SMEM_LIMIT = gemm.SMEM_LIMIT
STATIC_SLACK = 256          # ring barriers and the ticket slot beside the group table
PARAMS = (Param("offsets", u64, pointer=True), Param("groups", u32), Param("rows", u32), Param("n", u32),
          Param("out", u64, pointer=True), gemm.C_PARAM)


@dataclass(frozen=True)
class Config:
    gemm: gemm.Config = gemm.Config()
    max_groups: int = 256         # size of the shared prefix table (one cubin per power of two)

    def __post_init__(self):
        if self.max_groups < 1 or self.max_groups & (self.max_groups - 1) or self.max_groups > 4096:
            raise PTXBuildError(f"grouped_gemm Config.max_groups must be a power of two up to 4096, got "
                                f"{self.max_groups}")
        if self.smem_bytes > SMEM_LIMIT:
            raise PTXBuildError(f"grouped_gemm Config needs {self.smem_bytes} bytes of shared memory with its "
                                f"{self.max_groups}-group table, over 227 KB; use fewer stages")

    @property
    def table_bytes(self) -> int:
        return 4 * (self.max_groups + 1)

    @property
    def smem_bytes(self) -> int:
        """Everything the block holds: the GEMM's dynamic window plus the static group table."""
        return self.gemm.smem_bytes + self.table_bytes + STATIC_SLACK

    @property
    def w_box(self) -> tuple[int, int, int]:
        """The weights' 3-D tensor-map box: one expert's B box ((1, tile_n, 64) for "nk", a 64 x 64
        sub-box of the K x N matrix for "kn")."""
        g = self.gemm
        return (1,) + g.b_box

    @property
    def name(self) -> str:
        g = self.gemm
        return (f"grouped_gemm_{g.dtype}_{g.out_dtype}_{g.b_layout}_{g.tile_m}x{g.tile_n}_s{g.stages}"
                f"_g{self.max_groups}")


def group_table(ctx, cfg: Config):
    """Warp 0 writes ``table[g] = sum over h < g of ceil(rows_h / tile_m)`` for g = 0..groups into
    shared memory (then ``bar.sync 0``); returns the total tile rows, capped by the host's bound.

    Per step of 32 groups: each lane loads its group's end and start (``ld.global.nc``: offsets are
    inputs, final before the launch), clamps them, counts tiles, and a 5-step ``shfl.sync.up`` scan
    adds the lanes before it; lane 31's sum carries into the next step. Then
    ``fence.proxy.async.shared::cta`` (as for the launch ticket): the block's later TMA traffic through
    shared memory is ordered after these generic writes (pk-design 5).
    """
    b = ctx.b
    table = ctx.smem["group_tiles"]
    groups = ctx.p.groups
    lane = b.and_(b32, ctx.tid, 31, name="scan_lane")
    with b.if_then(b.setp("lt", u32, ctx.tid, 32, name="scan_warp"), uniform=True):
        b.st(u32, address(table), 0, space="shared", pred=b.setp("eq", u32, ctx.tid, 0))
        carry = b.mov(u32, 0, name="tile_carry")
        for first in b.range(0, groups, 32, name="scan_base"):
            g = b.add(u32, first, lane, name="scan_group")
            inside = b.setp("lt", u32, g, groups, name="in_groups")
            start, end = group_bounds(ctx, g, inside)
            tiles = b.shr(u32, b.add(u32, b.sub(u32, end, start), cfg.gemm.tile_m - 1),
                          cfg.gemm.tile_m.bit_length() - 1, name="group_tile_count")
            total = b.mov(u32, tiles, name="scan_sum")
            for delta in (1, 2, 4, 8, 16):
                up = b.shfl("up", total, delta, 0, name="scan_up")
                b.add(u32, total, up, into=total, pred=b.setp("ge", u32, lane, delta))
            slot = b.mad(u32, g, 4, b.add(u32, table, 4), mode="lo", name="table_slot")
            b.st(u32, address(slot), b.add(u32, total, carry), space="shared", pred=inside)
            b.add(u32, carry, b.shfl("idx", total, 31, 31, name="scan_last"), into=carry)
        b.fence_proxy_async("shared::cta")     # generic shared writes before the block's TMA use of shared memory
    b.bar_sync(0)
    last = b.mad(u32, groups, 4, table, mode="lo", name="table_last")
    return b.min(u32, b.ld(u32, address(last), space="shared", name="tiles_total"), ctx.p.tiles_m)


def group_bounds(ctx, g, inside):
    """(start, end) rows of group ``g`` (0, 0 where ``inside`` is false): ``offsets[g-1]`` and
    ``offsets[g]`` clamped to ``[0, rows]``, end at least start."""
    b = ctx.b
    rows, offsets = ctx.p.rows, ctx.p.offsets
    end_addr = b.mad(u64, b.cvt(u64, u32, g), 4, offsets, mode="lo", name="end_addr")
    end = b.mov(s32, 0, name="group_end")
    start = b.mov(s32, 0, name="group_start")
    b.ld(s32, address(end_addr), space="global", nc=True, into=end, pred=inside)
    has_prev = b.setp("ne", u32, g, 0, combine="and", c=inside, name="has_prev")
    b.ld(s32, address(end_addr, -4), space="global", nc=True, into=start, pred=has_prev)
    clamp = lambda v: b.cvt(u32, s32, b.min(s32, b.max(s32, v, 0), rows))      # noqa: E731
    start = clamp(start)
    return start, b.max(u32, clamp(end), start, name="group_end_rows")


# A tile of the grouped order: (tile row, tile column), its group, its first row and its group's end row.
GroupTile = namedtuple("GroupTile", "tm tn group row0 row_end")


def locate_tile(ctx, cfg: Config, task, tiles_m) -> GroupTile:
    """Task ``task``'s tile of the grouped order over ``tiles_m`` tile rows: binary search for the last g
    with table[g] <= tile row."""
    b = ctx.b
    tm, tn = tile_of(ctx, task, cfg.gemm.group_m, tiles_m)
    table = ctx.smem["group_tiles"]
    lo, hi = b.mov(u32, 0, name="search_lo"), b.mov(u32, ctx.p.groups, name="search_hi")
    with b.loop("search") as lp:
        lp.break_if(b.setp("le", u32, b.sub(u32, hi, lo), 1, name="found"))
        mid = b.shr(u32, b.add(u32, lo, hi), 1, name="search_mid")
        below = b.ld(u32, address(b.mad(u32, mid, 4, table, mode="lo")), space="shared", name="mid_tiles")
        fits = b.setp("le", u32, below, tm, name="mid_fits")
        b.mov(u32, mid, into=lo, pred=fits)
        b.mov(u32, mid, into=hi, pred=fits.negated())
    first_tile = b.ld(u32, address(b.mad(u32, lo, 4, table, mode="lo")), space="shared", name="group_first_tile")
    start, end = group_bounds(ctx, lo, b.setp("eq", u32, 0, 0, name="always"))
    row0 = b.mad(u32, b.sub(u32, tm, first_tile), cfg.gemm.tile_m, start, mode="lo", name="tile_row0")
    return GroupTile(tm, tn, lo, row0, end)


def roles(cfg: Config, *, before_a=None) -> dict:
    """The grouped GEMM's roles for ``Template.build``: the GEMM's consumer with this module's tile walk
    and store, its own loader (3-D weight coordinates). ``before_a(ctx, tile)`` runs on the loader lane
    before a tile's first load (the fused dispatch waits there for the tile's rows)."""
    g = cfg.gemm
    loop = gemm.KLoop()
    placed: GroupTile | None = None       # the tile of the role being emitted (its last tile hook's)

    def tile(ctx, task):
        nonlocal placed
        placed = locate_tile(ctx, cfg, task, loop.tiles_m)
        return placed.tm, placed.tn

    def store(ctx, acc, tm, tn, wg, staging):
        """A warpgroup's 64-row slab: TMA-stored when it lies inside its group, else register stores of
        the rows before the group's end (and the columns before N)."""
        b = ctx.b
        row = b.mad(u32, wg, 64, placed.row0, mode="lo", name="slab_row")
        col = b.mul(u32, tn, g.tile_n, mode="lo", name="slab_col")
        inside = b.setp("le", u32, b.add(u32, row, 64), placed.row_end, name="slab_inside")
        with b.if_else(inside, uniform=True) as (tma, registers):
            with tma:
                gemm.store_slab(ctx, g, acc, wg, staging, tensor_map_param(b, "tmap_c"), row, col)
            with registers:
                store_tail(ctx, cfg, acc, row, col, placed.row_end)

    parts = gemm.roles(g, store=store, tile=tile, loop=loop)
    gemm_prologue = parts["prologue"]

    def prologue(ctx):
        gemm_prologue(ctx)
        loop.tiles_m = group_table(ctx, cfg)

    def loader(ctx, task):
        """One lane: for each k-block, wait for a free stage, announce its bytes, load A rows from the
        tile's first row and W's box of expert ``group``."""
        b = ctx.b
        tile(ctx, task)
        with b.if_then(b.setp("eq", u32, ctx.role_tid, 0, name="loader_lane")):
            if before_a is not None:
                before_a(ctx, placed)
            tmap_a, tmap_b = tensor_map_param(b, "tmap_a"), tensor_map_param(b, "tmap_b")
            col = b.mul(u32, placed.tn, g.tile_n, mode="lo")
            for kb in b.range(0, loop.k_blocks, name="kb"):
                gemm.load_k_block(ctx, g, loop, kb, tmap_a, tmap_b, placed.row0, col, placed.group)

    return dict(parts, prologue=prologue, loader=loader)


def store_tail(ctx, cfg: Config, acc, row, col, row_end) -> None:
    """Predicated ``st.global`` of the accumulators: row ``row + frag_row (+8)`` only before ``row_end``,
    column pairs only before N (N is even). Weak stores: the kernel's end publishes them."""
    b = ctx.b
    g = cfg.gemm
    out_bytes = 4 if g.out_dtype == "f32" else 2
    frag_row, frag_col = warp_quad(b, b.and_(b32, ctx.role_tid, 127))
    first_col = b.add(u32, col, frag_col, name="tail_col")
    cols_left = b.sub(s32, ctx.p.n, first_col, name="cols_left")
    row_bytes = b.mul(u32, ctx.p.n, out_bytes, mode="lo", name="out_row_bytes")
    for half in (0, 1):
        r = b.add(u32, b.add(u32, row, frag_row), 8 * half, name="tail_row")
        row_ok = b.setp("lt", u32, r, row_end, name="row_ok")
        base = b.mad(u64, b.cvt(u64, u32, r), b.cvt(u64, u32, row_bytes),
                     b.add(u64, ctx.p.out, b.mul(u32, first_col, out_bytes, mode="wide")), mode="lo",
                     name="tail_addr")
        for chunk in range(g.tile_n // 8):
            ok = b.setp("gt", s32, cols_left, 8 * chunk, combine="and", c=row_ok, name="tail_ok")
            lo, hi = acc[4 * chunk + 2 * half], acc[4 * chunk + 2 * half + 1]
            dst = address(base, 8 * chunk * out_bytes)
            if out_bytes == 4:
                b.st(f32, dst, (lo, hi), space="global", pred=ok)
            else:
                b.st(b32, dst, b.cvt(f"{g.out_dtype}x2", f32, hi, lo, rnd="rn"), space="global", pred=ok)


def template(cfg: Config, name: str | None = None, *, params=(), layouts=(), comm_first: bool = False,
             progress: bool = False):
    """The GEMM's template with the grouped parameters and the static group table."""
    t = gemm.template(cfg.gemm, name or cfg.name, params=PARAMS + tuple(params), layouts=layouts,
                      progress=progress, comm_first=comm_first)
    return replace(t, buffers=t.buffers + (Buffer("group_tiles", cfg.table_bytes, 16),))


def build(cfg: Config = Config()):
    return template(cfg).build(**roles(cfg), epilogue=lambda ctx: ctx.b.bulk_wait_group(0))


def reference(x: np.ndarray, w: np.ndarray, offsets, b_layout: str = "nk") -> np.ndarray:
    """float64 ``out[rows of g] = x[rows of g] · w[g]ᵀ`` ("nk") or ``· w[g]`` ("kn")."""
    out = np.zeros((x.shape[0], w.shape[1] if b_layout == "nk" else w.shape[2]))
    start = 0
    for g, end in enumerate(np.asarray(offsets)):
        out[start:end] = gemm.reference(x[start:end], w[g], b_layout)
        start = end
    return out


def catalog():
    yield build(Config())
    yield build(Config(gemm.Config(b_layout="kn")))
    yield build(Config(gemm.Config(out_dtype="f32", tile_n=128, stages=5), max_groups=16))
