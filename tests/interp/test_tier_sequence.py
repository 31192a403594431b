"""CI tier under the interpreter: ring attention (contiguous and causal zigzag shards, default and pipelined
relays, GQA, tails) and Ulysses attention (heads split over the ranks) at world sizes 1 to 3, several
ranks in one process, launched with the parameter values of ``pkptx.ops.sequence`` (its planners
``check_ring`` / ``check_ulysses``, its tensor-map views and boxes, its tables of peers' maps), against
the kernels' float64 references: O by the bf16 normwise rule, LSE (natural log, f32) within 2e-2. Outputs
start as the NaN poison; reads of never-written bytes raise; every rank's status word must stay 0. And
the same launch again with new inputs in the same buffers (what a CUDA graph replay does: the same
arguments), right every time: the kernels count their launches on the device (arrive[LAUNCHES])."""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
import pytest

from pkptx.interp.tensormap import tiled
from pkptx.ops.attention import BOX
from pkptx.ops.sequence import BOX5, check_ring, check_ulysses
from pkptx.templates.kernels import ring_attention, ulysses

from .harness import DTYPES, Ranks, assert_rel

BF16 = DTYPES["bf16"]
COMPUTE = 2                 # compute blocks per rank besides the communicator (the work is shared by tickets)
LSE_TOL = 2e-2              # the GPU program's bound on |LSE - reference|


@functools.lru_cache(maxsize=None)
def kernel(build, cfg):
    return build(cfg)


def _full(seed: int, batch: int, seq: int, heads: int, kv_heads: int, dim: int):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((batch, seq, heads, dim), dtype=np.float32).astype(BF16)
    k, v = (rng.standard_normal((batch, seq, kv_heads, dim), dtype=np.float32).astype(BF16) for _ in range(2))
    return q, k, v


def _grid(p: dict) -> int:
    """``persistent_grid(work=tasks + num_comm_sms)`` on a small machine: the communicators and COMPUTE
    compute blocks, never more than the work."""
    return min(p["num_comm_sms"] + COMPUTE, p["tasks"] + p["num_comm_sms"])


def _scale_log2(dim: int) -> float:
    return dim ** -0.5 * math.log2(math.e)


def _check_calls(calls, what: str) -> None:
    """Every call's (O, LSE, references), as :func:`run_ring` and :func:`run_ulysses` return them."""
    for i, call in enumerate(calls):
        _check(*call, f"{what} call {i}")


def _check(outs, lses, refs, ref_lses, what: str) -> None:
    for r, (got, got_lse, ref, ref_lse) in enumerate(zip(outs, lses, refs, ref_lses)):
        assert not np.isnan(got).any(), f"{what} rank {r}: NaN (poison) left in O"
        assert not np.isnan(got_lse).any(), f"{what} rank {r}: NaN (poison) left in LSE"
        assert_rel(got, ref, f"{what} rank {r} O")
        err = float(np.abs(got_lse.astype(np.float64) - ref_lse).max())
        assert err < LSE_TOL, f"{what} rank {r} LSE: max error {err:.3g} (limit {LSE_TOL})"


# ------------------------------------------------------------------ ring attention
def _shards(seed: int, w: int, batch: int, shard_len: int, heads: int, kv_heads: int, dim: int, causal: bool):
    """Every rank's ring shard of a full (Q, K, V) drawn from ``seed``."""
    full = _full(seed, batch, w * shard_len, heads, kv_heads, dim)
    return tuple([ring_attention.shard(x, r, w, causal=causal) for r in range(w)] for x in full)


def _calls(ranks, launches, inputs, outputs, seeds, shards, reference):
    """The prepared launches of every rank (``launches[r]()``), once per seed: new shards written into
    the ``inputs`` allocations, ``outputs`` (O, LSE allocations, their dtypes and shapes) poisoned with
    NaN after the first call; then run. Returns per call (O, LSE per rank, and the references)."""
    out = []
    for i, seed in enumerate(seeds):
        qkv = shards(seed)
        if i:
            for r in range(ranks.size):
                for alloc, x in zip(inputs[r], qkv):
                    alloc.write(x[r])
                for alloc, dtype, shape in outputs[r]:
                    alloc.write(np.full(shape, np.nan, dtype))
        for launch in launches:
            launch()
        ranks.run()
        got = [[alloc.read(dtype, shape) for alloc, dtype, shape in outputs[r]] for r in range(ranks.size)]
        out.append(([o for o, _ in got], [x for _, x in got], *reference(*qkv)))
    return out


