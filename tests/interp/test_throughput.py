"""The throughput figure's benchmark runs (the figure itself is measured, not asserted: CI machines are shared)."""
from __future__ import annotations

from pkptx.interp.throughput import measure


def test_throughput_benchmark_runs():
    r = measure(ops=30, threads=64)
    assert r["steps"] == 2 * (30 + 11) and r["per_cpu_s"] > 0         # 2 warps, 30 ops + 11 around them
