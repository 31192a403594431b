"""Every primitive in every form emits exactly the PTX its docstring promises, and assembles (sm_90, sm_90a).

Each test builds a scratch kernel (scratch.py), records the lines one primitive call emits, compares
them with the expected lines (registers and labels anonymous: ``%r``, ``$L``; see ptxscan.shape), and
hands the kernel to nvJitLink for the drawn target. Hypothesis draws the primitive's parameters: sem and
scope, reduce ops, element types, tensor ranks, Python-int or register operands, multicast or unicast.
The last tests pin primitive bugs that were found and fixed (bad memory-ordering arguments, bad types).
"""
from __future__ import annotations

import pytest
from hypothesis import example, given, settings, strategies as st

from pkptx.errors import PkptxError, PTXBuildError
from pkptx.isa import Param, Scope, Sem, b32, b8, s32, u32, u64
from pkptx.primitives import StageRing, wait_parity
from pkptx.primitives.layout import ParallelLayout, WorldParams, add_layout_params
from pkptx.primitives.p2p import (TMAP_BYTES, load_async, peer_load, peer_red, peer_store, store_add_async, store_async,
                                  store_async_all)
from pkptx.primitives.sync import (STATUS_WORDS, barrier, publish_async_writes, signal, signal_all, stamp, wait,
                                   wait_peers)
from pkptx.primitives.tile import multimem_reduce, reduce_vector, unicast_reduce
from pkptx.primitives.tma import tensor_map_param
from pkptx.primitives.wgmma import SWIZZLE_MODE, advance, desc_high, fragment_coords, smem_desc, warp_quad

import ptxscan
from tests.helpers.errors import build_error
from scratch import TARGETS, Scratch

SCOPES = [s.value for s in Scope]
targets = st.sampled_from(TARGETS)
ints_or_reg = st.one_of(st.integers(0, 7), st.just("r"))
TMA_OPS = [None, "add", "min", "max", "inc", "dec", "and", "or", "xor"]
FAST = settings(max_examples=25)


def operand(sc: Scratch, value, name="v"):
    """A Python int stays an immediate; "r" becomes a fresh .u32 register holding 5."""
    return sc.b.mov(u32, 5, name=name) if value == "r" else value


def imm_or_reg(value) -> str:
    return "%r" if value == "r" else str(value)


def loop_bodies(ptx: str):
    lines, lps = ptxscan.loops(ptx)
    return [[ptxscan.shape(x) for x in lp.lines(lines)] for lp in lps]


# ------------------------------------------------------------------------------------------ signal
@FAST
@given(sem=st.sampled_from([Sem.RELEASE, Sem.RELAXED]), scope=st.sampled_from(SCOPES),
       value=st.one_of(st.integers(1, 2**31 - 1), st.just("r")), target=targets)
@example(sem=Sem.RELEASE, scope="sys", value=1, target="sm_90a")
def test_signal_is_one_red_add(sem, scope, value, target):
    sc = Scratch(target=target)
    addr = sc.flag(1, 2)
    v = operand(sc, value)
    assert sc.emit(lambda b: signal(b, addr, v, sem=sem, scope=scope)) == [
        f"red.{sem.value}.{scope}.global.add.u32 [%r], {imm_or_reg(value)};"]
    sc.assemble()


def test_flag_address_of_an_int_rank_and_index():
    sc = Scratch()
    assert sc.emit(lambda b: sc.flag(3, 5)) == ["ld.global.nc.u64 %r, [%r+24];", "add.u64 %r, %r, 20;"]
    assert sc.emit(lambda b: sc.flag(sc.rank, sc.idx)) == [
        "mul.wide.u32 %r, %r, 8;", "add.u64 %r, %r, %r;", "ld.global.nc.u64 %r, [%r];",
        "mul.wide.u32 %r, %r, 4;", "add.u64 %r, %r, %r;"]
    sc.assemble()


@FAST
@given(sem=st.sampled_from([Sem.RELEASE, Sem.RELAXED]), scope=st.sampled_from(SCOPES), index=ints_or_reg,
       value=st.integers(1, 9), target=targets)