def run_ring(w: int, *, shard_len: int, heads: int, kv_heads: int, dim: int, causal: bool, batch: int = 1,
             relay: dict | None = None, comm: int = 1, seed: int = 0, calls: int = 1):
    """Per call (``calls`` of one prepared launch per rank, new inputs each time): every rank's (O, LSE)
    of a ring attention launched as ``pkptx.ops.sequence.ring_attention`` does, and the float64
    references."""
    shards = functools.partial(_shards, w=w, batch=batch, shard_len=shard_len, heads=heads, kv_heads=kv_heads,
                               dim=dim, causal=causal)
    qs, ks, vs = shards(seed)
    cfg = ring_attention.default_config("bf16", dim, causal)
    if relay:
        cfg = dataclasses.replace(cfg, **relay)
    lse_shape = (batch, heads, shard_len)
    p = check_ring(qs[0].shape, BF16, ks[0].shape, BF16, vs[0].shape, BF16, w, qs[0].shape, BF16, lse_shape,
                   np.float32, causal=causal, num_comm_sms=comm, config=cfg)
    cfg, halves, c = p["cfg"], p["cfg"].halves, p["chunk"]
    kern = kernel(ring_attention.build, cfg)
    ranks = Ranks(w, seed=seed + w)
    mach = ranks.world.machine
    ring_shape = (batch, w * shard_len, kv_heads, dim)
    kr, vr = ranks.symmetric(ring_shape, BF16, "kr"), ranks.symmetric(ring_shape, BF16, "vr")
    arrive = ranks.symmetric((p["flags"],), np.uint32, "arrive", fill=0)
    launches, inputs, outputs = [], [], []
    for r in range(w):
        q_dev, k_dev, v_dev = (mach.from_numpy(x[r], name=n, rank=r) for n, x in (("q", qs), ("k", ks), ("v", vs)))
        out = mach.alloc(qs[r].nbytes, name="o", rank=r)
        lse = mach.alloc(4 * math.prod(lse_shape), name="lse", rank=r)
        inputs.append((q_dev, k_dev, v_dev))
        outputs.append(((out, BF16, qs[0].shape), (lse, np.float32, lse_shape)))
        q_view, kv_view = (batch, halves, c, heads, dim), (batch, halves, c, kv_heads, dim)
        ring_view = (batch, w * halves, c, kv_heads, dim)
        views = dict(q=(q_dev.base, q_view), o=(out.base, q_view), k=(k_dev.base, kv_view), v=(v_dev.base, kv_view),
                     kr=(kr.ptr(r), ring_view), vr=(vr.ptr(r), ring_view))
        maps = {f"tmap_{n}": ranks.tensor_map(ptr, BF16, shape, BOX5) for n, (ptr, shape) in views.items()}
        launches.append(functools.partial(
            ranks.launch, r, kern, kern.req_threads[0], layouts=dict(kr=kr, vr=vr, arrive=arrive), grid=_grid(p),
            smem=kern.dynamic_smem, num_comm_sms=p["num_comm_sms"], **maps,
            lse=lse.base, k_local=k_dev.base, v_local=v_dev.base, tasks=p["tasks"], q_blocks=p["q_blocks"],
            heads=heads, group=heads // kv_heads, chunk=c, k_blocks=p["k_blocks"], pieces=p["pieces"],
            row_bytes=p["row_bytes"], scale_log2=_scale_log2(dim)))
    results = _calls(ranks, launches, inputs, outputs, range(seed, seed + calls), shards,
                     functools.partial(ring_attention.reference, causal=causal))
    _check_launch_count(arrive, w, calls)
    return results


def _check_launch_count(arrive, w: int, calls: int) -> None:
    """Each rank's count of completed launches, which the kernel's last block leaves (device state), and
    the task counter it leaves at 0 for the next launch."""
    counts = [int(arrive.read(r)[ring_attention.LAUNCHES]) for r in range(w)]
    assert counts == [calls] * w, f"arrive[LAUNCHES] after {calls} launches: {counts}"
    drawn = [int(arrive.read(r)[ring_attention.TASKS]) for r in range(w)]
    assert drawn == [0] * w, f"arrive[TASKS] after {calls} launches: {drawn}"


