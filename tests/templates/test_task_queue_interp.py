"""The template's task queue (``Template(task_queue=True)``) on the CPU interpreter: whatever the grid,
the number of tasks and the order in which blocks run, every task is run exactly once by the loader lane
and once by every consumer warpgroup (so each block's consumers got the numbers its loader took), and
the counter gives out nothing past ``num_tasks`` besides one closing number a block."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pkptx.interp import Machine
from pkptx.isa import Param, Scope, Sem, address, u32, u64
from pkptx.templates.lcsc import Template

CONSUMERS = 2


def queue_kernel():
    """Loader lane: out_loader[task] += 1; each consumer warpgroup's first thread: out_consumer[task] += 1."""
    t = Template("queue_probe", params=(Param("queue", u64, pointer=True), Param("out_loader", u64, pointer=True),
                                        Param("out_consumer", u64, pointer=True), Param("tasks", u32)),
                 buffers=(), consumers=CONSUMERS, progress=False, task_queue=True)

    def count(b, name, task):
        addr = b.add(u64, b.load_param(name), b.mul(u32, task, 4, mode="wide"))
        b.red("add", u32, address(addr), 1, sem=Sem.RELAXED, scope=Scope.GPU, space="global")

    def loader(ctx, task):
        count(ctx.b, "out_loader", task)

    def consumer(ctx, task):
        b = ctx.b
        with b.if_then(b.setp("eq", u32, b.and_("b32", ctx.role_tid, 127), 0, name="wg_first")):
            count(b, "out_consumer", task)

    return t.build(num_tasks=lambda ctx: ctx.p.tasks, loader=loader, consumer=consumer,
                   queue=lambda ctx: ctx.p.queue)


KERNEL = queue_kernel()


@settings(max_examples=12, deadline=None)
@given(tasks=st.integers(0, 9), grid=st.integers(1, 4), seed=st.integers(0, 2**16), launches=st.integers(1, 2))
def test_every_task_once_whatever_the_grid(tasks, grid, seed, launches):
    m = Machine(seed=seed)
    queue = m.alloc(4, name="queue", fill=0)
    loads = m.alloc(4 * max(tasks, 1), name="loader", fill=0)
    uses = m.alloc(4 * max(tasks, 1), name="consumer", fill=0)
    status = m.alloc(32, name="status", fill=0)
    for _ in range(launches):
        queue.write(np.zeros(1, np.uint32))            # the kernel's epilogue would leave it at 0
        args = dict(queue=queue.base, out_loader=loads.base, out_consumer=uses.base,
                    tasks=tasks, rank=0, world=1, status=status.base, timeout_ns=10**9, num_comm_sms=0)
        m.launch(KERNEL, grid, KERNEL.req_threads[0], *(args[p.name] for p in KERNEL.params))
        m.run()
        assert int(queue.read(np.uint32)[0]) == tasks + grid       # one closing number a block
    assert not status.read(np.uint32).any(), status.read(np.uint32)
    if tasks:
        assert (loads.read(np.uint32, (tasks,)) == launches).all()
        assert (uses.read(np.uint32, (tasks,)) == launches * CONSUMERS).all()
