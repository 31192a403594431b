"""Device-side building blocks that emit several instructions each; every docstring shows the PTX."""
from .mbarrier import StageRing, wait_parity
from .pipeline import Pipeline, Slot, stage_phase

__all__ = ["StageRing", "wait_parity", "Pipeline", "Slot", "stage_phase"]
