"""pk-design section 5 holds in the emitted PTX (CPU only: the PTX is read back, see ptxscan.py).

- a producer waits for its TMA writes themselves (``cp.async.bulk.wait_group 0``, not ``.read``) and
  fences the async proxy before it signals;
- signals are release; waits are acquire, or relaxed polls followed by ``fence.acq_rel`` at the same scope;
- generic writes to shared memory are fenced (``fence.proxy.async.shared::cta``) before TMA reads them;
- every spin-wait reads ``%globaltimer``, and on expiry claims the status words, writes rank, flag,
  expected, observed and block into them, and exits;
- counters are epochs: compared wrap-safe (signed difference), never reset by a primitive.

The rules are checked on the primitives (hypothesis over their parameters), on every kernel the GPU tests
launch (programs/prim_kernels.py), and the bounded-wait, acquire and shared-handoff rules on every kernel
of the build catalogue. Known violations are strict xfails at the end.
"""
from __future__ import annotations

import re
from importlib import import_module

import pytest
from hypothesis import given, settings, strategies as st

from pkptx import catalog
from pkptx.isa import Kernel, Scope, Sem, address, b32, u32
from pkptx.primitives import wait_parity
from pkptx.primitives.p2p import load_async, store_async
from pkptx.primitives.sync import barrier, publish_async_writes, signal, signal_all, wait
from tests.primitives.programs import prim_kernels as PK

import ptxscan as S
from scratch import TARGETS, Scratch

SCOPE_ORDER = ["cta", "cluster", "gpu", "sys"]
FAST = settings(max_examples=25)


TEST_KERNELS = list(PK.catalogue())
TEST_IDS = [name for name, _ in TEST_KERNELS]


def after_loop(lines: list[str], lp: S.Loop, n: int = 2) -> list[str]:
    """The first ``n`` instructions after a loop's end label."""
    rest = [x for x in lines[lp.end + 1:] if not S.is_label(x)]
    return rest[:n]


def acquire_problems(lines: list[str], lp: S.Loop) -> list[str]:
    """Why a spin loop's polls do not acquire (empty: they do)."""
    problems = []
    for poll in S.loaded_exit(lines, lp):
        m = re.match(r"ld\.(\w+)\.(\w+)\.global", S.mnemonic(poll))
        if m is None:
            problems.append(f"weak poll (no .acquire/.relaxed and scope): {poll}")
            continue
        sem, scope = m.groups()
        if sem == "acquire":
            continue
        if sem != "relaxed":
            problems.append(f"poll is .{sem}: {poll}")
            continue
        fences = [re.match(r"fence\.(acq_rel|sc)\.(\w+)", S.mnemonic(x)) for x in after_loop(lines, lp)]
        if not any(f and SCOPE_ORDER.index(f.group(2)) >= SCOPE_ORDER.index(scope) for f in fences):
            problems.append(f"relaxed poll not followed by fence.acq_rel.{scope}: {poll}")
    return problems


# ------------------------------------------------------------------------------------------ publish, signal
def test_publish_waits_for_the_writes_not_only_the_reads():
    lines = Scratch().emit(publish_async_writes)
    assert lines == ["cp.async.bulk.wait_group 0;", "fence.proxy.async.global;"]
    assert not any(".read" in x for x in lines)


@settings(max_examples=30)
@given(dims=st.sampled_from([1, 2, 3]), op=st.sampled_from(PK.TILE_OPS), broadcast=st.booleans(),
       target=st.sampled_from(TARGETS))
def test_tma_producers_publish_before_they_signal(dims, op, broadcast, target):
    k = PK.tile_store(dims, op, broadcast, True, target=target)
    lines = S.body_lines(k.render())
    assert any(S.is_async_global_write(x) for x in lines) and any(S.is_signal(x) for x in lines)
    assert S.unpublished_signals(lines) == []
    stores = [i for i, x in enumerate(lines) if S.is_async_global_write(x)]
    full_wait = lines.index("cp.async.bulk.wait_group 0;")
    first_signal = next(i for i, x in enumerate(lines) if S.is_signal(x))
    assert max(stores) < full_wait < lines.index("fence.proxy.async.global;") < first_signal
    k.compile(use_cache=False)