PIPELINED = dict(relay_lanes=2, relay_stages=3)                          # 100-row pieces: lane 1 has no chunk
PIPELINED_4K = dict(relay_lanes=2, relay_stages=3, relay_chunk=4096)     # two 4 KiB chunks a lane per K/V copy
DEEP_4K = dict(relay_lanes=1, relay_stages=4, relay_chunk=4096)          # eight chunks a K/V copy
# (the 4 KiB cases: a lane's V copy right after its K copy reloads stages that K's stores may still be
#  reading, unless stream_copy waits for them, cp.async.bulk.wait_group.read 0, before its first loads)
RING_CASES = [
    # w, batch, shard_len, heads, kv_heads, dim, causal, relay, communicators
    (1, 1, 128, 2, 2, 64, False, None, 1),
    (2, 1, 128, 2, 2, 64, False, None, 1),
    (3, 1, 200, 2, 1, 64, False, None, 1),
    (1, 1, 200, 2, 1, 64, True, None, 1),
    (2, 1, 128, 2, 2, 64, True, None, 1),
    (3, 1, 200, 2, 1, 64, True, None, 1),
    (2, 2, 64, 2, 1, 64, True, None, 1),
    (3, 1, 384, 1, 1, 64, False, None, 2),
    (2, 1, 128, 1, 1, 128, True, None, 1),
    (2, 1, 200, 2, 1, 64, True, PIPELINED, 1),
    (2, 1, 128, 1, 1, 64, False, PIPELINED_4K, 1),
    (3, 1, 128, 2, 2, 64, False, DEEP_4K, 1),
]


def _ring_id(case) -> str:
    w, batch, s, h, kvh, d, causal, relay, comm = case
    relay = "" if relay is None else "-relay" + "".join(f"{k[6]}{v}" for k, v in relay.items())
    return f"w{w}-b{batch}-s{s}-h{h}kv{kvh}-d{d}{'-causal' if causal else ''}{relay}-comm{comm}"


@pytest.mark.parametrize("w, batch, shard_len, heads, kv_heads, dim, causal, relay, comm", RING_CASES,
                         ids=[_ring_id(c) for c in RING_CASES])
def test_ring_attention(w, batch, shard_len, heads, kv_heads, dim, causal, relay, comm):
    _check_calls(run_ring(w, batch=batch, shard_len=shard_len, heads=heads, kv_heads=kv_heads, dim=dim,
                          causal=causal, relay=relay, comm=comm, seed=shard_len + dim), f"ring w={w}")


@pytest.mark.parametrize("w, causal", [(1, False), (2, True), (3, False)])
def test_ring_attention_launched_again_with_the_same_arguments(w, causal):
    """Three launches of one prepared launch per rank, new inputs in the same buffers each time (a graph
    replay): the flags' waits expect each launch's own count, so no call passes on the previous one's."""
    _check_calls(run_ring(w, shard_len=128, heads=2, kv_heads=1, dim=64, causal=causal, seed=5, calls=3),
                 f"ring w={w} again")


# ------------------------------------------------------------------ Ulysses attention
def _map_table(mach, rank: int, ptrs, shape, box, swizzle, name: str) -> int:
    """``sequence._map_table``: the tensor maps of every rank's copy of a buffer, in ``rank``'s memory."""
    maps = b"".join(tiled(ptr, BF16, shape, box, swizzle=swizzle).data for ptr in ptrs)
    return mach.from_numpy(np.frombuffer(maps, np.uint8).copy(), name=name, rank=rank).base


