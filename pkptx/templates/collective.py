"""What every collective kernel shares: one launch that opens and closes with a cross-rank barrier
on an epoch flag array, and a communicator-only LCSC template.

The barriers count ranks, not blocks (:mod:`.progress`): ticket 0 of each rank opens, the last block of
each rank to finish closes, so the grid may be any size and needs no co-residency. Each rank's round
count lives in device memory and advances in the kernel, so the arguments never change between
calls and a captured graph replays correctly. No flag is ever reset.
"""
from __future__ import annotations

from .lcsc import Template
from .progress import FLAGS, close_barrier, open_barrier

ROUNDS_PER_LAUNCH = 2


def collective_template(name: str, params, layouts, *, threads: int) -> Template:
    return Template(name, tuple(params), tuple(layouts) + (FLAGS,), comm_threads=threads)


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
        open_barrier(ctx, multicast=multicast)
        if multicast:
            ctx.b.fence_proxy_alias()

    def epilogue(ctx):
        if multicast:
            ctx.b.fence_proxy_alias()
            ctx.b.bar_sync(0)
        close_barrier(ctx, 2, multicast=multicast)

    return template.build(comm_tasks=comm_tasks, communicator=communicator, prologue=prologue,
                          epilogue=epilogue)
