"""MoE dispatch fused with the first expert GEMM: one persistent launch (after the route launch of
:mod:`.moe_dispatch`) in which communicator blocks push token rows to the experts' owners while the
compute blocks run the grouped GEMM over the rows that have arrived.

Roles are fixed by launch ticket (:mod:`..progress`): the first ``num_comm_sms`` tickets are the
communicators (:func:`moe_dispatch.push_roles`, every warp's lane 0 a TMA pusher, the GEMM's stage
buffers as their row buffers); they never wait on another block while they push, so the compute
blocks, which do, wait only on blocks that have started (here, or on a peer). Tiles are drawn in the
grouped order from a counter (:func:`moe_dispatch.tile_counter`), first expert first as the rows
arrive, and a communicator that has pushed its rows draws tiles too: its SM computes for the rest of
the launch rather than idling once the dispatch is done. A compute tile waits, on its loader lane
before its first load, for the arrival counters of the 128-row blocks its rows touch (acquire,
bounded, then ``fence.proxy.async.global`` for the TMA reads); rows past its group's end that its
A box also covers are loaded but never stored, so they need no wait. The total of received rows
(route's last group end) tells each block how many rows it expects. The launch ends with the ranks'
closing barrier: no rank's next route resets counters or reuses buffers a peer still writes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...isa import address, s32, u32, u64
from ...primitives.sync import publish_async_writes
from ..progress import FLAGS, close_barrier
from . import grouped_gemm, moe_dispatch

THREADS = 384              # the GEMM's block: a producer and two consumer warpgroups
WARPS = THREADS // 32


@dataclass(frozen=True)
class Config:
    grouped: grouped_gemm.Config = grouped_gemm.Config(max_groups=32)

    @property
    def chunk(self) -> int:
        """Bytes each communicator warp moves per bulk copy: its share of the GEMM's stage buffers."""
        g = self.grouped.gemm
        return min(16384, g.stages * (g.a_bytes + g.b_bytes) // WARPS // 16 * 16)

    @property
    def name(self) -> str:
        return "moe_dispatch_" + self.grouped.name


def received_rows(ctx):
    """Rows this rank receives in all: route's end row of its last local expert, clamped to capacity."""
    b = ctx.b
    last = b.mad(u64, b.cvt(u64, u32, b.sub(u32, ctx.p.groups, 1)), 4, ctx.p.offsets, mode="lo")
    total = b.ld(s32, address(last), space="global", nc=True, name="received")
    return b.min(u32, b.cvt(u32, s32, b.max(s32, total, 0)), ctx.p.rows, name="received_rows")


def build(cfg: Config = Config()):
    t = grouped_gemm.template(cfg.grouped, cfg.name, params=moe_dispatch.PUSH_PARAMS,
                              layouts=(moe_dispatch.RECV, moe_dispatch.ARRIVALS, FLAGS), comm_first=True,
                              progress=True)
    t = moe_dispatch.with_pushers(t, WARPS, cfg.chunk)

    def await_rows(ctx, tile):
        b = ctx.b
        end = b.min(u32, b.add(u32, tile.row0, cfg.grouped.gemm.tile_m), tile.row_end, name="tile_rows_end")
        moe_dispatch.wait_rows(ctx, tile.row0, end, received_rows(ctx))

    def epilogue(ctx):
        publish_async_writes(ctx.b)           # this block's TMA stores (rows, or C) are written
        ctx.b.bar_sync(0)
        close_barrier(ctx, 1, multicast=False)

    return t.build(**grouped_gemm.roles(cfg.grouped, before_a=await_rows),
                   **moe_dispatch.push_roles(WARPS, cfg.chunk), epilogue=epilogue,
                   task_counter=lambda ctx: moe_dispatch.tile_counter(ctx, ctx.p.rows), comm_joins=True)


def reference(recv: np.ndarray, w_local: np.ndarray, offsets, b_layout: str = "nk") -> np.ndarray:
    """float64 expert outputs of the received rows."""
    return grouped_gemm.reference(recv, w_local, offsets, b_layout)


def catalog():
    yield build(Config())
