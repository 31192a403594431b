"""Ulysses attention in one persistent launch: the all-to-all from sequence-sharded to head-sharded Q/K/V,
attention on this rank's heads, and the all-to-all back, overlapped head group by head group.

Rank r holds rows [r·S, (r+1)·S) of every head; it computes heads [r·H/W, (r+1)·H/W) (K/V heads
[r·H_kv/W, ..)) over the whole sequence. A head group is one K/V head and its H/H_kv query heads.

Communicators (the first ``num_comm_sms`` tickets; they wait only on other ranks' ticket 0) push pieces:
(batch, head group g, destination d != r, a block of R rows): the group's Q heads and its K and V head
for those rows are TMA-loaded from this rank's inputs (unswizzled boxes) into shared memory and
TMA-stored into d's gathered buffers (``qg``/``kg``/``vg``: (B, world, S, heads of d, D), slot r) through
d's tensor maps, then d's flag of (batch, r, g) is raised (``cp.async.bulk.wait_group 0;
fence.proxy.async.global; red.release.sys``). Pieces go head group by head group, so the compute blocks,
whose tasks run in the same order, start on a head group as soon as its slices are in; a loader
acquire-waits a (batch, source, group) flag for ``n · row_pieces`` in the n-th launch before it TMA-loads
that source's rows (its own rows it reads from its inputs directly). Before its first push, a communicator
waits until every rank's ticket 0 has said its launch started (so no previous call still reads the
buffers). n is read on entry from arrive[LAUNCHES], the count of launches done on this rank, as in
:mod:`.ring_attention`, so the arguments never change between launches.

A finished task (batch, head, query shard s, query block) stores O straight into rank s's output at the
head's global index through s's tensor map, and its LSE into s's ``lse``: the return all-to-all rides on
the epilogue while other heads are still computing. The launch ends with a barrier over ranks (every
store into this rank's output has landed). Causal: key shard k of query shard s is full (k < s),
diagonal (k = s) or skipped.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...isa import Param, Scope, Sem, address, b8, f32, u32, u64
from ...primitives import Pipeline, store_async
from ...primitives.layout import ParallelLayout
from ...primitives.p2p import TensorMapTable
from ...primitives.sync import flag_address, publish_async_writes, signal, wait
from ...primitives.tma import tensor_map_param
from ..lcsc import WINDOW_SLACK, Buffer, Ring
from . import attention
from . import ring_attention
from .ring_attention import (PEER_FLAG, STARTED, PeerPlan, announce_start, await_starts, close_launch, communicating,
                             later_deadline, run_diag)

ARRIVE, LSE = ParallelLayout("arrive"), ParallelLayout("lse")
MAPS = tuple(TensorMapTable(n) for n in ("qg", "kg", "vg", "o"))
PARAMS = tuple(Param(f"tmap_{t}", b8, 128, 64) for t in ("q", "k", "v", "qs", "ks", "vs")) + (
    Param("tasks", u32), Param("q_blocks", u32), Param("heads", u32),
    Param("local_heads", u32), Param("local_kv_heads", u32), Param("group", u32), Param("seq", u32),
    Param("piece_rows", u32), Param("row_pieces", u32), Param("pieces", u32), Param("piece_bytes", u32),
    Param("scale_log2", f32))


@dataclass(frozen=True)
class Config(ring_attention.Config):
    prefix = "ulysses"


def group_flag(b, ctx, batch, src, g):
    """arrive[STARTED + world + (batch·world + src)·local_kv_heads + g]: pieces of (batch, src, head group
    g) here."""
    slot = b.mad(u32, batch, ctx.world, src, mode="lo", name="src_slot")
    first = b.add(u32, ctx.world, STARTED, name="first_group_flag")
    return b.add(u32, b.mad(u32, slot, ctx.p.local_kv_heads, g, mode="lo"), first, name="group_flag")


def await_group(ctx, batch, src, g, deadline) -> None:
    """Every piece of (batch, src, g) is here: acquire, then order it before the TMA reads of it."""
    b = ctx.b
    expected = b.mul(u32, ctx.launch, ctx.p.row_pieces, mode="lo", name="group_pieces")
    wait(b, flag_address(b, ctx.layouts["arrive"], ctx.rank, group_flag(b, ctx, batch, src, g)), expected,
         sem=Sem.ACQUIRE, scope=Scope.SYS, deadline=deadline, flag_id=b.or_("b32", src, PEER_FLAG, name="awaited_rank"))
    b.fence_proxy_async("global")


class UlyssesPlan(PeerPlan):
    """Tasks (batch, local head, query shard, query block), head groups in order, the last block first
    (drawn in this order by whichever block is free); runs of keys shard by shard, this rank's own first."""

    def task(self, ctx, task) -> attention.Task:
        b, world, rank = ctx.b, ctx.world, ctx.rank
        q_blocks, local_heads, seq = ctx.p.q_blocks, ctx.p.local_heads, ctx.p.seq
        qb = b.sub(u32, b.sub(u32, q_blocks, 1), b.rem(u32, task, q_blocks), name="qb")
        rest = b.div(u32, task, q_blocks, name="task_rest")
        sq = b.rem(u32, rest, world, name="q_shard")
        bh = b.div(u32, rest, world, name="bh")
        batch, head = b.div(u32, bh, local_heads, name="batch"), b.rem(u32, bh, local_heads, name="head")
        own = b.setp("eq", u32, sq, rank, name="own_rows")
        global_head = b.mad(u32, rank, local_heads, head, mode="lo", name="global_head")
        q_head = b.selp(u32, global_head, head, own, name="q_head")
        q_slot = b.selp(u32, 0, sq, own, name="q_slot")
        lse_rows = b.mul(u32, b.mad(u32, batch, ctx.p.heads, global_head, mode="lo"), seq, mode="lo",
                         name="lse_rows")

        def before_q():
            g = b.div(u32, head, ctx.p.group, name="head_group")
            deadline = later_deadline(ctx)
            with b.if_then(b.not_("pred", own, name="rows_from_peer")):
                await_group(ctx, batch, sq, g, deadline)

        return UlyssesTask(
            batch, head, qb, seq, lambda col, row: (col, q_head, row, q_slot, batch),
            lambda row: b.add(u32, lse_rows, row, name="lse_index"),
            q_map=lambda: b.selp(u64, tensor_map_param(b, "tmap_q"), tensor_map_param(b, "tmap_qg_local"), own,
                                 name="tmap_q_task"),
            before_q=before_q, o_map=lambda: ctx.tmaps["o"].of(b, sq),
            o_coords=lambda col, row: (col, global_head, row, batch),
            lse_ptr=ctx.layouts["lse"].peer(b, sq, name="lse_task"),
            q_shard=sq)

    def keys(self, ctx, t, body, *, loader: bool) -> None:
        b, world, rank, seq = ctx.b, ctx.world, ctx.rank, ctx.p.seq
        if loader:
            kv_head = b.div(u32, t.head, ctx.p.group, name="kv_head")
            global_kv = b.mad(u32, rank, ctx.p.local_kv_heads, kv_head, mode="lo", name="global_kv_head")
            maps = {x: (tensor_map_param(b, f"tmap_{x}"), tensor_map_param(b, f"tmap_{x}g_local")) for x in "kv"}
            deadline = later_deadline(ctx)
        neg_seq = b.neg("s32", seq, name="skip_run")
        for step in b.range(0, world, name="run"):
            src = b.rem(u32, b.add(u32, rank, step), world, name="src")
            if self.cfg.causal:
                diag = run_diag(b, src, t.q_shard, seq, neg_seq)
            else:
                diag = seq
            if not loader:
                body(attention.Keys(seq, diag))
                continue
            own = b.setp("eq", u32, step, 0, name="own_keys")
            with b.if_then(b.not_("pred", own, name="keys_from_peer")):
                await_group(ctx, t.batch, src, kv_head, deadline)
            head = b.selp(u32, global_kv, kv_head, own, name="k_head")
            slot = b.selp(u32, 0, src, own, name="k_slot")
            tmaps = {x: b.selp(u64, maps[x][0], maps[x][1], own, name=f"tmap_{x}_run") for x in "kv"}
            body(attention.Keys(seq, diag, tmaps.__getitem__, lambda col, key, head=head, slot=slot: (
                col, head, key, slot, t.batch)))


