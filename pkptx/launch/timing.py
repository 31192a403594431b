"""Kernel timing with CUDA events: warm-up, repeats, median/min/max, optional L2 flush.

The median is reported because one slow repeat (a clock change, another process) should not move
the figure; min and max show the spread. With ``flush_l2=True`` (see :func:`evict_l2`) a buffer of twice the L2 size is
written between repeats (outside the timed region), so each repeat starts with a cold cache. With
``hold_ns`` the GPU spins that long before each repeat's start event, so the host's own time for
``fn()`` (argument checks, launch) overlaps GPU work and the events time the GPU alone: a kernel-to-
kernel comparison, not what a Python caller waits. :func:`time_cuda_alternating` takes the repeats of
several functions in turn, so a comparison is not one side timed hot and the other cool.
"""
from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass

from ..errors import LaunchError
from .array import empty
from .device import Device, Event, as_stream

_flush_buffers: dict[int, object] = {}


@dataclass(frozen=True)
class Timing:
    samples_ms: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def min_ms(self) -> float:
        return min(self.samples_ms)

    @property
    def max_ms(self) -> float:
        return max(self.samples_ms)

    def __str__(self) -> str:
        return (f"median {self.median_ms * 1e3:.2f} us (min {self.min_ms * 1e3:.2f}, "
                f"max {self.max_ms * 1e3:.2f}, n={len(self.samples_ms)})")


def evict_l2(stream=None, device: Device | None = None) -> None:
    """Queue a write of 2x the L2 size on ``stream``, evicting whatever the L2 held."""
    s = as_stream(stream)
    device = device or s.device or Device.current()
    buf = _flush_buffers.get(device.ordinal)
    if buf is None:
        buf = _flush_buffers[device.ordinal] = empty(2 * device.l2_bytes, "uint8", device, s)
    buf.fill(0, s)


def spin_kernel(threads: int = 1, dynamic_smem: int = 0):
    """``spin(ns)``: each thread reads ``%globaltimer`` until ``ns`` nanoseconds have passed. With a large
    ``dynamic_smem`` its blocks hold whole SMs (the forward-progress tests' stand-in for other work)."""
    from ..isa import Kernel, Param, u64
    k = Kernel("spin" if threads == 1 and not dynamic_smem else f"spin_t{threads}_s{dynamic_smem}",
               [Param("ns", u64)], req_threads=threads, dynamic_smem=dynamic_smem)
    b = k.builder()
    end = b.add(u64, b.special("globaltimer"), b.load_param("ns"), name="end")
    with b.loop("spin") as lp:
        lp.break_if(b.setp("ge", u64, b.special("globaltimer"), end, name="done"))
    b.ret()
    return k


@functools.cache
def _spin_launcher(ordinal: int):
    from ..toolchain import build_cached
    from .launch import LoadedKernel
    return LoadedKernel.load(build_cached(spin_kernel), Device(ordinal))[1, 1]


def hold(stream, ns: int) -> None:
    """Queue ``ns`` nanoseconds of GPU spinning on ``stream``."""
    _spin_launcher(Device.current().ordinal)(ns, stream=stream)


def time_cuda(fn, *, stream=None, warmup: int = 3, repeats: int = 20, flush_l2: bool = False,
              hold_ns: int = 0) -> Timing:
    """Time ``fn()``, which must queue its work on ``stream``, ``repeats`` times after ``warmup`` calls."""
    return time_cuda_alternating((fn,), stream=stream, warmup=warmup, repeats=repeats, flush_l2=flush_l2,
                                 hold_ns=hold_ns)[0]


def time_cuda_alternating(fns, *, stream=None, warmup: int = 3, repeats: int = 20, flush_l2: bool = False,
                          hold_ns: int = 0) -> tuple[Timing, ...]:
    """Time each of ``fns`` as :func:`time_cuda` does, their repeats taken in turn (a, b, a, b, ...):
    a comparison in which both sides see the same clocks and heat, not one side's run after the other's."""
    if repeats < 1 or warmup < 0 or hold_ns < 0 or not fns:
        raise LaunchError(f"time_cuda(warmup={warmup}, repeats={repeats}, hold_ns={hold_ns}, {len(fns)} functions): "
                          "expected warmup >= 0, repeats >= 1, hold_ns >= 0 and at least one function")
    s = as_stream(stream)
    for fn in fns:
        for _ in range(warmup):
            fn()
    pairs = [[(Event(), Event()) for _ in range(repeats)] for _ in fns]
    for i in range(repeats):
        for fn, events in zip(fns, pairs):
            if flush_l2:
                evict_l2(s)
            if hold_ns:
                hold(s, hold_ns)
            events[i][0].record(s)
            fn()
            events[i][1].record(s)
    pairs[-1][-1][1].synchronize()
    return tuple(Timing(tuple(start.elapsed_ms(end) for start, end in events)) for events in pairs)
