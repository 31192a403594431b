"""CI tier under the interpreter: the MoE layer half at world sizes 1 to 3, several ranks in one process,
launched with the parameter values of ``pkptx.ops.moe`` (its checks ``check_routing`` / ``check_grouped``,
its planner ``plan_grouped`` and its ``grouped_args``; the symmetric state of ``_MoeState``: receive
rows, count matrix, arrival counters, ready flags), in the op's order on one heap: ``moe_dispatch``
(route, push), ``moe_dispatch_gemm`` (route again, its second launch, then the fused push and first
GEMM), the second GEMM (``grouped_gemm``) into a symmetric y, and ``moe_combine`` of y. And
``moe_dispatch`` three times with the same arguments and new inputs in the same buffers (what a CUDA
graph replay does): route counts its launches on the device (ready[ROUTES_DONE]).

Checked against the kernels' numpy models with the device's own slots (a pair's row depends on arrival
order): route's count matrix, receive layout (``layout``), slots (``check_slots``) and send order
(``send_keys``); the received rows bit for bit (``moe_dispatch.reference``); every arrival counter at
exactly its block's rows (each pushed row announced once, the last one at the communicator's last
task); the GEMMs against float64 by the bf16 normwise rule; the combine elementwise against its float64
reference over the device's y. Rows past the received ones must keep the NaN poison; reads of
never-written bytes and unordered accesses (a row read before its write is known complete) raise;
every rank's status word must stay 0. Grids are a small machine's: few blocks, so each pushing warp
moves several rows."""
from __future__ import annotations

import functools
from unittest import mock

import numpy as np
import pytest

from pkptx.interp.tensormap import tiled
from pkptx.launch.tensormap import TensorMap
from pkptx.ops import moe as ops
from pkptx.templates.kernels import grouped_gemm, moe_combine, moe_dispatch, moe_dispatch_gemm

from .harness import DTYPES, TIMEOUT_NS, Ranks, assert_close, assert_rel

BF16 = DTYPES["bf16"]
SM_COUNT, SMEM_OPTIN = 132, 232448      # what plan_grouped sees on an H100/H200 (SMs, opt-in shared bytes)
PUSH_BLOCKS = 2                          # persistent_grid on a small machine: communicator blocks of the push
COMPUTE = 2                              # compute blocks beside the fused kernel's communicators / of a GEMM


@functools.lru_cache(maxsize=None)
def kernel(build, cfg):
    return build(cfg)


class _Array:
    """What ``grouped_args`` reads of a DeviceArray: address, shape, dtype."""

    def __init__(self, ptr: int, shape, dtype):
        self.ptr, self.shape, self.dtype = ptr, tuple(shape), np.dtype(dtype)


def _tensor_map(arr, box, swizzle=128):
    """``pkptx.ops.launches.tensor_map`` over interpreter memory (C-contiguous arrays)."""
    return tiled(arr.ptr, arr.dtype, arr.shape, box, swizzle=swizzle)


def grouped_values(cfg, x: _Array, w: _Array, offsets: int, out: _Array, t: int, n: int, k: int, e: int):
    """``ops.grouped_args`` itself, its tensor maps encoded for the interpreter."""
    with mock.patch.object(ops, "tensor_map", _tensor_map):
        values, work = ops.grouped_args(cfg, x, w, _Array(offsets, (e,), np.int32), out, t, n, k, e)
    return {name: v.data if isinstance(v, TensorMap) else v for name, v in values.items()}, work


def plan(t: int, n: int, k: int, e: int):
    return ops.plan_grouped(t, n, k, e, "bf16", "bf16", "nk", sm_count=SM_COUNT, smem_limit=SMEM_OPTIN)


