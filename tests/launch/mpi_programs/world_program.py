"""Under mpiexec -n 3 (CPU only): World collectives, names, fd passing, the collective request check,
and symmetric heaps over the fake driver (both paths, gate closed and open). One line per section."""
from __future__ import annotations

import os
import tempfile
import time
import traceback
import warnings

import numpy as np

from pkptx.launch.fdpass import exchange_fds
from pkptx.launch.multicast import DISABLING_ENV
from pkptx.launch.symmetric import SymmetricHeap, check_alloc_request
from pkptx.launch.world import World
from tests.launch.mpi_programs.fake_cuda import FakeDriver
from tests.helpers.mpi import report

MULTICAST_CALLS = ("cuMulticastCreate", "cuMulticastGetGranularity", "cuMulticastAddDevice",
                   "cuMulticastBindMem", "cuMulticastUnbind", "cuDeviceGetAttribute", "cuDeviceGetUuid")

world = World(timeout=20)
rank, size = world.rank, world.size


def section(name):
    """Run one section; a crash becomes a report, so the other sections still run."""
    def wrap(fn):
        try:
            report(rank, name, **fn())
        except Exception:
            report(rank, name, crashed=traceback.format_exc())
        return fn
    return wrap


def failure(fn):
    """(exception type, message, seconds) of a call that must raise."""
    start = time.monotonic()
    try:
        fn()
    except Exception as exc:
        return type(exc).__name__, str(exc), time.monotonic() - start
    return None, "did not raise", time.monotonic() - start


@section("basics")
def _():
    return dict(size=size, local_rank=world.local_rank, local_size=world.local_size,
                local_ranks=world.local_ranks, token=world.token, pids=world.pids,
                gathered=world.allgather({"r": rank, "sq": rank * rank}),
                gathered_bytes=[b.decode() for b in world.allgather_bytes(f"b{rank}".encode() * rank)],
                names=[world.unique_name("sock", r) for r in range(size)],
                own_name=world.unique_name("sock"), other_purpose=world.unique_name("fd0"))


@section("device")
def _():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ordinal = world.device_ordinal(visible=2)
    return dict(ordinal=ordinal, warnings=[str(w.message) for w in caught])


@section("step")
def _():
    def failing_step():
        with world.step("demo step"):
            if rank == 1:
                raise ValueError("boom on rank one")
    kind, message, seconds = failure(failing_step)
    world.barrier(what="after the failed step")  # the world is still usable
    return dict(kind=kind, message=message, seconds=seconds)


@section("mismatch")
def _():
    shape = failure(lambda: check_alloc_request(world, (4, 8) if rank == 1 else (4, 4), np.float32))
    dtype = failure(lambda: check_alloc_request(world, (16,), np.float16 if rank == 2 else np.float32))
    invalid = failure(lambda: check_alloc_request(world, -1 if rank == 0 else 5, np.uint8))
    same = check_alloc_request(world, [3, 2], "int32")
    return dict(shape=shape, dtype=dtype, invalid=invalid, same=[list(same[0]), str(same[1])])


@section("fdpass")
def _():
    before = len(os.listdir("/proc/self/fd"))
    with tempfile.TemporaryFile() as f:
        f.write(f"written by rank {rank}".encode())
        f.flush()
        received = exchange_fds(world, [f.fileno()], payload=f"payload {rank}".encode())
    seen = {}
    for peer, got in received.items():
        seen[peer] = [os.pread(got.fds[0], 64, 0).decode(), got.payload.decode(), len(got.fds)]
        got.close()
    return dict(seen=seen, fds_leaked=len(os.listdir("/proc/self/fd")) - before)


def heap_section(path, **fake_options):
    fake = FakeDriver(**fake_options).install()
    try:
        heap = SymmetricHeap(world, 3 << 20, path=path, multicast=True)
        a = heap.alloc((8, 3), np.float32)
        b = heap.alloc((5,), np.uint16)
        sources = {p: fake.source_of(heap.base_ptrs[p]) for p in range(size) if p != rank}
        table = np.frombuffer(fake.written[a.peer_table_ptr], np.uint64).tolist()
        out = dict(nbytes=heap.nbytes, offsets=[a.offset, b.offset], reason=heap.multicast_reason,
                   multicast=heap.multicast_base is not None,
                   buffer_multicast=[x.multicast_ptr - heap.multicast_base if x.multicast_ptr else None
                                     for x in (a, b)],
                   source_pids={p: s["pid"] for p, s in sources.items()},
                   table_ok=table == a.peer_ptrs, ptrs_distinct=len(set(a.peer_ptrs)) == size,
                   multicast_calls=[c for c in fake.calls if c in MULTICAST_CALLS])
        heap.close()
        out.update(live=repr(fake.live()), fake_fds=fake.open_fake_fds(),
                   forbidden=fake.forbidden_calls,
                   teardown=[c for c in fake.calls[fake.calls.index("cuCtxSynchronize"):]
                             if c in ("cuMemUnmap", "cuMemRelease", "cuMemAddressFree",
                                      "cuIpcCloseMemHandle", "cuMemFree", "cuMulticastUnbind")])
        return out
    finally:
        fake.uninstall()


os.environ["PKPTX_DISABLE_MULTICAST"] = "1"
for _path in ("vmm", "ipc"):
    section(f"heap_{_path}")(lambda: heap_section(_path, forbid=MULTICAST_CALLS))

for _name, _ in DISABLING_ENV:  # only the fake driver is reachable below: no real GPU is touched
    os.environ.pop(_name, None)
section("heap_multicast")(lambda: heap_section("vmm", multicast_supported=1))


@section("import_failure")
def _():
    fake = FakeDriver(fail={"cuMemImportFromShareableHandle": 1} if rank == 1 else {}).install()
    try:
        kind, message, seconds = failure(lambda: SymmetricHeap(world, 1 << 20))
        world.barrier(what="after the failed heap")
        return dict(kind=kind, message=message, seconds=seconds, live=repr(fake.live()),
                    fake_fds=fake.open_fake_fds())
    finally:
        fake.uninstall()


@section("diverged")  # last: a world whose ranks went different ways refuses further collectives
def _():
    kind, message, seconds = failure(lambda: world.barrier(what="A" if rank == 0 else "B"))
    after = failure(world.barrier)
    return dict(kind=kind, message=message, seconds=seconds, after=after[:2])


world.close()
