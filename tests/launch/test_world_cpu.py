"""World, fd passing, the collective request check, the multicast gate and symmetric-heap
bookkeeping, all without a GPU: one-rank cases in process over the fake driver, multi-rank cases
as programs under ``mpiexec -n 3`` (tests/launch/mpi_programs)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cuda.bindings import driver as cu
from hypothesis import given, settings
from hypothesis import strategies as st

from pkptx.errors import CudaError, PkptxError, WorldError
from pkptx.launch.multicast import DISABLING_ENV, multicast_policy
from pkptx.launch.symmetric import SymmetricHeap, _FirstFit, check_agreement
from pkptx.launch.vmm import Transaction
from pkptx.launch.world import World, choose_device
from tests.helpers import mpi
from tests.launch.mpi_programs.fake_cuda import FakeDriver

MULTICAST_CALLS = ("cuMulticastCreate", "cuMulticastGetGranularity", "cuMulticastAddDevice",
                   "cuMulticastBindMem", "cuMulticastUnbind", "cuDeviceGetAttribute", "cuDeviceGetUuid")
EVERY_DRIVER_CALL = tuple(n for n in dir(cu) if n.startswith("cu") and callable(getattr(cu, n)))
PROGRAMS = Path(__file__).resolve().parent / "mpi_programs"


@pytest.fixture
def fake_driver():
    """Install a FakeDriver built by the test; always uninstalled afterwards."""
    installed = []

    def install(**options) -> FakeDriver:
        installed.append(FakeDriver(**options).install())
        return installed[-1]

    yield install
    for fake in reversed(installed):
        fake.uninstall()


@pytest.fixture
def no_optout(monkeypatch):
    for name, _ in DISABLING_ENV:
        monkeypatch.delenv(name, raising=False)


# ---------------------------------------------------------------------------------- one rank

def test_single_world_does_not_import_mpi4py():
    code = ("import sys; from pkptx.launch.world import World; w = World.single(); "
            "assert w.allgather('x') == ['x'] and w.rank == 0 and w.size == 1; w.barrier(); w.close(); "
            "print('mpi4py' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_single_world_collectives_names_and_close():
    world, other = World.single(), World.single()
    assert world.allgather_bytes(b"abc") == [b"abc"] and world.allgather({"k": 1}) == [{"k": 1}]
    with world.step("a step") as step:
        step.value = 7
    assert step.values == [7]
    name = world.unique_name("sock")
    assert re.fullmatch(rf"pkptx-{world.token}-sock-r0-\d+", name)
    assert world.token != other.token and name != other.unique_name("sock")
    assert world.unique_name("fd0") != name
    assert [world.next_sequence("p"), world.next_sequence("p"), world.next_sequence("q")] == [0, 1, 0]
    with pytest.raises(WorldError, match="purpose"):
        world.unique_name("no/slash")
    with pytest.raises(WorldError, match="rank 1 does not exist"):
        world.unique_name("sock", 1)
    closed = []
    world.on_close(lambda: closed.append("first"))
    world.on_close(lambda: closed.append("second"))
    forget = world.on_close(lambda: closed.append("forgotten"))
    forget()
    world.close()
    world.close()
    other.close()
    assert closed == ["second", "first"]
    with pytest.raises(WorldError, match="closed"):
        world.barrier()


def test_choose_device_round_robin_and_no_gpu():
    assert [choose_device(r, 4, 1) for r in range(4)] == [0, 0, 0, 0]
    assert [choose_device(r, 4, 2) for r in range(4)] == [0, 1, 0, 1]
    assert [choose_device(r, 2, 8) for r in range(2)] == [0, 1]
    with pytest.raises(WorldError, match="no GPU is visible"):
        choose_device(0, 1, 0)


def test_check_agreement_names_the_odd_rank():
    check_agreement("same", [(1, "a")] * 3)
    with pytest.raises(WorldError) as err:
        check_agreement("alloc", ["x", "y", "x"], describe=str)
    assert "alloc: rank 1 asked for something else than ranks 0, 2" in str(err.value)
    assert "  ranks 0, 2: x\n  rank 1: y" in str(err.value)
    with pytest.raises(WorldError, match="rank 1 asked"):  # a tie: the lowest rank's request wins
        check_agreement("tie", ["x", "y"], describe=str)
    with pytest.raises(WorldError, match="every rank bad"):
        check_agreement("all invalid", [("invalid", "every rank bad")] * 2)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 5000), st.sampled_from([16, 256, 4096])),
                max_size=40))
def test_first_fit_is_deterministic_aligned_and_never_overlaps(ops):
    heaps = [_FirstFit(1 << 16), _FirstFit(1 << 16)]
    live: list[tuple[int, int]] = []
    for free_one, nbytes, align in ops:
        if free_one and live:
            at, n = live.pop(len(live) // 2)
            for h in heaps:
                h.give(at, n)
            continue
        found = [h.find(nbytes, align) for h in heaps]
        assert found[0] == found[1]
        if found[0] is None:
            continue
        at = found[0]
        assert at % align == 0 and at + nbytes <= 1 << 16
        assert all(at + nbytes <= s or e <= at for s, e in ((s, s + n) for s, n in live))
        for h in heaps:
            h.take(at, nbytes)
        live.append((at, nbytes))
    for at, n in live:
        heaps[0].give(at, n)
    assert heaps[0].ranges == [[0, 1 << 16]]


def test_transaction_unwinds_newest_first_and_skips_collective_steps_on_error():
    done = []
    tx = Transaction("t")
    with pytest.raises(ValueError), pytest.warns(RuntimeWarning, match="second failed too"):
        with tx:
            tx.push("first", lambda: done.append("first"))
            tx.push("barrier", lambda: done.append("barrier"), collective=True)
            tx.push("second", lambda: 1 / 0)
            tx.push("third", lambda: done.append("third"))
            raise ValueError("halfway")
    assert done == ["third", "first"] and len(tx) == 0
    tx.push("a", lambda: done.append("a"))
    tx.push("b", lambda: done.append("b"), collective=True)
    fd_step = tx.push("c", lambda: done.append("c"))
    tx.settle(fd_step)
    tx.close()
    assert done[2:] == ["c", "b", "a"]
    tx.push("x", lambda: 1 / 0)
    tx.push("y", lambda: [][1])
    with pytest.raises(PkptxError, match="2 teardown steps failed"):
        tx.close()


# --------------------------------------------------------------------------- multicast gate

@pytest.mark.parametrize("name,value", DISABLING_ENV)
def test_every_optout_closes_the_gate_without_a_driver_call(monkeypatch, no_optout, fake_driver,
                                                            name, value):
    fake = fake_driver(forbid=EVERY_DRIVER_CALL)
    monkeypatch.setenv(name, value)
    assert multicast_policy(0) == (False, f"{name}={value} is set")
    assert fake.calls == []


def test_gate_reads_the_device_attribute_without_optout(no_optout, fake_driver, monkeypatch):
    fake_driver(multicast_supported=0)
    allowed, reason = multicast_policy(0)
    assert not allowed and "CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED reads 0" in reason
    fake_driver(multicast_supported=1)
    monkeypatch.setenv("PKPTX_DISABLE_MULTICAST", "0")  # only the closing value closes
    assert multicast_policy(0)[0]


def test_cuMulticastCreate_has_exactly_one_call_site():
    package = Path(__file__).resolve().parents[2] / "pkptx"
    sites = {str(p.relative_to(package)): p.read_text().count('"cuMulticastCreate"')
             for p in package.rglob("*.py")}
    assert {p: n for p, n in sites.items() if n} == {"launch/multicast.py": 1}


@pytest.mark.parametrize("path", ["vmm", "ipc"])
def test_closed_gate_heap_never_calls_multicast(monkeypatch, fake_driver, path):
    monkeypatch.setenv("PKPTX_DISABLE_MULTICAST", "1")
    fake = fake_driver(forbid=MULTICAST_CALLS)
    world = World.single()
    heap = SymmetricHeap(world, 3 << 20, path=path, multicast=True)
    buf = heap.alloc((7, 5), np.float32)
    assert buf.multicast_ptr is None and heap.multicast_base is None
    assert "PKPTX_DISABLE_MULTICAST=1" in heap.multicast_reason or path == "ipc"
    assert np.frombuffer(fake.written[buf.peer_table_ptr], np.uint64).tolist() == buf.peer_ptrs
    world.close()  # closes the heap too
    assert heap.closed and fake.forbidden_calls == [] and not set(fake.calls) & set(MULTICAST_CALLS)
    assert fake.live() == {} and fake.open_fake_fds() == []


def test_open_gate_binds_multicast_over_the_heap(no_optout, fake_driver):
    fake = fake_driver(multicast_supported=1)
    with World.single() as world, SymmetricHeap(world, 1 << 20, multicast=True) as heap:
        buf = heap.alloc(100, np.uint8)
        assert buf.multicast_ptr == heap.multicast_base + buf.offset
        order = [c for c in fake.calls if c.startswith("cuMulticast")]
        assert order == ["cuMulticastGetGranularity", "cuMulticastCreate", "cuMulticastAddDevice",
                         "cuMulticastBindMem"]
    assert "cuMulticastUnbind" in fake.calls
    assert fake.live() == {} and fake.open_fake_fds() == [] and fake.bound == []


# -------------------------------------------------------------------- failure and teardown

@pytest.mark.parametrize("path,step", [
    ("vmm", "cuMemGetAllocationGranularity"), ("vmm", "cuMemCreate"), ("vmm", "cuMemAddressReserve"),
    ("vmm", "cuMemMap"), ("vmm", "cuMemSetAccess"), ("vmm", "cuMemExportToShareableHandle"),
    ("ipc", "cuMemAlloc"), ("ipc", "cuIpcGetMemHandle"), ("ipc", "cuCtxSetCurrent"),
])
def test_failure_halfway_unwinds_exactly_what_was_done(monkeypatch, fake_driver, path, step):
    monkeypatch.setenv("PKPTX_DISABLE_MULTICAST", "1")
    fake = fake_driver(fail={step: 1})
    with World.single() as world:
        with pytest.raises(CudaError, match=step):
            SymmetricHeap(world, 1 << 20, path=path)
    assert fake.live() == {} and fake.open_fake_fds() == []


def test_teardown_order_and_closed_heap(monkeypatch, fake_driver):
    monkeypatch.setenv("PKPTX_DISABLE_MULTICAST", "1")
    fake = fake_driver()
    world = World.single()
    heap = SymmetricHeap(world, 1 << 20)
    buf = heap.alloc((4,), np.int32)
    start = len(fake.calls)
    heap.close()
    teardown = fake.calls[start:]
    assert teardown == ["cuCtxPushCurrent", "cuCtxSynchronize", "cuMemUnmap", "cuMemAddressFree",
                        "cuMemRelease", "cuCtxPopCurrent"]
    with pytest.raises(PkptxError, match="closed"):
        heap.alloc(1, np.uint8)
    with pytest.raises(PkptxError, match="freed or its heap closed"):
        buf.peer(0)
    world.close()


def test_heap_bad_requests_and_full_heap(monkeypatch, fake_driver):
    monkeypatch.setenv("PKPTX_DISABLE_MULTICAST", "1")
    fake_driver()
    with World.single() as world:
        with pytest.raises(WorldError, match="path in"):
            SymmetricHeap(world, 1 << 20, path="nvshmem")
        with pytest.raises(WorldError, match="nbytes > 0"):
            SymmetricHeap(world, 0)
        heap = SymmetricHeap(world, 1 << 20)
        for shape, dtype, align, match in [((2, -1), np.float32, 256, "no negative"),
                                           ((0,), np.float32, 256, "at least one element"),
                                           ("x", np.float32, 256, "shape must be"),
                                           (4, object, 256, "cannot live in device memory"),
                                           (4, np.float32, 24, "power of two")]:
            with pytest.raises(WorldError, match=match):
                heap.alloc(shape, dtype, align=align)
        with pytest.raises(WorldError, match="no such rank"):
            heap.alloc(4, np.uint8).peer(1)
        assert heap.nbytes == 2 << 20  # rounded up to the (fake) 2 MiB granularity
        big = heap.alloc(heap.nbytes - 4096, np.uint8)
        with pytest.raises(PkptxError, match="no room"):
            heap.alloc(8192, np.uint8)
        big.free()
        assert heap.alloc(8192, np.uint8).offset == 256  # after the 4-byte buffer still in use


# ---------------------------------------------------------------------- three ranks (mpiexec)

@pytest.fixture(scope="module")
def three_ranks():
    proc, results = mpi.run(3, PROGRAMS / "world_program.py", timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert sorted(results) == [0, 1, 2], proc.stdout + proc.stderr
    for rank, sections in results.items():
        crashed = {s: d["crashed"] for s, d in sections.items() if "crashed" in d}
        assert not crashed, f"rank {rank}: {crashed}"
    return results


@pytest.mark.mpi
def test_world_basics_and_unique_names(three_ranks):
    basics = [three_ranks[r]["basics"] for r in range(3)]
    assert {b["token"] for b in basics} == {basics[0]["token"]} and len(basics[0]["token"]) == 16
    for r, b in enumerate(basics):
        assert b["size"] == 3 and b["local_size"] == 3 and b["local_rank"] == r
        assert b["local_ranks"] == [0, 1, 2] and b["pids"] == basics[0]["pids"]
        assert b["gathered"] == [{"r": i, "sq": i * i} for i in range(3)]
        assert b["gathered_bytes"] == ["", "b1", "b2b2"]
        assert b["names"] == basics[0]["names"] and b["own_name"] == b["names"][r]
        assert b["other_purpose"] not in b["names"]
    assert len(set(basics[0]["names"])) == 3


@pytest.mark.mpi
def test_device_choice_when_ranks_outnumber_gpus(three_ranks):
    for r in range(3):
        device = three_ranks[r]["device"]
        assert device["ordinal"] == r % 2
        assert len(device["warnings"]) == 1 and "3 ranks on this node share 2 GPU(s)" in device["warnings"][0]


@pytest.mark.mpi
def test_step_failure_reaches_every_rank_at_once(three_ranks):
    assert three_ranks[1]["step"]["kind"] == "ValueError"
    for r in (0, 2):
        step = three_ranks[r]["step"]
        assert step["kind"] == "WorldError" and "demo step failed on rank 1" in step["message"]
        assert "boom on rank one" in step["message"] and step["seconds"] < 5


@pytest.mark.mpi
def test_collective_request_mismatch_raises_on_every_rank(three_ranks):
    for r in range(3):
        m = three_ranks[r]["mismatch"]
        for case, odd, theirs, ours in [("shape", 1, "shape (4, 8) float32", "shape (4, 4) float32"),
                                        ("dtype", 2, "shape (16,) float16", "shape (16,) float32"),
                                        ("invalid", 0, "bad request: shape (-1,)", "shape (5,) uint8")]:
            kind, message, _ = m[case]
            assert kind == "WorldError", (case, message)
            assert f"rank {odd} asked for something else" in message and theirs in message
            assert ours in message
        assert m["same"] == [[3, 2], "int32"]


@pytest.mark.mpi
def test_fd_passing_between_three_ranks(three_ranks):
    for r in range(3):
        fdpass = three_ranks[r]["fdpass"]
        assert fdpass["fds_leaked"] == 0
        assert fdpass["seen"] == {str(p): [f"written by rank {p}", f"payload {p}", 1]
                                  for p in range(3) if p != r}


@pytest.mark.mpi
@pytest.mark.parametrize("section", ["heap_vmm", "heap_ipc", "heap_multicast"])
def test_symmetric_heap_over_fake_driver(three_ranks, section):
    pids = three_ranks[0]["basics"]["pids"]
    creators = 0
    for r in range(3):
        heap = three_ranks[r][section]
        assert heap["source_pids"] == {str(p): pids[p] for p in range(3) if p != r}
        assert heap["offsets"] == [0, 256] and heap["table_ok"] and heap["ptrs_distinct"]
        assert heap["live"] == "{}" and heap["fake_fds"] == []
        assert heap["forbidden"] == []
        if section == "heap_multicast":
            assert heap["multicast"] and heap["buffer_multicast"] == [0, 256]
            calls = heap["multicast_calls"]
            creators += calls.count("cuMulticastCreate")
            assert calls.index("cuMulticastAddDevice") < calls.index("cuMulticastBindMem")
            assert heap["teardown"][:3] == ["cuMemUnmap", "cuMemAddressFree", "cuMulticastUnbind"]
        else:
            assert not heap["multicast"] and heap["multicast_calls"] == []
            assert heap["buffer_multicast"] == [None, None]
    if section == "heap_ipc":
        assert three_ranks[0][section]["teardown"] == ["cuIpcCloseMemHandle"] * 2 + ["cuMemFree"]
    if section == "heap_vmm":
        assert three_ranks[0][section]["teardown"] == ["cuMemUnmap", "cuMemRelease"] * 2 + [
            "cuMemUnmap", "cuMemAddressFree", "cuMemRelease"]
    assert creators == (1 if section == "heap_multicast" else 0)


@pytest.mark.mpi
def test_failure_on_one_rank_unwinds_every_rank(three_ranks):
    for r in range(3):
        failed = three_ranks[r]["import_failure"]
        assert failed["live"] == "{}" and failed["fake_fds"] == []
        assert failed["seconds"] < 5
        if r == 1:
            assert failed["kind"] == "CudaError"
        else:
            assert failed["kind"] == "WorldError" and "failed on rank 1" in failed["message"]
            assert "cuMemImportFromShareableHandle" in failed["message"]


@pytest.mark.mpi
def test_ranks_in_different_collectives_are_told_where_each_is(three_ranks):
    for r in range(3):
        diverged = three_ranks[r]["diverged"]
        assert diverged["kind"] == "WorldError" and diverged["seconds"] < 5
        assert "ranks run collectives in different orders" in diverged["message"]
        assert ("rank 0 is in 'A'" if r else "rank 1 is in 'B'") in diverged["message"]
        assert diverged["after"][0] == "WorldError" and "unusable" in diverged["after"][1]


@pytest.mark.mpi
def test_gpu_program_over_the_fake_drivers_shared_memory():
    """The GPU test's own program, on host shared memory: its logic runs in CPU CI too."""
    env = {"PKPTX_TEST_FAKE_DRIVER": "1", "PKPTX_DISABLE_MULTICAST": "1", "PKPTX_EXPECT_RANKS": "3"}
    proc, results = mpi.run(3, PROGRAMS / "gpu_symmetric_program.py", env=env, timeout=120)
    assert sorted(results) == [0, 1, 2], proc.stdout[-4000:] + proc.stderr[-4000:]
    for rank in range(3):
        assert results[rank]["setup"]["ok"]
        for path in ("vmm", "ipc"):
            assert results[rank][path]["ok"], (rank, path, results[rank][path]["problems"])
    assert proc.returncode == 0


