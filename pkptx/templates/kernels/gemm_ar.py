"""GEMM + all-reduce, overlapped across SMs (pk-design 1 and 7).

Every rank holds a K-shard of A and B and computes the full partial C_r (M x N) into its copy of the
symmetric buffer ``c``. Each finished slab is TMA-stored locally, and once the store has landed the
warpgroup stamps its slot of the tile's flags on the tile's owner (the tile at position p of the
grouped order is owned by rank p mod W; one slot per source rank and warpgroup) with the launch's
epoch. The owner's communicators wait for every slot (a timeout names the ranks behind), then reduce
the tile over every rank's copy and write the sum back to all of them (multimem in the switch, or the
unicast fallback: peer loads, f32 sums, stores). One launch; the epoch is device state
(:mod:`..progress`), so graph replays work.

Both sides draw their tasks from counters (the two words after the flags, left at 0 by the closing
barrier): GEMM tiles in the grouped order, owned tiles in the same order. A compute block that finds no
tile left joins the communicators, so the tiles finished last are reduced by every SM rather than by
the ``num_comm_sms`` that reduce while the GEMM runs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import PTXBuildError
from ...isa import Param, Scope, Sem, u32, u64
from ...primitives.layout import ParallelLayout
from ...primitives.sync import flag_address, publish_async_writes, stamp, wait_peers
from ...primitives import all_reduce
from ..gemm_parts import grouped_position, tile_of
from ..progress import FLAGS, close_barrier
from . import gemm

CBUF, DONE = ParallelLayout("c"), ParallelLayout("done")
REDUCE_THREADS = 256     # communicator threads that reduce a full tile (a power of two: rows split evenly)
BATCH = 8                # 16-byte vectors per thread and step: loads in flight together


@dataclass(frozen=True)
class Config:
    gemm: gemm.Config = gemm.Config()
    multicast: bool = False


def build(cfg: Config = Config()):
    g = cfg.gemm
    if g.split_k or g.stream_k:
        raise PTXBuildError("gemm_ar: the fused kernel communicates whole tiles; split-K and stream-K are the plain "
                            "gemm's")
    out_bytes = 4 if g.out_dtype == "f32" else 2
    vec_per_row = g.tile_n * out_bytes // 16
    steps, rest = divmod(g.tile_m * vec_per_row, REDUCE_THREADS * BATCH)
    if rest:
        raise PTXBuildError(f"gemm_ar: a {g.tile_m}x{g.tile_n} tile is not whole steps of {REDUCE_THREADS} x {BATCH} "
                            "16-byte vectors")
    store_local = gemm.store_c(g)
    t = gemm.template(g, f"gemm_ar_{g.dtype}_{g.out_dtype}_{g.b_layout}_{g.tile_m}x{g.tile_n}_s{g.stages}"
                      f"{'_mc' if cfg.multicast else ''}",
                      params=(gemm.C_PARAM, Param("m", u32), Param("n", u32)),
                      layouts=(CBUF, DONE, FLAGS))

    def store(ctx, acc, tm, tn, wg, staging):
        """TMA-store the slab into this rank's partial C; once written, stamp this rank's and warpgroup's
        slot of the tile at its owner."""
        b = ctx.b
        store_local(ctx, acc, tm, tn, wg, staging)
        with b.if_then(b.setp("eq", u32, b.and_("b32", ctx.role_tid, 127), 0, name="slab_leader")):
            publish_async_writes(b)
            tile = b.mad(u32, tm, ctx.p.tiles_n, tn, mode="lo", name="tile_id")
            owner = b.rem(u32, grouped_position(ctx, tm, tn, g.group_m), ctx.world, name="tile_owner")
            slot = b.mad(u32, b.mad(u32, tile, ctx.world, ctx.rank, mode="lo"), g.consumers, wg, mode="lo",
                         name="done_slot")
            stamp(b, flag_address(b, ctx.layouts["done"], owner, slot), ctx.epoch, sem=Sem.RELEASE, scope=Scope.SYS)

    def tiles(ctx):
        return ctx.b.mul(u32, ctx.p.tiles_m, ctx.p.tiles_n, mode="lo", name="ar_tiles")

    def owned_tiles(ctx):
        """Tiles whose grouped position is this rank modulo the world: ceil((tiles - rank) / world)."""
        b = ctx.b
        total = b.max(u32, tiles(ctx), ctx.rank, name="ar_total")
        return b.div(u32, b.add(u32, b.sub(u32, total, ctx.rank), b.sub(u32, ctx.world, 1)), ctx.world,
                     name="owned_tiles")

    def reduce_tile(ctx, task):
        """This rank's ``task``-th tile in the compute blocks' (grouped) order, so the tile waited for is
        one the compute side finishes soon: wait for every rank's slabs, then all-reduce it."""
        b = ctx.b
        tm, tn = tile_of(ctx, b.mad(u32, task, ctx.world, ctx.rank, mode="lo", name="ar_position"), g.group_m)
        tile = b.mad(u32, tm, ctx.p.tiles_n, tn, mode="lo", name="ar_tile")
        with b.if_then(b.setp("eq", u32, ctx.tid, 0, name="tile_waiter")):
            first = b.mul(u32, tile, b.mul(u32, ctx.world, g.consumers, mode="lo"), mode="lo", name="tile_slots")
            wait_peers(b, flag_address(b, ctx.layouts["done"], ctx.rank, first), ctx.world, ctx.epoch,
                       per_peer=g.consumers, sem=Sem.ACQUIRE, scope=Scope.SYS, deadline=ctx.deadline, flag_id=tile)
        b.bar_sync(0)
        row0 = b.mul(u32, tm, g.tile_m, mode="lo", name="ar_row0")
        col0 = b.mul(u32, tn, g.tile_n, mode="lo", name="ar_col0")
        full = b.setp("le", u32, b.add(u32, row0, g.tile_m), ctx.p.m, combine="and",
                      c=b.setp("le", u32, b.add(u32, col0, g.tile_n), ctx.p.n), name="full_tile")
        with b.if_else(full, uniform=True) as (inner, edge):
            with inner:
                reduce_full_tile(ctx, row0, col0)
            with edge:
                reduce_edge_tile(ctx, row0, col0)
        b.bar_sync(0)

    def element_offset(ctx, row0, col0, v):
        """Byte offset in C of 16-byte vector ``v`` of the tile at (row0, col0), and its row and column."""
        b = ctx.b
        row = b.add(u32, row0, b.div(u32, v, vec_per_row), name="ar_row")
        col = b.mad(u32, b.rem(u32, v, vec_per_row), 16 // out_bytes, col0, mode="lo", name="ar_col")
        offset = b.mul(u64, b.mad(u64, b.cvt(u64, u32, row), b.cvt(u64, u32, ctx.p.n), b.cvt(u64, u32, col),
                                  mode="lo"), out_bytes, mode="lo", name="ar_off")
        return offset, row, col

    def reduce_full_tile(ctx, row0, col0):
        """A tile inside C: the first REDUCE_THREADS threads take BATCH vectors per step each, every
        load in flight before the first store (no bounds checks)."""
        b = ctx.b
        with b.if_then(b.setp("lt", u32, ctx.tid, REDUCE_THREADS, name="reducer")):
            for step in b.range(0, steps, name="ar_step"):
                first = b.mad(u32, step, REDUCE_THREADS * BATCH, ctx.tid, mode="lo", name="ar_first")
                offsets = tuple(element_offset(ctx, row0, col0, b.add(u32, first, j * REDUCE_THREADS))[0]
                                for j in range(BATCH))
                all_reduce(b, ctx.layouts["c"], offsets, ty=g.out_dtype, op="sum", world=ctx.world, rank=ctx.rank,
                           multicast=cfg.multicast)

    def reduce_edge_tile(ctx, row0, col0):
        """A tile that C's edge cuts: one vector per thread-step, each inside C."""
        b = ctx.b
        for v in b.range(ctx.tid, g.tile_m * vec_per_row, t.threads, name="v"):
            offset, row, col = element_offset(ctx, row0, col0, v)
            inside = b.setp("lt", u32, col, ctx.p.n, combine="and",
                            c=b.setp("lt", u32, row, ctx.p.m), name="in_c")
            with b.if_then(inside):
                all_reduce(b, ctx.layouts["c"], offset, ty=g.out_dtype, op="sum", world=ctx.world, rank=ctx.rank,
                           multicast=cfg.multicast)

    parts = gemm.roles(g, store=store)

    def counter(word):
        """done[tiles · world · consumers + word] on this rank: GEMM tiles (0) or owned tiles (1) drawn."""
        def address_of(ctx):
            b = ctx.b
            slots = b.mul(u32, tiles(ctx), b.mul(u32, ctx.world, g.consumers, mode="lo"), mode="lo", name="ar_slots")
            return flag_address(b, ctx.layouts["done"], ctx.rank, b.add(u32, slots, word, name="counter_word"))
        return address_of

    def epilogue(ctx):
        # every owner has written every reduced tile; both counters are 0 again for the next launch
        close_barrier(ctx, 1, multicast=cfg.multicast, leave=((counter(0)(ctx), 0), (counter(1)(ctx), 0)))

    return t.build(**parts, comm_tasks=owned_tiles, communicator=reduce_tile, epilogue=epilogue,
                   task_counter=counter(0), comm_counter=counter(1), compute_joins=True)


def reference(a_shards, b_shards, b_layout: str = "nk") -> np.ndarray:
    return sum(gemm.reference(a, b, b_layout) for a, b in zip(a_shards, b_shards))


def catalog():
    yield build(Config())
    yield build(Config(multicast=True))
