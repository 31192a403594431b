"""Under mpirun -n N with every rank on GPU 0 and PKPTX_DISABLE_MULTICAST=1: symmetric buffers on
both mapping paths. Each rank writes fresh random data (seeded per rank and per run) into its own
copies and into the next rank's copy, then reads every peer's copy through the peer views; exact.
With PKPTX_TEST_FAKE_DRIVER=1 it runs on the fake driver's shared host memory instead (CPU CI)."""
from __future__ import annotations

import os
import secrets
import time
import traceback

import ml_dtypes
import numpy as np

from pkptx.launch.flags import FlagArray, host_barrier
from pkptx.launch.symmetric import SymmetricHeap
from pkptx.launch.world import World
from tests.helpers.mpi import report

if os.environ.get("PKPTX_TEST_FAKE_DRIVER") == "1":
    from tests.launch.mpi_programs.fake_cuda import FakeDriver

    FakeDriver().install()
world = World(timeout=120)
rank, size = world.rank, world.size
run_seed = world.allgather(secrets.randbits(63) if rank == 0 else None, what="seed")[0]
PATHS = ("vmm", "ipc")
SHAPES = {"a": ((257, 33), np.float32), "b": ((1000,), np.int64), "c": ((64, 48), ml_dtypes.bfloat16)}


def pattern(owner: int, name: str, path: str) -> np.ndarray:
    """What ``owner`` writes into buffer ``name``: random, never all zeros, the same on every rank."""
    shape, dtype = SHAPES[name]
    rng = np.random.default_rng([run_seed, owner, ord(name), PATHS.index(path)])
    data = rng.standard_normal(shape).astype(dtype) if name != "b" else rng.integers(1, 2**62, shape)
    assert np.any(data.view(np.uint8) != 0)
    return data


def same(got: np.ndarray, want: np.ndarray) -> bool:
    return got.shape == want.shape and got.dtype == want.dtype and got.tobytes() == want.tobytes()


def check(path: str) -> dict:
    start = time.monotonic()
    problems = []
    heap = SymmetricHeap(world, 8 << 20, path=path, multicast=True)
    try:
        bufs = {name: heap.alloc(shape, dtype) for name, (shape, dtype) in SHAPES.items()}
        flags = FlagArray(heap, 16)
        expected = "PKPTX_DISABLE_MULTICAST=1" if path == "vmm" else "cannot be bound"
        if heap.multicast_base is not None or expected not in heap.multicast_reason:
            problems.append(f"multicast not closed for the expected reason: {heap.multicast_reason}")
        bufs["a"].local.copy_from_numpy(pattern(rank, "a", path))
        bufs["c"].local.copy_from_numpy(pattern(rank, "c", path))
        bufs["b"].peer((rank + 1) % size).copy_from_numpy(pattern(rank, "b", path))  # a remote write
        host_barrier(world, what=f"{path}: every rank wrote")
        for peer in range(size):
            for name in ("a", "c"):
                if not same(bufs[name].peer(peer).to_numpy(), pattern(peer, name, path)):
                    problems.append(f"{name}: rank {peer}'s copy read through peer({peer}) differs")
        if not same(bufs["b"].local.to_numpy(), pattern((rank - 1) % size, "b", path)):
            problems.append(f"b: what rank {(rank - 1) % size} wrote through its peer view is not here")
        for name, buf in bufs.items():
            if buf.peer_table.to_numpy().tolist() != buf.peer_ptrs:
                problems.append(f"{name}: the device peer table differs from peer_ptrs")
            if buf.peer(rank).ptr != buf.local.ptr or len(set(buf.peer_ptrs)) != size:
                problems.append(f"{name}: peer pointers {buf.peer_ptrs} are not one per rank")
        if np.any(flags.buffer.local.to_numpy() != 0):
            problems.append("flags: not zeroed")
        host_barrier(world, what=f"{path}: every rank read")
        offsets = [buf.offset for buf in bufs.values()]
    finally:
        heap.close()
    return dict(ok=not problems, problems=problems, offsets=offsets, seconds=time.monotonic() - start)


if os.environ.get("PKPTX_DISABLE_MULTICAST") != "1":
    report(rank, "setup", ok=False, problems=["PKPTX_DISABLE_MULTICAST=1 is not set: refusing to run"])
    raise SystemExit(1)
report(rank, "setup", ok=world.size == int(os.environ["PKPTX_EXPECT_RANKS"]), size=world.size,
       device=world.device_ordinal())
for mapping in PATHS:
    try:
        report(rank, mapping, **check(mapping))
    except Exception:
        report(rank, mapping, ok=False, problems=[traceback.format_exc()])
world.close()
