"""Collectives along tensor dimensions as copies of *runs*, and the index math they share.

A run is a stretch of elements that is contiguous both where it is read and where it is written:
all-gather and reduce-scatter along dim ``d`` move rows of ``mid * inner`` elements, all-to-all moves
blocks from the later of its scatter and gather dims down. Each rank's work is a grid of
``rows_hi x rows_lo`` rows of ``run`` units (a unit is ``width`` bytes: 16, 8, 4 or 2), and unit ``u``
is read and written at (in units)::

    row, j = divmod(u, run);  hi, lo = divmod(row, rows_lo)
    src = hi * src_hi + lo * src_lo + j + src_base  (+ d * src_peer when sending to rank d)
    dst = hi * dst_hi + lo * dst_lo + j + dst_base

Two row levels are enough for every case (all-to-all between dims a < g: rows (p, j*Q + q)).
The host computes the rank-dependent terms (``src_base``, ``dst_base``) for its own rank, so the device
code holds no world-size constant: one cubin per unit width serves every shape and world size.
The width is the widest that divides the run's bytes (:func:`unit_bytes`); every stride and base is
a multiple of the run, so every access is aligned and a row never ends inside a unit.

Ordering (the same for every run collective): data moves with weak ``ld.global`` / ``st.global`` on
peer addresses, between the two cross-rank barriers of :mod:`.collective`. The opening one (thread 0:
``red.release.sys`` to every rank, ``ld.acquire.sys`` on its own flag; then ``bar.sync``) means every
rank's inputs are written and no rank still reads the outputs we are about to write (its previous
work on the stream is done). The closing one (``bar.sync``, then thread 0's release, cumulative over
the CTA's writes, and acquire) means every rank's stores into this rank's output are visible when its
kernel ends, and no peer still reads this rank's input. Loads are not ``.nc``: in place, the kernel
writes the buffer it reads (each element only by the thread that read it, see the model tests).

:class:`RunMap` and :func:`thread_units` are the pure-Python model (the tests check, with hypothesis,
that each output element is written once, from the right source); :func:`build_runs` emits the device
code that follows it exactly: thread ``t`` of communicator block ``k`` moves units
``task * threads + t`` for ``task in range(k, ceil(units / threads), nblocks)``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from ..isa import Param, u32, u64
from ..primitives.p2p import UNIT_ACCESS
from . import schedule
from .collective import build_collective, collective_template

WIDTHS = tuple(sorted(UNIT_ACCESS, reverse=True))     # 16, 8, 4, 2 bytes
MAX_UNITS = (1 << 32) - (1 << 16)                      # unit indices are u32, with room for a task of threads
_COUNTS = ("units", "run", "rows_lo")                  # u32 parameters, in units and rows
_BYTES = ("src_hi", "src_lo", "src_base", "src_peer", "dst_hi", "dst_lo", "dst_base")   # u64, in bytes
PARAMS = tuple(Param(n, u32) for n in _COUNTS) + tuple(Param(n, u64) for n in _BYTES)


def normalize_dim(dim, ndim: int) -> int:
    """``dim`` in ``0 .. ndim-1`` (negative counts from the end); ValueError when out of range."""
    if isinstance(dim, bool) or not isinstance(dim, int) or not -ndim <= dim < ndim:
        raise ValueError(f"dim must be an int in {-ndim}..{ndim - 1} for a {ndim}-D tensor, got {dim!r}")
    return dim % ndim


def split_at(shape, dim: int) -> tuple[int, int, int]:
    """(outer, mid, inner): the tensor viewed around ``dim``."""
    return math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:])


def unit_bytes(run_bytes: int) -> int:
    """The widest unit (16, 8, 4 or 2 bytes) dividing a run of ``run_bytes``."""
    return next(w for w in WIDTHS + (1,) if run_bytes % w == 0)


@dataclass(frozen=True)
class RunMap:
    """One rank's runs (see the module docstring); in elements from the kernel modules, in units after
    :meth:`in_units`."""
    rows_hi: int
    rows_lo: int
    run: int
    src_hi: int
    src_lo: int
    src_base: int
    src_peer: int
    dst_hi: int
    dst_lo: int
    dst_base: int

    @property
    def units(self) -> int:
        return self.rows_hi * self.rows_lo * self.run

    def offsets(self, unit):
        """(src, dst) of ``unit`` (an int or a numpy array of them): what the device computes."""
        row, j = unit // self.run, unit % self.run
        hi, lo = row // self.rows_lo, row % self.rows_lo
        return (hi * self.src_hi + lo * self.src_lo + j + self.src_base,
                hi * self.dst_hi + lo * self.dst_lo + j + self.dst_base)

    def in_units(self, elements: int) -> "RunMap":
        """The same map counted in units of ``elements`` elements (each length must divide)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        scaled = {k: v if k.startswith("rows") else v // elements for k, v in values.items()}
        bad = [k for k, v in values.items() if not k.startswith("rows") and v % elements]
        if bad:
            raise ValueError(f"RunMap.in_units({elements}): {', '.join(bad)} not a multiple of the unit")
        return RunMap(**scaled)

    def args(self, width: int) -> dict:
        """Kernel parameter values: counts in units and rows, strides and bases in bytes."""
        return {"units": self.units, "run": self.run, "rows_lo": self.rows_lo,
                **{k: getattr(self, k) * width for k in _BYTES}}


def peer_order(rank: int, world: int) -> list[int]:
    """The ranks in the order a rank visits them: itself, then the next ones, wrapping (staggered, so
    the ranks do not all hit rank 0 first)."""
    return [(rank + i) % world for i in range(world)]


def thread_units(units: int, threads: int, nblocks: int):
    """Yield ``(block, thread, unit)`` arrays: which thread of which block moves which unit, as the
    template's communicator loop assigns them (every block a communicator)."""
    split, ntasks = schedule.Split(nblocks, nblocks), -(-units // threads)
    lanes = np.arange(threads)
    for block in range(nblocks):
        tasks = np.array(schedule.comm_tasks(split, block, ntasks), dtype=np.int64)
        unit = (tasks[:, None] * threads + lanes[None, :]).ravel()
        thread = np.broadcast_to(lanes, (len(tasks), threads)).ravel()
        keep = unit < units
        yield np.full(int(keep.sum()), block), thread[keep], unit[keep]


# ------------------------------------------------------------------------------------- device code
def peers(b, rank, world):
    """``for d in peer_order(rank, world)`` on the device: ``d = rank + i; if d >= world: d -= world``."""
    for i in b.range(0, world, name="hop"):
        d = b.add(u32, rank, i, name="peer_rank")
        b.sub(u32, d, world, into=d, pred=b.setp("ge", u32, d, world, name="wraps"))
        yield d


def build_runs(name: str, layouts, move, *, width: int, threads: int, multicast: bool):
    """A collective over :data:`PARAMS`: between the two rank barriers, thread ``t`` of communicator
    block ``k`` calls ``move(ctx, src, dst)`` (u64 byte offsets from the module docstring's formulas,
    ``src_peer`` not yet added) for each of its units."""

    def comm_tasks(ctx):
        b = ctx.b
        return b.div(u32, b.add(u32, ctx.p.units, threads - 1), threads, name="ntasks")

    def communicator(ctx, task):
        b = ctx.b
        unit = b.mad(u32, task, threads, ctx.role_tid, mode="lo", name="unit")
        with b.if_then(b.setp("lt", u32, unit, ctx.p.units)):
            row = b.div(u32, unit, ctx.p.run, name="row")
            j = b.sub(u32, unit, b.mul(u32, row, ctx.p.run, mode="lo"), name="j")
            hi = b.div(u32, row, ctx.p.rows_lo, name="hi")
            lo = b.sub(u32, row, b.mul(u32, hi, ctx.p.rows_lo, mode="lo"), name="lo")
            hi, lo, at = (b.cvt(u64, u32, hi), b.cvt(u64, u32, lo), b.mul(u32, j, width, mode="wide"))

            def offset(side):
                base = b.add(u64, at, ctx.p[f"{side}_base"])
                return b.mad(u64, hi, ctx.p[f"{side}_hi"],
                             b.mad(u64, lo, ctx.p[f"{side}_lo"], base, mode="lo"), mode="lo", name=side)

            move(ctx, offset("src"), offset("dst"))

    template = collective_template(name, PARAMS, layouts, threads=threads)
    return build_collective(template, comm_tasks=comm_tasks, communicator=communicator, multicast=multicast)
