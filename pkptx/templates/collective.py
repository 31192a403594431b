"""What every collective kernel shares: one launch that opens and closes with a cross-rank barrier
on an epoch flag array, and a communicator-only LCSC template.

The host keeps the flag's running total (``barrier_base``: its value before this launch). In round
``k`` of a launch every block of every rank adds 1 on every rank, so the round is complete when the
flag reaches ``barrier_base + k * world * nblocks`` (wrap-safe). No flag is ever reset.
"""
from __future__ import annotations

from ..isa import Param, u32
from ..primitives.layout import ParallelLayout
from ..primitives.sync import barrier
from .lcsc import Ctx, Template

FLAGS = ParallelLayout("flags")
ROUNDS_PER_LAUNCH = 2


def rank_barrier(ctx: Ctx, round_in_launch: int, *, multicast: bool) -> None:
    """Thread 0 of each block meets every block of every rank; then the block's threads resume."""
    b = ctx.b
    base = ctx.param("barrier_base")             # loaded on every thread's path: a later call reuses it
    with b.if_then(b.setp("eq", u32, ctx.tid, 0, name="barrier_thread")):
        nblocks = b.special("nctaid.x")
        participants = b.mul(u32, ctx.world, nblocks, mode="lo", name="participants")
        expected = b.mad(u32, participants, round_in_launch, base, mode="lo", name="expected")
        barrier(b, ctx.layouts[FLAGS.name], 0, expected, rank=ctx.rank, world=ctx.world, scope="sys",
                deadline=ctx.deadline, multicast=multicast)
    b.bar_sync(0)


def collective_template(name: str, params, layouts, *, threads: int) -> Template:
    return Template(name, tuple(params) + (Param("barrier_base", u32),), tuple(layouts) + (FLAGS,),
                    comm_threads=threads)


def build_collective(template: Template, *, comm_tasks, communicator, multicast: bool):
    """The kernel: barrier (inputs everywhere ready), the communicator over its tasks, barrier (every
    rank done reading and writing peers' buffers).

    Multicast kernels reach memory through two virtual addresses (unicast before and after the kernel,
    ``multimem`` inside it), so every thread also fences that alias: ``fence.proxy.alias`` after the
    opening barrier's ``bar.sync`` (before its first multimem access) and before an extra ``bar.sync``
    ahead of the closing barrier (after its last one), so thread 0's release covers every thread's
    multimem writes.
    """
    def prologue(ctx):
        rank_barrier(ctx, 1, multicast=multicast)
        if multicast:
            ctx.b.fence_proxy_alias()

    def epilogue(ctx):
        if multicast:
            ctx.b.fence_proxy_alias()
            ctx.b.bar_sync(0)
        rank_barrier(ctx, 2, multicast=multicast)

    return template.build(comm_tasks=comm_tasks, communicator=communicator, prologue=prologue,
                          epilogue=epilogue)