@dataclass(frozen=True)
class UlyssesTask(attention.Task):
    q_shard: object = None     # whose rows the task's queries are


def build(cfg: Config = Config()):
    lanes = push_lanes(cfg.attention)
    lane_bytes = lane_buffer_bytes(cfg.attention)
    t, parts = communicating(cfg, UlyssesPlan(cfg), announce=announce_start,
                             params=PARAMS + tuple(Param(f"tmap_{x}g_local", b8, 128, 64) for x in "qkv"),
                             layouts=(ARRIVE, LSE), tensor_maps=MAPS,
                             comm_buffers=(Buffer("push_staging", lanes * lane_bytes, 1024),),
                             rings=lambda base: base.rings + (Ring("push", lanes, 1),))

    def comm_tasks(ctx):
        return ctx.b.div(u32, ctx.b.add(u32, ctx.p.pieces, lanes - 1), lanes, name="push_tasks")

    def push(ctx, task):
        """Pieces task·lanes + lane (batch, head group, destination, row block), one per lane thread, each
        through its own shared-memory buffer and barrier, so the lanes' copies overlap: load the
        piece's Q, K and V boxes, store them into the destination's slot for this rank, raise the
        destination's group flag."""
        b = ctx.b
        lane = ctx.tid
        piece = b.mad(u32, task, lanes, lane, mode="lo", name="piece")
        pusher = b.setp("lt", u32, lane, lanes, name="pusher")
        with b.if_then(b.setp("lt", u32, piece, ctx.p.pieces, combine="and", c=pusher, name="real_piece")):
            world, rank, row_pieces = ctx.world, ctx.rank, ctx.p.row_pieces
            rb = b.rem(u32, piece, row_pieces, name="piece_rows_block")
            rest = b.div(u32, piece, row_pieces, name="piece_rest")
            peers = b.sub(u32, world, 1, name="peers")
            dest = b.rem(u32, b.add(u32, b.add(u32, rank, 1), b.rem(u32, rest, peers)), world, name="dest")
            rest = b.div(u32, rest, peers, name="piece_rest")
            local_kv = ctx.p.local_kv_heads
            g, batch = b.rem(u32, rest, local_kv, name="piece_group"), b.div(u32, rest, local_kv, name="piece_batch")
            row = b.mul(u32, rb, ctx.p.piece_rows, mode="lo", name="piece_row")
            with b.if_then(b.setp("eq", u32, task, ctx.ticket, name="first_task")):
                await_starts(ctx)
            group = ctx.p.group
            q_head = b.mad(u32, dest, ctx.p.local_heads, b.mul(u32, g, group, mode="lo"), mode="lo",
                           name="src_q_head")
            kv_head = b.mad(u32, dest, local_kv, g, mode="lo", name="src_kv_head")
            phase = b.carried(u32, 0, name="piece_phase")       # the lane's pieces through its buffer, over the tasks
            pipe = Pipeline.bounce(ctx.rings["push"].bar(b, lane), phase=phase)
            pipe.acquire(b)                               # the lane's last piece has left shared memory
            bar = pipe.commit(b, ctx.p.piece_bytes)
            q_buf = b.mad(u32, lane, lane_bytes, ctx.smem["push_staging"], mode="lo", name="push_buffer")
            k_buf = b.add(u32, q_buf, cfg.attention.q_bytes, name="push_k")
            boxes = (("q", q_buf, q_head, b.mul(u32, g, group, mode="lo", name="dst_q_head")),
                     ("k", k_buf, kv_head, g), ("v", b.add(u32, k_buf, cfg.attention.kv_bytes, name="push_v"), kv_head, g))
            for x, buf, src_head, _ in boxes:
                b.tensor_load(address(buf), tensor_map_param(b, f"tmap_{x}s"), (0, src_head, row, batch), bar)
            pipe.wait(b, deadline=ctx.deadline, name="piece_in")
            pipe.advance(b)
            for x, buf, _, dst_head in boxes:       # one bulk group: the last store commits it
                store_async(b, ctx.tmaps[f"{x}g"].of(b, dest), (0, dst_head, row, rank, batch), buf, commit=x == "v")
            publish_async_writes(b)
            signal(b, flag_address(b, ctx.layouts["arrive"], dest, group_flag(b, ctx, batch, rank, g)), 1,
                   sem=Sem.RELEASE, scope=Scope.SYS)

    def epilogue(ctx):
        """Every O/LSE store of this block has landed at its owner, then the ranks meet, so each rank's
        output is complete when its launch ends."""
        publish_async_writes(ctx.b)
        ctx.b.bar_sync(0)
        close_launch(ctx)

    return t.build(**parts, comm_tasks=comm_tasks, communicator=push, epilogue=epilogue)


