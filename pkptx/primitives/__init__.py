"""Device-side building blocks that emit several instructions each; every docstring shows the PTX."""
from .mbarrier import StageRing, wait_parity

__all__ = ["StageRing", "wait_parity"]
