"""CI tier under the interpreter: every collective at world sizes 1 to 4 on small sizes, planned by the
host ops' own planners, unicast and (where the op has one) through multicast addresses (multimem), checked against the kernels' numpy references with the GPU tests' rules
(reductions against float64 within the dtype's tolerance, copies bit for bit). Memory starts as NaN and
reads of never-written bytes raise."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from pkptx.interp import DeadlockError
from pkptx.ops import collectives as ops
from pkptx.templates.kernels import all_gather, all_reduce, all_to_all, reduce_scatter

from .harness import DTYPES, GRID, Ranks, assert_bits, assert_close, inputs

WORLDS = (1, 2, 3, 4)


@functools.lru_cache(maxsize=None)
def kernel(build, cfg):
    return build(cfg)


def _slot(shape, dim: int, world: int, rank: int) -> tuple:
    size = shape[dim] // world
    return (slice(None),) * dim + (slice(rank * size, (rank + 1) * size),)


def _with_dim(shape, dim: int, factor: int) -> tuple:
    return shape[:dim] + (shape[dim] * factor,) + shape[dim + 1:]


@pytest.mark.parametrize("w", WORLDS)
@pytest.mark.parametrize("n, dtype, op, algorithm", [(300, "bf16", "sum", "one_shot"), (1000, "f32", "max", "two_shot"),
                                                     (7, "f16", "min", "two_shot"), (129, "bf16", "sum", "two_shot")])
@pytest.mark.parametrize("mc", [False, True], ids=["unicast", "multicast"])
def test_all_reduce(w, n, dtype, op, algorithm, mc):
    ranks = Ranks(w, seed=n + w, multicast=mc)
    xs = inputs(n, w, (n,), dtype)
    src = ranks.symmetric((n,), DTYPES[dtype], "src")
    dst = src if algorithm == "two_shot" else ranks.symmetric((n,), DTYPES[dtype], "dst")
    cfg = all_reduce.Config(dtype=dtype, op=op, algorithm=algorithm, multicast=mc and op == "sum")
    n_vec = -(-src.nbytes // 16)
    work = -(-n_vec // w) if algorithm == "two_shot" else n_vec
    grid = min(GRID, -(-work // cfg.threads))
    for r in range(w):
        src.write(r, xs[r])
        ranks.launch(r, kernel(all_reduce.build, cfg), cfg.threads, layouts=dict(src=src, dst=dst), grid=grid,
                     n_vec=n_vec)
    ranks.run()
    ref = all_reduce.reference(xs, op)
    for r in range(w):
        assert_close(dst.read(r), ref, dtype, w, f"rank {r}")


def _planned(ranks, plan, build, src, dst, **kw):
    """Launch every rank's share as the host op plans it (Config and run map per rank)."""
    for r in range(ranks.size):
        cfg, units = plan(r)
        grid = min(GRID, -(-units.units // cfg.threads))
        ranks.launch(r, kernel(build, cfg), cfg.threads, layouts=dict(src=src, dst=dst), grid=max(grid, 1),
                     **units.args(cfg.width))
    ranks.run()


@pytest.mark.parametrize("w", WORLDS)
@pytest.mark.parametrize("shard, dim, dtype, in_place", [((5, 24), 0, "bf16", False), ((3, 4, 16), 1, "f32", True),
                                                        ((9,), 0, "f16", False), ((2, 7), -1, "bf16", True)])
@pytest.mark.parametrize("mc", [False, True], ids=["unicast", "multicast"])
def test_all_gather(w, shard, dim, dtype, in_place, mc):
    ranks = Ranks(w, seed=w, multicast=mc)
    d = dim % len(shard)
    out_shape = _with_dim(shard, d, w)
    shards = inputs(len(shard) + w, w, shard, dtype)
    out = ranks.symmetric(out_shape, DTYPES[dtype], "out")
    buf = out if in_place else ranks.symmetric(shard, DTYPES[dtype], "buf")
    for r in range(w):
        if in_place:
            start = np.full(out_shape, np.nan, DTYPES[dtype])
            start[_slot(out_shape, d, w, r)] = shards[r]
            out.write(r, start)
        else:
            buf.write(r, shards[r])
    _planned(ranks, lambda r: ops.check_all_gather(buf.shape, buf.dtype, out.shape, out.dtype, w, r, dim=dim,
                                                   in_place=in_place, multicast=mc), all_gather.build, buf, out)
    want = all_gather.reference(shards, d)
    for r in range(w):
        assert_bits(out.read(r), want, f"rank {r}")


@pytest.mark.parametrize("w", WORLDS)
@pytest.mark.parametrize("part, dim, dtype, op, in_place", [((3, 16), 0, "bf16", "sum", False),
                                                           ((4, 5), 1, "f32", "max", True),
                                                           ((2, 3, 8), -1, "f16", "min", False)])
@pytest.mark.parametrize("mc", [False, True], ids=["unicast", "multicast"])
def test_reduce_scatter(w, part, dim, dtype, op, in_place, mc):
    ranks = Ranks(w, seed=w + 1, multicast=mc)
    d = dim % len(part)
    shape = _with_dim(part, d, w)
    xs = inputs(len(part) * w, w, shape, dtype)
    buf = ranks.symmetric(shape, DTYPES[dtype], "buf")
    out = buf if in_place else ranks.symmetric(part, DTYPES[dtype], "out")
    for r in range(w):
        buf.write(r, xs[r])
    _planned(ranks, lambda r: ops.check_reduce_scatter(buf.shape, buf.dtype, out.shape, out.dtype, w, r, dim=dim,
                                                       op=op, in_place=in_place, multicast=mc),
             reduce_scatter.build, buf, out)
    refs = reduce_scatter.reference(xs, d, op)
    for r in range(w):
        if not in_place:
            assert_close(out.read(r), refs[r], dtype, w, f"rank {r}")
            continue
        got, mine = buf.read(r), _slot(shape, d, w, r)
        assert_close(got[mine], refs[r], dtype, w, f"rank {r}")
        rest = got.copy()
        rest[mine] = xs[r][mine]
        assert_bits(rest, xs[r], f"rank {r} outside its slot")


@pytest.mark.parametrize("w", WORLDS)
@pytest.mark.parametrize("base, a, g, dtype", [((2, 8, 3), 0, 1, "bf16"), ((3, 16), 1, 0, "f32"), ((1, 4, 2, 8), 2, 1, "f16")])
def test_all_to_all(w, base, a, g, dtype):
    ranks = Ranks(w, seed=w + 2)
    shape = _with_dim(base, a, w)
    out_shape = all_to_all.out_shape(shape, a, g, w)
    xs = inputs(a + g + w, w, shape, dtype)
    buf = ranks.symmetric(shape, DTYPES[dtype], "buf")
    out = ranks.symmetric(out_shape, DTYPES[dtype], "out")
    for r in range(w):
        buf.write(r, xs[r])
    _planned(ranks, lambda r: ops.check_all_to_all(buf.shape, buf.dtype, out.shape, out.dtype, w, r, scatter_dim=a,
                                                   gather_dim=g), all_to_all.build, buf, out)
    want = all_to_all.reference(xs, a, g)
    for r in range(w):
        assert_bits(out.read(r), want[r], f"rank {r}")


@pytest.mark.parametrize("seed, quantum", [(s, q) for s in range(3) for q in (1, 5, 64)])
def test_all_reduce_under_other_schedules(seed, quantum):
    """The same collective under other interleavings of the ranks' warps (seeded scheduler, turns of
    1 to ``quantum`` warp-instructions)."""
    w, n, dtype = 3, 200, "f32"
    ranks = Ranks(w, seed=seed, quantum=quantum)
    xs = inputs(seed, w, (n,), dtype)
    buf = ranks.symmetric((n,), DTYPES[dtype], "buf")
    cfg = all_reduce.Config(dtype=dtype, algorithm="two_shot")
    for r in range(w):
        buf.write(r, xs[r])
        ranks.launch(r, kernel(all_reduce.build, cfg), cfg.threads, layouts=dict(src=buf, dst=buf), grid=1,
                     n_vec=-(-buf.nbytes // 16))
    ranks.run()
    for r in range(w):
        assert_close(buf.read(r), all_reduce.reference(xs), dtype, w, f"rank {r}")


def test_a_rank_that_never_comes_is_a_deadlock_naming_the_flag():
    """Rank 1 never launches: rank 0's blocks wait at the heap barrier; the report names the flag
    word (rank 1's arrival slot, progress.ARRIVED + 1), its owner, the value seen and the value the wait
    expects."""
    ranks = Ranks(2)
    buf = ranks.symmetric((64,), np.float32, "buf", fill=0)
    cfg = all_reduce.Config(dtype="f32", algorithm="two_shot")
    ranks.launch(0, kernel(all_reduce.build, cfg), cfg.threads, layouts=dict(src=buf, dst=buf), grid=1, n_vec=16)
    with pytest.raises(DeadlockError, match=r"waits on flag heap flags\[5\] of rank 0 .*observed 0, expects 1"):
        ranks.run()
