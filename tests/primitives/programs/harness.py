"""What the primitive GPU programs share beyond tests/helpers/mpi.py: the world, the symmetric heap,
kernel loading and launching, per-case phases that keep every rank in step, data helpers and numpy
references.

A program runs under mpirun (one process per rank, all on GPU 0) or as a plain ``python`` process, a
world of one (how tools/sanitize_primitives.sh runs it under compute-sanitizer). Results go through
``tests.helpers.mpi.report``.
"""
from __future__ import annotations

import json
import os
import secrets
import time
import traceback

import ml_dtypes
import numpy as np

from pkptx.launch import DeviceArray, Device, LoadedKernel, TensorMap, empty, from_numpy
from pkptx.launch.status import device_status
from pkptx.launch.symmetric import SymmetricHeap
from pkptx.launch.world import World
from tests.helpers.mpi import report

DTYPES = {"bf16": np.dtype(ml_dtypes.bfloat16), "f16": np.dtype(np.float16), "f32": np.dtype(np.float32)}
BITS = {2: np.uint16, 4: np.uint32}
POISON = {"bf16": 0x7FC1, "f16": 0x7E01, "f32": 0x7FC00001}     # quiet NaNs no kernel produces
UNIT = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11, "f32": 2.0 ** -24}  # unit roundoff
TIMEOUT_NS = int(os.environ.get("PKPTX_TIMEOUT_NS", str(30 * 10**9)))
LAUNCHERS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK")


class Env:
    """The world, this rank's device, a symmetric heap, loaded kernels and the run's random seed."""

    def __init__(self, heap_bytes: int = 64 << 20):
        under_launcher = any(v in os.environ for v in LAUNCHERS)
        self.world = World(timeout=120) if under_launcher else World.single(timeout=120)
        self.rank, self.size = self.world.rank, self.world.size
        self.device = Device(self.world.device_ordinal()).set_current()
        self.heap = SymmetricHeap(self.world, heap_bytes, path=os.environ.get("PKPTX_PATH", "vmm"))
        self.status = device_status(self.device)
        self.run_seed = self.world.allgather(secrets.randbits(62) if self.rank == 0 else None, what="seed")[0]
        self._kernels: dict[str, LoadedKernel] = {}

    def kernel(self, built) -> LoadedKernel:
        """A builder Kernel assembled (disk cache) and loaded once per process."""
        k = self._kernels.get(built.name)
        if k is None:
            k = self._kernels[built.name] = LoadedKernel.load(built.compile(), self.device)
        return k

    def launch(self, built, grid: int, block: int, smem: int = 0, **values) -> None:
        k = self.kernel(built)
        names = set(k.signature.names)
        defaults = dict(rank=self.rank, world=self.size, status=self.status.ptr, timeout_ns=TIMEOUT_NS)
        args = {**{n: v for n, v in defaults.items() if n in names}, **values}
        k[grid, block, smem](*k.signature.bind(args))

    def finish(self, what: str) -> None:
        """Wait for this rank's kernels and raise DeviceTimeoutError if a bounded wait expired."""
        self.device.synchronize()
        self.status.check(what, TIMEOUT_NS)

    def rng(self, case_seed: int, owner: int, tag: int = 0) -> np.random.Generator:
        """The same generator on every rank for (case, owner): each rank can compute every input."""
        return np.random.default_rng([self.run_seed, case_seed, owner, tag])

    def close(self) -> None:
        self.heap.close()
        self.world.close()


class Case:
    """One hypothesis case on every rank. ``run`` steps stop at the first error of this rank; ``meet``
    is a world barrier that every rank always reaches, in the same order, so one rank's failure never
    leaves the others waiting at a different barrier."""

    def __init__(self, env: Env, section: str, params: dict, failures: list):
        self.env, self.section, self.params, self.failures = env, section, params, failures
        self.errors: list[str] = []

    def run(self, what: str, fn, *args):
        if self.errors:
            return None
        try:
            return fn(*args)
        except Exception:
            self.errors.append(f"{what}: {traceback.format_exc()[-2500:]}")
            return None

    def meet(self, what: str) -> None:
        try:
            self.env.world.barrier(what=f"{self.section}: {what}")
        except Exception:
            self.errors.append(f"barrier '{what}': {traceback.format_exc()[-800:]}")

    def sync_and_meet(self, what: str) -> None:
        """This rank's device work done, then every rank meets: peers' writes are all visible."""
        self.run(f"device synchronize before '{what}'", self.env.finish, f"{self.section} {self.params}")
        self.meet(what)

    def phases(self, prepare, launch, check, *, ready: str, done: str) -> None:
        """The shape of every case: prepare, every rank meets (``ready``), launch, every rank meets
        (``done``: all peers' writes visible), check, and the closing meeting."""
        self.run("prepare", prepare)
        self.sync_and_meet(ready)
        self.run("launch", launch)
        self.sync_and_meet(done)
        self.run("check", check)
        self.close()

    def expect(self, what: str, ok: bool, **detail) -> None:
        if not ok and not self.errors:
            self.errors.append(f"{what}: {json.dumps(detail, default=str)[:1500]}")

    def close(self) -> None:
        """Every rank meets; if any rank's CUDA context is gone (a sticky error), all stop the section."""
        lost = None
        if self.errors:
            try:
                self.env.device.synchronize()
            except Exception as exc:        # every later CUDA call of that process would fail too
                lost = f"rank {self.env.rank}: {exc}"
        try:
            gone = [x for x in self.env.world.allgather(lost, what=f"{self.section}: case done") if x]
        except Exception:
            self.errors.append(f"barrier 'case done': {traceback.format_exc()[-800:]}")
            gone = [lost] if lost else []
        if self.errors:
            self.failures.append(dict(self.params, errors=self.errors))
        if gone:
            raise ContextLost(f"the CUDA context is gone after case {self.params}: {gone}")