def test_the_publish_checker_catches_a_read_only_wait():
    """The checker itself: a signal after ``wait_group.read`` (the reference code's mistake) is flagged."""
    sc = Scratch()
    addr = sc.flag(1, 0)
    sc.emit(lambda b: store_async(b, sc.maps["t"].of(b, 1), [0, 0], sc.smem))
    sc.emit(lambda b: b.bulk_wait_group(0, read=True))
    sc.emit(lambda b: signal(b, addr, 1, sem=Sem.RELEASE, scope="sys"))
    bad = S.unpublished_signals(S.body_lines(sc.assemble()))
    assert bad == ["red.release.sys.global.add.u32 [%s], 1;" % addr.name]


@FAST
@given(scope=st.sampled_from([s.value for s in Scope]), multicast=st.booleans(), index=st.integers(0, 9))
def test_signals_are_release(scope, multicast, index):
    sc = Scratch()
    lines = sc.emit(lambda b: signal(b, sc.flag(0, index), 2, sem=Sem.RELEASE, scope=scope))
    lines += sc.emit(lambda b: signal_all(b, sc.flags, index, 1, world=sc.world, sem=Sem.RELEASE, scope=scope,
                                          multicast=multicast))
    lines += sc.emit(lambda b: barrier(b, sc.flags, index, 3, rank=sc.rank, world=sc.world, scope=scope,
                                       deadline=sc.deadline, multicast=multicast))
    reds = [x for x in lines if x.startswith(("red.", "multimem.red"))]
    assert len(reds) == 3 and all(f".release.{scope}." in x for x in reds)
    sc.assemble()


# ------------------------------------------------------------------------------------------ waits
@FAST
@given(sem=st.sampled_from([Sem.ACQUIRE, Sem.RELAXED]), scope=st.sampled_from([s.value for s in Scope]),
       target=st.sampled_from(TARGETS))
def test_waits_acquire_or_fence_after_a_relaxed_poll(sem, scope, target):
    sc = Scratch(target=target)
    addr = sc.flag(sc.rank, 1)
    sc.emit(lambda b: wait(b, addr, 7, sem=sem, scope=scope, deadline=sc.deadline, flag_id=1))
    sc.emit(lambda b: b.ld(u32, address(sc.flag(0, 2)), space="global", name="data"))   # what the wait guards
    lines, spins = S.spin_loops(sc.assemble())
    (lp,) = spins
    assert acquire_problems(lines, lp) == []
    if sem == Sem.RELAXED:
        assert after_loop(lines, lp, 1) == [f"fence.acq_rel.{scope};"]     # before any later access


def test_the_acquire_checker_catches_a_relaxed_poll_without_fence():
    sc = Scratch()
    addr = sc.flag(0, 0)

    def poll(b):
        seen = b.reg(u32, "seen")
        with b.loop("spin") as lp:
            b.ld(u32, address(addr), space="global", sem="relaxed", scope="sys", into=seen)
            lp.break_if(b.setp("ge", u32, seen, 1))
    sc.emit(poll)
    lines, spins = S.spin_loops(sc.assemble())
    assert acquire_problems(lines, spins[0]) == [f"relaxed poll not followed by fence.acq_rel.sys: "
                                                 f"{S.loaded_exit(lines, spins[0])[0]}"]
    assert S.bounded(lines, spins[0])       # and it is unbounded: the bound checker says what is missing


@FAST
@given(sem=st.sampled_from([Sem.ACQUIRE, Sem.RELAXED]), scope=st.sampled_from(["gpu", "sys"]),
       waits=st.integers(1, 3), multicast=st.booleans())
