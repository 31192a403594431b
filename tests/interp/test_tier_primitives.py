"""CI tier under the interpreter: the primitives' property tests (tests/primitives/programs) at world sizes
1 to 4: their test kernels, their hypothesis strategies and references, on an interpreter World instead
of GPU processes (fewer and smaller cases: the ring exchange with signal/wait/barrier, the unicast vector
reduce, and 1-D bulk copies and reductions between ranks)."""
from __future__ import annotations


import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from .harness import Ranks

from tests.primitives.programs import harness as gpu_harness
from tests.primitives.programs import prim_kernels as P
from tests.primitives.programs import primitives_program as PP

CASES = settings(max_examples=15, deadline=None, derandomize=True, database=None,
                 suppress_health_check=list(HealthCheck))
WORLDS = st.integers(1, 4)
U32 = np.uint32
REGION = 64 * 1024        # bytes per rank of the bulk buffers (the GPU program uses 2 MiB)


@CASES
@given(w=WORLDS, c=PP.rings())
def test_signal_wait_ring(w, c):
    """Every round reads the previous rank's token; counters end at base + launches * rounds * step."""
    ranks = Ranks(w, seed=c["seed"])
    slots = PP.MAX_BLOCKS * P.MAX_ROUNDS
    flags = ranks.symmetric((PP.MAX_BLOCKS,), U32, "ring flags")
    data = ranks.symmetric((2 * slots,), U32, "data", fill=0)
    outs = [ranks.world.machine.alloc(8 * slots, name="out", rank=r, fill=0xFF, written=True) for r in range(w)]
    step = {"peer": c["value"], "all": c["value"] * w, "barrier": w}[c["form"]]
    for r in range(w):
        flags.write(r, np.full(PP.MAX_BLOCKS, c["base"], U32))
    for n in range(c["launches"]):          # one stream per rank: launch n + 1 after launch n
        for r in range(w):
            ranks.launch(r, P.ring(c["form"], c["sem"]), 32, grid=c["nblocks"], layouts=dict(flags=flags, data=data),
                         rounds=c["rounds"], base=(c["base"] + n * c["rounds"] * step) % 2**32, value=c["value"],
                         slot0=n * slots, tag=n + 1, out=outs[r].base)
        ranks.run()
    for r in range(w):
        want = np.full(2 * slots, 0xFFFFFFFF, U32)
        for n in range(c["launches"]):
            for blk in range(c["nblocks"]):
                for j in range(c["rounds"]):
                    want[n * slots + blk * P.MAX_ROUNDS + j] = ((n + 1) << 24) + (((r - 1) % w) << 16) + (blk << 8) + j + 1
        assert np.array_equal(outs[r].read(U32), want), f"rank {r}"
        final = np.full(PP.MAX_BLOCKS, c["base"], U32)
        final[:c["nblocks"]] = (c["base"] + c["launches"] * c["rounds"] * step) % 2**32
        assert np.array_equal(flags.read(r), final), f"rank {r}"


