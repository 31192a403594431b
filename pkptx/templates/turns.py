"""Turns between consumer warpgroups (the ping-pong of FlashAttention-3 and of CUTLASS's ping-pong GEMM):
the warpgroups issue their matrix products one after the other, so one warpgroup's non-tensor work
(softmax, an epilogue) runs while the next one's products have the tensor cores. Left free, the
warpgroups drift into step and all wait on the same unit, then all do the other work at once."""
from __future__ import annotations

from dataclasses import dataclass

from ..isa import u32


@dataclass(frozen=True)
class Turns:
    """Warpgroup w takes its turn at named barrier ``FIRST + w`` (its 128 threads and the previous
    warpgroup's 128 arrivals) and hands the turn on by arriving at the next one's; the last warpgroup
    hands the first its first turn in the prologue. The turns go round in warpgroup order, so every
    warpgroup must take its turns in that order: in attention each takes the same number per task (the
    query block's K/V blocks), in the ping-pong GEMM each takes one per tile of its own and the tiles
    alternate. A turn handed on and never taken (the last one of a block) is left at its barrier when
    the block ends."""
    mine: object
    after: object
    FIRST = 8                    # past the staging barriers (1 .. consumers)

    @classmethod
    def of(cls, b, consumers: int, wg) -> "Turns":
        after = b.rem(u32, b.add(u32, wg, 1), consumers, name="next_wg")
        return cls(b.add(u32, wg, cls.FIRST, name="turn_barrier"), b.add(u32, after, cls.FIRST, name="next_turn"))

    @classmethod
    def start(cls, b, consumers: int, tid) -> None:
        """The last consumer warpgroup (warpgroup ``consumers``; 0 is the loader's) hands turn 0 on."""
        last = b.setp("eq", u32, b.shr(u32, tid, 7), consumers, name="last_consumer")
        b.bar_arrive(cls.FIRST, 256, pred=last)

    def take(self, b) -> None:
        """``bar.sync mine, 256``: wait for the previous warpgroup to hand the turn on."""
        b.bar_sync(self.mine, 256)

    def give(self, b) -> None:
        """``bar.arrive after, 256``: the next warpgroup may issue its products."""
        b.bar_arrive(self.after, 256)
