"""Reduce-scatter along any dimension, in one launch, pulled: each rank reduces its own slice from
every rank.

Around the scattered dim the input is (outer, world * mid, inner) on every rank and rank r's output
(outer, mid, inner) = op over ranks p of input_p[:, r*mid:(r+1)*mid, :]. Row o of the slice is input
row ``o * world + r``, ``mid * inner`` contiguous elements: one run per row (:mod:`..runs`). In place,
the result goes into that same slice of rank r's input (no one else reads it, so no extra barrier).

Each thread loads one unit from every rank (weak loads: the opening barrier's acquire makes the
inputs visible; ordering in :mod:`..runs`), reduces in f32 (16-bit inputs rounded once at the end),
and stores it locally; with ``multicast`` one ``multimem.ld_reduce.relaxed.sys`` replaces the world
loads (16-byte units; the switch has no f32 min/max; the ``fence.proxy.alias`` after the opening
barrier orders it after the inputs' unicast writes). The closing barrier keeps every rank's input
alive until all peers have read it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import PTXBuildError
from ...primitives.layout import ParallelLayout
from ...primitives import reduce
from ..runs import WIDTHS, RunMap, build_runs

SRC, DST = ParallelLayout("src"), ParallelLayout("dst")
DTYPES = ("bf16", "f16", "f32")
OPS = ("sum", "max", "min")
ITEMSIZE = {"bf16": 2, "f16": 2, "f32": 4}


def switch_reduces(dtype: str, op: str, width: int) -> bool:
    """Whether ``multimem.ld_reduce`` can do this unit (the host's choice and Config's rule)."""
    return width == 16 and not (dtype == "f32" and op != "sum")


@dataclass(frozen=True)
class Config:
    dtype: str = "bf16"
    op: str = "sum"
    width: int = 16           # bytes per unit: the widest dividing a row's bytes (the host picks it)
    multicast: bool = False
    threads: int = 512

    def __post_init__(self):
        for name, value, legal in (("dtype", self.dtype, DTYPES), ("op", self.op, OPS)):
            if value not in legal:
                raise PTXBuildError(f"reduce_scatter Config.{name} must be one of {legal}, got {value!r}")
        if self.width not in WIDTHS or self.width < ITEMSIZE[self.dtype]:
            raise PTXBuildError(f"reduce_scatter Config.width must be one of {WIDTHS} and hold a "
                                f"{self.dtype}, got {self.width!r}")
        if self.multicast and not switch_reduces(self.dtype, self.op, self.width):
            raise PTXBuildError("reduce_scatter Config.multicast needs width 16 and not f32 min/max")


def run_map(outer: int, mid: int, inner: int, world: int, rank: int, *, in_place: bool) -> RunMap:
    """Rank ``rank``'s runs, in elements: input row ``o * world + rank`` (the same offset on every
    rank) into output row o (or, in place, back into input row ``o * world + rank``)."""
    row = mid * inner
    return RunMap(rows_hi=1, rows_lo=outer, run=row,
                  src_hi=0, src_lo=world * row, src_base=rank * row, src_peer=0,
                  dst_hi=0, dst_lo=world * row if in_place else row, dst_base=rank * row if in_place else 0)


def build(cfg: Config):
    def pull(ctx, src, dst):
        reduce(ctx.b, ctx.layouts["src"], src, ty=cfg.dtype, op=cfg.op, world=ctx.world, rank=ctx.rank,
               multicast=cfg.multicast, dst=ctx.layouts["dst"], dst_offset=dst, width=cfg.width)

    name = f"reduce_scatter_{cfg.dtype}_{cfg.op}_w{cfg.width}{'_mc' if cfg.multicast else ''}"
    return build_runs(name, [SRC, DST], pull, width=cfg.width, threads=cfg.threads, multicast=cfg.multicast)


def stores(m: RunMap, unit, rank: int, world: int):
    """The pure-Python twin of ``pull``: one local store, reduced from the same unit of every rank."""
    src, dst = m.offsets(unit)
    return [(rank, dst, [(p, src) for p in range(world)])]


def reference(inputs: list[np.ndarray], dim: int, op: str = "sum") -> list[np.ndarray]:
    """Every rank's output, reduced in float64."""
    stack = np.stack([x.astype(np.float64) for x in inputs])
    total = {"sum": stack.sum, "max": stack.max, "min": stack.min}[op](axis=0)
    return np.split(total, len(inputs), axis=dim)


def catalog():
    for dtype in DTYPES:
        yield build(Config(dtype=dtype))
    for width in (8, 4, 2):
        yield build(Config(dtype="bf16", width=width))
    yield build(Config(dtype="f32", op="max", width=4))
    yield build(Config(dtype="f16", op="min", width=8))
    yield build(Config(dtype="bf16", multicast=True))