@pytest.mark.mpi
@pytest.mark.parametrize("where", ["world", "barrier", "heap"])
def test_rank_killed_during_setup_is_named_within_the_timeout_and_survivors_exit(where):
    """The launcher keeps the survivors alive; they name the dead rank, then end on their own (the
    program has no os._exit: a hang in MPI_Finalize would run into the launcher's timeout). The
    SIGUSR1 that MPICH's launcher sends the survivors of a killed rank is noted, not fatal."""
    timeout = 2.0
    proc, results = mpi.run(3, PROGRAMS / "kill_program.py", where, str(timeout), timeout=60,
                                 survive_dead_ranks=True)
    assert sorted(results) == [0, 1], proc.stdout[-4000:] + proc.stderr[-4000:]
    seconds = []
    for r in (0, 1):
        seen = results[r][where]
        assert seen["error"] is not None and "rank 2 did not arrive" in seen["error"], seen
        seconds.append(seen["seconds"])
    # the first survivor to give up waited its whole timeout; its notice may tell the other sooner
    assert max(seconds) >= timeout and max(seconds) < timeout + 3, seconds
    status = 3 if where == "heap" else 1
    assert proc.returncode == status, proc.stderr[-4000:]
    assert proc.stderr.count(f"ends with status {status} without MPI_Finalize") == 2, proc.stderr[-4000:]
    if where == "barrier":
        assert "the MPI launcher reported a failed process (SIGUSR1)" in proc.stderr, proc.stderr[-4000:]


@pytest.mark.mpi
def test_late_arrival_at_an_abandoned_barrier_raises():
    timeout = 1.0
    proc, results = mpi.run(3, PROGRAMS / "late_program.py", str(timeout), timeout=60, survive_dead_ranks=True)
    assert sorted(results) == [0, 1, 2], proc.stdout[-4000:] + proc.stderr[-4000:]
    for r in (0, 1):
        seen = results[r]["late"]
        assert seen["error"] is not None and "rank 2 did not arrive" in seen["error"], seen
    late = results[2]["late"]
    assert late["error"] is not None, "the late rank passed a barrier the others had abandoned"
    # whichever of ranks 0 and 1 timed out first told the other, which then had no need to
    assert re.search(rf"rank [01] gave up on 'late barrier' \(host collective #2\) after {timeout:g} s, "
                     "missing rank 2", late["error"]), late
    assert "this rank (rank 2 of 3, at #2) came too late" in late["error"] and late["seconds"] < 1, late
    for r in range(3):
        assert "unusable after an earlier failure" in results[r]["after"]["error"], results[r]
    assert proc.returncode == 1 and proc.stderr.count("ends with status 1 without MPI_Finalize") == 3, proc.stderr
