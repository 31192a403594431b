"""Kernel-side view of a parallel global layout (PGL): one buffer of the same shape on every rank.

A PGL named ``x`` adds two kernel parameters: ``x_peers`` (device address of a table of ``world`` u64
base addresses, entry ``i`` being rank i's copy as mapped into this process; its kind is the layout's
``table``: a peer table, or the heap's progress flags) and ``x_mc`` (the multicast address, 0 when
multicast is unavailable). Rank and world size are runtime parameters shared by all
PGLs of a kernel (:class:`WorldParams`), so one cubin serves every world size.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..isa import Builder, Kind, Param, Reg, address, u32, u64


@dataclass(frozen=True)
class WorldParams:
    """The ``rank`` and ``world`` kernel parameters."""

    @staticmethod
    def params() -> list[Param]:
        return [Param("rank", u32), Param("world", u32)]

    @staticmethod
    def load(b: Builder) -> tuple[Reg, Reg]:
        return b.load_param("rank"), b.load_param("world")


@dataclass(frozen=True)
class ParallelLayout:
    name: str
    table: Kind = Kind.PEER_TABLE

    def params(self) -> list[Param]:
        return [Param(f"{self.name}_peers", u64, pointer=True, kind=self.table),
                Param(f"{self.name}_mc", u64, kind=Kind.MULTICAST)]

    def bind(self, b: Builder) -> "BoundLayout":
        """Load the table address and multicast address once, at kernel start."""
        return BoundLayout(self, b.load_param(f"{self.name}_peers"), b.load_param(f"{self.name}_mc"))


@dataclass(frozen=True)
class BoundLayout:
    layout: ParallelLayout
    table: Reg
    mc: Reg

    def peer(self, b: Builder, rank, *, name: str | None = None) -> Reg:
        """Base address of ``rank``'s copy: ``ld.global.nc.u64 d, [table + 8*rank]`` (read-only path,
        cached in L1, so repeated lookups in a tile loop cost no HBM traffic)."""
        if isinstance(rank, int):
            return b.ld(u64, address(self.table, 8 * rank), space="global", nc=True,
                        name=name or f"{self.layout.name}_peer")
        offset = b.mul(u32, rank, 8, mode="wide")
        return b.ld(u64, address(b.add(u64, self.table, offset)), space="global", nc=True,
                    name=name or f"{self.layout.name}_peer")


def add_layout_params(kernel_params: list, *layouts: ParallelLayout) -> list:
    """``kernel_params`` + the world parameters + every layout's parameters, in a fixed order."""
    out = list(kernel_params) + WorldParams.params()
    for lay in layouts:
        out += lay.params()
    return out


__all__ = ["WorldParams", "ParallelLayout", "BoundLayout", "add_layout_params"]