def test_every_wait_is_bounded_and_reports(sem, scope, waits, multicast):
    sc = Scratch()
    for i in range(waits):
        addr = sc.flag(sc.rank, i)
        sc.emit(lambda b: wait(b, addr, 5 + i, sem=sem, scope=scope, deadline=sc.deadline, flag_id=i))
    sc.emit(lambda b: barrier(b, sc.flags, 7, 4, rank=sc.rank, world=sc.world, scope=scope, deadline=sc.deadline,
                              multicast=multicast))
    ptx = sc.assemble()
    lines, spins = S.spin_loops(ptx)
    assert len(spins) == waits + 1
    for lp in spins:
        assert S.bounded(lines, lp) == []
    # one budget for the whole kernel: %globaltimer read once at the start, every loop compares with it
    deadline = next(x for x in lines if x.startswith("add.u64 %deadline")).split()[1].rstrip(",")
    compares = [x for x in lines if S.mnemonic(x) == "setp.gt.u64"]
    assert len(compares) == waits + 1 and all(x.rstrip(";").endswith(deadline) for x in compares)


def ptx_reached(seen: int, expected: int, lines: list[str]) -> bool:
    """Evaluate the wait's exit test as emitted (sub.s32 then setp.ge.s32 against 0) on 32-bit values."""
    sub = next(x for x in lines if S.mnemonic(x) == "sub.s32")
    test = next(x for x in lines if S.mnemonic(x) == "setp.ge.s32")
    assert sub.endswith(f", {expected};") and test.endswith(", 0;")
    diff = (seen - expected) & 0xFFFFFFFF
    return (diff - (1 << 32) if diff & 0x80000000 else diff) >= 0


@given(expected=st.integers(0, 2**32 - 1), ahead=st.integers(0, 2**31 - 1), behind=st.integers(1, 2**31))
def test_epoch_waits_are_wrap_safe(expected, ahead, behind):
    """Reached once the counter is up to 2**31 - 1 past the epoch, across the 2**32 wrap; not reached
    while it is behind, so no counter is ever reset."""
    sc = Scratch()
    lines = sc.emit(lambda b: wait(b, sc.flag(0, 0), expected, sem=Sem.ACQUIRE, scope="sys", deadline=sc.deadline,
                                   flag_id=0))
    raw = [x for x in sc.k.render().splitlines()]
    body = [x.strip() for x in raw if "sub.s32" in x or "setp.ge.s32" in x]
    assert ptx_reached((expected + ahead) % 2**32, expected, body)
    assert not ptx_reached((expected - behind) % 2**32, expected, body)
    assert not any(x.startswith(("st.", "atom.global.exch")) and "%r+" not in x for x in lines if "@" not in x)


def test_the_spin_checker_tells_a_poll_from_a_read_that_decides_an_if():
    """A loop that ends on a loaded flag spins (it must be bounded); a task loop that reads a counter once
    to choose one iteration's branch (stream-K's position 0) does not."""
    from pkptx.isa import Param, u64
    k = Kernel("polls", [Param("f", u64, pointer=True)], max_threads=32)
    b = k.builder()
    f = b.load_param("f")
    with b.loop("poll") as lp:
        lp.break_if(b.setp("eq", u32, b.ld(u32, address(f), space="global", sem=Sem.ACQUIRE, scope=Scope.GPU), 1))
    for task in b.range(0, 4, name="task"):
        seen = b.ld(u32, address(f), space="global", sem=Sem.ACQUIRE, scope=Scope.GPU, name="seen")
        with b.if_then(b.setp("eq", u32, seen, 3)):
            b.st(u32, address(f, 8), task, space="global")
    b.ret()
    lines, all_loops = S.loops(k.render())
    _, spins = S.spin_loops(k.render())
    assert len(all_loops) == 2 and [lp.head for lp in spins] == [all_loops[0].head]


def test_barriers_never_reset_their_counter():
    sc = Scratch()
    lines = sc.raw(lambda b: barrier(b, sc.flags, 2, 6, rank=sc.rank, world=sc.world, scope="sys",
                                     deadline=sc.deadline, multicast=False))
    status = S.status_register(S.body_lines(sc.k.render()))
    writes = [x for x in lines if S.mnemonic(x).startswith(("st.", "atom."))]
    assert writes and all(f"[{status}" in x for x in writes)     # only the status words, on expiry


# ------------------------------------------------------------------------------------------ proxies
def test_tiles_written_by_threads_are_fenced_before_tma_reads_them():
    for dims in (1, 2, 3):
        for op in PK.TILE_OPS:
            lines = S.body_lines(PK.tile_store(dims, op, False).render())
            assert any(S.mnemonic(x).startswith("st.shared") for x in lines)
            assert S.unfenced_shared_handoffs(lines) == []


