"""All-gather + GEMM, overlapped across SMs (pk-design 1 and 7).

A is sharded by rows: rank r owns rows [r·M/W, (r+1)·M/W) of A (M x K), kept in a symmetric buffer
``a`` of the full shape, where the rank has written its own rows. B is the rank's weight shard; C_r =
A·B_rᵀ (or A·B_r). The first ``num_comm_sms`` tickets are communicators (they never wait, so the compute
blocks that wait on them may): they push the rank's row blocks to every peer with 1-D bulk copies
through shared memory and then raise that row block's flag on every peer. Compute blocks start with their own rows and, before loading a peer's row block, wait for its
flag. A flag holds the epoch of the launch that last raised it (:mod:`..progress`: device state, the
same on every rank), so it is never reset and a graph replay waits for its own rows. Tiles are drawn
from a counter (the word after the flags, left at 0 by the closing barrier), and a communicator that
has pushed its rows draws tiles too, so its SM computes for the rest of the launch.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ...isa import Param, Scope, Sem, address, u32, u64
from ...primitives import Pipeline
from ...primitives.layout import ParallelLayout
from ...primitives.sync import flag_address, publish_async_writes, stamp, wait
from ..progress import FLAGS, close_barrier
from ..gemm_parts import tile_of
from ..lcsc import Buffer, Ring
from . import gemm

A, READY = ParallelLayout("a"), ParallelLayout("ready")
CHUNK = 32 * 1024          # bytes a communicator moves per bulk copy


@dataclass(frozen=True)
class Config:
    gemm: gemm.Config = gemm.Config()


def build(cfg: Config = Config()):
    g = cfg.gemm
    t = gemm.template(g, f"ag_gemm_{g.dtype}_{g.out_dtype}_{g.b_layout}_{g.tile_m}x{g.tile_n}_s{g.stages}",
                      params=(gemm.C_PARAM, Param("rows_per_rank", u32),
                              Param("row_bytes", u32)),
                      layouts=(A, READY, FLAGS), comm_first=True)   # compute blocks wait on the pushers
    t = replace(t, comm_buffers=(Buffer("push_chunk", CHUNK, 128),), rings=t.rings + (Ring("chunk_in", 1, 1),))

    def own_rows_first(ctx, task):
        """The grouped order, rotated so this rank's row blocks come first."""
        b = ctx.b
        tm, tn = tile_of(ctx, task, g.group_m)
        shift = b.mul(u32, b.div(u32, ctx.p.rows_per_rank, g.tile_m), ctx.rank, mode="lo", name="own")
        return b.rem(u32, b.add(u32, tm, shift), ctx.p.tiles_m, name="tile_m_rot"), tn

    def await_rows(ctx, tm):
        """A peer's row block: wait until its owner has pushed it here, then order the acquire before
        the TMA (async-proxy) reads of it."""
        b = ctx.b
        owner = b.div(u32, b.mul(u32, tm, g.tile_m, mode="lo"), ctx.p.rows_per_rank, name="row_owner")
        with b.if_then(b.setp("ne", u32, owner, ctx.rank, name="remote_rows")):
            wait(b, flag_address(b, ctx.layouts["ready"], ctx.rank, tm), ctx.epoch, sem=Sem.ACQUIRE,
                 scope=Scope.SYS, deadline=ctx.deadline, flag_id=tm, peer=owner)
            b.fence_proxy_async("global")

    def comm_tasks(ctx):
        return ctx.b.div(u32, ctx.p.rows_per_rank, g.tile_m, name="own_blocks")

    def push_rows(ctx, task):
        """Copy one of this rank's row blocks to every peer, chunk by chunk, then raise its flag there."""
        b = ctx.b
        with b.if_then(b.setp("eq", u32, ctx.tid, 0, name="pusher")):
            tm = b.add(u32, b.div(u32, b.mul(u32, ctx.rank, ctx.p.rows_per_rank, mode="lo"), g.tile_m),
                       task, name="push_block")
            block_bytes = b.mul(u32, ctx.p.row_bytes, g.tile_m, mode="lo", name="block_bytes")
            first = b.mul(u32, tm, block_bytes, mode="wide", name="block_offset")
            local = b.add(u64, ctx.layouts["a"].peer(b, ctx.rank), first, name="block_src")
            phase = b.carried(u32, 0, name="chunk_phase")          # chunks through the buffer, over the tasks
            pipe, buf = Pipeline.bounce(ctx.rings["chunk_in"].bar(b, 0), phase=phase), ctx.smem["push_chunk"]
            for done in b.range(0, block_bytes, CHUNK, name="chunk"):
                size = b.min(u32, b.sub(u32, block_bytes, done), CHUNK, name="chunk_bytes")
                pipe.acquire(b)                          # the last chunk has left shared memory
                bar = pipe.commit(b, size)
                b.bulk_load(address(buf), address(b.add(u64, local, b.cvt(u64, u32, done))), size, bar)
                pipe.wait(b, deadline=ctx.deadline, name="chunk_in")
                pipe.advance(b)
                for peer in b.range(0, ctx.world, name="dst"):
                    with b.if_then(b.setp("ne", u32, peer, ctx.rank, name="is_peer")):
                        dst = b.add(u64, b.add(u64, ctx.layouts["a"].peer(b, peer), first), b.cvt(u64, u32, done))
                        b.bulk_store(address(dst), address(buf), size)
                b.bulk_commit_group()
            publish_async_writes(b)
            for peer in b.range(0, ctx.world, name="dst"):
                stamp(b, flag_address(b, ctx.layouts["ready"], peer, tm), ctx.epoch, sem=Sem.RELEASE, scope=Scope.SYS)

    parts = gemm.roles(g, store=gemm.store_c(g), tile=own_rows_first, before_a=await_rows)

    def tile_counter(ctx):
        """ready[tiles_m] on this rank: the tiles drawn in this launch."""
        return flag_address(ctx.b, ctx.layouts["ready"], ctx.rank, ctx.p.tiles_m)

    def epilogue(ctx):
        publish_async_writes(ctx.b)                  # this block's C stores are written, before the release
        ctx.b.bar_sync(0)
        # nobody overwrites A rows a peer still reads; the tile counter is 0 again for the next launch
        close_barrier(ctx, 1, multicast=False, leave=((tile_counter(ctx), 0),))

    return t.build(**parts, comm_tasks=comm_tasks, communicator=push_rows, epilogue=epilogue,
                   task_counter=tile_counter, comm_joins=True)


def reference(a_shards, b_local, b_layout: str = "nk") -> np.ndarray:
    return gemm.reference(np.concatenate(a_shards, axis=0), b_local, b_layout)


def catalog():
    yield build(Config())
