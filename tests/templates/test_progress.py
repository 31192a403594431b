"""Forward progress (pkptx.templates.progress): a model of the ticket and barrier protocol under any
residency, and checks that every catalogued kernel and host op follows the rule.

The model runs several ranks' launches of each kernel shape (collective, GEMM+RS, AG+GEMM, GEMM+AR) with
the device's counters and host totals, a residency cap per rank (an MPS share, or other work holding
SMs) as small as one block, and a random choice of which resident block moves next. It must never
deadlock, and every barrier must mean what it says.
"""
from __future__ import annotations

import ast
import random
from importlib import import_module
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from pkptx.catalog import KERNEL_MODULES
from tests.primitives import ptxscan as S

ROOT = Path(__file__).resolve().parents[2]


class Deadlock(AssertionError):
    pass


class Rank:
    def __init__(self, world: "World", index: int, grid: int, cap: int):
        self.world, self.index, self.grid, self.cap = world, index, grid, cap
        self.barrier = 0              # counter 0: peers add to it
        self.started = self.finished = 0
        self.barrier_total = self.launch_total = 0
        self.flags: dict = {}         # ready / done flags of the fused shapes
        self.launches = 0
        self.pending = 0              # blocks of the current launch not yet started
        self.running: list = []
        self.work_done = 0


class World:
    """The shapes' device code as generators; each ``yield cond`` blocks until ``cond()``."""

    def __init__(self, shape: str, grids, caps, ncomm: int, tasks: int, rng: random.Random):
        self.shape, self.ncomm, self.tasks, self.rng = shape, ncomm, tasks, rng
        self.ranks = [Rank(self, r, g, c) for r, (g, c) in enumerate(zip(grids, caps))]
        self.rounds = 2 if shape in ("collective", "gemm_rs") else 1
        self.started_ranks: set = set()

    # ------------------------------------------------------------------ device code
    def signal_all(self):
        for peer in self.ranks:
            peer.barrier += 1

    def block(self, me: Rank, base_barrier: int, base_launch: int, launch: int):
        w = len(self.ranks)
        ticket = me.started - base_launch
        me.started += 1
        if ticket == 0:
            self.started_ranks.add((me.index, launch))
        if self.shape in ("collective", "gemm_rs"):               # open_barrier
            if ticket == 0:
                self.signal_all()
            yield lambda: me.barrier - (base_barrier + w) >= 0
            assert all((r, launch) in self.started_ranks for r in range(w)), "opened before every rank started"
        yield from self.role(me, ticket, launch)
        me.work_done += 1
        order = me.finished - base_launch                          # close_barrier
        me.finished += 1
        if order + 1 == me.grid:
            self.signal_all()
            yield lambda: me.barrier - (base_barrier + self.rounds * w) >= 0
            assert all(r.work_done >= (launch + 1) * r.grid for r in self.ranks), "closed before every block finished"

    def role(self, me: Rank, ticket: int, launch: int):
        w, ncomm, grid = len(self.ranks), self.ncomm, me.grid
        epoch = launch + 1
        if self.shape == "ag_gemm":                                 # communicators first: they never wait
            if ticket < ncomm:
                for blk in range(ticket, self.tasks, ncomm):        # push own row block blk everywhere
                    for peer in self.ranks:
                        peer.flags[("ready", me.index, blk)] = epoch
                return
            worker, workers = ticket - ncomm, grid - ncomm
            for task in range(worker, self.tasks * w, workers):
                owner, blk = divmod(task, self.tasks)
                if owner != me.index:
                    yield lambda o=owner, k=blk: me.flags.get(("ready", o, k), 0) >= epoch
        elif self.shape == "gemm_ar":                               # communicators last: they wait
            workers = grid - ncomm
            if ticket < workers:
                for tile in range(ticket, self.tasks, workers):
                    owner = self.ranks[tile % w]
                    owner.flags[("done", tile)] = owner.flags.get(("done", tile), 0) + 1
                return
            for tile in range(w * (ticket - workers) + me.index, self.tasks, w * ncomm):
                yield lambda t=tile: me.flags.get(("done", t), 0) >= epoch * w
        else:
            yield lambda: True

    # ------------------------------------------------------------------ host and scheduler
    def launch(self, me: Rank) -> None:
        base_barrier, base_launch = me.barrier_total, me.launch_total
        me.pending, launch = me.grid, me.launches
        me.starter = lambda: self.block(me, base_barrier, base_launch, launch)
        me.barrier_total += self.rounds * len(self.ranks)
        me.launch_total += me.grid
        me.launches += 1

    def run(self, launches: int) -> None:
        for r in self.ranks:
            self.launch(r)
        while True:
            for r in self.ranks:                                    # fill free slots in start order
                while r.pending and len(r.running) < r.cap:
                    gen = r.starter()
                    r.pending -= 1
                    r.running.append([gen, None])
            movable = [(r, b) for r in self.ranks for b in r.running if b[1] is None or b[1]()]
            if not movable:
                if all(not r.running and not r.pending for r in self.ranks):
                    if all(r.launches == launches for r in self.ranks):
                        return
                raise Deadlock(f"{self.shape}: no resident block can move")
            r, blk = self.rng.choice(movable)
            try:
                blk[1] = next(blk[0])
            except StopIteration:
                r.running.remove(blk)
                if not r.running and not r.pending and r.launches < launches:
                    self.launch(r)


