"""Pipeline: each step emits exactly the PTX its docstring promises for random stage counts, rings and
positions, and assembles (sm_90, sm_90a); the protocol moves every chunk through the stages in order on
the CPU interpreter, counted and stepped, for random stage counts, chunk counts and schedules.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

from pkptx.errors import PTXBuildError
from pkptx.interp import Machine
from pkptx.isa import Kernel, Param, Reg, address, b32, u32, u64
from pkptx.primitives import Pipeline, Slot, StageRing
from pkptx.primitives.sync import Deadline

from scratch import TARGETS, Scratch

FAST = settings(max_examples=25, deadline=None)
MAD = "mad.lo.u32 %r, %r, 8, %r;"
LOOP = ["$L:", "mbarrier.try_wait.parity.shared::cta.b64 %r, [%r], %r;", "@%r bra $L;", "bra $L;", "$L:"]


def position_lines(stages: int) -> list[str]:
    """stage = pos mod S, phase = (pos / S) & 1: masks and shifts for 2^n stages."""
    if stages & (stages - 1) == 0:
        return [f"and.b32 %r, %r, {stages - 1};", f"shr.u32 %r, %r, {stages.bit_length() - 1};",
                "and.b32 %r, %r, 1;"]
    return [f"rem.u32 %r, %r, {stages};", f"div.u32 %r, %r, {stages};", "and.b32 %r, %r, 1;"]


def ring(sc: Scratch, name: str, stages: int) -> StageRing:
    return StageRing(sc.b.mov(u32, sc.k.shared(name, 8 * stages, 8), name=name), stages)


def counted(sc: Scratch, stages: int, rings: int = 1) -> Pipeline:
    full = tuple(ring(sc, f"full_{'kvw'[i]}", stages) for i in range(rings))
    return Pipeline(full, ring(sc, "empty", stages), uses=sc.b.mov(u32, 0, name="it"))


# ------------------------------------------------------------------------------------------ emitted PTX
@FAST
@given(stages=st.integers(1, 12), rings=st.integers(1, 3), nbytes=st.integers(16, 1 << 16),
       abandon=st.booleans(), target=st.sampled_from(TARGETS))
@example(stages=4, rings=1, nbytes=49152, abandon=True, target="sm_90a")      # the GEMM's ring
@example(stages=1, rings=2, nbytes=32768, abandon=True, target="sm_90")       # attention's q ring at D=128
def test_counted_ring_emits_the_protocol(stages, rings, nbytes, abandon, target):
    sc = Scratch(target=target)
    pipe = counted(sc, stages, rings)
    lane0 = sc.b.setp("eq", u32, sc.tid, 0)
    acquired: list[Slot] = []
    assert sc.emit(lambda b: acquired.append(pipe.acquire(b, deadline=None))) == (
        position_lines(stages) + [MAD, "xor.b32 %r, %r, 1;"] + LOOP)
    for i in range(rings):
        assert sc.emit(lambda b: pipe.commit(b, nbytes, stage=acquired[0].stage, ring=i)) == [
            MAD, f"mbarrier.arrive.expect_tx.shared::cta.b64 %r, [%r], {nbytes};"]
    assert sc.emit(lambda b: pipe.advance(b)) == ["add.u32 %r, %r, 1;"]
    slot = pipe.at(sc.b)
    for i in range(rings):
        assert sc.emit(lambda b: pipe.wait(b, slot, deadline=None, abandon=abandon, ring=i)) == [MAD] + LOOP
    assert sc.emit(lambda b: pipe.release(b, pipe.behind(b), pred=lane0)) == (
        ["sub.u32 %r, %r, 1;"] + position_lines(stages) + [MAD, "@%r mbarrier.arrive.shared::cta.b64 %r, [%r];"])
    sc.assemble()


def test_counted_waits_read_the_barrier_of_their_own_ring_and_stage():
    sc = Scratch()
    pipe = counted(sc, 2, rings=2)
    raw = sc.raw(lambda b: pipe.wait(b, Slot(1, 0), deadline=None, ring=1))
    assert raw[1] == "mbarrier.try_wait.parity.shared::cta.b64 %mbdone0, [%full_v0+8], 0;"
    raw = sc.raw(lambda b: pipe.acquire(b, deadline=None))
    assert "xor.b32" in raw[4] and "%phase0" in raw[4] and raw[3].startswith("mad.lo.u32") and "%empty0" in raw[3]
    sc.assemble()


@FAST
@given(stages=st.integers(2, 12), target=st.sampled_from(TARGETS))
def test_stepped_ring_advances_with_a_wrap_and_no_division(stages, target):
    sc = Scratch(target=target)
    pipe = Pipeline((ring(sc, "full", stages),))
    stepped: list[Pipeline] = []
    assert sc.emit(lambda b: stepped.append(pipe.stepped(b))) == ["mov.u32 %r, 0;", "mov.u32 %r, 0;"]
    pipe = stepped[0]
    assert sc.emit(lambda b: pipe.at(b)) == []
    assert sc.emit(lambda b: pipe.wait(b, deadline=None)) == [MAD] + LOOP
    assert sc.emit(lambda b: pipe.behind(b)) == ["setp.eq.u32 %r, %r, 0;", "sub.u32 %r, %r, 1;",
                                                 f"selp.u32 %r, {stages - 1}, %r, %r;"]
    assert sc.emit(lambda b: pipe.advance(b)) == ["add.u32 %r, %r, 1;", f"setp.eq.u32 %r, %r, {stages};",
                                                  "selp.u32 %r, 0, %r, %r;", "selp.u32 %r, 1, 0, %r;",
                                                  "xor.b32 %r, %r, %r;"]
    assert sc.emit(lambda b: pipe.acquire(b, pending=1)) == ["cp.async.bulk.wait_group.read 1;"]
    sc.assemble()


@FAST
@given(form=st.sampled_from(["uses", "phase", "stepped"]), pending=st.integers(0, 7), nbytes=st.integers(16, 4096),
       target=st.sampled_from(TARGETS))
def test_bounce_pipeline_has_no_stage_arithmetic(form, pending, nbytes, target):
    sc = Scratch(target=target)
    state = sc.b.mov(u32, 0, name="state")
    bar = address(sc.bars)
    if form == "stepped":
        pipe = Pipeline((StageRing(sc.bars, 1),)).stepped(sc.b)
    else:
        pipe = Pipeline.bounce(bar, **{form: state})
    assert sc.emit(lambda b: pipe.acquire(b, pending=pending)) == [f"cp.async.bulk.wait_group.read {pending};"]
    commit = f"mbarrier.arrive.expect_tx.shared::cta.b64 %r, [%r], {nbytes};"
    assert sc.emit(lambda b: pipe.commit(b, nbytes)) == [commit]
    parity = ["and.b32 %r, %r, 1;"] if form == "uses" else []
    assert sc.emit(lambda b: pipe.wait(b, deadline=None)) == parity + LOOP
    assert sc.emit(lambda b: pipe.advance(b)) == (["add.u32 %r, %r, 1;"] if form == "uses" else ["xor.b32 %r, %r, 1;"])
    sc.assemble()


def test_wait_with_a_deadline_reports_the_parity_and_abandons_on_request():
    sc = Scratch()
    pipe = counted(sc, 2)
    ptx = sc.emit(lambda b: pipe.wait(b, deadline=sc.deadline, abandon=True, name="wait_full"))
    assert "mov.u64 %r, %globaltimer;" in ptx and "exit;" not in ptx
    ptx = sc.emit(lambda b: pipe.acquire(b, deadline=sc.deadline))
    assert "exit;" in ptx
    sc.assemble()


def test_misuse_is_refused_with_the_reason():
    sc = Scratch()
    pipe = counted(sc, 4)
    with pytest.raises(PTXBuildError, match="needs deadline="):
        pipe.acquire(sc.b)
    with pytest.raises(PTXBuildError, match="which of the 4 stages"):
        pipe.commit(sc.b, 64)
    bounce = Pipeline.bounce(address(sc.bars), phase=sc.b.mov(u32, 0))
    with pytest.raises(PTXBuildError, match="there is no empty ring"):
        bounce.release(sc.b, Slot(0))
    with pytest.raises(PTXBuildError, match="only its current slot"):
        bounce.at(sc.b, sc.idx)
    for kw in ({}, {"uses": sc.idx, "phase": sc.idx}):
        with pytest.raises(PTXBuildError, match="exactly one of"):
            Pipeline.bounce(address(sc.bars), **kw)


# ------------------------------------------------------------------------------------------ the protocol, run
CHUNK = 16


def relay_kernel(stages: int, stepped: bool) -> Kernel:
    """Warp 0's lane 0 bulk-loads chunk i of ``src`` into stage i mod S and commits it; warp 1's lane 0
    waits for it, copies it to ``dst`` with plain loads and stores, and releases the stage. Stepped: the
    consumer keeps (stage, phase) registers (its ring has no empty side to wait on, so the producer stays
    counted)."""
    k = Kernel(f"pipeline_{stages}_{int(stepped)}", [Param("dst", u64, pointer=True), Param("src", u64, pointer=True),
                                                     Param("chunks", u32), *Deadline.params()], max_threads=64)
    b = k.builder()
    data = b.mov(u32, k.shared("data", CHUNK * stages, 128), name="data")
    full = StageRing(b.mov(u32, k.shared("full", 8 * stages, 8), name="full"), stages)
    empty = StageRing(b.mov(u32, k.shared("empty", 8 * stages, 8), name="empty"), stages)
    tid = b.special("tid.x")
    leader = b.setp("eq", u32, tid, 0, name="leader")
    full.init(b, 1, leader=leader)
    empty.init(b, 1, leader=leader)
    b.bar_sync(0)
    deadline = Deadline.start(b, b.mov(u32, 0, name="rank"))
    dst, src, chunks = b.load_param("dst"), b.load_param("src"), b.load_param("chunks")
    pipe = Pipeline((full,), empty, uses=b.mov(u32, 0, name="it"))
    with b.if_then(leader):
        for i in b.range(0, chunks, name="load"):
            stage = pipe.acquire(b, deadline=deadline).stage
            bar = pipe.commit(b, CHUNK, stage=stage)
            offset = b.mul(u32, i, CHUNK, mode="wide")
            b.bulk_load(address(b.mad(u32, stage, CHUNK, data, mode="lo")), address(b.add(u64, src, offset)), CHUNK,
                        bar)
            pipe.advance(b)
    with b.if_then(b.setp("eq", u32, tid, 32, name="consumer")):
        if stepped:
            pipe = pipe.stepped(b)
        for i in b.range(0, chunks, name="use"):
            slot = pipe.wait(b, deadline=deadline)
            words = b.ld(b32, address(b.mad(u32, slot.stage, CHUNK, data, mode="lo")), space="shared", vec=4)
            b.st(b32, address(b.add(u64, dst, b.mul(u32, i, CHUNK, mode="wide"))), words, space="global")
            pipe.release(b, slot)
            pipe.advance(b)
    b.ret()
    return k


@settings(max_examples=12, deadline=None)
@given(stages=st.integers(1, 5), chunks=st.integers(1, 12), stepped=st.booleans(), seed=st.integers(0, 2**16))
def test_every_chunk_passes_through_the_ring_in_order(stages, chunks, stepped, seed):
    src = np.random.default_rng(seed).integers(1, 2**32, chunks * CHUNK // 4, dtype=np.uint64).astype(np.uint32)
    dst = np.zeros_like(src)
    m = Machine(seed=seed)
    status = m.alloc(32, name="status")
    status.write(np.zeros(8, np.uint32))
    m.launch(relay_kernel(stages, stepped), 1, 64, dst, src, chunks, status, 10**12)
    m.run()
    assert np.array_equal(dst, src)
    assert not status.read(np.uint32).any()


def skip_kernel(stages: int, counted_form: bool) -> Kernel:
    """One thread: ``before`` advances, then ``skip(count)``; stores the position it lands on (counted:
    uses; stepped: stage and phase)."""
    k = Kernel(f"pipeline_skip_{stages}_{int(counted_form)}", [Param("out", u64, pointer=True), Param("before", u32),
                                                               Param("count", u32)], max_threads=32)
    b = k.builder()
    out, before, count = b.load_param("out"), b.load_param("before"), b.load_param("count")
    full = StageRing(b.mov(u32, k.shared("full", 8 * stages, 8), name="full"), stages)
    pipe = Pipeline((full,), uses=b.mov(u32, 0, name="it"))
    if not counted_form:
        pipe = pipe.stepped(b)
    for _ in b.range(0, before, name="step"):
        pipe.advance(b)
    pipe.skip(b, count)
    slot = pipe.at(b)
    b.st(u32, address(out), slot.stage if isinstance(slot.stage, Reg) else b.mov(u32, slot.stage), space="global")
    b.st(u32, address(out, 4), slot.phase, space="global")
    b.ret()
    return k


@settings(max_examples=20, deadline=None)
@given(stages=st.integers(1, 8), before=st.integers(0, 20), count=st.integers(0, 40), counted_form=st.booleans())
def test_skip_lands_where_as_many_advances_would(stages, before, count, counted_form):
    m = Machine(seed=stages)
    out = m.alloc(8, name="out")
    out.write(np.full(2, 0xFFFFFFFF, np.uint32))
    m.launch(skip_kernel(stages, counted_form), 1, 32, out, before, count)
    m.run()
    at = before + count
    assert out.read(np.uint32).tolist() == [at % stages, (at // stages) & 1]
