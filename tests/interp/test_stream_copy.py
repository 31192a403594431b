"""stream_copy (pkptx.primitives.stream) under the interpreter: any byte count, chunk, stage count and
lane split copies every byte exactly once and nothing past the end, also when one pipeline carries two
copies in a row (its count goes on across them), with u32 and u64 counts."""
from __future__ import annotations

import functools

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from pkptx.isa import Kernel, Param, u32, u64
from pkptx.primitives import Pipeline, StageRing
from pkptx.primitives.stream import stream_copy
from pkptx.primitives.sync import Deadline

from .harness import Ranks

CASES = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                 suppress_health_check=list(HealthCheck))
POISON = 0xA5


@functools.lru_cache(maxsize=None)
def copier(lanes: int, stages: int, chunk: int, wide: bool) -> Kernel:
    """Lane l of block g copies chunks g·lanes + l, stepping by grid·lanes, of two regions, one after the other."""
    count = u64 if wide else u32
    k = Kernel(f"stream_l{lanes}_s{stages}_c{chunk}_{'w' if wide else 'n'}",
               [Param("dst", u64, pointer=True), Param("src", u64, pointer=True), Param("nbytes", count),
                Param("dst2", u64, pointer=True), Param("src2", u64, pointer=True), Param("nbytes2", count),
                *Deadline.params()], req_threads=32, dynamic_smem=lanes * stages * chunk + 128)
    b = k.builder()
    tid = b.special("tid.x")
    bars = b.mov(u32, k.shared("bars", 8 * lanes * stages, align=8), name="bars")
    StageRing(bars, lanes * stages).init(b, 1, leader=b.setp("eq", u32, tid, 0))
    b.bar_sync(0)
    with b.if_then(b.setp("lt", u32, tid, lanes)):
        deadline = Deadline.start(b, rank=b.mov(u32, 0, name="rank"))
        own = StageRing(b.mad(u32, tid, 8 * stages, bars, mode="lo"), stages)
        buf = b.mad(u32, tid, stages * chunk, b.mov(u32, k.dynamic_shared(align=128)), mode="lo")
        pipe = Pipeline((own,), uses=b.mov(u32, 0, name="uses"))
        first = b.mad(u32, b.special("ctaid.x"), lanes, tid, mode="lo")
        stride = b.mul(u32, b.special("nctaid.x"), lanes, mode="lo")
        if wide:
            first, stride = b.cvt(u64, u32, first), b.cvt(u64, u32, stride)
        for suffix in ("", "2"):
            stream_copy(b, pipe, b.load_param(f"dst{suffix}"), b.load_param(f"src{suffix}"),
                        b.load_param(f"nbytes{suffix}"), chunk=chunk, buffer=buf, deadline=deadline, first=first,
                        stride=stride)
        b.bulk_wait_group(0)
    b.ret()
    return k


@CASES
@given(units=st.tuples(st.integers(0, 700), st.integers(1, 700)), chunk=st.sampled_from([16, 48, 256, 1024, 4096]),
       stages=st.integers(1, 4), lanes=st.integers(1, 4), grid=st.integers(1, 2), wide=st.booleans(),
       seed=st.integers(0, 2**16))
def test_stream_copy(units, chunk, stages, lanes, grid, wide, seed):
    ranks = Ranks(1, seed=seed)
    machine, rng = ranks.world.machine, np.random.default_rng(seed)
    args, want = {}, []
    for suffix, n in zip(("", "2"), units):
        host = rng.integers(0, 256, 16 * n, dtype=np.uint8)
        src = machine.from_numpy(host if n else np.zeros(16, np.uint8), name=f"src{suffix}", rank=0)
        dst = machine.alloc(16 * n + 64, name=f"dst{suffix}", rank=0, fill=POISON, written=True)
        args.update({f"src{suffix}": src.base, f"dst{suffix}": dst.base, f"nbytes{suffix}": 16 * n})
        want.append((dst, host))
    ranks.launch(0, copier(lanes, stages, chunk, wide), 32, layouts={}, grid=grid, **args)
    ranks.run()
    for dst, host in want:
        got = dst.read(np.uint8)
        assert np.array_equal(got[:host.size], host), "bytes differ"
        assert np.all(got[host.size:] == POISON), "written past the end"
