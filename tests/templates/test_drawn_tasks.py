"""Drawn tasks (``Template.build``'s task_counter / comm_counter) and joined roles, on the CPU interpreter:
every task runs exactly once whatever the grid and the split into communicators, blocks that join run
the other side's tasks, the counters are 0 again after each launch (two launches with the same
arguments), and :func:`gemm_parts.grouped_position` inverts :func:`gemm_parts.tile_of`. Plus the
build-time refusals of combinations that cannot work."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pkptx.errors import PTXBuildError
from pkptx.interp import World
from pkptx.isa import Param, address, u32, u64
from pkptx.templates.gemm_parts import grouped_position, tile_of
from pkptx.templates.lcsc import Template
from pkptx.templates.progress import FLAGS, close_barrier, flag_words

PARAMS = (Param("compute_runs", u64, pointer=True), Param("comm_runs", u64, pointer=True),
          Param("positions", u64, pointer=True), Param("counters", u64, pointer=True), Param("tiles_m", u32),
          Param("tiles_n", u32), Param("comm_count", u32))


def _word(b, ptr, index):
    return address(b.mad(u64, b.cvt(u64, u32, index), 4, ptr, mode="lo"))


def build(group_m: int, *, mirrored: bool):
    """Compute tasks are the tiles of a tiles_m x tiles_n grid: the first consumer thread counts the task's
    run and writes the grouped position of its tile; communicator tasks count theirs. ``mirrored``: the
    communicators draw too and the compute blocks join them; else the communicators walk their stride
    and then join the compute side."""
    t = Template(f"drawn_tasks_g{group_m}{'_m' if mirrored else ''}", params=PARAMS, layouts=(FLAGS,),
                 comm_first=not mirrored, consumers=1)

    def counter(i):
        return lambda ctx: ctx.b.add(u64, ctx.p.counters, 4 * i)

    def loader(ctx, task):
        pass                           # the loader only draws

    def consumer(ctx, task):
        b = ctx.b
        with b.if_then(b.setp("eq", u32, ctx.role_tid, 0)):
            b.red("add", u32, _word(b, ctx.p.compute_runs, task), 1, space="global")
            tm, tn = tile_of(ctx, task, group_m)
            b.st(u32, _word(b, ctx.p.positions, task), grouped_position(ctx, tm, tn, group_m), space="global")

    def communicator(ctx, task):
        b = ctx.b
        with b.if_then(b.setp("eq", u32, ctx.tid, 0)):
            b.red("add", u32, _word(b, ctx.p.comm_runs, task), 1, space="global")

    def num_tasks(ctx):
        return ctx.b.mul(u32, ctx.p.tiles_m, ctx.p.tiles_n, mode="lo")

    def epilogue(ctx):
        close_barrier(ctx, 1, multicast=False, leave=((counter(0)(ctx), 0), (counter(1)(ctx), 0)))

    joins = dict(comm_counter=counter(1), compute_joins=True) if mirrored else dict(comm_joins=True)
    return t.build(num_tasks=num_tasks, loader=loader, consumer=consumer, comm_tasks=lambda ctx: ctx.p.comm_count,
                   communicator=communicator, epilogue=epilogue, task_counter=counter(0), **joins)


@settings(max_examples=6, deadline=None)
@given(tiles_m=st.integers(1, 5), tiles_n=st.integers(1, 4), group_m=st.sampled_from([1, 2, 8]),
       comm=st.integers(0, 5), grid=st.integers(2, 4), mirrored=st.booleans())
def test_every_task_runs_once_and_the_counters_are_left_at_zero(tiles_m, tiles_n, group_m, comm, grid, mirrored):
    world = World(1, seed=tiles_m * 7 + tiles_n)
    m = world.machine
    kernel = build(group_m, mirrored=mirrored)
    tasks = tiles_m * tiles_n
    num_comm = min(grid - 1, 1 + comm % 2)
    flags = world.symmetric((flag_words(1),), np.uint32, name="flags", fill=0)
    buffers = {name: m.alloc(4 * max(size, 1), name=name, fill=0) for name, size in
               (("compute_runs", tasks), ("comm_runs", comm), ("positions", tasks), ("counters", 2))}
    for launch in (1, 2):
        args = dict({n: a.base for n, a in buffers.items()}, tiles_m=tiles_m, tiles_n=tiles_n, comm_count=comm,
                    rank=0, world=1, status=m.alloc(32, name="status", fill=0).base, timeout_ns=10**9,
                    num_comm_sms=num_comm, flags_peers=flags.peer_table(0), flags_mc=0)
        world.launch(0, kernel, grid, kernel.req_threads[0], *(args[p.name] for p in kernel.params))
        world.run()
        assert list(buffers["compute_runs"].read(np.uint32, (tasks,))) == [launch] * tasks
        assert list(buffers["comm_runs"].read(np.uint32, (max(comm, 1),)))[:comm] == [launch] * comm
        assert list(buffers["positions"].read(np.uint32, (tasks,))) == list(range(tasks))
        assert list(buffers["counters"].read(np.uint32, (2,))) == [0, 0]


def _toy(**build_args):
    t = Template("refused", params=PARAMS, layouts=(FLAGS,), consumers=1)
    return t.build(num_tasks=lambda ctx: ctx.p.tiles_m, loader=lambda ctx, task: None,
                   consumer=lambda ctx, task: None, comm_tasks=lambda ctx: ctx.p.comm_count,
                   communicator=lambda ctx, task: None,
                   epilogue=lambda ctx: close_barrier(ctx, 1, multicast=False), **build_args)


def _counter(ctx):
    return ctx.p.counters


@pytest.mark.parametrize("build_args, message", [
    (dict(comm_joins=True), "comm_joins needs a task_counter"),
    (dict(task_counter=_counter, compute_joins=True), "compute_joins needs a task_counter and a comm_counter"),
    (dict(task_counter=_counter, comm_counter=_counter, compute_joins=True, comm_joins=True), "not comm_joins"),
])
def test_joining_without_counters_is_refused_at_build(build_args, message):
    with pytest.raises(PTXBuildError, match=message):
        _toy(**build_args)


def test_drawn_tasks_need_a_loader():
    t = Template("refused", params=PARAMS, layouts=(FLAGS,), consumers=1)
    with pytest.raises(PTXBuildError, match="drawn tasks need a loader"):
        t.build(num_tasks=lambda ctx: ctx.p.tiles_m, consumer=lambda ctx, task: None, task_counter=_counter,
                epilogue=lambda ctx: close_barrier(ctx, 1, multicast=False))
