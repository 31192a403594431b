"""Under mpirun, every rank checks pkptx's collectives against numpy on hypothesis-chosen cases.

Every rank draws the same cases (derandomized hypothesis, no database) and builds every rank's input
from the case's seed, so each can compute the reference itself. A failing case is recorded, not
raised, so the ranks never diverge (hypothesis would shrink differently on each). Copies
(all-gather, all-to-all) must be bit-exact; reductions are checked against float64. Outputs start as
NaN, so an element nobody wrote shows. ``argv[1:]``, if given, names the collectives to run.
"""
from __future__ import annotations

import math
import os
import sys
import traceback

import ml_dtypes
import numpy as np
from hypothesis import given, strategies as st

from pkptx.launch import Device
from pkptx.launch.symmetric import SymmetricHeap
from pkptx.launch.world import World
from pkptx.ops import collectives
from pkptx.templates.kernels import all_gather, all_reduce, all_to_all, reduce_scatter
from tests.helpers.hog import hog_from_env
from tests.helpers.mpi import hyp, report

DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32}
BITS = {"bf16": np.uint16, "f16": np.uint16, "f32": np.uint32}
RTOL = {"bf16": 2.0 ** -7, "f16": 2.0 ** -10, "f32": 1e-5}
POISON = {"bf16": 0x7FC0, "f16": 0x7E00, "f32": 0x7FC00000}
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
MAX_ELEMENTS = 120_000
# Sizes: small odd ones (2-byte units, tails), powers of two (16-byte units), a few large.
SIZE = st.one_of(st.integers(1, 9), st.sampled_from([16, 24, 64, 128, 1000]))
SHAPE = st.lists(SIZE, min_size=1, max_size=4).map(tuple).filter(lambda s: math.prod(s) <= MAX_ELEMENTS // 4)
SETTINGS = hyp(25)


def inputs(seed: int, world: int, shape, dtype: str) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape, dtype=np.float32).astype(DTYPES[dtype]) for _ in range(world)]


def with_dim(shape, dim: int, factor: int):
    return shape[:dim] + (shape[dim] * factor,) + shape[dim + 1:]


def slot(shape, dim: int, world: int, rank: int) -> tuple:
    size = shape[dim] // world
    return (slice(None),) * dim + (slice(rank * size, (rank + 1) * size),)


def bit_mismatch(got: np.ndarray, want: np.ndarray, dtype: str) -> dict | None:
    """None when equal bit for bit, else where and how they differ."""
    bad = got.view(BITS[dtype]) != want.view(BITS[dtype])
    if not bad.any():
        return None
    i = np.unravel_index(int(np.argmax(bad)), bad.shape)
    return dict(bad=int(bad.sum()), first=[int(x) for x in i], got=float(got[i]), ref=float(want[i]))


def value_mismatch(got: np.ndarray, ref: np.ndarray, dtype: str, world: int) -> dict | None:
    got = got.astype(np.float64)
    bad = ~(np.abs(got - ref) <= RTOL[dtype] * (np.abs(ref) + np.sqrt(world)))
    if not bad.any():
        return None
    i = np.unravel_index(int(np.argmax(bad)), bad.shape)
    return dict(bad=int(bad.sum()), first=[int(x) for x in i], got=float(got[i]), ref=float(ref[i]))


class Harness:
    """Allocation, the host barriers around a case, and failure recording shared by every case."""

    def __init__(self, world, device, heap):
        self.world, self.device, self.heap = world, device, heap
        self.hog = hog_from_env()
        self.cases: dict[str, list] = {name: [] for name in COLLECTIVES}
        self.failures: dict[str, list] = {name: [] for name in COLLECTIVES}

    def run(self, name: str, case: dict, buffers: list[tuple], body) -> None:
        """Allocate ``buffers`` ((shape, dtype) each, in the same order on every rank), call
        ``body(*buffers)`` (returns a mismatch dict or None), record, free."""
        self.cases[name].append(case)
        bufs = []
        try:
            bufs = [self.heap.alloc(shape, DTYPES[dtype]) for shape, dtype in buffers]
            bad = body(*bufs)
            if bad:
                self.failures[name].append(dict(case, **bad))
        except Exception:
            self.failures[name].append(dict(case, error=traceback.format_exc()[-1500:]))
        finally:
            self.world.barrier(what=f"{name} case done")
            for buf in reversed(bufs):
                buf.free()

    def ready(self) -> None:
        """Inputs written on every rank before any rank launches (then, with ``PKPTX_TEST_HOG_MS``,
        half of the SMs taken by other work while the collective runs)."""
        self.device.synchronize()
        self.world.barrier(what="inputs written")
        self.hog()


