"""MoE kernels on the CPU: every kernel builds and assembles, host checks refuse bad input before any GPU
work, the grouped GEMM's tile walk (run on the PTX interpreter) covers exactly the groups' rows, and the
numpy model of the routing layout (counts, prefix sums, slots) holds for random routings."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pkptx.isa import Param, address, u32, u64
from pkptx.ops.moe import MoeArgumentError, check_grouped, max_groups_for
from pkptx.templates.progress import flag_words
from pkptx.templates.kernels import grouped_gemm, moe_combine, moe_dispatch, moe_dispatch_gemm
from pkptx.templates.lcsc import Buffer, Template
from pkptx.toolchain import assemble

KERNELS = [k for module in (grouped_gemm, moe_dispatch, moe_dispatch_gemm, moe_combine) for k in module.catalog()]


@pytest.mark.parametrize("kernel", KERNELS, ids=[k.name for k in KERNELS])
def test_moe_kernels_assemble_without_spills_or_serialised_wgmma(kernel):
    cubin = assemble(kernel.render(), kernel.target, use_cache=False)
    assert cubin.resources.spills == 0, (kernel.name, cubin.resources)
    assert "C7518" not in cubin.log and "serialized" not in cubin.log


def test_same_config_same_ptx():
    cfg = grouped_gemm.Config()
    assert grouped_gemm.build(cfg).render() == grouped_gemm.build(cfg).render()


# ---------------------------------------------------------------------------------------- host checks
GOOD = dict(x_shape=(100, 64), x_dtype="bfloat16", w_shape=(3, 32, 64), w_dtype="bfloat16", offsets_shape=(3,),
            offsets_dtype="int32")


@pytest.mark.parametrize("change, message", [
    (dict(w_shape=(3, 32, 48)), "K = 48"),
    (dict(x_shape=(100, 40), w_shape=(3, 32, 40)), "multiple of 16"),
    (dict(w_shape=(3, 24, 64)), "N = 24"),
    (dict(x_shape=(100, 64, 1)), "2-D"),
    (dict(w_shape=(32, 64)), "3-D"),
    (dict(offsets_shape=(4,)), r"offsets must have shape \(3,\)"),
    (dict(offsets_dtype="int64"), "int32"),
    (dict(w_dtype="float16"), "both be bfloat16"),
])
def test_grouped_gemm_refuses_bad_shapes(change, message):
    with pytest.raises(MoeArgumentError, match=message):
        check_grouped(**{**GOOD, **change})


def test_grouped_gemm_kn_layout_and_out():
    assert check_grouped(**{**GOOD, "w_shape": (3, 64, 32)}, w_layout="kn") == (100, 32, 64, 3)
    with pytest.raises(MoeArgumentError, match="out must be 100 x 32"):
        check_grouped(**GOOD, out_shape=(100, 64))
    with pytest.raises(MoeArgumentError, match="w_layout"):
        check_grouped(**GOOD, w_layout="tn")


def test_group_table_sizes():
    assert [max_groups_for(g) for g in (1, 16, 17, 256, 257)] == [16, 16, 32, 256, 512]
    with pytest.raises(Exception, match="max_groups"):
        grouped_gemm.Config(max_groups=24)


# ------------------------------------------------------------------ the grouped tile walk, interpreted
WALK_PARAMS = (Param("offsets", u64, pointer=True), Param("groups", u32), Param("rows", u32),
               Param("tiles_m", u32), Param("tiles_n", u32), Param("result", u64, pointer=True))


def walk_kernel(cfg: grouped_gemm.Config):
    """A communicator-only kernel that runs the grouped GEMM's prologue table and tile locator for
    every task and records (tile row, tile column, group, first row, group end) per task."""
    t = Template("grouped_walk", params=WALK_PARAMS, buffers=(Buffer("group_tiles", cfg.table_bytes, 16),),
                 comm_threads=64, progress=False)

    tiles_m = None

    def comm_tasks(ctx):
        nonlocal tiles_m
        tiles_m = grouped_gemm.group_table(ctx, cfg)
        return ctx.b.mul(u32, tiles_m, ctx.p.tiles_n, mode="lo")

    def communicator(ctx, task):
        b = ctx.b
        t = grouped_gemm.locate_tile(ctx, cfg, task, tiles_m)
        with b.if_then(b.setp("eq", u32, ctx.role_tid, 0)):
            at = b.mad(u64, b.cvt(u64, u32, task), 20, ctx.p.result, mode="lo")
            for i, v in enumerate((t.tm, t.tn, t.group, t.row0, t.row_end)):
                b.st(u32, address(at, 4 * i), v, space="global")

    return t.build(comm_tasks=comm_tasks, communicator=communicator)


def expected_tiles(sizes, tile_m=128):
    """(group, first row, group end) of every tile row, in order."""
    out, start = [], 0
    for g, size in enumerate(sizes):
        for j in range(-(-size // tile_m)):
            out.append((g, start + tile_m * j, start + size))
        start += size
    return out


@settings(max_examples=12, deadline=None)
@given(sizes=st.lists(st.sampled_from([0, 1, 5, 127, 128, 129, 200, 256, 300]), min_size=1, max_size=40),
       tiles_n=st.integers(1, 3))
@example(sizes=[0, 0, 0], tiles_n=1)
@example(sizes=[0] * 33 + [130], tiles_n=2)
@example(sizes=[1000], tiles_n=1)
def test_tile_walk_covers_every_group_row_once(sizes, tiles_n):
    cfg = grouped_gemm.Config(max_groups=max_groups_for(len(sizes)))
    kernel = walk_kernel(cfg)
    offsets = np.cumsum(sizes).astype(np.int32)
    rows = int(offsets[-1])
    want = expected_tiles(sizes)
    bound = -(-rows // 128) + len(sizes)
    result = np.full((max(1, bound * tiles_n), 5), 0xFFFFFFFF, dtype=np.uint32)
    status = np.zeros(8, dtype=np.uint32)
    kernel.interpret(2, 64, offsets, len(sizes), rows, bound, tiles_n, result, 0, 1, status, 10**9, 2)
    got = result[:len(want) * tiles_n]
    assert (result[len(want) * tiles_n:] == 0xFFFFFFFF).all(), "tasks past the table's total ran"
    seen = sorted((int(r[0]), int(r[1])) for r in got)
    assert seen == [(m, n) for m in range(len(want)) for n in range(tiles_n)]
    for tm, tn, g, row0, end in got:
        assert (g, row0, end) == want[tm]


def test_tile_walk_clamps_offsets_past_the_rows():
    cfg = grouped_gemm.Config(max_groups=16)
    kernel = walk_kernel(cfg)
    offsets = np.array([100, 50, 400], dtype=np.int32)     # decreasing (group 1 empty), and past the 300 rows
    result = np.full((8, 5), 0xFFFFFFFF, dtype=np.uint32)
    kernel.interpret(1, 64, offsets, 3, 300, 6, 1, result, 0, 1, np.zeros(8, np.uint32), 10**9, 1)
    assert [tuple(r[2:]) for r in result[:3]] == [(0, 0, 100), (2, 50, 300), (2, 178, 300)]
    assert (result[3:] == 0xFFFFFFFF).all()


# ------------------------------------------------------------------------------- the routing layout

@st.composite
def routings(draw, max_world=4):
    """(ids per rank, number of experts): random top-k routings, and the corner cases by name."""
    world = draw(st.integers(1, max_world))
    local = draw(st.integers(1, 4))
    experts = world * local
    tokens = draw(st.integers(1, 12))
    topk = draw(st.integers(1, min(experts, 3)))
    kind = draw(st.sampled_from(["random", "one_expert", "twice_to_one_rank", "empty_experts", "invalid"]))
    ids = []
    for _ in range(world):
        rng = np.random.default_rng(draw(st.integers(0, 2**31)))
        if kind == "one_expert":
            i = np.zeros((tokens, topk), dtype=np.int32)
        elif kind == "twice_to_one_rank" and local >= 2:
            i = np.stack([rng.permutation(local)[:min(topk, local)] for _ in range(tokens)]).astype(np.int32)
        elif kind == "empty_experts":
            i = rng.integers(0, max(1, experts // 2), size=(tokens, topk)).astype(np.int32)
        else:
            i = np.stack([rng.permutation(experts)[:topk] for _ in range(tokens)]).astype(np.int32)
            if kind == "invalid":
                i[0, 0] = experts + 3
        ids.append(i)
    return ids, experts


@settings(max_examples=60, deadline=None)
@given(case=routings(max_world=8))
def test_layout_model_groups_rows_by_expert_then_source(case):
    ids, experts = case
    lay = moe_dispatch.layout(ids, experts)
    world, local = lay.world, lay.local
    for d in range(world):
        owned = np.arange(d * local, (d + 1) * local)
        ends = lay.offsets[d]
        assert ends[-1] == lay.counts[:, owned].sum()
        starts = np.concatenate([[0], ends[:-1]])
        assert np.array_equal(ends - starts, lay.counts[:, owned].sum(axis=0))
    slots = [moe_dispatch.stable_slots(i, s, lay) for s, i in enumerate(ids)]
    for d in range(world):                  # every row of every rank's buffer is hit exactly once
        got = np.concatenate([sl[(i // local == d) & (i >= 0) & (i < experts)] for i, sl in zip(ids, slots)])
        assert np.array_equal(np.sort(got), np.arange(lay.offsets[d, -1]))
    for s, (i, sl) in enumerate(zip(ids, slots)):
        assert moe_dispatch.check_slots(i, sl, s, lay) == []
        for (t, kk), e in np.ndenumerate(i):
            if 0 <= e < experts:
                d, l = divmod(int(e), local)
                first = lay.offsets[d, l - 1] if l else 0
                assert first <= sl[t, kk] < lay.offsets[d, l]            # inside its expert's rows
                assert sl[t, kk] >= first + lay.counts[:s, e].sum()     # after lower ranks' rows
            else:
                assert sl[t, kk] == -1


def route_args(kernel, values):
    return [values[p.name] for p in kernel.params]


@settings(max_examples=8, deadline=None)
@given(case=routings(max_world=3), seed=st.integers(0, 2**16))
@example(case=([np.zeros((3, 2), np.int32), np.zeros((3, 2), np.int32)], 2), seed=0)
def test_route_kernel_matches_the_layout_model(case, seed):
    """The route kernel of every rank, run together on the PTX interpreter (count exchange, ready
    flags, slots), against the numpy layout model."""
    from pkptx.interp import Machine
    ids, experts = case
    world, blocks = len(ids), 3
    kernel = moe_dispatch.build_route(moe_dispatch.Config(max_experts=16))
    m = Machine(seed=seed)
    shared = {}
    for name, nbytes in (("counts", 4 * world * experts), ("ready", 4 * moe_dispatch.READY_WORDS),
                         ("arrivals", 4 * (blocks + 1)), ("flags", 4 * flag_words(world))):
        allocs = [m.alloc(nbytes, name=name, rank=r, fill=0xFF if name == "arrivals" else 0) for r in range(world)]
        tables = [m.from_numpy(np.array([a.base for a in allocs], np.uint64), name=f"{name}_peers", rank=r)
                  for r in range(world)]
        shared[name] = (allocs, tables)
    outs = []
    for r in range(world):
        slots = m.alloc(4 * ids[r].size, name="slots", rank=r, fill=0xEE)
        order = m.alloc(4 * ids[r].size, name="order", rank=r, fill=0xEE)
        offsets = m.alloc(4 * (experts // world), name="recv_offsets", rank=r, fill=0xEE)
        status = m.alloc(32, name="status", rank=r, fill=0)
        values = dict(ids=m.from_numpy(ids[r], rank=r), pairs=ids[r].size, experts=experts, local=experts // world,
                      slots=slots, order=order, recv_offsets=offsets, blocks=blocks, rank=r, world=world,
                      status=status, timeout_ns=10**12, num_comm_sms=1)
        for name, (_, tables) in shared.items():
            values.update({f"{name}_peers": tables[r], f"{name}_mc": 0})
        m.launch(kernel, 1, moe_dispatch.ROUTE_THREADS, *route_args(kernel, values), rank=r)
        outs.append((slots, order, offsets, status))
    m.run()
    lay = moe_dispatch.layout(ids, experts)
    for r, (slots, order, offsets, status) in enumerate(outs):
        assert status.read(np.uint32)[0] == 0
        assert np.array_equal(offsets.read(np.int32), lay.offsets[r])
        got = slots.read(np.int32, ids[r].shape)
        assert moe_dispatch.check_slots(ids[r], got, r, lay) == []
        sent = order.read(np.int32)
        assert np.array_equal(np.sort(sent), np.arange(ids[r].size)), "the send order is not a permutation"
        keys = moe_dispatch.send_keys(ids[r], r, lay)[sent]
        assert (np.diff(keys) >= 0).all(), "pairs not in send-key order"
        same = np.diff(keys) == 0
        flat = got.ravel()[sent]
        assert (np.diff(flat)[same & (keys[1:] < experts)] > 0).all(), "one expert's pairs out of slot order"
        assert (shared["arrivals"][0][r].read(np.uint32) == 0).all(), "arrival or tile counters not reset"


# --------------------------------------------------------------------------------- dispatch checks
from pkptx.ops.moe import check_routing  # noqa: E402

ROUTE_OK = dict(x_shape=(10, 64), x_dtype="bfloat16", ids_shape=(10, 2), ids_dtype="int32", weights_shape=(10, 2),
                weights_dtype="float32", world_size=4, num_experts=8)


@pytest.mark.parametrize("change, message", [
    (dict(num_experts=6), "split evenly over the world size 4"),
    (dict(num_experts=0), "positive int"),
    (dict(num_experts=8.0), "positive int"),
    (dict(num_experts=4096), "route kernel holds"),
    (dict(x_shape=(10, 60)), "hidden = 60"),
    (dict(x_dtype="float32"), "bfloat16 or float16"),
    (dict(ids_shape=(9, 2), weights_shape=(9, 2)), r"topk_ids must be \(10, k\)"),
    (dict(ids_dtype="int64"), "topk_ids must be int32"),
    (dict(weights_shape=(10, 3)), "topk_weights must have topk_ids' shape"),
    (dict(weights_dtype="float16"), "topk_weights must be float32"),
])
def test_dispatch_refuses_bad_arguments(change, message):
    with pytest.raises(MoeArgumentError, match=message):
        check_routing(**{**ROUTE_OK, **change})


def test_routing_capacity_takes_every_pair_of_every_rank():
    r = check_routing(**ROUTE_OK)
    assert (r.local, r.capacity, r.blocks) == (2, 4 * 10 * 2, 1)
    assert check_routing(**{**ROUTE_OK, "world_size": 1}).local == 8


def pgl(m, name, per_rank):
    """Allocations of ``per_rank`` (one numpy array or byte count per rank) and each rank's peer table."""
    allocs = [m.from_numpy(a, name=name, rank=r) if isinstance(a, np.ndarray) else m.alloc(a, name=name, rank=r, fill=0)
              for r, a in enumerate(per_rank)]
    tables = [m.from_numpy(np.array([a.base for a in allocs], np.uint64), name=f"{name}_peers", rank=r)
              for r in range(len(per_rank))]
    return allocs, tables