def test_signal_all_multicast_is_one_multimem_red(sem, scope, index, value, target):
    sc = Scratch(target=target)
    idx = sc.idx if index == "r" else index
    lines = sc.emit(lambda b: signal_all(b, sc.flags, idx, value, world=sc.world, sem=sem, scope=scope,
                                         multicast=True))
    address = ["mul.wide.u32 %r, %r, 4;", "add.u64 %r, %r, %r;"] if index == "r" else [f"add.u64 %r, %r, {4 * index};"]
    assert lines == address + ["mov.u32 %r, " + str(value) + ";",
                               f"multimem.red.{sem.value}.{scope}.global.add.u32 [%r], %r;"]
    assert not any(x.startswith("red.") for x in lines)
    sc.assemble()


@FAST
@given(sem=st.sampled_from([Sem.RELEASE, Sem.RELAXED]), scope=st.sampled_from(SCOPES), index=ints_or_reg,
       value=st.integers(1, 9), target=targets)
def test_signal_all_unicast_loops_over_every_peer(sem, scope, index, value, target):
    sc = Scratch(target=target)
    idx = sc.idx if index == "r" else index
    raw = sc.raw(lambda b: signal_all(b, sc.flags, idx, value, world=sc.world, sem=sem, scope=scope,
                                      multicast=False))
    lines = [ptxscan.shape(x) for x in raw]
    assert not any("multimem" in x for x in lines)
    red = f"red.{sem.value}.{scope}.global.add.u32 [%r], {value};"
    assert lines.count(red) == 1
    ptx = sc.assemble()
    (body,) = [b for b in loop_bodies(ptx) if red in b]       # one loop holds the signal ...
    assert "ld.global.nc.u64 %r, [%r];" in body                 # ... and looks each peer's table entry up
    bound = next(x for x in raw if x.startswith("setp.lt.u32"))
    assert bound.split(", ")[-1] == f"{sc.world.name};"         # ... for every rank of the world


# ------------------------------------------------------------------------------------------ wait
def wait_lines(sem: str, scope: str, expected: str, flag_id: str) -> list[str]:
    poll = f"ld.{sem}.{scope}.global.u32 %r, [%r];"
    return (["$L:", poll, f"sub.s32 %r, %r, {expected};", "setp.ge.s32 %r, %r, 0;", "@%r bra $L;",
             "mov.u64 %r, %globaltimer;", "setp.gt.u64 %r, %r, %r;", "@!%r bra $L;",
             "atom.global.cas.b32 %r, [%r], 0, 1;", "setp.eq.u32 %r, %r, 0;", "mov.u32 %r, %ctaid.x;",
             "@%r st.global.u32 [%r+4], %r;", f"@%r st.global.u32 [%r+8], {flag_id};",
             f"@%r st.global.u32 [%r+12], {expected};", "@%r st.global.u32 [%r+16], %r;",
             "@%r st.global.u32 [%r+20], %r;", "@%r st.global.u32 [%r+24], 4294967295;",
             "@%r st.global.u32 [%r+28], 0;", "exit;", "$L:", "bra $L;", "$L:"]
            + ([f"fence.acq_rel.{scope};"] if sem == "relaxed" else []))


@FAST
@given(sem=st.sampled_from([Sem.ACQUIRE, Sem.RELAXED]), scope=st.sampled_from(SCOPES),
       expected=st.one_of(st.integers(0, 2**32 - 1), st.just("r")), flag_id=ints_or_reg, target=targets)
@example(sem=Sem.ACQUIRE, scope="sys", expected=5, flag_id=3, target="sm_90")
@example(sem=Sem.RELAXED, scope="gpu", expected=2**32 - 1, flag_id="r", target="sm_90a")
def test_wait_is_a_bounded_poll(sem, scope, expected, flag_id, target):
    sc = Scratch(target=target)
    addr = sc.flag(sc.rank, 0)
    exp = operand(sc, expected, "expected")
    fid = sc.idx if flag_id == "r" else flag_id
    seen = []
    lines = sc.emit(lambda b: seen.append(wait(b, addr, exp, sem=sem, scope=scope, deadline=sc.deadline,
                                                 flag_id=fid)))
    assert lines == wait_lines(sem.value, scope, imm_or_reg(expected), imm_or_reg(flag_id))
    assert seen[0].type is u32                                  # the observed value comes back
    sc.assemble()