def test_the_shared_handoff_checker_catches_a_missing_fence():
    sc = Scratch()
    sc.emit(lambda b: b.st(b32, address(sc.smem), b.mov(b32, 1), space="shared"))
    sc.emit(lambda b: store_async(b, sc.maps["t"].of(b, 0), [0, 0], sc.smem))
    assert len(S.unfenced_shared_handoffs(S.body_lines(sc.assemble()))) == 1


def test_load_async_announces_the_bytes_before_the_copy():
    sc = Scratch()
    lines = sc.emit(lambda b: load_async(b, sc.maps["t"], 1, [0, 0], sc.smem, sc.bars, 8192))
    assert lines[0] == "mbarrier.arrive.expect_tx.shared::cta.b64 %r, [%r], 8192;"
    assert lines[-1].startswith("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes")


def test_multicast_barrier_fences_the_alias():
    """multimem.red through the multicast address, then polls of the same counter through the unicast
    one: fence.proxy.alias between them (pk-design 5: two virtual addresses of one buffer)."""
    sc = Scratch()
    lines = sc.emit(lambda b: barrier(b, sc.flags, 0, 2, rank=sc.rank, world=sc.world, scope="sys",
                                      deadline=sc.deadline, multicast=True))
    red = next(i for i, x in enumerate(lines) if x.startswith("multimem.red"))
    poll = next(i for i, x in enumerate(lines) if x.startswith("ld.acquire"))
    assert "fence.proxy.alias;" in lines[red:poll]


# ------------------------------------------------------------------------------------------ every kernel
def check_kernel(name: str, kernel) -> None:
    lines, spins = S.spin_loops(kernel.render())
    for lp in spins:
        assert S.bounded(lines, lp) == [], (name, lp.head, S.bounded(lines, lp))
        assert acquire_problems(lines, lp) == [], (name, lp.head)
    assert S.unfenced_shared_handoffs(lines) == [], name


@pytest.mark.parametrize("module", catalog.KERNEL_MODULES)
def test_every_catalogued_kernel_spin_loop_is_bounded_and_acquires(module):
    """Built here, module by module, so one module that does not build fails alone."""
    kernels = list(import_module(module).catalog())
    assert kernels
    for kernel in kernels:
        check_kernel(kernel.name, kernel)


@pytest.mark.parametrize("name,kernel", TEST_KERNELS, ids=TEST_IDS)
def test_every_test_kernel_follows_the_rules(name, kernel):
    check_kernel(name, kernel)
    assert S.unpublished_signals(S.body_lines(kernel.render())) == [], name


@pytest.mark.parametrize("module", catalog.KERNEL_MODULES)
def test_every_catalogued_kernel_mbarrier_wait_is_bounded(module):
    """pk-design 5: every spin-wait has a budget, the TMA completions' too (a wrong expect-tx count would
    otherwise hang the GPU)."""
    for kernel in import_module(module).catalog():
        lines, loops = S.mbarrier_loops(kernel.render())
        for lp in loops:
            assert S.bounded(lines, lp) == [], (kernel.name, lp.head, S.bounded(lines, lp))


def test_wait_parity_needs_a_deadline_or_an_explicit_none():
    sc = Scratch()
    with pytest.raises(TypeError, match="deadline"):
        wait_parity(sc.b, sc.bars, 0)


def test_the_test_kernels_are_kernels():
    assert all(isinstance(k, Kernel) for _, k in TEST_KERNELS) and len(set(TEST_IDS)) == len(TEST_IDS)


def test_mbarrier_waits_with_a_deadline_are_bounded():
    from pkptx.launch.status import MBARRIER_FLAG_ID as HOST_SIDE
    from pkptx.primitives.mbarrier import MBARRIER_FLAG_ID
    sc = Scratch()
    sc.emit(lambda b: wait_parity(b, sc.bars, 0, deadline=sc.deadline))
    lines, loops = S.mbarrier_loops(sc.assemble())
    assert S.bounded(lines, loops[0]) == []
    assert HOST_SIDE == MBARRIER_FLAG_ID