@settings(max_examples=6, deadline=None)
@given(case=routings(max_world=3), n_units=st.integers(1, 3), out_dtype=st.sampled_from(["bf16", "f32"]),
       seed=st.integers(0, 2**16))
def test_combine_kernel_sums_weighted_expert_rows(case, n_units, out_dtype, seed):
    """moe_combine of every rank on the PTX interpreter (both rank barriers, peer loads) against
    the float64 reference, with the layout model's slots."""
    import ml_dtypes
    from pkptx.interp import Machine
    ids, experts = case
    world, local, n = len(ids), experts // len(ids), 8 * n_units
    lay = moe_dispatch.layout(ids, experts)
    slots = [moe_dispatch.stable_slots(i, s, lay).astype(np.int32) for s, i in enumerate(ids)]
    rng = np.random.default_rng(seed)
    ys = [rng.standard_normal((max(1, int(lay.offsets[d, -1])), n)).astype(ml_dtypes.bfloat16) for d in range(world)]
    weights = [rng.random(i.shape, dtype=np.float32) for i in ids]
    kernel = moe_combine.build(moe_combine.Config(out_dtype=out_dtype, threads=64))
    m = Machine(seed=seed)
    _, y_tables = pgl(m, "y", ys)
    _, flag_tables = pgl(m, "flags", [4 * flag_words(world)] * world)
    outs = []
    out_type = ml_dtypes.bfloat16 if out_dtype == "bf16" else np.float32
    for r in range(world):
        tokens = ids[r].shape[0]
        out = m.alloc(tokens * n * np.dtype(out_type).itemsize, name="out", rank=r, fill=0xFF)
        status = m.alloc(32, name="status", rank=r, fill=0)
        values = dict(ids=m.from_numpy(ids[r], rank=r), slots=m.from_numpy(slots[r], rank=r),
                      weights=m.from_numpy(weights[r], rank=r), units=tokens * n_units, row_units=n_units,
                      topk=ids[r].shape[1], local=local, out=out, rank=r, world=world, status=status,
                      timeout_ns=10**12, num_comm_sms=2, y_peers=y_tables[r], y_mc=0,
                      flags_peers=flag_tables[r], flags_mc=0)
        m.launch(kernel, 2, 64, *route_args(kernel, values), rank=r)
        outs.append((out, status))
    m.run()
    for r, (out, status) in enumerate(outs):
        assert status.read(np.uint32)[0] == 0
        got = out.read(out_type, (ids[r].shape[0], n)).astype(np.float64)
        want = moe_combine.reference(ys, ids[r], slots[r], weights[r], local)
        assert np.allclose(got, want, rtol=1e-2 if out_dtype == "bf16" else 1e-5, atol=1e-2), (got, want)


