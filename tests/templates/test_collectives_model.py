"""The collectives' index math and ownership, without a GPU.

Each kernel's device code follows a pure-Python twin: the host plan (``check_*`` -> Config + RunMap,
exactly what is launched), :func:`pkptx.templates.runs.thread_units` (which block and thread move
which unit) and the kernel module's ``stores`` (what one thread reads and writes for a unit). Run
over every rank, the twin must write every output element exactly once, from the right source, in
bounds, with no thread reading what another thread of the same launch writes (in place); and the
result must equal the numpy ``reference``. Hypothesis draws shapes, dims, dtypes (so unit widths
16/8/4/2), world sizes 1..16, block and thread counts. Then the host APIs' argument errors.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

from pkptx.launch.symmetric import SymmetricBuffer
from pkptx.launch.world import World
from pkptx.ops import collectives as ops
from pkptx.ops.common import ArgumentError
from pkptx.templates.kernels import all_gather, all_to_all, reduce_scatter
from pkptx.templates.runs import MAX_UNITS, RunMap, peer_order, thread_units, unit_bytes

DTYPES = {"bf16": np.dtype(ml_dtypes.bfloat16), "f16": np.dtype(np.float16), "f32": np.dtype(np.float32)}
REDUCE = {"sum": np.add, "max": np.maximum, "min": np.minimum}
SIZES = st.sampled_from([1, 2, 3, 4, 5, 6, 8, 16])


def shapes(min_dims=1, max_dims=4, max_elements=96):
    """Shapes of 1..4 dims, odd sizes included, small enough that world 16 stays fast."""
    return st.lists(SIZES, min_size=min_dims, max_size=max_dims).map(tuple).filter(
        lambda s: math.prod(s) <= max_elements)


launch = st.fixed_dictionaries({"threads": st.sampled_from([32, 64, 128, 512]), "nblocks": st.integers(1, 6)})


def simulate(module, maps: list[RunMap], width: int, itemsize: int, before: list[np.ndarray], src_of, *,
             threads: int, nblocks: int, op=None, in_place: bool):
    """Run the twin on every rank: (final destination buffers, writes per element).

    ``before[r]``: rank r's destination buffer before the launch (flat); ``src_of(r)`` rank r's source
    buffer (flat; in place, the same buffer as the destination). Reads see the buffers as they were
    before the launch; the race check below makes that the only possible outcome.
    """
    world, per = len(maps), width // itemsize
    after = [b.copy() for b in before]
    writes = [np.zeros(b.size, np.int64) for b in before]
    writer = [np.full(b.size, -1, np.int64) for b in before]          # thread id of the last writer
    reads = [[] for _ in before]                                       # (elements, thread ids) per rank
    lane = np.arange(per)
    for rank, m in enumerate(maps):
        seen = np.concatenate([u for _, _, u in thread_units(m.units, threads, nblocks)] or [np.zeros(0, int)])
        assert np.array_equal(np.sort(seen), np.arange(m.units)), "a unit is moved by none or two threads"
        for block, thread, unit in thread_units(m.units, threads, nblocks):
            tid = (rank * nblocks + block) * threads + thread
            for dst_rank, dst, sources in module.stores(m, unit, rank, world):
                values = None
                for src_rank, src in sources:
                    at = (src[:, None] * per + lane).ravel()
                    assert at.size == 0 or at.max() < src_of(src_rank).size, "read out of bounds"
                    reads[src_rank].append((at, np.repeat(tid, per)))
                    got = src_of(src_rank)[at]
                    values = got if values is None else REDUCE[op](values, got)
                at = (dst[:, None] * per + lane).ravel()
                assert at.size == 0 or at.max() < after[dst_rank].size, "write out of bounds"
                np.add.at(writes[dst_rank], at, 1)
                writer[dst_rank][at] = np.repeat(tid, per)
                after[dst_rank][at] = values
    if in_place:   # an element written in this launch is read only by the thread that writes it
        for rank in range(world):
            for at, tid in reads[rank]:
                hit = writer[rank][at]
                assert np.all((hit == -1) | (hit == tid)), f"rank {rank}: a thread reads what another writes"
    return after, writes


def ids(world: int, n: int) -> list[np.ndarray]:
    """Distinct values per rank and element, exact in float64: a wrong source shows."""
    return [np.arange(n, dtype=np.float64) + r * n + 1 for r in range(world)]


def slot(shape, dim: int, world: int, rank: int) -> tuple:
    size = shape[dim] // world
    return (slice(None),) * dim + (slice(rank * size, (rank + 1) * size),)


# --------------------------------------------------------------------------------- all-gather
@given(shard=shapes(), data=st.data(), world=st.integers(1, 16), dtype=st.sampled_from(sorted(DTYPES)),
       in_place=st.booleans(), run=launch)
@example(shard=(7,), data=None, world=3, dtype="bf16", in_place=False, run={"threads": 32, "nblocks": 2})
@example(shard=(2, 3, 8), data=None, world=4, dtype="f32", in_place=True, run={"threads": 64, "nblocks": 3})
@settings(max_examples=150)
def test_all_gather_writes_every_element_once(shard, data, world, dtype, in_place, run):
    dim = data.draw(st.integers(-len(shard), len(shard) - 1)) if data is not None else len(shard) - 1
    d = dim % len(shard)
    out_shape = shard[:d] + (shard[d] * world,) + shard[d + 1:]
    shards = [x.reshape(shard) for x in ids(world, math.prod(shard))]
    want = all_gather.reference(shards, d)
    before = []
    for r in range(world):
        buf = np.full(out_shape, np.nan)
        if in_place:
            buf[slot(out_shape, d, world, r)] = shards[r]
        before.append(buf.ravel())
    plans = [ops.check_all_gather(out_shape if in_place else shard, DTYPES[dtype], out_shape, DTYPES[dtype],
                                  world, r, dim=dim, in_place=in_place) for r in range(world)]
    cfg = plans[0][0]
    assert cfg.width == unit_bytes(math.prod(shard[d:]) * DTYPES[dtype].itemsize)
    src = (lambda r: before[r]) if in_place else (lambda r: shards[r].ravel())
    after, writes = simulate(all_gather, [m for _, m in plans], cfg.width, DTYPES[dtype].itemsize, before, src,
                             in_place=in_place, **run)
    for r in range(world):
        assert np.all(writes[r] == 1)
        np.testing.assert_array_equal(after[r], want.ravel())


# ----------------------------------------------------------------------------- reduce-scatter
@given(part=shapes(), data=st.data(), world=st.integers(1, 16), dtype=st.sampled_from(sorted(DTYPES)),
       op=st.sampled_from(sorted(REDUCE)), in_place=st.booleans(), run=launch, seed=st.integers(0, 2**31))
@example(part=(5, 3), data=None, world=2, dtype="f16", op="sum", in_place=True, run={"threads": 32, "nblocks": 1},
         seed=1)
@settings(max_examples=150)
def test_reduce_scatter_writes_every_element_once(part, data, world, dtype, op, in_place, run, seed):
    dim = data.draw(st.integers(-len(part), len(part) - 1)) if data is not None else 0
    d = dim % len(part)
    shape = part[:d] + (part[d] * world,) + part[d + 1:]
    rng = np.random.default_rng(seed)
    inputs = [rng.integers(-1000, 1000, shape).astype(np.float64) for _ in range(world)]
    want = reduce_scatter.reference(inputs, d, op)
    plans = [ops.check_reduce_scatter(shape, DTYPES[dtype], shape if in_place else part, DTYPES[dtype], world, r,
                                      dim=dim, op=op, in_place=in_place) for r in range(world)]
    cfg = plans[0][0]
    before = [x.ravel().copy() if in_place else np.full(math.prod(part), np.nan) for x in inputs]
    after, writes = simulate(reduce_scatter, [m for _, m in plans], cfg.width, DTYPES[dtype].itemsize, before,
                             lambda r: inputs[r].ravel(), op=op, in_place=in_place, **run)
    for r in range(world):
        if in_place:
            mask, expect = np.zeros(shape, np.int64), inputs[r].copy()
            mask[slot(shape, d, world, r)] = 1
            expect[slot(shape, d, world, r)] = want[r]
            np.testing.assert_array_equal(writes[r], mask.ravel())
            np.testing.assert_array_equal(after[r], expect.ravel())
        else:
            assert np.all(writes[r] == 1)
            np.testing.assert_array_equal(after[r], want[r].ravel())


# -------------------------------------------------------------------------------- all-to-all
@given(base=shapes(), data=st.data(), world=st.integers(1, 16), dtype=st.sampled_from(sorted(DTYPES)), run=launch)
@example(base=(1, 6, 2, 8), data=None, world=2, dtype="bf16", run={"threads": 128, "nblocks": 4})   # Ulysses
@settings(max_examples=150)
def test_all_to_all_writes_every_element_once(base, data, world, dtype, run):
    if data is None:                                   # (B, S, H, D): scatter H, gather S
        a, g = 2, 1
    else:
        a = data.draw(st.integers(0, len(base) - 1))
        g = data.draw(st.integers(0, len(base) - 1))
    shape = base[:a] + (base[a] * world,) + base[a + 1:]
    out_shape = all_to_all.out_shape(shape, a, g, world)
    inputs = [x.reshape(shape) for x in ids(world, math.prod(shape))]
    want = all_to_all.reference(inputs, a, g)
    plans = [ops.check_all_to_all(shape, DTYPES[dtype], out_shape, DTYPES[dtype], world, r, scatter_dim=a,
                                  gather_dim=g - len(shape)) for r in range(world)]
    cfg = plans[0][0]
    before = [np.full(math.prod(out_shape), np.nan) for _ in range(world)]
    after, writes = simulate(all_to_all, [m for _, m in plans], cfg.width, DTYPES[dtype].itemsize, before,
                             lambda r: inputs[r].ravel(), in_place=False, **run)
    for r in range(world):
        assert np.all(writes[r] == 1)
        np.testing.assert_array_equal(after[r], want[r].ravel())


@given(base=shapes(max_dims=3, max_elements=24), data=st.data(), world=st.integers(1, 4))
def test_all_to_all_reference_is_the_definition(base, data, world):
    """``Y_r[..., g-chunk s, ...] = X_s[..., a-chunk r, ...]``, element by element."""
    a, g = data.draw(st.integers(0, len(base) - 1)), data.draw(st.integers(0, len(base) - 1))
    shape = base[:a] + (base[a] * world,) + base[a + 1:]
    inputs = [x.reshape(shape) for x in ids(world, math.prod(shape))]
    out = all_to_all.reference(inputs, a, g)
    part, size_g = shape[a] // world, shape[g]
    for r in range(world):
        assert out[r].shape == all_to_all.out_shape(shape, a, g, world)
        for index in np.ndindex(*out[r].shape):
            s = index[g] // (size_g if a != g else part)
            src = list(index)
            src[g] -= s * (size_g if a != g else part)
            src[a] += r * part
            assert out[r][index] == inputs[s][tuple(src)]


def test_peer_order_visits_every_rank_once_starting_at_self():
    for world in range(1, 17):
        for rank in range(world):
            order = peer_order(rank, world)
            assert order[0] == rank and sorted(order) == list(range(world))


# ------------------------------------------------------------------------- argument validation
BF16, F32 = DTYPES["bf16"], DTYPES["f32"]


@pytest.mark.parametrize("call, message", [
    (lambda: ops.check_all_gather((4, 3), np.dtype(np.int32), (8, 3), np.dtype(np.int32), 2, 0, dim=0,
                                  in_place=False), "dtype must be bfloat16, float16 or float32"),
    (lambda: ops.check_all_gather((4, 3), BF16, (8, 3), F32, 2, 0, dim=0, in_place=False), "out dtype"),
    (lambda: ops.check_all_gather((4, 3), BF16, (8, 3), BF16, 2, 0, dim=2, in_place=False), "dim must be"),
    (lambda: ops.check_all_gather((4, 3), BF16, (8, 3), BF16, 2, 0, dim=-3, in_place=False), "dim must be"),
    (lambda: ops.check_all_gather((4, 3), BF16, (8, 3), BF16, 2, 0, dim=True, in_place=False), "dim must be"),
    (lambda: ops.check_all_gather((4, 3), BF16, (4, 6), BF16, 2, 0, dim=0, in_place=False),
     "out must have shape (8, 3)"),
    (lambda: ops.check_all_gather((4, 3), BF16, (4, 3), BF16, 2, 0, dim=1, in_place=True), "multiple of the world"),
    (lambda: ops.check_reduce_scatter((5, 4), BF16, (5, 2), BF16, 2, 0, dim=0, op="sum", in_place=False),
     "(5, 4)[0] = 5 must be a multiple of the world size 2"),
    (lambda: ops.check_reduce_scatter((4, 4), BF16, (4, 2), BF16, 2, 0, dim=0, op="sum", in_place=False),
     "out must have shape (2, 4)"),
    (lambda: ops.check_reduce_scatter((4, 4), BF16, (2, 4), BF16, 2, 0, dim=0, op="prod", in_place=False),
     "op must be one of"),
    (lambda: ops.check_all_to_all((4, 4), BF16, (4, 4), BF16, 2, 0, scatter_dim=0, gather_dim=1, in_place=True),
     "separate buffer"),
    (lambda: ops.check_all_to_all((3, 4), BF16, (3, 4), BF16, 2, 0, scatter_dim=0, gather_dim=1),
     "multiple of the world"),
    (lambda: ops.check_all_to_all((4, 4), BF16, (4, 4), BF16, 2, 0, scatter_dim=0, gather_dim=1),
     "out must have shape (2, 8)"),
    (lambda: ops.check_all_to_all((4, 4), BF16, (2, 8), BF16, 2, 0, scatter_dim=0, gather_dim=5),
     "gather_dim: dim must be"),
    (lambda: ops.check_all_gather((1 << 22, 1 << 13), F32, (1 << 23, 1 << 13), F32, 2, 0, dim=0, in_place=False),
     "more than one launch indexes"),
])
def test_check_rejects_bad_arguments(call, message):
    with pytest.raises(ArgumentError) as err:
        call()
    assert message in str(err.value)


def test_check_plans_the_widest_unit():
    cfg, m = ops.check_all_gather((3, 8), BF16, (6, 8), BF16, 2, 1, dim=0, in_place=False)
    assert cfg.width == 16 and m == all_gather.run_map(1, 3, 8, 2, 1, in_place=False).in_units(8)
    assert ops.check_all_gather((3, 5), BF16, (3, 10), BF16, 2, 1, dim=1, in_place=False)[0].width == 2
    assert ops.check_reduce_scatter((4, 6), F32, (4, 3), F32, 2, 0, dim=1, op="max", in_place=False)[0].width == 4
    cfg, _ = ops.check_reduce_scatter((4, 8), F32, (4, 4), F32, 2, 0, dim=1, op="max", in_place=False,
                                      multicast=True)
    assert cfg.width == 16 and not cfg.multicast          # the switch has no f32 max
    assert MAX_UNITS < 1 << 32


class _FakeHeap:
    """What a SymmetricBuffer reads from its heap, with no GPU behind it."""

    def __init__(self, world, multicast_base=None):
        self.world, self.base_ptrs, self.multicast_base = world, [1 << 40] * world.size, multicast_base


def _buffer(world, shape, dtype=BF16, offset=0, heap=None):
    return SymmetricBuffer(heap or _FakeHeap(world), offset, tuple(shape), np.dtype(dtype), offset + 4096, 8192)


@pytest.fixture(scope="module")
def world():
    w = World.single()
    yield w
    w.close()


def test_host_apis_check_buffers_before_any_gpu_work(world):
    buf = _buffer(world, (4, 8))
    with pytest.raises(ArgumentError, match="must be a SymmetricBuffer"):
        ops.all_gather(np.zeros(4), world, dim=0, out=buf)
    with pytest.raises(ArgumentError, match="out= is required"):
        ops.all_to_all(buf, world, scatter_dim=0, gather_dim=1, out=None)     # no in-place form
    other = World.single()
    try:
        with pytest.raises(ArgumentError, match="another World"):
            ops.all_to_all(buf, other, scatter_dim=0, gather_dim=1, out=buf)
    finally:
        other.close()
    with pytest.raises(ArgumentError, match="dtype must be"):
        ops.all_gather(_buffer(world, (4,), np.int32), world, dim=0, out=_buffer(world, (4,), np.int32, 256))
    with pytest.raises(ArgumentError, match="out must have shape"):
        ops.all_gather(buf, world, dim=1, out=_buffer(world, (4, 9), offset=256))
    with pytest.raises(ArgumentError, match="separate buffer"):
        ops.all_to_all(buf, world, scatter_dim=0, gather_dim=1, out=buf)
    with pytest.raises(ArgumentError, match="op must be"):
        ops.reduce_scatter(buf, world, dim=0, op="mean", out=buf)
