"""The launch layer on the CPU interpreter inside a test process, chosen the way ``PKPTX_INTERPRET=1``
chooses it at a process's first driver call; afterwards the previous driver (and its caches) are back."""
from __future__ import annotations

import contextlib
import gc

import pytest


@contextlib.contextmanager
def interpreted_driver():
    """Yields the InterpretedDriver that ``PKPTX_INTERPRET=1`` selects, on a fresh interpreter machine."""
    import pkptx.launch.driver as pkdriver
    from pkptx.launch import Device
    from tests.launch.fake_launch import forget_fake_handles

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(pkdriver.INTERPRET_ENV, "1")
        mp.setattr(pkdriver, "_selected", None)
        mp.setattr(pkdriver, "_initialised", False)
        mp.setattr(Device, "_instances", {})
        forget_fake_handles()
        try:
            yield pkdriver.driver()
        finally:
            forget_fake_handles()       # free what the caches hold, and arrays in reference cycles (tracebacks),
            gc.collect()                # while the interpreter's driver is the one their frees reach
