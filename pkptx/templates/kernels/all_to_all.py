"""All-to-all with a free scatter dim a and gather dim g, in one launch, pushed:
``Y_r[..., g-chunk s, ...] = X_s[..., a-chunk r, ...]`` (e.g. Ulysses, (B, S, H, D): scatter H, gather S).

Rank s sends a-chunk r of its input to rank r, which holds it at g-chunk s: the layout change happens
in the stores, so no reshape runs before or after. What moves are runs: from the later (inner) of the
two dims down, elements stay contiguous on both sides: ``G * I`` (all of the gather dim) when a < g,
``(A / world) * I`` (one a-chunk) otherwise, I the product of the dims after both. With P the
product of the dims before both and Q of those between, the rows are P x (A/world * Q) for a < g and
P x (G * Q) otherwise (:func:`run_map`; the index math in :mod:`..runs`).

Each thread, for each destination d (from its own rank onwards), loads its unit of a-chunk d
(``src + d * src_peer``) from the local input and stores it into d's output (plain ``st.global``
into peer memory; the closing barrier publishes it: ordering in :mod:`..runs`). Out of place only:
in place, peers' stores would overwrite chunks of rank r's input that rank r has yet to send.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...errors import PTXBuildError
from ...isa import u32, u64
from ...primitives.layout import ParallelLayout
from ...primitives.p2p import load_unit, store_unit
from ..runs import WIDTHS, RunMap, build_runs, peer_order, peers

SRC, DST = ParallelLayout("src"), ParallelLayout("dst")


@dataclass(frozen=True)
class Config:
    width: int = 16           # bytes per unit: the widest dividing a run's bytes (the host picks it)
    threads: int = 512

    def __post_init__(self):
        if self.width not in WIDTHS:
            raise PTXBuildError(f"all_to_all Config.width must be one of {WIDTHS}, got {self.width!r}")


def run_map(shape, scatter_dim: int, gather_dim: int, world: int, rank: int) -> RunMap:
    """Rank ``rank``'s runs, in elements, for input shape ``shape`` (dims already normalized)."""
    a, g = scatter_dim, gather_dim
    lo, hi = min(a, g), max(a, g)
    p, q, i = math.prod(shape[:lo]), math.prod(shape[lo + 1:hi]), math.prod(shape[hi + 1:])
    big_a, big_g = shape[a], shape[g]
    part = big_a // world                                       # a-chunk length
    if a == g:      # X (P, A, I) -> Y (P, A, I): chunk d of X_s to chunk s of Y_d; rows p
        run = part * i
        return RunMap(rows_hi=1, rows_lo=p, run=run, src_hi=0, src_lo=big_a * i, src_base=0, src_peer=run,
                      dst_hi=0, dst_lo=big_a * i, dst_base=rank * run)
    if a < g:       # X (P, A, Q, G, I) -> Y (P, A/w, Q, w*G, I); rows (p, j*Q + q)
        run = big_g * i
        return RunMap(rows_hi=p, rows_lo=part * q, run=run, src_hi=big_a * q * run, src_lo=run, src_base=0,
                      src_peer=part * q * run, dst_hi=part * q * world * run, dst_lo=world * run,
                      dst_base=rank * run)
    run = part * i  # g < a: X (P, G, Q, A, I) -> Y (P, w*G, Q, A/w, I); rows (p, gg*Q + q)
    return RunMap(rows_hi=p, rows_lo=big_g * q, run=run, src_hi=big_g * q * big_a * i, src_lo=big_a * i, src_base=0,
                  src_peer=run, dst_hi=world * big_g * q * run, dst_lo=run, dst_base=rank * big_g * q * run)


def out_shape(shape, scatter_dim: int, gather_dim: int, world: int) -> tuple[int, ...]:
    out = list(shape)
    out[scatter_dim] //= world
    out[gather_dim] *= world
    return tuple(out)


def build(cfg: Config):
    def push(ctx, src, dst):
        b, mine = ctx.b, ctx.layouts["src"].peer(ctx.b, ctx.rank, name="input")
        for d in peers(b, ctx.rank, ctx.world):
            chunk = b.mad(u64, b.cvt(u64, u32, d), ctx.p.src_peer, src, mode="lo", name="chunk")
            words = load_unit(b, b.add(u64, mine, chunk), cfg.width)
            store_unit(b, b.add(u64, ctx.layouts["dst"].peer(b, d), dst), words, cfg.width)

    return build_runs(f"all_to_all_w{cfg.width}", [SRC, DST], push, width=cfg.width, threads=cfg.threads,
                      multicast=False)


def stores(m: RunMap, unit, rank: int, world: int):
    """The pure-Python twin of ``push``: one store per destination, from its a-chunk."""
    src, dst = m.offsets(unit)
    return [(d, dst, [(rank, src + d * m.src_peer)]) for d in peer_order(rank, world)]


def reference(inputs: list[np.ndarray], scatter_dim: int, gather_dim: int) -> list[np.ndarray]:
    """Every rank's output: rank r gathers chunk r of every input along the gather dim."""
    world = len(inputs)
    return [np.concatenate([np.split(x, world, axis=scatter_dim)[r] for x in inputs], axis=gather_dim)
            for r in range(world)]


def catalog():
    for width in WIDTHS:
        yield build(Config(width=width))
