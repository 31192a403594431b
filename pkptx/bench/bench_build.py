"""Build-time benchmark: emit a ~1000-instruction kernel, assemble it cold, then again from the cache.

Goal (issue 2): under 1 s cold, under 10 ms from the cache. No GPU needed.
``python -m pkptx bench build [--record]``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from ..isa import Kernel, Param, address, f32, u32, u64
from ..toolchain import assemble, build_cached, nvjitlink_version
from .common import report


def build_kernel(instructions: int = 1000, salt: int = 0) -> Kernel:
    """A straight-line-plus-loops kernel of about ``instructions`` instructions (salt changes the PTX)."""
    k = Kernel(f"bench_build_{salt}", [Param("x", u64, pointer=True), ("n", u32)], max_threads=256)
    b = k.builder()
    x, n = b.load_param("x"), b.load_param("n")
    tid = b.special("tid.x")
    p = b.add(u64, x, b.mul(u32, tid, 4, mode="wide"))
    acc = b.ld(f32, address(p), space="global")
    while k.instruction_count < instructions - 8:
        with b.if_then(b.setp("lt", u32, tid, n)):
            v = b.fma(f32, acc, float(salt + 1), 0.5, rnd="rn")
            b.max(f32, b.mul(f32, v, acc), acc, into=acc)   # into: acc stays written on every path
            b.st(f32, address(p, 4 * (k.instruction_count % 64)), acc, space="global")
    b.ret()
    return k


def measure(repeats: int = 5) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        os.environ["PKPTX_CACHE_DIR"] = cache
        emit_ms, cold_ms, warm_ms, rebuild_ms = [], [], [], []
        for salt in range(repeats):
            t0 = time.perf_counter()
            k = build_kernel(salt=salt)
            ptx = k.render()
            t1 = time.perf_counter()
            cold = assemble(ptx, k.target)
            t2 = time.perf_counter()
            warm = assemble(ptx, k.target)
            t3 = time.perf_counter()
            assert not cold.from_cache and warm.from_cache and warm.data == cold.data
            build_cached(build_kernel, salt=salt)             # first time: emits, assembles from cache
            t4 = time.perf_counter()
            again = build_cached(build_kernel, salt=salt)     # now: neither emits nor assembles
            t5 = time.perf_counter()
            assert again.cubin.from_cache and again.cubin.data == cold.data and again.ptx == ptx
            rebuild_ms.append((t5 - t4) * 1e3)
            emit_ms.append((t1 - t0) * 1e3)
            cold_ms.append((t2 - t1) * 1e3)
            warm_ms.append((t3 - t2) * 1e3)
    return {"instructions": k.instruction_count, "emit_ms": statistics.median(emit_ms),
            "assemble_cold_ms": statistics.median(cold_ms), "assemble_cached_ms": statistics.median(warm_ms),
            "build_cached_ms": statistics.median(rebuild_ms)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--record", action="store_true", help="append the result to bench/RESULTS.md")
    args = parser.parse_args(argv)
    assemble(build_kernel(10).render(), "sm_90", use_cache=False)      # load nvJitLink once
    r = measure()
    rows = [["emit PTX with the builder", r["emit_ms"], ""],
            ["assemble, cold cache (nvJitLink)", r["assemble_cold_ms"], ""],
            ["emit + assemble cold", r["emit_ms"] + r["assemble_cold_ms"], "< 1000"],
            ["assemble the same PTX again (cubin cache)", r["assemble_cached_ms"], ""],
            ["build_cached: same factory and config again (no emit, no assemble)", r["build_cached_ms"], "< 10"]]
    report(f"Build and assemble a {r['instructions']}-instruction kernel (no GPU)", ["step", "ms", "goal"], rows,
           f"Median of 5; nvJitLink {nvjitlink_version()}.", args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
