"""GEMM + all-reduce, overlapped across SMs (pk-design 1 and 7).

Every rank holds a K-shard of A and B and computes the full partial C_r (M x N) into its copy of the
symmetric buffer ``c``. Each finished slab is TMA-stored locally, and once the store has landed the
warpgroup stamps its slot of the tile's flags on the tile's owner (tile t is owned by rank t mod W;
one slot per source rank and warpgroup) with the launch's epoch. The owner's communicator SMs wait
for every slot (a timeout names the ranks behind), then reduce the tile over every rank's copy and
write the sum back to all of them (multimem in the switch, or the unicast fallback: peer loads, f32
sums, stores). One launch; the epoch is device state (:mod:`..progress`), so graph replays work.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...isa import Param, Sem, u32, u64
from ...primitives.layout import ParallelLayout
from ...primitives.sync import flag_address, publish_async_writes, stamp, wait_peers
from ...primitives.tile import reduce_vector
from ..progress import FLAGS, close_barrier
from . import gemm

CBUF, DONE = ParallelLayout("c"), ParallelLayout("done")


@dataclass(frozen=True)
class Config:
    gemm: gemm.Config = gemm.Config()
    multicast: bool = False


def build(cfg: Config = Config()):
    g = cfg.gemm
    out_bytes = 4 if g.out_dtype == "f32" else 2
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
            tile = b.mad(u32, tm, ctx.param("tiles_n"), tn, mode="lo", name="tile_id")
            owner = b.rem(u32, tile, ctx.world, name="tile_owner")
            slot = b.mad(u32, b.mad(u32, tile, ctx.world, ctx.rank, mode="lo"), g.consumers, wg, mode="lo",
                         name="done_slot")
            stamp(b, flag_address(b, ctx.layouts["done"], owner, slot), ctx.epoch, sem=Sem.RELEASE, scope="sys")

    def reduce_tile(ctx, tile):
        """Wait for every rank's slabs of an owned tile, then all-reduce it, 16 bytes per thread-step."""
        b = ctx.b
        with b.if_then(b.setp("eq", u32, ctx.tid, 0, name="tile_waiter")):
            first = b.mul(u32, tile, b.mul(u32, ctx.world, g.consumers, mode="lo"), mode="lo", name="tile_slots")
            wait_peers(b, flag_address(b, ctx.layouts["done"], ctx.rank, first), ctx.world, ctx.epoch,
                       per_peer=g.consumers, sem=Sem.ACQUIRE, scope="sys", deadline=ctx.deadline, flag_id=tile)
        b.bar_sync(0)
        tm = b.div(u32, tile, ctx.param("tiles_n"), name="ar_tile_m")
        tn = b.rem(u32, tile, ctx.param("tiles_n"), name="ar_tile_n")
        vec_per_row = g.tile_n * out_bytes // 16
        for v in b.range(ctx.tid, g.tile_m * vec_per_row, t.threads, name="v"):
            row = b.mad(u32, tm, g.tile_m, b.div(u32, v, vec_per_row), mode="lo", name="ar_row")
            col = b.mad(u32, tn, g.tile_n, b.mul(u32, b.rem(u32, v, vec_per_row), 16 // out_bytes, mode="lo"),
                        mode="lo", name="ar_col")
            inside = b.setp("lt", u32, col, ctx.param("n"), combine="and",
                            c=b.setp("lt", u32, row, ctx.param("m")), name="in_c")
            with b.if_then(inside):
                offset = b.mul(u64, b.mad(u64, b.cvt(u64, u32, row), b.cvt(u64, u32, ctx.param("n")),
                                          b.cvt(u64, u32, col), mode="lo"), out_bytes, mode="lo", name="ar_off")
                reduce_vector(b, ctx.layouts["c"], offset, ty=g.out_dtype, op="sum", world=ctx.world,
                              rank=ctx.rank, write_all=True, multicast=cfg.multicast)
        b.bar_sync(0)

    parts = gemm.roles(g, store=store)

    def epilogue(ctx):
        close_barrier(ctx, 1, multicast=cfg.multicast)     # every owner has written every reduced tile

    return t.build(**parts, comm_tasks=lambda ctx: ctx.b.mul(u32, ctx.param("tiles_m"), ctx.param("tiles_n"),
                                                             mode="lo"),
                   communicator=reduce_tile, rank_major_comm=True, epilogue=epilogue)


def reference(a_shards, b_shards, b_layout: str = "nk") -> np.ndarray:
    return sum(gemm.reference(a, b, b_layout) for a, b in zip(a_shards, b_shards))


def catalog():
    yield build(Config())
    yield build(Config(multicast=True))