class ContextLost(RuntimeError):
    """A kernel broke the CUDA context; the section stops at the case that did it."""


def section(env: Env, name: str, body) -> None:
    """Run ``body(cases, failures)`` (a hypothesis-driven function) and report it for this rank."""
    cases: list = []
    failures: list = []
    start = time.monotonic()
    try:
        body(cases, failures)
    except Exception as exc:
        lost = exc if isinstance(exc, ContextLost) else getattr(exc, "__cause__", None)
        failures.append(dict(error=str(lost) if isinstance(lost, ContextLost) else traceback.format_exc()[-3000:]))
    report(env.rank, name, cases=len(cases), failures=failures[:20], seconds=round(time.monotonic() - start, 2))


# ---------------------------------------------------------------------------------------- data
def view(ptr: int, shape, dtype, owner) -> DeviceArray:
    return DeviceArray.from_pointer(ptr, tuple(shape), dtype, owner=owner)


def poison(arr: DeviceArray, dtype: str) -> None:
    """Fill with a NaN bit pattern no kernel writes (whole array, raw bits)."""
    item = DTYPES[dtype].itemsize
    view(arr.ptr, (arr.nbytes // item,), BITS[item], arr).fill(POISON[dtype])


def poison_bytes(arr: DeviceArray, value: int = 0xA5) -> None:
    view(arr.ptr, (arr.nbytes,), np.uint8, arr).fill(value)


def poisoned(shape, dtype: str) -> np.ndarray:
    """A host array of ``shape`` holding the poison pattern: what an untouched output reads back as."""
    dt = DTYPES[dtype]
    return np.full(shape, POISON[dtype], BITS[dt.itemsize]).view(dt)


def normal(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32).astype(DTYPES[dtype])


def raw(a: np.ndarray) -> np.ndarray:
    """Bit patterns, for exact comparisons that also see poison and signed zeros."""
    return a.view(BITS[a.dtype.itemsize])


def first_mismatch(got: np.ndarray, want: np.ndarray) -> dict:
    bad = np.argwhere(got != want)
    if not bad.size:
        return {}
    i = tuple(int(x) for x in bad[0])
    return dict(count=int(len(bad)), first=i, got=repr(got[i]), want=repr(want[i]))


def tensor_maps(ptrs, dtype: str, shape, box) -> DeviceArray:
    """A device table of one 128-byte tiled tensor map per address (rank order), 64-byte aligned."""
    blob = b"".join(TensorMap.tiled(p, DTYPES[dtype], tuple(shape), box=tuple(box)).data for p in ptrs)
    table = from_numpy(np.frombuffer(blob, np.uint8).copy())
    if table.ptr % 64:
        raise RuntimeError(f"tensor-map table at 0x{table.ptr:x} is not 64-byte aligned")
    return table


def clip(coords, box, shape):
    """(tile slices, tensor slices) of the part of a box at ``coords`` inside ``shape``, or None."""
    tile, dst = [], []
    for c, b, s in zip(coords, box, shape):
        lo, hi = max(c, 0), min(c + b, s)
        if hi <= lo:
            return None
        tile.append(slice(lo - c, hi - c))
        dst.append(slice(lo, hi))
    return tuple(tile), tuple(dst)


def combine(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return {"add": np.add, "min": np.minimum, "max": np.maximum}[op](a, b)


def within(got: np.ndarray, exact: np.ndarray, magnitude: np.ndarray, terms: int, dtype: str) -> np.ndarray:
    """Elementwise: |got - exact| <= (terms + 1) * 2u * magnitude + tiny, the error bound of ``terms``
    roundings in any order (atomics reduce in whatever order the peers arrive)."""
    bound = (terms + 1) * 2 * UNIT[dtype] * magnitude + 1e-30
    return np.abs(got.astype(np.float64) - exact) <= bound


def bound_failure(got: np.ndarray, exact: np.ndarray, ok: np.ndarray) -> dict:
    """Where a rounding-bound check failed first, with the values."""
    bad = np.argwhere(~ok)
    if not bad.size:
        return {}
    i = tuple(int(x) for x in bad[0])
    return dict(count=int(len(bad)), first=i, got=float(got[i]), exact=float(exact[i]))


def empty_like_bytes(nbytes: int) -> DeviceArray:
    return empty((nbytes,), np.uint8)


__all__ = ["Env", "Case", "section", "view", "poison", "poison_bytes", "normal", "raw",
           "first_mismatch", "bound_failure", "poisoned", "tensor_maps", "clip", "combine", "within", "DTYPES",
           "POISON", "UNIT",
           "TIMEOUT_NS", "empty", "from_numpy", "empty_like_bytes"]