@FAST
@given(index=ints_or_reg, multicast=st.booleans(), scope=st.sampled_from(["sys", "gpu"]), target=targets)
def test_barrier_is_signal_all_then_an_acquire_wait(index, multicast, scope, target):
    sc = Scratch(target=target)
    idx = sc.idx if index == "r" else index
    lines = sc.emit(lambda b: barrier(b, sc.flags, idx, 12, rank=sc.rank, world=sc.world, scope=scope,
                                      deadline=sc.deadline, multicast=multicast))
    signal_line = (f"multimem.red.release.{scope}.global.add.u32 [%r], %r;" if multicast
                   else f"red.release.{scope}.global.add.u32 [%r], 1;")
    poll = f"ld.acquire.{scope}.global.u32 %r, [%r];"
    assert lines.count(signal_line) == 1 and lines.count(poll) == 1
    assert lines.index(signal_line) < lines.index(poll)
    between = lines[lines.index(signal_line):lines.index(poll)]
    assert ("fence.proxy.alias;" in between) == multicast       # multicast add, unicast poll: alias fence
    assert "sub.s32 %r, %r, 12;" in lines and not any(x.startswith("fence.acq_rel") for x in lines)
    sc.assemble()


# ------------------------------------------------------------------------------------------ TMA tiles
def tmap_lines(rank) -> list[str]:
    if rank == "r":
        return ["cvt.u64.u32 %r, %r;", f"mad.lo.u64 %r, %r, {TMAP_BYTES}, %r;"]
    return [f"add.u64 %r, %r, {TMAP_BYTES * rank};"]


def coord_text(spec) -> str:
    return ", ".join("%r" if c == "r" else str(c) for c in spec)


coords_st = st.integers(1, 5).flatmap(lambda n: st.lists(st.one_of(st.integers(0, 300), st.just("r")),
                                                         min_size=n, max_size=n))


@settings(max_examples=40)
@given(coords=coords_st, op=st.sampled_from(TMA_OPS), rank=ints_or_reg, target=targets)
@example(coords=[0, 16], op="add", rank=1, target="sm_90a")
def test_store_async_is_one_tensor_store_and_a_commit(coords, op, rank, target):
    sc = Scratch(target=target)
    c = sc.coords(coords)
    dst = sc.rank if rank == "r" else rank
    lines = sc.emit(lambda b: store_async(b, sc.maps["t"].of(b, dst), c, sc.smem, reduce_op=op))
    d = f"{len(coords)}d"
    store = (f"cp.async.bulk.tensor.{d}.global.shared::cta.tile.bulk_group" if op is None
             else f"cp.reduce.async.bulk.tensor.{d}.global.shared::cta.{op}.tile.bulk_group")
    assert lines == tmap_lines(rank) + [f"{store} [%r, {{{coord_text(coords)}}}], [%r];",
                                        "cp.async.bulk.commit_group;"]
    sc.assemble()


@FAST
@given(coords=coords_st, commit=st.booleans(), target=targets)
def test_store_add_async_is_the_add_reduce_store(coords, commit, target):
    sc = Scratch(target=target)
    c = sc.coords(coords)
    tmap = sc.maps["t"].of(sc.b, 1)
    lines = sc.emit(lambda b: store_add_async(b, tmap, c, sc.smem, commit=commit))
    assert lines == [f"cp.reduce.async.bulk.tensor.{len(coords)}d.global.shared::cta.add.tile.bulk_group "
                     f"[%r, {{{coord_text(coords)}}}], [%r];"] + ["cp.async.bulk.commit_group;"] * commit
    sc.assemble()


@FAST
@given(coords=coords_st, op=st.sampled_from([None, "add", "min", "max"]), target=targets)
def test_store_async_all_multicast_uses_the_multicast_map(coords, op, target):
    sc = Scratch(target=target)
    c = sc.coords(coords)
    lines = sc.emit(lambda b: store_async_all(b, sc.maps["t"], c, sc.smem, world=sc.world, multicast=True,
                                              reduce_op=op))
    assert lines[:2] == tmap_lines("r")                         # table + 128 * world: the multicast map
    assert len([x for x in lines if x.startswith(("cp.async.bulk.tensor", "cp.reduce.async.bulk.tensor"))]) == 1
    assert not any(x.startswith("$L") for x in lines)            # no loop
    sc.assemble()