def all_reduce_cases(h: Harness) -> None:
    world = h.world

    @SETTINGS
    @given(n=st.one_of(st.integers(1, 300), st.integers(1, 200_000)), dtype=st.sampled_from(sorted(DTYPES)),
           op=st.sampled_from(["sum", "max", "min"]), algorithm=st.sampled_from(["one_shot", "two_shot"]),
           seed=st.integers(0, 2**31))
    def case(n, dtype, op, algorithm, seed):
        data = inputs(seed, world.size, (n,), dtype)

        def body(src, dst=None):
            src.local.copy_from_numpy(data[world.rank])
            if dst is not None:
                dst.local.fill(POISON[dtype])
            h.ready()
            result = collectives.all_reduce(src, world, op=op, out=dst, algorithm=algorithm)
            collectives.synchronize(what=f"all_reduce n={n} {dtype} {op} {algorithm}")
            return value_mismatch(result.local.to_numpy(), all_reduce.reference(data, op), dtype, world.size)

        buffers = [((n,), dtype)] * (2 if algorithm == "one_shot" else 1)
        h.run("all_reduce", dict(n=n, dtype=dtype, op=op, algorithm=algorithm, seed=seed), buffers, body)

    case()


def all_gather_cases(h: Harness) -> None:
    world, w = h.world, h.world.size

    @SETTINGS
    @given(shard=SHAPE, data=st.data(), dtype=st.sampled_from(sorted(DTYPES)), in_place=st.booleans(),
           seed=st.integers(0, 2**31))
    def case(shard, data, dtype, in_place, seed):
        dim = data.draw(st.integers(-len(shard), len(shard) - 1), label="dim")
        d = dim % len(shard)
        out_shape = with_dim(shard, d, w)
        shards = inputs(seed, w, shard, dtype)
        want = all_gather.reference(shards, d)

        def body(out, buf=None):
            if in_place:
                start = np.full(out_shape, np.nan, DTYPES[dtype])
                start[slot(out_shape, d, w, world.rank)] = shards[world.rank]
                out.local.copy_from_numpy(start)
            else:
                buf.local.copy_from_numpy(shards[world.rank])
                out.local.fill(float("nan"))
            h.ready()
            collectives.all_gather(out if in_place else buf, world, dim=dim, out=out)
            collectives.synchronize(what=f"all_gather {shard} dim={dim} {dtype}")
            return bit_mismatch(out.local.to_numpy(), want, dtype)

        buffers = [(out_shape, dtype)] + ([] if in_place else [(shard, dtype)])
        h.run("all_gather", dict(shard=shard, dim=dim, dtype=dtype, in_place=in_place, seed=seed), buffers, body)

    case()


