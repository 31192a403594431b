"""A progress bar for long benchmark sweeps, on stderr and only where someone watches it.

It shows when stderr is a terminal, or when ``PKPTX_PROGRESS=1`` (what ``python -m pkptx bench`` sets
for the ranks it starts from a terminal, whose stderr is a pipe); ``PKPTX_PROGRESS=0`` turns it off.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Iterable, Iterator, TextIO, TypeVar

PROGRESS_ENV = "PKPTX_PROGRESS"
WIDTH = 30
T = TypeVar("T")


def enabled(stream: TextIO) -> bool:
    """Whether a bar drawn on ``stream`` would be seen (the environment decides first)."""
    value = os.environ.get(PROGRESS_ENV, "").strip()
    if value in ("0", "1"):
        return value == "1"
    return stream.isatty()


def bar(label: str, done: int, total: int, seconds: float) -> str:
    """One frame: ``label [#####-----] done/total  seconds``."""
    filled = WIDTH * done // max(total, 1)
    return f"\r{label} [{'#' * filled}{'-' * (WIDTH - filled)}] {done}/{total} {seconds:5.0f} s"


def progress(items: Iterable[T], label: str, *, show: bool = True, stream: TextIO | None = None) -> Iterator[T]:
    """Yield ``items``, drawing a bar before each and a full one after the last (``show=False``: only
    yield them, as on every rank but rank 0)."""
    items = list(items)
    stream = stream or sys.stderr
    draw = show and enabled(stream)
    t0 = time.monotonic()
    for done, item in enumerate(items):
        if draw:
            stream.write(bar(label, done, len(items), time.monotonic() - t0))
            stream.flush()
        yield item
    if draw:
        stream.write(bar(label, len(items), len(items), time.monotonic() - t0) + "\n")
        stream.flush()