@pytest.mark.parametrize("experts, rows, k, n", [(8, 4096, 4096, 14336), (64, 1024, 7168, 2048), (256, 256, 7168, 2048),
                                                 (3, 5, 16, 16), (1, 1, 64, 4096)])
@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_planned_configs_fit_and_their_tensor_maps_encode(experts, rows, k, n, layout):
    """The host's plan at the issue's shapes (and tiny ones) fits in shared memory, and every tensor
    map it asks for passes cuTensorMapEncodeTiled's rules."""
    import ml_dtypes
    from pkptx.launch.tensormap import describe_tiled
    from pkptx.ops.moe import plan_grouped
    t = experts * rows
    cfg = plan_grouped(t, n, k, experts, "bf16", "bf16", layout, sm_count=132, smem_limit=232448)
    assert cfg.smem_bytes <= grouped_gemm.SMEM_LIMIT and cfg.max_groups >= experts
    bf16 = ml_dtypes.bfloat16
    w_shape = (experts, n, k) if layout == "nk" else (experts, k, n)
    for shape, box in (((t, k), (cfg.gemm.tile_m, 64)), (w_shape, cfg.w_box), ((t, n), cfg.gemm.c_box)):
        describe_tiled(1 << 20, bf16, shape, box=box, swizzle=128)       # raises on a rule broken
    g = cfg.gemm
    assert np.prod(cfg.w_box) * 2 * (g.tile_n // cfg.w_box[-1] if layout == "kn" else 1) == g.b_bytes


@pytest.mark.parametrize("kernel", [moe_dispatch.build(), moe_dispatch_gemm.build()], ids=["dispatch", "fused"])
def test_rows_are_written_before_their_arrival_is_signalled(kernel):
    """pk-design 5 on the push: between a bulk store of rows and the release that announces rows,
    ``cp.async.bulk.wait_group N`` (not ``.read``) and ``fence.proxy.async.global``: N = 0 (every row
    written), or N = 1 after the newest row's store was committed (every row but that one written; the
    release is the row before's)."""
    lines = [x.strip() for x in kernel.render().splitlines()]
    stores = [i for i, x in enumerate(lines) if x.startswith(("cp.async.bulk.global.shared::cta", "@"))
              and "cp.async.bulk.global.shared::cta" in x]
    reds = [i for i, x in enumerate(lines) if x.startswith("red.release.sys.global.add.u32")]
    assert stores and reds
    deferred = 0
    for red in reds:
        last_store = max((i for i in stores if i < red), default=None)
        if last_store is None:
            continue                  # the closing barrier's signals, before any push in program order
        between = lines[last_store:red]
        assert "fence.proxy.async.global;" in between, lines[red]
        if "cp.async.bulk.wait_group 0;" in between:
            continue
        assert "cp.async.bulk.wait_group 1;" in between, lines[red]
        wait = between.index("cp.async.bulk.wait_group 1;")
        assert "cp.async.bulk.commit_group;" in between[:wait], "the pending group is the newest row's"
        deferred += 1
    assert deferred, "rows are announced one row late, so a pusher keeps a store in flight"


def test_fused_tiles_fence_their_acquire_before_loading_rows():
    """A compute tile's wait on an arrival counter (acquire) is followed by ``fence.proxy.async.global``
    before the TMA loads of the rows (generic-proxy acquire, async-proxy reads)."""
    lines = [x.strip() for x in moe_dispatch_gemm.build().render().splitlines()]
    polls = [i for i, x in enumerate(lines) if x.startswith("ld.acquire.sys.global.u32")]
    loads = [i for i, x in enumerate(lines) if x.startswith("cp.async.bulk.tensor.2d.shared::cluster.global")]
    assert polls and loads
    first_load = min(loads)
    fences = [i for i, x in enumerate(lines) if x == "fence.proxy.async.global;"]
    row_polls = [i for i in polls if i < first_load]
    assert row_polls and any(max(row_polls) < f < first_load for f in fences)


def test_two_builds_of_one_module_and_config_load_apart(monkeypatch):
    """ops.common.load caches per factory, not per module: the MoE route and push kernels share a module
    and a Config (on the H200 the push launch once got the route kernel)."""
    from pkptx.ops import common
    loaded = []
    monkeypatch.setattr(common, "_loaded", {})
    monkeypatch.setattr(common, "build_cached", lambda factory, cfg: factory(cfg))
    monkeypatch.setattr(common.LoadedKernel, "load", staticmethod(lambda kernel, device: loaded.append(kernel) or kernel))
    device = type("D", (), {"ordinal": 0})()
    route = common.load(moe_dispatch.build_route, moe_dispatch.Config(), device)
    push = common.load(moe_dispatch.build, moe_dispatch.Config(), device)
    assert route.name != push.name and len(loaded) == 2


def test_default_comm_sms_is_a_quarter_of_the_blocks_within_1_to_16():
    from pkptx.ops.moe import default_comm_sms
    assert [default_comm_sms(b) for b in (2, 4, 8, 32, 66, 132)] == [1, 1, 2, 8, 16, 16]