def reduce_scatter_cases(h: Harness) -> None:
    world, w = h.world, h.world.size

    @SETTINGS
    @given(part=SHAPE, data=st.data(), dtype=st.sampled_from(sorted(DTYPES)), op=st.sampled_from(["sum", "max", "min"]),
           in_place=st.booleans(), seed=st.integers(0, 2**31))
    def case(part, data, dtype, op, in_place, seed):
        dim = data.draw(st.integers(-len(part), len(part) - 1), label="dim")
        d = dim % len(part)
        shape = with_dim(part, d, w)
        xs = inputs(seed, w, shape, dtype)
        ref = reduce_scatter.reference(xs, d, op)[world.rank]

        def body(buf, out=None):
            buf.local.copy_from_numpy(xs[world.rank])
            if out is not None:
                out.local.fill(float("nan"))
            h.ready()
            collectives.reduce_scatter(buf, world, dim=dim, op=op, out=buf if in_place else out)
            collectives.synchronize(what=f"reduce_scatter {shape} dim={dim} {dtype} {op}")
            if not in_place:
                return value_mismatch(out.local.to_numpy(), ref, dtype, w)
            got, mine = buf.local.to_numpy(), slot(shape, d, w, world.rank)
            rest = got.copy()
            rest[mine] = xs[world.rank][mine]                 # everything outside the slot is untouched
            return value_mismatch(got[mine], ref, dtype, w) or bit_mismatch(rest, xs[world.rank], dtype)

        buffers = [(shape, dtype)] + ([] if in_place else [(part, dtype)])
        h.run("reduce_scatter", dict(shape=shape, dim=dim, dtype=dtype, op=op, in_place=in_place, seed=seed),
              buffers, body)

    case()


def all_to_all_cases(h: Harness) -> None:
    world, w = h.world, h.world.size

    @SETTINGS
    @given(base=SHAPE, data=st.data(), dtype=st.sampled_from(sorted(DTYPES)), seed=st.integers(0, 2**31))
    def case(base, data, dtype, seed):
        a = data.draw(st.integers(0, len(base) - 1), label="scatter_dim")
        g = data.draw(st.integers(0, len(base) - 1), label="gather_dim")
        shape = with_dim(base, a, w)
        out_shape = all_to_all.out_shape(shape, a, g, w)
        xs = inputs(seed, w, shape, dtype)
        want = all_to_all.reference(xs, a, g)[world.rank]

        def body(buf, out):
            buf.local.copy_from_numpy(xs[world.rank])
            out.local.fill(float("nan"))
            h.ready()
            collectives.all_to_all(buf, world, scatter_dim=a, gather_dim=g, out=out)
            collectives.synchronize(what=f"all_to_all {shape} a={a} g={g} {dtype}")
            return bit_mismatch(out.local.to_numpy(), want, dtype)

        h.run("all_to_all", dict(shape=shape, scatter_dim=a, gather_dim=g, dtype=dtype, seed=seed),
              [(shape, dtype), (out_shape, dtype)], body)

    case()


def ulysses_case(h: Harness) -> None:
    """The layout the paper benchmarks: (B, S, H, D), scatter H, gather S, 16-byte units."""
    world, w = h.world, h.world.size
    shape, dtype = (1, 64, 8 * w, 128), "bf16"
    xs = inputs(7, w, shape, dtype)
    want = all_to_all.reference(xs, 2, 1)[world.rank]

    def body(buf, out):
        buf.local.copy_from_numpy(xs[world.rank])
        out.local.fill(float("nan"))
        h.ready()
        collectives.all_to_all(buf, world, scatter_dim=2, gather_dim=1, out=out)
        collectives.synchronize(what="all_to_all ulysses")
        return bit_mismatch(out.local.to_numpy(), want, dtype)

    h.run("all_to_all", dict(shape=shape, scatter_dim=2, gather_dim=1, dtype=dtype, seed=7),
          [(shape, dtype), (all_to_all.out_shape(shape, 2, 1, w), dtype)], body)


def main() -> None:
    world = World()
    device = Device(world.device_ordinal()).set_current()
    heap = SymmetricHeap(world, 64 << 20, path=os.environ.get("PKPTX_PATH", "vmm"))
    h = Harness(world, device, heap)
    wanted = sys.argv[1:] or COLLECTIVES
    runs = {"all_reduce": [all_reduce_cases], "all_gather": [all_gather_cases],
            "reduce_scatter": [reduce_scatter_cases], "all_to_all": [ulysses_case, all_to_all_cases]}
    for name in COLLECTIVES:
        if name in wanted:
            for cases in runs[name]:
                cases(h)
            report(world.rank, name, cases=len(h.cases[name]), failures=h.failures[name])
    heap.close()
    world.close()


if __name__ == "__main__":
    main()