@FAST
@given(coords=coords_st, op=st.sampled_from([None, "add", "min", "max"]), target=targets)
def test_store_async_all_unicast_stores_once_per_rank(coords, op, target):
    sc = Scratch(target=target)
    c = sc.coords(coords)
    raw = sc.raw(lambda b: store_async_all(b, sc.maps["t"], c, sc.smem, world=sc.world, multicast=False,
                                           reduce_op=op))
    ptx = sc.assemble()
    stores = [b for b in loop_bodies(ptx) if any(x.startswith(("cp.async.bulk.tensor", "cp.reduce.async"))
                                                 for x in b)]
    assert len(stores) == 1
    body = stores[0]
    assert body.count("cp.async.bulk.commit_group;") == 1
    assert tmap_lines("r")[1] in body                            # the map of rank i, i = 0 .. world-1
    assert next(x for x in raw if x.startswith("setp.lt.u32")).endswith(f", {sc.world.name};")


@settings(max_examples=30)
@given(coords=coords_st, rank=ints_or_reg, nbytes=st.one_of(st.integers(16, 1 << 17), st.just("r")), target=targets)
def test_load_async_announces_bytes_then_loads(coords, rank, nbytes, target):
    sc = Scratch(target=target)
    c = sc.coords(coords)
    src = sc.rank if rank == "r" else rank
    n = sc.n if nbytes == "r" else nbytes
    lines = sc.emit(lambda b: load_async(b, sc.maps["t"], src, c, sc.smem, sc.bars, n))
    d = f"{len(coords)}d"
    assert lines == ([f"mbarrier.arrive.expect_tx.shared::cta.b64 %r, [%r], {imm_or_reg(nbytes)};"] + tmap_lines(rank)
                     + [f"cp.async.bulk.tensor.{d}.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                        f"[%r], [%r, {{{coord_text(coords)}}}], [%r];"])
    sc.assemble()


def test_publish_async_writes_is_a_full_wait_then_a_proxy_fence():
    sc = Scratch()
    assert sc.emit(publish_async_writes) == ["cp.async.bulk.wait_group 0;", "fence.proxy.async.global;"]
    sc.assemble()


def test_tensor_map_param_is_a_generic_address():
    sc = Scratch()
    assert sc.emit(lambda b: tensor_map_param(b, "tm")) == ["mov.u64 %r, tm;", "cvta.param.u64 %r, %r;"]
    sc.assemble()


# ------------------------------------------------------------------------------------------ peer ld/st/red
VEC_TYPES = {"b32": (1, 2, 4), "u32": (1, 2, 4), "s32": (1, 2, 4), "f32": (1, 2, 4), "b64": (1, 2), "u64": (1, 2),
             "f64": (1, 2)}
peer_forms = st.sampled_from(sorted(VEC_TYPES)).flatmap(
    lambda ty: st.tuples(st.just(ty), st.sampled_from(VEC_TYPES[ty])))


@FAST
@given(form=peer_forms, offset=st.one_of(st.integers(0, 4096).map(lambda x: 16 * x), st.just("r")), target=targets)
def test_peer_load_and_store_are_one_vector_access(form, offset, target):
    ty, vec = form
    sc = Scratch(target=target)
    base = sc.bound["x"].peer(sc.b, 1)
    off = sc.u64reg(32) if offset == "r" else offset
    got = []
    load = sc.emit(lambda b: got.append(peer_load(b, base, off, ty, vec=vec)))
    v = got[0]
    store = sc.emit(lambda b: peer_store(b, base, off, ty, v))
    vmod = "" if vec == 1 else f".v{vec}"
    regs = "%r" if vec == 1 else "{" + ", ".join(["%r"] * vec) + "}"
    where = "[%r]" if offset == "r" or offset == 0 else f"[%r+{offset}]"
    pre = ["add.u64 %r, %r, %r;"] if offset == "r" else []
    assert load == pre + [f"ld.global{vmod}.{ty} {regs}, {where};"]
    assert store == pre + [f"st.global{vmod}.{ty} {where}, {regs};"]
    sc.assemble()


RED_FORMS = ([("add", t) for t in ("u32", "s32", "u64", "f32", "f64", "f16x2", "bf16x2")]
             + [(op, t) for op in ("min", "max") for t in ("u32", "s32", "u64", "s64")]
             + [(op, t) for op in ("and", "or", "xor") for t in ("b32", "b64")] + [("inc", "u32"), ("dec", "u32")])
ORDERINGS = [(None, None)] + [(sem, scope) for sem in ("relaxed", "release") for scope in SCOPES]


@settings(max_examples=40)
@given(form=st.sampled_from(RED_FORMS), ordering=st.sampled_from(ORDERINGS), offset=st.one_of(st.just(0), st.just("r")),
       target=targets)
def test_peer_red_is_one_atomic_reduction(form, ordering, offset, target):
    op, ty = form
    sem, scope = ordering
    sc = Scratch(target=target)
    base = sc.bound["x"].peer(sc.b, sc.rank)
    value = sc.b.mov(ty, 1, name="val")
    off = sc.u64reg(8) if offset == "r" else offset
    lines = sc.emit(lambda b: peer_red(b, base, off, op, ty, value, sem=sem, scope=scope))
    order = f".{sem}.{scope}" if sem else ""
    noftz = ".noftz" if ty in ("f16x2", "bf16x2") else ""
    pre = ["add.u64 %r, %r, %r;"] if offset == "r" else []
    assert lines == pre + [f"red{order}.global.{op}{noftz}.{ty} [%r], %r;"]
    sc.assemble()


# ------------------------------------------------------------------------------------------ vector reduce
PAIR = {"bf16": "bf16x2", "f16": "f16x2", "f32": "f32"}
OP = {"sum": "add", "max": "max", "min": "min"}
IDENTITY = {"sum": "0f00000000", "max": "0fFF800000", "min": "0f7F800000"}


@settings(max_examples=40)
@given(ty=st.sampled_from(["bf16", "f16", "f32"]), op=st.sampled_from(["sum", "max", "min"]), write_all=st.booleans(),
       out_of_place=st.booleans(), target=targets)
@example(ty="bf16", op="sum", write_all=True, out_of_place=False, target="sm_90a")
def test_reduce_vector_multicast_form(ty, op, write_all, out_of_place, target):
    sc = Scratch(target=target)
    off = sc.u64reg(0)
    dst = sc.bound["y"] if out_of_place else None
    lines = sc.emit(lambda b: reduce_vector(b, sc.bound["x"], off, ty=ty, op=op, world=sc.world, rank=sc.rank,
                                            write_all=write_all, multicast=True, dst=dst))
    sc.assemble()
    if ty == "f32" and op != "sum":                  # the switch has no f32 min/max: the unicast form runs
        assert not any("multimem" in x for x in lines)
        assert any(x == "ld.global.v4.b32 {%r, %r, %r, %r}, [%r];" for x in lines)
        return
    acc = ".acc::f32" if op == "sum" and ty != "f32" else ""
    vec = "{%r, %r, %r, %r}"
    load = f"multimem.ld_reduce.relaxed.sys.global.{OP[op]}{acc}.v4.{PAIR[ty]} {vec}, [%r];"
    assert lines[:2] == ["add.u64 %r, %r, %r;", load]
    if write_all:
        assert lines[2:] == ["add.u64 %r, %r, %r;", f"multimem.st.relaxed.sys.global.v4.{PAIR[ty]} [%r], {vec};"]
    else:
        assert lines[2:] == ["mul.wide.u32 %r, %r, 8;", "add.u64 %r, %r, %r;", "ld.global.nc.u64 %r, [%r];",
                             "add.u64 %r, %r, %r;", f"st.global.v4.b32 [%r], {vec};"]
    assert not any(x.startswith("$L") for x in lines)


@settings(max_examples=40)
@given(ty=st.sampled_from(["bf16", "f16", "f32"]), op=st.sampled_from(["sum", "max", "min"]), write_all=st.booleans(),
       target=targets)
def test_reduce_vector_unicast_form_loops_over_peers(ty, op, write_all, target):
    sc = Scratch(target=target)
    off = sc.u64reg(0)
    lines = sc.emit(lambda b: reduce_vector(b, sc.bound["x"], off, ty=ty, op=op, world=sc.world, rank=sc.rank,
                                            write_all=write_all, multicast=False))
    ptx = sc.assemble()
    lanes = 4 if ty == "f32" else 8
    assert not any("multimem" in x for x in lines)
    assert lines[:lanes] == [f"mov.f32 %r, {IDENTITY[op]};"] * lanes      # f32 accumulators at the identity
    bodies = loop_bodies(ptx)
    (reads,) = [b for b in bodies if "ld.global.v4.b32 {%r, %r, %r, %r}, [%r];" in b]
    assert reads.count(f"{OP[op]}.f32 %r, %r, %r;") == lanes             # accumulate every lane in f32
    if ty != "f32":
        assert reads.count(f"cvt.f32.{ty} %r, %r;") == 8
        assert lines.count(f"cvt.rn.{PAIR[ty]}.f32 %r, %r, %r;") == 4     # one rounding, after the loop
        assert not any(x.startswith("cvt.rn") for x in reads)
    store = "st.global.v4.b32 [%r], {%r, %r, %r, %r};"
    writes = [b for b in bodies if store in b]
    assert len(writes) == (1 if write_all else 0)                        # write_all: a loop of stores
    assert lines.count(store) == 1


def test_unicast_reduce_and_multimem_reduce_are_the_named_forms():
    sc = Scratch()
    off = sc.u64reg(0)
    lines = sc.emit(lambda b: unicast_reduce(b, sc.bound["x"], off, ty="bf16", op="sum", world=sc.world,
                                             rank=sc.rank, write_all=False))
    assert not any("multimem" in x for x in lines)
    lines = sc.emit(lambda b: multimem_reduce(b, sc.bound["x"], off, ty="f16", op="max", rank=sc.rank, write_all=True))
    assert "multimem.ld_reduce.relaxed.sys.global.max.v4.f16x2 {%r, %r, %r, %r}, [%r];" in lines
    sc.assemble()


# ------------------------------------------------------------------------------------------ mbarriers
@FAST
@given(stages=st.integers(1, 8), arrivals=st.integers(1, 1024), target=targets)
def test_stage_ring_init_and_addresses(stages, arrivals, target):
    sc = Scratch(target=target)
    ring = StageRing(sc.bars, stages)
    leader = sc.b.setp("eq", u32, sc.tid, 0)
    lines = sc.emit(lambda b: ring.init(b, arrivals, leader=leader))
    inits = [f"mbarrier.init.shared::cta.b64 [%r{'+' + str(8 * s) if s else ''}], {arrivals};" for s in range(stages)]
    assert lines == ["@!%r bra $L;"] + inits + ["fence.mbarrier_init.release.cluster;", "$L:"]
    assert ring.bar(sc.b, 2).offset == 16
    assert sc.emit(lambda b: ring.bar(b, sc.idx)) == ["mad.lo.u32 %r, %r, 8, %r;"]
    sc.assemble()


@FAST
@given(parity=st.one_of(st.sampled_from([0, 1]), st.just("r")), target=targets)
def test_wait_parity_is_a_try_wait_loop(parity, target):
    sc = Scratch(target=target)
    p = sc.b.and_(b32, sc.idx, 1) if parity == "r" else parity
    lines = sc.emit(lambda b: wait_parity(b, sc.bars, p, deadline=None))
    assert lines == ["$L:", f"mbarrier.try_wait.parity.shared::cta.b64 %r, [%r], {imm_or_reg(parity)};",
                     "@%r bra $L;", "bra $L;", "$L:"]
    sc.assemble()


# ------------------------------------------------------------------------------------------ layout, deadline
def test_layout_params_and_peer_lookups():
    lay = ParallelLayout("x")
    assert [(p.name, p.type.name, p.pointer) for p in lay.params()] == [("x_peers", "u64", True),
                                                                         ("x_mc", "u64", False)]
    params = add_layout_params([Param("n", u32)], ParallelLayout("a"), ParallelLayout("b"))
    assert [p.name for p in params] == ["n", "rank", "world", "a_peers", "a_mc", "b_peers", "b_mc"]
    assert [p.name for p in WorldParams.params()] == ["rank", "world"]
    sc = Scratch()
    assert sc.emit(lambda b: sc.bound["x"].peer(b, 0)) == ["ld.global.nc.u64 %r, [%r];"]
    assert sc.emit(lambda b: sc.bound["x"].peer(b, 6)) == ["ld.global.nc.u64 %r, [%r+48];"]
    assert sc.emit(lambda b: sc.bound["x"].peer(b, sc.rank)) == [
        "mul.wide.u32 %r, %r, 8;", "add.u64 %r, %r, %r;", "ld.global.nc.u64 %r, [%r];"]
    sc.assemble()


def test_deadline_reads_the_clock_once_at_start():
    lines = [ptxscan.shape(x) for x in ptxscan.body_lines(Scratch().k.render())]
    params = [line for line in lines if line.startswith("ld.param")]
    assert lines[:len(params)] == params              # every parameter is loaded at the entry
    assert params[2:4] == ["ld.param.u64 %r, [timeout_ns];", "ld.param.u64 %r, [status];"]
    clock = lines.index("mov.u64 %r, %globaltimer;")
    assert lines.count("mov.u64 %r, %globaltimer;") == 1 and lines[clock + 1] == "add.u64 %r, %r, %r;"
    assert clock == len(params)
    assert STATUS_WORDS == 8


# ------------------------------------------------------------------------------------------ wgmma helpers
@FAST
@given(swizzle=st.sampled_from(sorted(SWIZZLE_MODE)), stride=st.integers(0, 2**13).map(lambda x: 16 * x),
       leading=st.one_of(st.just(0), st.integers(1, 2**13).map(lambda x: 16 * x)))
def test_smem_desc_encodes_the_fields(swizzle, stride, leading):
    sc = Scratch(target="sm_90a")
    lines = sc.emit(lambda b: smem_desc(b, sc.smem, stride_bytes=stride, leading_bytes=leading, swizzle=swizzle))
    hi = desc_high(stride_bytes=stride, swizzle=swizzle)
    assert hi == (stride >> 4) | (SWIZZLE_MODE[swizzle] << 30)
    assert lines == (["shr.b32 %r, %r, 4;"] + ([f"or.b32 %r, %r, {(leading >> 4) << 16};"] if leading else [])
                     + [f"mov.b32 %r, {hi};", "mov.b64 %r, {%r, %r};"])
    d = sc.b.mov(u64, 0)
    assert advance(sc.b, d, 0) is d
    assert sc.emit(lambda b: advance(b, d, 64)) == ["add.u64 %r, %r, 4;"]
    with pytest.raises(PTXBuildError, match="multiples of 16"):
        advance(sc.b, d, 8)
    with pytest.raises(PTXBuildError, match="swizzle must be one of"):
        desc_high(stride_bytes=1024, swizzle=16)
    sc.assemble()


@given(n=st.sampled_from([8 * k for k in range(1, 33)]))
def test_fragment_coords_cover_the_warp_slab_once(n):
    """Each lane's n/2 registers plus the lane's quad position cover the warp's 16 x n slab exactly once."""
    regs = list(fragment_coords(n))
    assert sorted(r for r, _, _ in regs) == list(range(n // 2))
    cells = [(lane // 4 + row, col + 2 * (lane % 4)) for lane in range(32) for _, row, col in regs]
    assert sorted(cells) == [(r, c) for r in range(16) for c in range(n)]


def test_warp_quad_lines():
    sc = Scratch()
    assert sc.emit(lambda b: warp_quad(b, sc.tid)) == [
        "and.b32 %r, %r, 31;", "shr.u32 %r, %r, 5;", "and.b32 %r, %r, 3;", "shl.b32 %r, %r, 4;", "shr.u32 %r, %r, 2;",
        "add.u32 %r, %r, %r;", "and.b32 %r, %r, 3;", "shl.b32 %r, %r, 1;"]
    sc.assemble()


# ------------------------------------------------------------------------------------------ errors
def test_reduce_vector_rejects_other_types_and_ops():
    sc = Scratch()
    off = sc.u64reg(0)
    for ty in ("u32", "f64", "bf16x2"):
        with pytest.raises(PTXBuildError, match="ty must be bf16, f16 or f32"):
            reduce_vector(sc.b, sc.bound["x"], off, ty=ty, op="sum", world=sc.world, rank=sc.rank, write_all=False,
                          multicast=False)
    with pytest.raises(PTXBuildError, match="sum/max/min"):
        reduce_vector(sc.b, sc.bound["x"], off, ty="bf16", op="prod", world=sc.world, rank=sc.rank, write_all=False,
                      multicast=False)


def test_multimem_has_no_f32_min_max():
    sc = Scratch()
    with pytest.raises(PTXBuildError, match=r"'\.max' is not defined on \.f32"):
        multimem_reduce(sc.b, sc.bound["x"], sc.u64reg(0), ty="f32", op="max", rank=sc.rank, write_all=True)


@pytest.mark.parametrize("sem,scope,needle", [(Sem.ACQUIRE, "sys", "sem must be Sem.RELEASE"),
                                              (Sem.RELEASE, None, "with a scope")])
def test_signal_rejects_what_cannot_publish(sem, scope, needle):
    """The error names this file and line (the caller), not only pkptx/primitives/sync.py."""
    sc = Scratch()
    addr = sc.flag(0, 0)
    with build_error(needle):
        signal(sc.b, addr, 1, sem=sem, scope=scope)


@pytest.mark.parametrize("sem", [Sem.RELEASE, Sem.ACQ_REL, Sem.SC, Sem.WEAK, Sem.VOLATILE, None])
def test_wait_rejects_polls_without_acquire_at_sys_scope(sem):
    sc = Scratch()
    addr = sc.flag(0, 0)
    with build_error("wait: sem must be Sem.ACQUIRE or Sem.RELAXED"):
        wait(sc.b, addr, 1, sem=sem, scope="sys", deadline=sc.deadline, flag_id=0)


# ------------------------------------------------------------------------------------------ known bugs
@pytest.mark.parametrize("sem", [Sem.WEAK, Sem.VOLATILE])
def test_wait_rejects_weak_polls_without_scope(sem):
    sc = Scratch()
    addr = sc.flag(0, 0)
    with pytest.raises(PkptxError):
        wait(sc.b, addr, 1, sem=sem, scope=None, deadline=sc.deadline, flag_id=0)


def test_signal_rejects_a_missing_sem():
    sc = Scratch()
    addr = sc.flag(0, 0)
    with pytest.raises(PkptxError):
        signal(sc.b, addr, 1, sem=None, scope=None)


def test_reduce_vector_rejects_a_non_type_with_a_pkptx_error():
    sc = Scratch()
    with pytest.raises(PkptxError):
        reduce_vector(sc.b, sc.bound["x"], sc.u64reg(0), ty=5, op="sum", world=sc.world, rank=sc.rank,
                      write_all=False, multicast=False)


def test_scratch_parameters_are_what_the_primitives_read():
    names = [p.name for p in Scratch().k.params]
    assert names[:4] == ["rank", "world", "status", "timeout_ns"]
    assert {"flags_peers", "flags_mc", "x_peers", "x_mc", "t_tmaps", "tm"} <= set(names)
    assert Scratch().k.param("tm").type is b8 and s32.bits == 32


# ------------------------------------------------------------------------------ stamps and per-peer waits
@pytest.mark.parametrize("per_peer", [1, 2])
def test_wait_peers_names_the_ranks_behind_on_expiry(per_peer):
    """One acquire poll per slot; the expiry path (only there) re-reads every slot relaxed and stores the
    first rank behind and the mask into status words 6 and 7."""
    sc = Scratch()
    lines = sc.emit(lambda b: wait_peers(b, sc.flag(sc.rank, 4), sc.world, sc.n, per_peer=per_peer,
                                         sem=Sem.ACQUIRE, scope="sys", deadline=sc.deadline, flag_id=7))
    assert lines.count("ld.acquire.sys.global.u32 %r, [%r];") == 1
    assert lines.count("ld.relaxed.sys.global.u32 %r, [%r];") == 1
    scan = lines.index("ld.relaxed.sys.global.u32 %r, [%r];")
    assert scan > lines.index("mov.u64 %r, %globaltimer;")           # the scan runs only once late
    assert "@%r min.u32 %r, %r, %r;" in lines and "@%r or.b32 %r, %r, %r;" in lines
    assert "@%r st.global.u32 [%r+24], %r;" in lines and "@%r st.global.u32 [%r+28], %r;" in lines
    assert ("div.u32 %r, %r, 2;" in lines) == (per_peer == 2)
    sc.assemble()


def test_wait_with_a_known_signaller_reports_it():
    sc = Scratch()
    lines = sc.emit(lambda b: wait(b, sc.flag(sc.rank, 0), 3, sem=Sem.ACQUIRE, scope="sys", deadline=sc.deadline,
                                   flag_id=0, peer=sc.idx))
    assert "shl.b32 %r, %r, %r;" in lines and "@%r st.global.u32 [%r+24], %r;" in lines
    sc.assemble()


def test_stamp_is_one_release_store_and_refuses_weak_order():
    sc = Scratch()
    flag = sc.flag(1, 0)
    assert sc.emit(lambda b: stamp(b, flag, sc.n, sem=Sem.RELEASE, scope="sys")) == [
        "st.release.sys.global.u32 [%r], %r;"]
    with pytest.raises(PTXBuildError, match="stamp without release"):
        stamp(sc.b, flag, 1, sem=Sem.ACQUIRE, scope="sys")
    sc.assemble()
