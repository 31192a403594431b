"""Device-side building blocks that emit several instructions each; every docstring shows the PTX.

ParallelKittens' eight primitives (pk-design 3), each with a unicast form wherever the multicast one
may be unavailable, and the mbarrier pipeline the roles of a block hand tiles over with.
"""
from .mbarrier import StageRing, wait_parity
from .p2p import store_add_async, store_async
from .pipeline import Pipeline, Slot, stage_phase
from .sync import barrier, signal, signal_all, wait
from .tile import all_reduce, reduce

__all__ = ["store_async", "store_add_async", "reduce", "all_reduce", "signal", "signal_all", "wait", "barrier",
           "Pipeline", "Slot", "stage_phase", "StageRing", "wait_parity"]
