"""Sequence parallelism on the CPU: the ring and Ulysses kernels assemble without spills and carry the
memory-ordering forms the design needs; every argument error is raised before GPU work; and numpy
models of the ring schedule check that the runs of keys each rank visits (in arrival order, with their
full / diagonal / skipped masks) give exactly attention over the whole sequence, that zigzag gives every
rank (and every ring step) the same work, and that the communicators send every piece to exactly the
ranks that see it."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pkptx.catalog import KERNEL_MODULES
from pkptx.launch import status
from pkptx.ops.sequence import MIN_COMM_SMS, SM_FLOPS, SM_PUSH, SequenceArgumentError, auto_comm_sms, check_ring, check_ulysses
from pkptx.templates.attention_parts import key_limit
from pkptx.templates.kernels import attention
from pkptx.templates.kernels import ring_attention as ring
from pkptx.templates.kernels import ulysses
from pkptx.toolchain import assemble
from tests.helpers.assemble import consumer_budget_log

CONFIGS = [(module, module.default_config(dtype, d, causal)) for module in (ring, ulysses)
           for dtype in ("bf16", "f16") for d in (64, 128) for causal in (False, True)]
RING = [cfg for module, cfg in CONFIGS if module is ring]


@pytest.mark.parametrize("module, cfg", CONFIGS, ids=lambda c: getattr(c, "name", ""))
def test_assembles_without_spills(module, cfg):
    """At the consumers' whole-program register budget where the kernel uses setmaxnreg (a granule more
    with 3 consumer warpgroups, see consumer_budget_log; there the driver's compile keeps a few per-task
    values of the ring's and Ulysses' bookkeeping in local memory, outside the K/V loop)."""
    built = module.build(cfg)
    cubin = (consumer_budget_log(built, slack=8 if cfg.attention.consumers == 3 else 0) if built.rebalances
             else assemble(built.render(), "sm_90a", use_cache=False))
    assert cubin.resources.spills == 0 and cubin.resources.stack_bytes == 0, (cfg.name, cubin.resources)
    assert "C75" not in cubin.log, cubin.log
    assert cfg.smem_bytes == module.build(cfg).dynamic_smem


@pytest.mark.parametrize("module", [ring, ulysses])
def test_catalogued(module):
    assert module.__name__ in KERNEL_MODULES
    assert [k.name for k in module.catalog()] == [c.name for m, c in CONFIGS if m is module]


def test_ring_ptx_ordering_forms():
    ptx = ring.build(RING[-1]).render()
    assert ptx == ring.build(RING[-1]).render()
    lines = [line.strip() for line in ptx.splitlines() if line.strip() and not line.strip().startswith("//")]
    for form in ("cp.async.bulk.tensor.5d.shared::cluster.global.tile", "cp.async.bulk.shared::cluster.global",
                 "cp.async.bulk.global.shared::cta.bulk_group", "ld.acquire.sys.global.u32",
                 "red.release.sys.global.add.u32", "cp.async.bulk.wait_group.read 0"):
        assert any(line.startswith(form) for line in lines), form
    signals = [i for i, line in enumerate(lines) if line.startswith("red.release.sys")]
    # the first signal is ticket 0's "started" to every rank; every later one raises an arrival
    # and must follow a full wait for the bulk stores and the async-proxy fence (pk-design 5)
    for i in signals[1:]:
        last_store = max(j for j in range(i) if lines[j].startswith("cp.async.bulk.global.shared::cta"))
        after = lines[last_store:i]
        assert "cp.async.bulk.wait_group 0;" in after, after
        assert after.index("fence.proxy.async.global;") > after.index("cp.async.bulk.wait_group 0;"), after
    # the flag waits: every rank's start (a loop over the ranks, then one fence before the first bulk copy),
    # the loader's wait for a piece (fenced before its TMA loads), and the closing rank barrier's
    ends = [i for i, line in enumerate(lines) if line.startswith("$L_wait_flag_end")]
    assert len(ends) == 3 and lines[ends[1] + 1] == "fence.proxy.async.global;", [lines[i + 1] for i in ends]
    first_copy = next(i for i in range(ends[0], len(lines)) if lines[i].startswith("cp.async.bulk.shared::cluster"))
    assert "fence.proxy.async.global;" in lines[ends[0]:first_copy]


def test_peer_flag_constant_shared_with_the_host():
    assert ring.PEER_FLAG == status.PEER_FLAG


BF = "bfloat16"


def plan(q=(2, 100, 8, 128), k=(2, 100, 2, 128), v=None, world=2, dtypes=(BF, BF, BF), **kw):
    return check_ring(q, dtypes[0], k, dtypes[1], v or k, dtypes[2], world, **kw)


def test_ring_plan():
    p = plan(world=3, causal=True)
    assert (p["chunk"], p["k_blocks"], p["q_blocks"], p["cfg"].halves) == (50, 1, 1, 2)
    assert p["tasks"] == 2 * 8 * 2 and p["pieces"] == 2 * 2 and p["flags"] == 2 + 3 + 2 * 3 * 2
    assert plan(world=1)["num_comm_sms"] == 0 and plan(world=4, num_comm_sms=7)["num_comm_sms"] == 7


@settings(max_examples=50, deadline=None)
@given(comm=st.integers(0, 2**34), more=st.integers(0, 2**34), flops=st.floats(1.0, 1e15), sms=st.integers(1, 132))
def test_auto_comm_sms_in_range_and_growing_with_the_bytes(comm, more, flops, sms):
    n = auto_comm_sms(comm, flops, sms)
    most = max(1, sms // 4)
    assert min(MIN_COMM_SMS, most) <= n <= most
    assert auto_comm_sms(comm + more, flops, sms) >= n          # more to push: never fewer communicators
    if n < most:                   # enough: the pushes take at most 2/3 of the estimated attention time
        assert comm / (n * SM_PUSH) <= flops / (sms * SM_FLOPS) / 1.5 * (1 + 1e-9)


def test_auto_comm_sms_at_the_measured_shapes():
    """bench_sp's ring, B=4, H=16, D=128, one GPU under MPS: 8 communicators beat the 2-4 of the old
    model (2026-12-04); the model now asks for several."""
    ring4 = plan(q=(4, 1536, 16, 128), k=(4, 1536, 16, 128), world=4, sm_count=32)
    ring2 = plan(q=(4, 12288, 16, 128), k=(4, 12288, 16, 128), world=2, sm_count=66)
    assert ring4["num_comm_sms"] == 8 and ring2["num_comm_sms"] == 8


@pytest.mark.parametrize("kw, message", [
    (dict(q=(2, 100, 8)), "q must be 4-D"),
    (dict(k=(2, 90, 2, 128)), "same shard"),
    (dict(causal=True, q=(2, 99, 8, 128), k=(2, 99, 2, 128)), "even shard length"),
    (dict(k=(2, 100, 3, 128)), "must divide q heads"),
    (dict(q=(2, 100, 8, 96), k=(2, 100, 2, 96)), "head dim D"),
    (dict(dtypes=(BF, "float16", BF)), "must all be bfloat16 or all float16"),
    (dict(world=0), "world size"),
    (dict(num_comm_sms=0), "num_comm_sms"),
    (dict(num_comm_sms=True), "num_comm_sms"),
    (dict(causal=1), "causal must be True or False"),
    (dict(scale=-1.0), "scale"),
    (dict(q=(1 << 13, 1 << 12, 1, 64), k=(1 << 13, 1 << 12, 1, 64), world=64), "B·world·S"),
])
def test_ring_argument_errors(kw, message):
    with pytest.raises(SequenceArgumentError, match=message) as info:
        plan(**kw)
    assert str(info.value).startswith("ring_attention:")


# ------------------------------------------------------------------ models of the ring schedule
def modelled_ring(q_shards, k_shards, v_shards, *, causal):
    """Every rank's (O, LSE) as the kernel computes them: per query chunk, the runs of keys of
    ``ring.schedule`` in order, each masked with key_limit(row, chunk, diag) for its kind."""
    world, outs, lses = len(q_shards), [], []
    halves = 2 if causal else 1
    diag_of = {"full": 1, "diag": 0, "skip": -1}
    for r in range(world):
        runs = ring.schedule(r, world, causal=causal)
        per_half = len(runs) // halves
        q = np.asarray(q_shards[r], np.float64)
        c = q.shape[1] // halves
        out, lse = np.zeros_like(q), np.zeros((q.shape[0], q.shape[2], q.shape[1]))
        for h in range(halves):
            qh = q[:, h * c:(h + 1) * c]
            scores, values = [], []
            for src, _gk, kind in runs[h * per_half:(h + 1) * per_half]:
                khalf = ring.zigzag_chunks(src, world).index(_gk) if causal else 0
                kk = np.asarray(k_shards[src], np.float64)[:, khalf * c:(khalf + 1) * c]
                vv = np.asarray(v_shards[src], np.float64)[:, khalf * c:(khalf + 1) * c]
                s = np.einsum("bihd,bjhd->bhij", qh, kk) / np.sqrt(q.shape[-1])
                limits = np.array([key_limit(i, c, diag_of[kind] * c) for i in range(c)])
                s = np.where(np.arange(c)[None, :] < limits[:, None], s, -np.inf)
                scores.append(s)
                values.append(vv)
            s = np.concatenate(scores, axis=-1)
            vals = np.concatenate(values, axis=1)
            top = s.max(axis=-1, keepdims=True)
            e = np.exp(s - top)
            out[:, h * c:(h + 1) * c] = np.einsum("bhij,bjhd->bihd", e / e.sum(-1, keepdims=True), vals)
            lse[:, :, h * c:(h + 1) * c] = np.log(e.sum(-1)) + top[..., 0]
        outs.append(out)
        lses.append(lse)
    return outs, lses


@settings(max_examples=25, deadline=None)
@given(world=st.integers(1, 5), half=st.integers(1, 6), heads=st.integers(1, 2), causal=st.booleans(),
       seed=st.integers(0, 2**31))
def test_ring_schedule_is_attention_over_the_whole_sequence(world, half, heads, causal, seed):
    rng = np.random.default_rng(seed)
    seq = 2 * world * half
    q, k, v = (rng.standard_normal((1, seq, heads, 8)) for _ in range(3))
    shards = [[ring.shard(x, r, world, causal=causal) for r in range(world)] for x in (q, k, v)]
    got, got_lse = modelled_ring(*shards, causal=causal)
    want, want_lse = ring.reference(*shards, causal=causal)
    for r in range(world):
        np.testing.assert_allclose(got[r], want[r], atol=1e-10)
        np.testing.assert_allclose(got_lse[r], want_lse[r], atol=1e-10)
    full, _ = attention.reference(q, k, v, causal=causal)
    np.testing.assert_allclose(ring.unshard(want, causal=causal), full, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(world=st.integers(1, 8), causal=st.booleans())
def test_every_pair_once_and_sources_in_arrival_order(world, causal):
    for r in range(world):
        runs = ring.schedule(r, world, causal=causal)
        halves = 2 if causal else 1
        per_half = len(runs) // halves
        for h in range(halves):
            mine = runs[h * per_half:(h + 1) * per_half]
            assert sorted(gk for _, gk, _ in mine) == list(range(world * halves))
            steps = [(r - src) % world for src, _, _ in mine]
            assert steps == sorted(steps) and steps[0] == 0


@settings(max_examples=40, deadline=None)
@given(world=st.integers(1, 8))
def test_zigzag_balances_work_per_rank_and_per_step(world):
    """Work in chunk pairs (a diagonal pair is half a full one): the same on every rank, and at every ring
    step the same on every rank (2 full pairs; step 0: 1 full + 2 diagonal)."""
    cost = {"full": 1.0, "diag": 0.5, "skip": 0.0}
    per_step = np.zeros((world, world))
    for r in range(world):
        for src, _, kind in ring.schedule(r, world, causal=True):
            per_step[r, (r - src) % world] += cost[kind]
    assert np.allclose(per_step, 2.0)


@settings(max_examples=60, deadline=None)
@given(world=st.integers(2, 6), k_blocks=st.integers(1, 5), batch=st.integers(1, 3), causal=st.booleans())
def test_every_piece_reaches_every_rank_that_sees_it_once(world, k_blocks, batch, causal):
    """The communicator tasks of rank r send each piece (batch, chunk, key block) once to every other
    rank whose queries see that chunk (``ring.schedule``: not "skip"), and to no other, in piece order."""
    halves = 2 if causal else 1
    pieces = batch * halves * k_blocks
    for rank in range(world):
        sent = []
        for task in range(pieces * (world - 1)):
            piece, dst = task // (world - 1), (rank + 1 + task % (world - 1)) % world
            khalf = (piece // k_blocks) % halves
            if khalf == 0 or dst < rank:
                sent.append((piece, dst))
        assert [p for p, _ in sent] == sorted(p for p, _ in sent)
        for piece in range(pieces):
            khalf = (piece // k_blocks) % halves
            chunk = ring.zigzag_chunks(rank, world)[khalf] if causal else rank
            seen_by = {r for r in range(world) if r != rank and any(
                gk == chunk and kind != "skip" for _, gk, kind in ring.schedule(r, world, causal=causal))}
            assert {d for p, d in sent if p == piece} == seen_by, (rank, piece)


@settings(max_examples=30, deadline=None)
@given(world=st.integers(1, 6), half=st.integers(1, 5), causal=st.booleans())
def test_shard_round_trip(world, half, causal):
    x = np.arange(2 * world * half * 3).reshape(1, 2 * world * half, 3)
    assert (ring.unshard([ring.shard(x, r, world, causal=causal) for r in range(world)], causal=causal) == x).all()


# ------------------------------------------------------------------ Ulysses
def test_ulysses_ptx_ordering_forms():
    ptx = ulysses.build(ulysses.default_config("bf16", 128, True)).render()
    lines = [line.strip() for line in ptx.splitlines() if line.strip() and not line.strip().startswith("//")]
    for form in ("cp.async.bulk.tensor.4d.shared::cluster.global.tile", "cp.async.bulk.tensor.5d.global.shared::cta",
                 "cp.async.bulk.tensor.4d.global.shared::cta", "ld.acquire.sys.global.u32",
                 "red.release.sys.global.add.u32", "atom.acq_rel.sys.global.add.u32"):
        assert any(line.startswith(form) for line in lines), form
    stores = [i for i, line in enumerate(lines) if line.startswith("cp.async.bulk.tensor.5d.global.shared::cta")]
    signal = next(i for i in range(stores[-1], len(lines)) if lines[i].startswith("red.release.sys"))
    after = lines[stores[-1]:signal]
    assert after.index("fence.proxy.async.global;") > after.index("cp.async.bulk.wait_group 0;"), after
    ends = [i for i, line in enumerate(lines) if line.startswith("$L_wait_flag_end")]
    assert sum(lines[i + 1] == "fence.proxy.async.global;" for i in ends) == 2, [lines[i + 1] for i in ends]


def uplan(q=(2, 100, 8, 128), k=(2, 100, 4, 128), world=2, **kw):
    return check_ulysses(q, BF, k, BF, k, BF, world, **kw)


def test_ulysses_plan():
    p = uplan(causal=True)
    assert (p["local_heads"], p["local_kv_heads"], p["group"], p["piece_rows"], p["row_pieces"]) == (4, 2, 2, 96, 2)   # 192-row blocks / group 2
    assert p["pieces"] == 2 * 2 * 1 * 2 and p["tasks"] == 2 * 4 * 2 * 1 and p["flags"] == 2 + 2 + 2 * 2 * 2
    assert p["piece_bytes"] == 96 * 128 * 2 * 4
    assert uplan(world=1, k=(2, 100, 1, 128))["pieces"] == 0


@pytest.mark.parametrize("kw, message", [
    (dict(q=(2, 100, 6, 128), k=(2, 100, 3, 128), world=2), "must both be multiples of the world size"),
    (dict(q=(2, 100, 8, 128), k=(2, 100, 2, 128), world=4), "must both be multiples of the world size"),
    (dict(q=(1, 10, 258, 64), k=(1, 10, 2, 64), world=2), "at most 128 q heads per K/V head"),
    (dict(k=(2, 99, 4, 128)), "same shard"),
    (dict(world=0), "world size"),
])
def test_ulysses_argument_errors(kw, message):
    with pytest.raises(SequenceArgumentError, match=message) as info:
        uplan(**kw)
    assert str(info.value).startswith("ulysses_attention:")


@settings(max_examples=25, deadline=None)
@given(world=st.integers(1, 4), shard=st.integers(1, 9), kv_local=st.integers(1, 2), group=st.integers(1, 3),
       causal=st.booleans(), seed=st.integers(0, 2**31))
def test_ulysses_head_split_is_attention_over_the_whole_sequence(world, shard, kv_local, group, causal, seed):
    """Rank d attends its heads over every shard (full, diagonal or skipped by shard order, as the
    plan's runs), and each query shard's rows of those heads go back to that shard's rank."""
    rng = np.random.default_rng(seed)
    kv = kv_local * world
    q = rng.standard_normal((1, shard * world, kv * group, 8))
    k, v = (rng.standard_normal((1, shard * world, kv, 8)) for _ in range(2))
    shards = [np.split(x, world, axis=1) for x in (q, k, v)]
    want, _ = ulysses.reference(*shards, causal=causal)
    got = [np.zeros_like(s) for s in shards[0]]
    hl = kv_local * group
    for d in range(world):
        for h in range(d * hl, (d + 1) * hl):
            kh = h // group
            for sq in range(world):
                qq = shards[0][sq][:, :, h]
                scores, values = [], []
                for sk in range(world):
                    kind = "full" if not causal or sk < sq else "diag" if sk == sq else "skip"
                    diag = {"full": shard, "diag": 0, "skip": -shard}[kind]
                    s = np.einsum("bid,bjd->bij", qq, shards[1][sk][:, :, kh]) / np.sqrt(8)
                    limits = np.array([key_limit(i, shard, diag) for i in range(shard)])
                    scores.append(np.where(np.arange(shard)[None, :] < limits[:, None], s, -np.inf))
                    values.append(shards[2][sk][:, :, kh])
                s = np.concatenate(scores, axis=-1)
                e = np.exp(s - s.max(-1, keepdims=True))
                got[sq][:, :, h] = np.einsum("bij,bjd->bid", e / e.sum(-1, keepdims=True), np.concatenate(values, 1))
    for r in range(world):
        np.testing.assert_allclose(got[r], want[r], atol=1e-10)


@settings(max_examples=40, deadline=None)
@given(world=st.integers(2, 6), pieces=st.integers(1, 6), workers=st.integers(1, 4), data=st.data())
def test_a_rank_that_never_comes_is_what_every_stuck_forwarder_waits_on(world, pieces, workers, data):
    """With rank ``a`` absent, every communicator still stuck waits either for ``a`` to start (it is the
    next rank) or for a piece of ``a``'s shard: so the first expiries (communicators' budgets end before
    the compute blocks') name ``a`` on every rank."""
    a = data.draw(st.integers(0, world - 1))
    items = {r: {j: [(p, s) for s in range(1, world) for p in range(j, pieces, workers)] for j in range(workers)}
             for r in range(world) if r != a}
    done, progress = set(), True
    while progress:
        progress = False
        for r, per in items.items():
            for lst in per.values():
                while lst and (r + 1) % world != a:
                    p, s = lst[0]
                    if s > 1 and ((r - 1) % world, p, s - 1) not in done:
                        break
                    done.add((r, p, s))
                    lst.pop(0)
                    progress = True
    for r, per in items.items():
        for lst in per.values():
            if lst:
                p, s = lst[0]
                assert (r + 1) % world == a or (r - s + 1) % world == a, (r, p, s)