@settings(max_examples=300, deadline=None)
@given(shape=st.sampled_from(["collective", "gemm_rs", "ag_gemm", "gemm_ar"]), w=st.integers(1, 4),
       data=st.data(), seed=st.integers(0, 2**31))
def test_protocol_never_deadlocks_at_any_residency(shape, w, data, seed):
    ncomm = data.draw(st.integers(1, 3), label="ncomm")
    grids = [data.draw(st.integers(ncomm + 1, 9), label="grid") for _ in range(w)]
    caps = [data.draw(st.integers(1, g), label="resident") for g in grids]
    tasks = data.draw(st.integers(1, 12), label="tasks")
    World(shape, grids, caps, ncomm, tasks, random.Random(seed)).run(launches=3)


def test_the_model_catches_a_barrier_over_blocks():
    """The old barrier (every block of every rank arrives, then waits) deadlocks once a rank cannot hold
    its whole grid: the model must see that, or it proves nothing."""
    class EveryBlock(World):
        def block(self, me, base_barrier, base_launch, launch):
            self.signal_all()
            yield lambda: me.barrier - (base_barrier + sum(r.grid for r in self.ranks)) >= 0
            me.work_done += 1
            me.finished += 1
    world = EveryBlock("collective", [4, 4], [4, 2], 1, 1, random.Random(0))
    world.rounds = 4    # the host total of that scheme (every block of every rank, once)
    with pytest.raises(Deadlock):
        world.run(launches=1)


# ------------------------------------------------------------------ the rule, checked on the code
def test_host_ops_size_grids_from_the_context():
    """No op or template reads the device's SM count: under MPS or beside other work the context has
    fewer; grids come from pkptx.launch.occupancy."""
    offenders = []
    for path in sorted((ROOT / "pkptx" / "ops").glob("*.py")) + sorted((ROOT / "pkptx" / "templates").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("sm_count", "MULTIPROCESSOR_COUNT"):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


@pytest.mark.parametrize("module", KERNEL_MODULES)
def test_every_waiting_kernel_takes_its_roles_from_tickets(module):
    """A catalogued kernel with a flag wait must take a launch ticket before its first wait (so its
    roles follow start order, not %ctaid)."""
    for kernel in import_module(module).catalog():
        lines, spins = S.spin_loops(kernel.render())
        flag_waits = [lp for lp in spins if "wait_flag" in lp.head]
        if not flag_waits:
            continue
        ticket = next((i for i, line in enumerate(lines) if "%ticket_raw" in line and "atom" in line), None)
        assert ticket is not None, kernel.name
        assert all(ticket < lp.start for lp in flag_waits), kernel.name
