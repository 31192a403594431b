"""GEMM + reduce-scatter, overlapped inside each SM (pk-design 1 and 7).

Every rank holds a K-shard: A_r (M x K/W) and B_r (N x K/W, or K/W x N). The result C = sum_r A_r·B_rᵀ
is scattered by rows: rank o owns rows [o·M/W, (o+1)·M/W). Each rank computes every tile of its partial
product; its consumers stage the tile in shared memory and one thread per warpgroup reduces it into the
owner's C with a TMA add (``cp.reduce.async.bulk.tensor ... .add``), so communication rides on the
storer path while the tensor cores move on. Ranks walk the tiles from different starting points so
owners are not all hit at once. One launch: a barrier (every C zeroed), the GEMM, a barrier (every add
landed).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import PTXBuildError
from ...isa import Param, u32
from ...primitives.p2p import TensorMapTable, store_add_async
from ..progress import FLAGS, close_barrier, open_barrier
from ..gemm_parts import stage_accumulators, tile_of
from . import gemm

C = TensorMapTable("c")


@dataclass(frozen=True)
class Config:
    gemm: gemm.Config = gemm.Config()

    def __post_init__(self):
        if self.gemm.out_dtype == "f16" and self.gemm.dtype == "bf16":
            raise PTXBuildError("gemm_rs: reduce into bf16 or f32 for bf16 inputs")


def build(cfg: Config = Config()):
    g = cfg.gemm
    t = gemm.template(g, f"gemm_rs_{g.dtype}_{g.out_dtype}_{g.b_layout}_{g.tile_m}x{g.tile_n}_s{g.stages}",
                      params=(Param("rows_per_rank", u32),),
                      layouts=(FLAGS,), tensor_maps=(C,))

    def staggered(ctx, task):
        """Rank r starts 1/W of the way into the tile list (and wraps)."""
        b = ctx.b
        tiles = b.mul(u32, ctx.p.tiles_m, ctx.p.tiles_n, mode="lo", name="tiles")
        shift = b.mul(u32, b.div(u32, tiles, ctx.world), ctx.rank, mode="lo", name="stagger")
        return tile_of(ctx, b.rem(u32, b.add(u32, task, shift), tiles), g.group_m)

    def store(ctx, acc, tm, tn, wg, staging):
        """TMA-add the slab into the owner's rows of C."""
        b = ctx.b
        row, col = gemm.slab_origin(ctx, g, tm, tn, wg)
        owner = b.div(u32, row, ctx.p.rows_per_rank, name="owner")
        local_row = b.sub(u32, row, b.mul(u32, owner, ctx.p.rows_per_rank, mode="lo"), name="owner_row")
        tmap = ctx.tmaps["c"].of(b, owner)
        stage_accumulators(ctx, acc, wg, staging, n=g.tile_n, out_type=g.out_dtype,
                           issue=lambda sub, offset: store_add_async(b, tmap, (b.add(u32, col, offset), local_row),
                                                                     sub, commit=False))

    def epilogue(ctx):
        """Every add issued by this block has landed in its owner (not just left shared memory), then
        the ranks meet, so each owner may read its rows."""
        ctx.b.bulk_wait_group(0)
        ctx.b.fence_proxy_async("global")
        ctx.b.bar_sync(0)
        close_barrier(ctx, 2, multicast=False)

    parts = gemm.roles(g, store=store, tile=staggered)
    prologue = parts.pop("prologue")

    def start(ctx):
        prologue(ctx)
        open_barrier(ctx, multicast=False)         # every rank's C is zeroed before anyone adds into it

    return t.build(**parts, prologue=start, epilogue=epilogue)


def reference(a_shards, b_shards, world: int, b_layout: str = "nk") -> list[np.ndarray]:
    """float64 C = sum_r A_r·B_r, then rank o's rows."""
    total = sum(gemm.reference(a, b, b_layout) for a, b in zip(a_shards, b_shards))
    return np.split(total, world, axis=0)


def catalog():
    yield build(Config())
    yield build(Config(gemm.Config(out_dtype="f32")))