def run_ulysses(w: int, *, seq: int, heads: int, kv_heads: int, dim: int, causal: bool, batch: int = 1,
                seed: int = 0, calls: int = 1):
    """Per call (``calls`` of one prepared launch per rank, new inputs each time): every rank's (O, LSE)
    of a Ulysses attention launched as ``pkptx.ops.sequence.ulysses_attention`` does, and the float64
    references."""
    def shards(seed):
        return tuple(np.split(x, w, axis=1) for x in _full(seed, batch, w * seq, heads, kv_heads, dim))

    qs, ks, vs = shards(seed)
    p = check_ulysses(qs[0].shape, BF16, ks[0].shape, BF16, vs[0].shape, BF16, w, causal=causal, num_comm_sms=1)
    kern = kernel(ulysses.build, p["cfg"])
    b, s, d, hl, kvl, group, rows = batch, p["seq"], dim, p["local_heads"], p["local_kv_heads"], p["group"], \
        p["piece_rows"]
    ranks = Ranks(w, seed=seed + w)
    mach = ranks.world.machine
    gathered = {x: ranks.symmetric((b, w * s, hl if x == "q" else kvl, d), BF16, f"{x}g") for x in "qkv"}
    arrive = ranks.symmetric((p["flags"],), np.uint32, "arrive", fill=0)
    out = ranks.symmetric(qs[0].shape, BF16, "o")
    lse_shape = (b, heads, s)
    lse = ranks.symmetric(lse_shape, np.float32, "lse")
    heads_of = {"q": (heads, hl, group), "k": (kv_heads, kvl, 1), "v": (kv_heads, kvl, 1)}
    launches, inputs = [], []
    outputs = [((out.allocs[r], BF16, qs[0].shape), (lse.allocs[r], np.float32, lse_shape)) for r in range(w)]
    for r in range(w):
        values, devs = {}, []
        for x, arr in (("q", qs[r]), ("k", ks[r]), ("v", vs[r])):
            total, local, box_heads = heads_of[x]
            dev = mach.from_numpy(arr, name=x, rank=r)
            devs.append(dev)
            buf = gathered[x]
            values[f"tmap_{x}"] = ranks.tensor_map(dev.base, BF16, (b, 1, s, total, d), BOX5)
            values[f"tmap_{x}g_local"] = ranks.tensor_map(buf.ptr(r), BF16, (b, w, s, local, d), BOX5)
            values[f"tmap_{x}s"] = tiled(dev.base, BF16, arr.shape, (1, rows, box_heads, d)).data
            values[f"{x}g_tmaps"] = _map_table(mach, r, [buf.ptr(i) for i in range(w)], (b, w, s, local, d),
                                               (1, 1, rows, box_heads, d), None, f"{x}g tmaps")
        values["o_tmaps"] = _map_table(mach, r, [out.ptr(i) for i in range(w)], qs[0].shape, BOX, 128, "o tmaps")
        inputs.append(devs)
        launches.append(functools.partial(
            ranks.launch, r, kern, kern.req_threads[0], layouts=dict(arrive=arrive, lse=lse), grid=_grid(p),
            smem=kern.dynamic_smem, num_comm_sms=p["num_comm_sms"], **values,
            tasks=p["tasks"], q_blocks=p["q_blocks"], heads=heads, local_heads=hl, local_kv_heads=kvl,
            group=group, seq=s, piece_rows=rows, row_pieces=p["row_pieces"], pieces=p["pieces"],
            piece_bytes=p["piece_bytes"], scale_log2=_scale_log2(d)))
    results = _calls(ranks, launches, inputs, outputs, range(seed, seed + calls), shards,
                     functools.partial(ulysses.reference, causal=causal))
    _check_launch_count(arrive, w, calls)
    return results


ULYSSES_CASES = [
    # w, seq (per rank), heads, kv_heads, dim, causal
    (1, 128, 2, 1, 64, False),
    (2, 128, 2, 2, 64, False),
    (2, 200, 4, 2, 64, True),
    (3, 72, 3, 3, 64, True),
    (2, 72, 2, 2, 128, True),
]


@pytest.mark.parametrize("w, seq, heads, kv_heads, dim, causal", ULYSSES_CASES,
                         ids=[f"w{w}-s{s}-h{h}kv{kvh}-d{d}{'-causal' if c else ''}" for w, s, h, kvh, d, c in ULYSSES_CASES])
def test_ulysses_attention(w, seq, heads, kv_heads, dim, causal):
    _check_calls(run_ulysses(w, seq=seq, heads=heads, kv_heads=kv_heads, dim=dim, causal=causal, seed=seq + heads),
                 f"ulysses w={w}")


@pytest.mark.parametrize("w, causal", [(1, True), (2, False), (3, True)])
def test_ulysses_attention_launched_again_with_the_same_arguments(w, causal):
    """As the ring's: three launches of one prepared launch per rank, new inputs each time."""
    _check_calls(run_ulysses(w, seq=72, heads=w, kv_heads=w, dim=64, causal=causal, seed=7, calls=3),
                 f"ulysses w={w} again")
