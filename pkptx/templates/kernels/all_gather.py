"""All-gather along any dimension, in one launch, pushed: every rank writes its shard into every rank.

Around the gathered dim the shard is (outer, mid, inner) and the output (outer, world * mid, inner),
rank r's shard at mid-offset r * mid. Row o of the shard (``mid * inner`` contiguous elements) lands
at row ``o * world + r`` of the output: one run per row (:mod:`..runs`), so any dim is as cheap as
the leading one. In place, the shard already sits in its slot of rank r's output and is read there.

Each thread loads one unit from the local shard and stores it into every rank's output, visiting the
ranks from its own onwards (plain ``st.global`` into peer memory; the closing barrier publishes it:
ordering in :mod:`..runs`), or, with ``multicast``, stores it once to the output's multicast address
(``multimem.st.relaxed.sys.v4``, the switch fans it out; 16-byte units only; relaxed suffices because
the closing barrier's release orders it, after the ``fence.proxy.alias`` that
:func:`..collective.build_collective` adds to multicast kernels). A copy moves bits, so the cubin
depends only on the unit width, not on the dtype.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import PTXBuildError
from ...isa import Scope, Sem, address, f32, u64
from ...primitives.layout import ParallelLayout
from ...primitives.p2p import load_unit, store_unit
from ..runs import WIDTHS, RunMap, build_runs, peer_order, peers

SRC, DST = ParallelLayout("src"), ParallelLayout("dst")


@dataclass(frozen=True)
class Config:
    width: int = 16           # bytes per unit: the widest dividing a row's bytes (the host picks it)
    multicast: bool = False
    threads: int = 512

    def __post_init__(self):
        if self.width not in WIDTHS:
            raise PTXBuildError(f"all_gather Config.width must be one of {WIDTHS}, got {self.width!r}")
        if self.multicast and self.width != 16:
            raise PTXBuildError("all_gather Config.multicast needs width 16 (multimem.st.v4.f32)")


def run_map(outer: int, mid: int, inner: int, world: int, rank: int, *, in_place: bool) -> RunMap:
    """Rank ``rank``'s runs, in elements: row o goes from shard row o (or, in place, output row
    ``o * world + rank``) to output row ``o * world + rank`` on every rank."""
    row = mid * inner
    return RunMap(rows_hi=1, rows_lo=outer, run=row,
                  src_hi=0, src_lo=world * row if in_place else row, src_base=rank * row if in_place else 0,
                  src_peer=0, dst_hi=0, dst_lo=world * row, dst_base=rank * row)


def build(cfg: Config):
    def push(ctx, src, dst):
        b, mine = ctx.b, ctx.layouts["src"].peer(ctx.b, ctx.rank, name="shard")
        if cfg.multicast:
            v = b.ld(f32, address(b.add(u64, mine, src)), space="global", vec=4, name="v")
            b.multimem_st(f32, address(b.add(u64, ctx.layouts["dst"].mc, dst)), v, sem=Sem.RELAXED, scope=Scope.SYS)
            return
        words = load_unit(b, b.add(u64, mine, src), cfg.width)
        for d in peers(b, ctx.rank, ctx.world):
            store_unit(b, b.add(u64, ctx.layouts["dst"].peer(b, d), dst), words, cfg.width)

    name = f"all_gather_w{cfg.width}{'_mc' if cfg.multicast else ''}"
    return build_runs(name, [SRC, DST], push, width=cfg.width, threads=cfg.threads, multicast=cfg.multicast)


def stores(m: RunMap, unit, rank: int, world: int):
    """The pure-Python twin of ``push``: ``(dst rank, dst unit, [(src rank, src unit)])`` per store."""
    src, dst = m.offsets(unit)
    return [(d, dst, [(rank, src)]) for d in peer_order(rank, world)]


def reference(shards: list[np.ndarray], dim: int) -> np.ndarray:
    """What every rank's output holds."""
    return np.concatenate(shards, axis=dim)


def catalog():
    for width in WIDTHS:
        yield build(Config(width=width))
    yield build(Config(width=16, multicast=True))