class Layer:
    """One heap's MoE state over several launches (``ops._MoeState``), with every rank's inputs on the
    device."""

    def __init__(self, xs, ids, wts, num_experts: int, seed: int):
        w = len(xs)
        self.r = r = ops.check_routing(xs[0].shape, xs[0].dtype, ids[0].shape, ids[0].dtype, wts[0].shape,
                                       wts[0].dtype, w, num_experts)
        self.xs, self.ids, self.wts = xs, ids, wts
        self.ranks = ranks = Ranks(w, seed=seed)
        mach = ranks.world.machine
        self.recv = ranks.symmetric((r.capacity, r.hidden), r.dtype, "recv")
        self.counts = ranks.symmetric((w, r.num_experts), np.uint32, "counts")
        self.arrivals = ranks.symmetric((r.blocks + 1,), np.uint32, "arrivals")     # and the tile counter
        self.ready = ranks.symmetric((moe_dispatch.READY_WORDS,), np.uint32, "ready", fill=0)   # FlagArray: zeroed
        pairs = r.tokens * r.topk
        self.slots = [mach.alloc(4 * pairs, name="slots", rank=d) for d in range(w)]
        self.order = [mach.alloc(4 * pairs, name="order", rank=d) for d in range(w)]
        self.offsets = [mach.alloc(4 * r.local, name="offsets", rank=d) for d in range(w)]
        self.x = [mach.from_numpy(xs[d], name="x", rank=d) for d in range(w)]
        self.ids_dev = [mach.from_numpy(ids[d], name="topk_ids", rank=d) for d in range(w)]
        self.wts_dev = [mach.from_numpy(wts[d], name="topk_weights", rank=d) for d in range(w)]
        self.lay = moe_dispatch.layout(ids, num_experts)

    @property
    def w(self) -> int:
        return self.ranks.size

    def write_inputs(self, xs, ids) -> None:
        """New tokens and routings into the same device buffers (the launches' arguments stay)."""
        for d in range(self.w):
            self.x[d].write(xs[d])
            self.ids_dev[d].write(ids[d])
        self.xs, self.ids = xs, ids
        self.lay = moe_dispatch.layout(ids, self.r.num_experts)

    # ------------------------------------------------------------------ launches, as pkptx.ops.moe
    def route(self) -> None:
        """``ops._route``: one block (``persistent_grid(work=1)``)."""
        r, kern = self.r, kernel(moe_dispatch.build_route, moe_dispatch.Config())
        for d in range(self.w):
            self.ranks.launch(d, kern, kern.req_threads[0], grid=1, smem=kern.dynamic_smem,
                              layouts=dict(counts=self.counts, ready=self.ready, arrivals=self.arrivals),
                              ids=self.ids_dev[d].base, pairs=r.tokens * r.topk, experts=r.num_experts, local=r.local,
                              slots=self.slots[d].base, order=self.order[d].base, recv_offsets=self.offsets[d].base,
                              blocks=r.blocks)
        self.ranks.run()

    def push_values(self, d: int) -> dict:
        """``ops._push_values``."""
        r = self.r
        return dict(x=self.x[d].base, pairs=r.tokens * r.topk, topk=r.topk, row_bytes=r.hidden * r.dtype.itemsize,
                    ids=self.ids_dev[d].base, slots=self.slots[d].base, order=self.order[d].base, local=r.local)

    def dispatch(self) -> None:
        """``ops.moe_dispatch``: route, then the plain push on ``persistent_grid(work=ceil(pairs/warps))``
        blocks, all communicators."""
        self.route()
        cfg = moe_dispatch.Config()
        kern = kernel(moe_dispatch.build, cfg)
        work = -(-self.r.tokens * self.r.topk // cfg.warps)
        for d in range(self.w):
            self.ranks.launch(d, kern, kern.req_threads[0], grid=min(PUSH_BLOCKS, work), smem=kern.dynamic_smem,
                              layouts=dict(recv=self.recv, arrivals=self.arrivals), **self.push_values(d))
        self.ranks.run()

    def dispatch_gemm(self, w1: list[np.ndarray], num_comm_sms: int):
        """``ops.moe_dispatch_gemm`` (w1[d]: rank d's local experts, N x hidden each): route, then the fused
        kernel on ``num_comm_sms`` communicators and COMPUTE compute blocks. Returns each rank's out (the
        allocation, and its contents)."""
        r, mach = self.r, self.ranks.world.machine
        _, n, k, e = ops.check_grouped((r.capacity, r.hidden), r.dtype, w1[0].shape, w1[0].dtype, (w1[0].shape[0],),
                                       np.int32, (r.capacity, w1[0].shape[1]), r.dtype)
        assert e == r.local
        grouped = plan(r.capacity, n, k, e)
        kern = kernel(moe_dispatch_gemm.build, moe_dispatch_gemm.Config(grouped))
        blocks = num_comm_sms + COMPUTE              # persistent_grid(kernel): what a small machine holds
        assert 1 <= num_comm_sms < blocks
        # out starts as the NaN poison, written (as the GPU test's fill_bits): the second GEMM's A boxes
        # read rows past the received ones, which they never store
        outs = [mach.alloc(r.capacity * n * 2, name="h", rank=d, fill=0xFF, written=True) for d in range(self.w)]
        self.route()
        for d in range(self.w):
            w_dev = mach.from_numpy(w1[d], name="w1", rank=d)
            values, _ = grouped_values(grouped, _Array(self.recv.ptr(d), self.recv.shape, r.dtype),
                                       _Array(w_dev.base, w1[d].shape, r.dtype), self.offsets[d].base,
                                       _Array(outs[d].base, (r.capacity, n), r.dtype), r.capacity, n, k, e)
            self.ranks.launch(d, kern, kern.req_threads[0], grid=blocks, smem=kern.dynamic_smem,
                              num_comm_sms=num_comm_sms, layouts=dict(recv=self.recv, arrivals=self.arrivals),
                              **values, **self.push_values(d))
        self.ranks.run()
        for d in range(self.w):       # each tile drawn once, and each block's last draw past the end
            sizes = np.diff(np.concatenate([[0], self.lay.offsets[d]]))
            tiles = int((-(-sizes // grouped.gemm.tile_m)).sum()) * -(-n // grouped.gemm.tile_n)
            drawn = int(self.arrivals.read(d)[r.blocks])
            assert drawn == tiles + blocks, f"dispatch_gemm rank {d}: {drawn} draws, want {tiles} tiles + {blocks}"
        return outs, [o.read(BF16, (r.capacity, n)) for o in outs]

    def grouped_gemm(self, x_ptrs, x_shape, w2: list[np.ndarray], y) -> None:
        """``ops.grouped_gemm(x, w2[d], offsets, out=y.local)`` on every rank: rank 0 of a world of one,
        no communicators, ``persistent_grid(work=tiles)`` blocks."""
        r, mach = self.r, self.ranks.world.machine
        t, n, k, e = ops.check_grouped(x_shape, r.dtype, w2[0].shape, w2[0].dtype, (r.local,), np.int32,
                                       y.shape, y.dtype)
        cfg = plan(t, n, k, e)
        kern = kernel(grouped_gemm.build, cfg)
        for d in range(self.w):
            w_dev = mach.from_numpy(w2[d], name="w2", rank=d)
            values, work = grouped_values(cfg, _Array(x_ptrs[d], x_shape, r.dtype), _Array(w_dev.base, w2[d].shape,
                                          r.dtype), self.offsets[d].base, _Array(y.ptr(d), y.shape, y.dtype),
                                          t, n, k, e)
            args = dict(values, rank=0, world=1, status=self.ranks.status[d].base, timeout_ns=TIMEOUT_NS,
                        num_comm_sms=0)
            self.ranks.world.launch(d, kern, min(COMPUTE, work), kern.req_threads[0],
                                    *[args[p.name] for p in kern.params], smem=kern.dynamic_smem)
        self.ranks.run()

    def combine(self, y, out_dtype: str) -> list[np.ndarray]:
        """``ops.moe_combine(y, dispatch, world, out=...)``: ``persistent_grid(work=ceil(units/threads))``."""
        r, mach = self.r, self.ranks.world.machine
        n = y.shape[1]
        cfg = moe_combine.Config(dtype="bf16", out_dtype=out_dtype)
        kern = kernel(moe_combine.build, cfg)
        units = r.tokens * (n // 8)
        work = -(-units // kern.req_threads[0])
        outs = [mach.alloc(r.tokens * n * np.dtype(DTYPES[out_dtype]).itemsize, name="out", rank=d)
                for d in range(self.w)]
        for d in range(self.w):
            self.ranks.launch(d, kern, kern.req_threads[0], grid=min(COMPUTE, work), smem=kern.dynamic_smem,
                              layouts=dict(y=y), ids=self.ids_dev[d].base, slots=self.slots[d].base,
                              weights=self.wts_dev[d].base, units=units, row_units=n // 8, topk=r.topk,
                              local=r.local, out=outs[d].base)
        self.ranks.run()
        return [o.read(DTYPES[out_dtype], (r.tokens, n)) for o in outs]

    # ------------------------------------------------------------------ checks against the numpy models
    def rows(self, d: int) -> int:
        return int(self.lay.offsets[d, -1])

    def device_slots(self) -> list[np.ndarray]:
        return [s.read(np.int32, self.ids[0].shape) for s in self.slots]

    def check_route(self, what: str) -> list[np.ndarray]:
        """Count matrices, receive layouts, slots and send order of every rank; returns the slots."""
        r, lay = self.r, self.lay
        slots = self.device_slots()
        for d in range(self.w):
            assert np.array_equal(self.counts.read(d), lay.counts), f"{what} rank {d}: count matrix"
            offsets = self.offsets[d].read(np.int32, (r.local,))
            assert np.array_equal(offsets, lay.offsets[d]), f"{what} rank {d}: offsets {offsets} != {lay.offsets[d]}"
            problems = moe_dispatch.check_slots(self.ids[d], slots[d], d, lay)
            assert not problems, f"{what} rank {d}: {problems}"
            order = self.order[d].read(np.int32, (r.tokens * r.topk,)).astype(np.int64)
            assert np.array_equal(np.sort(order), np.arange(order.size)), f"{what} rank {d}: order is no permutation"
            keys, flat = moe_dispatch.send_keys(self.ids[d], d, lay)[order], slots[d].ravel()[order]
            assert (np.diff(keys) >= 0).all(), f"{what} rank {d}: send order not sorted by send_key: {keys}"
            same = (np.diff(keys) == 0) & (keys[1:] < r.num_experts)
            assert (np.diff(flat)[same] > 0).all(), f"{what} rank {d}: an expert's pairs not in slot order"
        return slots

    def check_recv(self, slots, what: str) -> list[np.ndarray]:
        """Received rows bit for bit, the poison past them, every arrival counter; returns the rows."""
        refs = moe_dispatch.reference(self.xs, self.ids, slots, self.r.num_experts)
        for d in range(self.w):
            got, rows = self.recv.read(d), self.rows(d)
            assert np.array_equal(got[:rows].astype(np.float64), refs[d]), f"{what} rank {d}: received rows differ"
            assert np.isnan(got[rows:].astype(np.float32)).all(), f"{what} rank {d}: a row past the received written"
            blk = np.arange(self.r.blocks)
            want = np.clip(rows - moe_dispatch.BLOCK_ROWS * blk, 0, moe_dispatch.BLOCK_ROWS)
            got_arrivals = self.arrivals.read(d)[:self.r.blocks]
            assert np.array_equal(got_arrivals, want), f"{what} rank {d}: arrival counters {got_arrivals} != {want}"
        return refs


# ---------------------------------------------------------------------------------------------- routings
def routing(kind: str, rng, tokens: int, topk: int, experts: int, local: int, world: int) -> np.ndarray:
    """One rank's top-k ids (distinct per token unless the kind says otherwise)."""
    if kind == "one_expert":                     # every token's first choice is expert 0
        rest = [rng.permutation(np.arange(1, experts))[:topk - 1] for _ in range(tokens)]
        return np.array([[0, *p] for p in rest], dtype=np.int32)
    if kind == "twice_to_one_rank":              # two experts of one rank for every token
        owner = rng.integers(0, world)
        pick = [owner * local + rng.permutation(local)[:2] for _ in range(tokens)]
        rest = [rng.permutation(np.setdiff1d(np.arange(experts), p))[:topk - 2] for p in pick]
        return np.array([[*p, *q] for p, q in zip(pick, rest)], dtype=np.int32)
    pool = np.arange(experts)
    if kind == "empty_expert":                   # the last rank's last expert gets nothing
        pool = pool[:-1]
    ids = np.array([rng.permutation(pool)[:topk] for _ in range(tokens)], dtype=np.int32)
    if kind == "invalid":                        # ids outside [0, E): dropped (slot -1)
        bad = rng.random(ids.shape) < 0.3
        ids[bad] = rng.choice(np.array([-1, experts, experts + 5, 2 ** 31 - 1], dtype=np.int32), size=int(bad.sum()))
    return ids


CASES = [
    # w, tokens, topk, local, hidden, ffn, routing, communicators of the fused kernel
    (1, 80, 2, 2, 64, 64, "random", 1),           # 160 rows: block 0 complete before the pushers' last rows
    (1, 9, 1, 2, 128, 64, "invalid", 1),
    (2, 40, 2, 2, 128, 64, "random", 2),
    (2, 30, 2, 3, 64, 64, "empty_expert", 1),
    (2, 16, 3, 4, 256, 64, "twice_to_one_rank", 1),
    (2, 24, 3, 2, 64, 64, "invalid", 2),
    (2, 72, 2, 2, 64, 64, "one_expert", 1),       # rank 0: 144 rows of expert 0, then 48 of expert 1
    (3, 20, 3, 2, 64, 64, "random", 1),
    (3, 48, 2, 1, 64, 64, "one_expert", 2),       # rank 0: 144 rows, two arrival blocks, two tiles
    (3, 12, 1, 1, 64, 64, "one_expert", 2),       # every row to rank 0: ranks 1 and 2 receive none
]
# Several rows per pushing warp everywhere but the smallest cases (pairs > 8 warps x PUSH_BLOCKS, or 12
# warps x the fused kernel's communicators). Only a rank with more than 128 rows can see a row announced
# before it is written: a tile of block 0 may then start while the pushers still move later rows, where
# with one block the block completes only with every pusher's last row, after its wait_group 0.


def _id(case) -> str:
    w, t, k, local, h, f, kind, comm = case
    return f"w{w}-t{t}-k{k}-e{local * w}-h{h}-f{f}-{kind}-comm{comm}"


@pytest.mark.parametrize("w, tokens, topk, local, hidden, ffn, kind, comm", CASES, ids=[_id(c) for c in CASES])
def test_moe_layer(w, tokens, topk, local, hidden, ffn, kind, comm):
    experts = local * w
    seed = tokens * 7 + hidden + w
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal((tokens, hidden), dtype=np.float32).astype(BF16) for _ in range(w)]
    ids = [routing(kind, rng, tokens, topk, experts, local, w) for _ in range(w)]
    wts = [rng.random((tokens, topk), dtype=np.float32) for _ in range(w)]
    w1 = (rng.standard_normal((experts, ffn, hidden), dtype=np.float32) / np.sqrt(hidden)).astype(BF16)
    w2 = (rng.standard_normal((experts, hidden, ffn), dtype=np.float32) / np.sqrt(ffn)).astype(BF16)
    mine = [slice(d * local, (d + 1) * local) for d in range(w)]
    layer = Layer(xs, ids, wts, experts, seed)

    # 1. moe_dispatch
    layer.dispatch()
    layer.check_recv(layer.check_route("dispatch"), "dispatch")

    # 2. moe_dispatch_gemm on the same heap (route's second launch), into a poisoned receive buffer
    for d in range(w):
        layer.recv.write(d, np.full(layer.recv.shape, np.nan, BF16))
    h_dev, hs = layer.dispatch_gemm([np.ascontiguousarray(w1[m]) for m in mine], comm)
    slots = layer.check_route("dispatch_gemm")
    recv = layer.check_recv(slots, "dispatch_gemm")
    for d in range(w):
        rows = layer.rows(d)
        assert not np.isnan(hs[d][:rows].astype(np.float32)).any(), f"dispatch_gemm rank {d}: NaN in out"
        assert np.isnan(hs[d][rows:].astype(np.float32)).all(), f"dispatch_gemm rank {d}: a row past the received"
        if rows:
            assert_rel(hs[d][:rows], moe_dispatch_gemm.reference(recv[d], w1[mine[d]], layer.lay.offsets[d]),
                       f"dispatch_gemm rank {d} out")

    # 3. the second GEMM into a symmetric y, then moe_combine of it
    r = layer.r
    y = layer.ranks.symmetric((r.capacity, hidden), BF16, "y")
    layer.grouped_gemm([h.base for h in h_dev], (r.capacity, ffn), [np.ascontiguousarray(w2[m]) for m in mine], y)
    ys = [y.read(d) for d in range(w)]
    for d in range(w):
        rows = layer.rows(d)
        if rows:
            assert_rel(ys[d][:rows], grouped_gemm.reference(hs[d][:rows], w2[mine[d]], layer.lay.offsets[d]),
                       f"grouped_gemm rank {d}")
        assert np.isnan(ys[d][rows:].astype(np.float32)).all(), f"grouped_gemm rank {d}: a row past the groups"
    out_dtype = "f32" if w == 2 else "bf16"
    outs = layer.combine(y, out_dtype)
    for d in range(w):
        ref = moe_combine.reference(ys, ids[d], slots[d], wts[d], local)
        assert_close(outs[d], ref, out_dtype, 1, f"combine rank {d}")


@pytest.mark.parametrize("w, tokens, topk, local", [(1, 20, 2, 2), (2, 24, 2, 2), (3, 12, 2, 1)])
def test_moe_dispatch_launched_again_with_the_same_arguments(w, tokens, topk, local):
    """Three dispatches whose launches keep their arguments, new tokens and routings in the same buffers
    each time (a graph replay): route's wait for every rank's counts expects its own launch count, so
    no call goes ahead on the previous call's counts."""
    experts, hidden = local * w, 64
    rng = np.random.default_rng(w)

    def draw():
        xs = [rng.standard_normal((tokens, hidden), dtype=np.float32).astype(BF16) for _ in range(w)]
        return xs, [routing("random", rng, tokens, topk, experts, local, w) for _ in range(w)]

    xs, ids = draw()
    layer = Layer(xs, ids, [np.ones((tokens, topk), np.float32)] * w, experts, seed=w)
    for call in range(3):
        if call:
            layer.write_inputs(*draw())
        for d in range(w):
            layer.recv.write(d, np.full(layer.recv.shape, np.nan, BF16))
        layer.dispatch()
        layer.check_recv(layer.check_route(f"dispatch {call}"), f"dispatch {call}")
    done = [int(layer.ready.read(d)[moe_dispatch.ROUTES_DONE]) for d in range(w)]
    assert done == [3] * w, f"ready[ROUTES_DONE] after 3 routes: {done}"
