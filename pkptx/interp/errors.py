"""What the interpreter raises: every error names the Python line that emitted the instruction."""
from __future__ import annotations

from ..errors import PkptxError


class InterpError(PkptxError):
    """A kernel did something the interpreter refuses: ``where`` names rank, block, warp, lanes and the
    instruction with the Python ``file:line`` that emitted it."""

    def __init__(self, message: str, where: str = ""):
        self.where = where
        super().__init__(f"{message}\n  at {where}" if where else message)


class UnsupportedError(InterpError):
    """An instruction (or a form of one) the interpreter does not model."""


class MemoryFault(InterpError):
    """An access outside every allocation, or not aligned to its size."""


class UninitializedRead(InterpError):
    """A read of bytes nothing ever wrote (``check_uninit=True``)."""


class RaceError(InterpError):
    """A read or write not ordered after a conflicting access of another thread (happens-before)."""


class DeadlockError(InterpError):
    """No warp of any rank can make progress; the message lists what each waiting warp waits for."""


class StepLimitError(InterpError):
    """The run executed more warp-instructions than ``max_steps``."""