@CASES
@given(w=WORLDS, c=PP.vectors().filter(lambda c: c["n_vec"] <= 300))
def test_vector_reduce(w, c):
    """f32 accumulation in rank order, rounded once, bit for bit; poison after the reduced vectors."""
    dtype, n_vec = c["dtype"], c["n_vec"]
    dt = gpu_harness.DTYPES[dtype]
    per_vec = 16 // dt.itemsize
    count = (n_vec + 8) * per_vec
    ranks = Ranks(w, seed=c["seed"])
    src, dst = ranks.symmetric((count,), dt, "src"), ranks.symmetric((count,), dt, "dst")
    rng = np.random.default_rng(c["seed"])
    inputs = [gpu_harness.normal(rng, (count,), dtype) for _ in range(w)]
    write_all = c["mode"] == "all_reduce"
    for r in range(w):
        src.write(r, inputs[r])
        dst.write(r, gpu_harness.poisoned((count,), dtype))
        per = -(-n_vec // w)
        first, todo = (min(r * per, n_vec), max(0, min(per, n_vec - min(r * per, n_vec)))) if write_all else (0, n_vec)
        if todo:
            ranks.launch(r, P.vector_reduce(dtype, c["op"], write_all), P.VEC_THREADS, grid=-(-todo // P.VEC_THREADS),
                         layouts=dict(src=src, dst=dst), first=first, count=todo)
    ranks.run()
    want = gpu_harness.poisoned((count,), dtype)
    m = n_vec * per_vec
    want[:m] = PP.reduce_reference([x[:m] for x in inputs], c["op"], dtype)
    for r in range(w):
        assert np.array_equal(gpu_harness.raw(dst.read(r)), gpu_harness.raw(want)), f"rank {r}"


def _small(c: dict) -> dict:
    """A bulk case moved into REGION bytes (same size and alignment, offsets folded in)."""
    n = min(c["nbytes"], REGION // 2)
    room = (REGION - n) // 16 + 1
    return dict(c, nbytes=n, src_off=16 * (c["src_off"] // 16 % room), dst_off=16 * (c["dst_off"] // 16 % room))


@CASES
@given(data=st.data(), w=WORLDS)
def test_bulk_copy_and_reduce(data, w):
    """Rank r copies (or reduces) rank (r + sshift)'s source range into rank dst_of(r)'s destination."""
    c = _small(data.draw(PP.bulks(w)))
    dtype, op, n = c["dtype"], c["op"], c["nbytes"]
    dt = gpu_harness.DTYPES[dtype]
    count = REGION // dt.itemsize
    ranks = Ranks(w, seed=c["seed"])
    a, b = ranks.symmetric((count,), dt, "a"), ranks.symmetric((count,), dt, "b")
    rng = np.random.default_rng(c["seed"])
    srcs = [gpu_harness.normal(rng, (count,), dtype) for _ in range(w)]
    inits = [gpu_harness.normal(rng, (count,), dtype) if op else gpu_harness.poisoned((count,), dtype)
             for _ in range(w)]

    def dst_of(s):
        return c["target"] if c["target"] is not None else (s + c["dshift"]) % w
    for r in range(w):
        a.write(r, srcs[r])
        b.write(r, inits[r])
        ranks.launch(r, P.bulk(op, dtype if op else "b32"), 32, grid=1, smem=n + P.SMEM_SLACK,
                     layouts=dict(src=a, dst=b), src_rank=(r + c["sshift"]) % w, dst_rank=dst_of(r),
                     src_off=c["src_off"], dst_off=c["dst_off"], nbytes=n)
    ranks.run()
    i0, i1 = c["dst_off"] // dt.itemsize, (c["dst_off"] + n) // dt.itemsize
    j0, j1 = c["src_off"] // dt.itemsize, (c["src_off"] + n) // dt.itemsize
    raw = gpu_harness.raw
    for r in range(w):
        got = b.read(r)
        parts = [srcs[(s + c["sshift"]) % w][j0:j1] for s in range(w) if dst_of(s) == r]
        outside = np.ones(count, bool)
        if parts:
            outside[i0:i1] = False
        assert np.array_equal(raw(got)[outside], raw(inits[r])[outside]), f"rank {r}: bytes outside the range"
        if not parts:
            continue
        if op is None:              # copies: one sender per destination (dshift is a rotation)
            assert np.array_equal(raw(got[i0:i1]), raw(parts[0])), f"rank {r}: copy"
            continue
        exact = inits[r][i0:i1].astype(np.float64)
        for p in parts:
            exact = gpu_harness.combine(op, exact, p.astype(np.float64))
        if op == "add":
            mag = np.abs(inits[r][i0:i1].astype(np.float64)) + sum(np.abs(p.astype(np.float64)) for p in parts)
            ok = gpu_harness.within(got[i0:i1], exact, mag, len(parts), dtype)
            assert ok.all(), f"rank {r}: {gpu_harness.bound_failure(got[i0:i1], exact, ok)}"
        else:
            assert np.array_equal(raw(got[i0:i1]), raw(exact.astype(dt))), f"rank {r}: {op}"