def lane_buffer_bytes(cfg: attention.Config) -> int:
    """Shared memory of one push lane: a piece's Q rows (at most one Q buffer) and its K and V rows (at
    most one K/V stage each), 1024-aligned."""
    return -(-(cfg.q_bytes + 2 * cfg.kv_bytes) // 1024) * 1024


def push_lanes(cfg: attention.Config) -> int:
    """Pieces a communicator has in flight: as many lane buffers as the attention's window holds."""
    return max(1, (attention.template(cfg).dynamic_smem - WINDOW_SLACK) // lane_buffer_bytes(cfg))


def piece_rows(group: int, cfg: attention.Config) -> int:
    """Rows per piece: the group's Q heads fill at most smem_q (cfg.rows·D 16-bit values), K and V one
    stage of smem_k / smem_v each."""
    return max(1, min(cfg.rows // group, cfg.block_k, 256))


def reference(q_shards, k_shards, v_shards, *, causal: bool, scale: float | None = None):
    """float64 (O, LSE) of every rank's (contiguous) shard: attention over the full sequence."""
    q, k, v = (np.concatenate(x, axis=1) for x in (q_shards, k_shards, v_shards))
    out, lse = attention.reference(q, k, v, causal=causal, scale=scale)
    world = len(q_shards)
    return np.split(out, world, axis=1), np.split(lse, world, axis=2)


def default_config(dtype: str, head_dim: int, causal: bool) -> Config:
    return ring_attention.default_config(dtype, head_dim, causal, kind=Config)


def catalog():
    for launched in ring_attention.LAUNCHED:
        yield build(default_config(*launched))
