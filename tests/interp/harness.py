"""Launching pkptx's persistent kernels on an interpreter World the way the host ops do: the ops'
planners choose the Config and run map, and ``launch`` fills in what ``pkptx.ops`` passes every kernel
(rank, world, status words, timeout, the heap barrier's flags, peer tables of the layouts)."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from pkptx.interp.tensormap import tiled
from pkptx.interp.world import World
from pkptx.templates.progress import flag_words

DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32}
RTOL = {"bf16": 2.0 ** -7, "f16": 2.0 ** -10, "f32": 1e-5}
GRID = 2                    # blocks per rank: enough for two blocks to share the work
TIMEOUT_NS = 10 ** 15       # the interpreter's clock runs 1 ns per warp-op: never expires


class Ranks:
    """An interpreter World with the per-rank state every launch needs: status words and heap flags."""

    def __init__(self, size: int, seed: int = 0, *, multicast: bool = False, **options):
        self.world = World(size, seed=seed, check_uninit=True, check_races=True, **options)
        self.size, self.multicast = size, multicast
        self.flags = self.world.symmetric((flag_words(size),), np.uint32, name="heap flags", fill=0,
                                          multicast=multicast)
        self.status = [self.world.machine.alloc(32, name="status", rank=r, fill=0, written=True)
                       for r in range(size)]

    def symmetric(self, shape, dtype, name: str, fill=None):
        """A buffer on every rank (with a multicast address when the ranks have multicast)."""
        return self.world.symmetric(shape, dtype, name=name, fill=fill, multicast=self.multicast)

    def launch(self, rank: int, kernel, threads: int, *, layouts: dict, grid: int = GRID, smem=None,
               num_comm_sms=None, **values):
        """One rank's launch with ``values`` plus the common parameters; ``layouts`` name -> Symmetric
        (``flags`` defaults to the heap barrier's)."""
        args = dict(values, rank=rank, world=self.size, status=self.status[rank].base, timeout_ns=TIMEOUT_NS,
                    num_comm_sms=grid if num_comm_sms is None else num_comm_sms)
        for name, buf in {"flags": self.flags, **layouts}.items():
            args[f"{name}_peers"], args[f"{name}_mc"] = buf.peer_table(rank), buf.mc
        self.world.launch(rank, kernel, grid, threads, *[args[p.name] for p in kernel.params], smem=smem)

    def run(self):
        m = self.world.run()
        for r, status in enumerate(self.status):
            words = status.read(np.uint32)
            assert not words[0], f"rank {r}: a bounded wait expired (status {words})"
        return m

    def tensor_map(self, ptr: int, dtype, shape, box):
        return tiled(ptr, dtype, shape, box, swizzle=128).data

    def gemm_values(self, cfg, a_ptr: int, b: np.ndarray, rank: int, m: int, n: int, k: int) -> dict:
        """The GEMM parameters of ``pkptx.ops.fused``: A's map at ``a_ptr``, B copied onto the rank."""
        b_dev = self.world.machine.from_numpy(b, name="b", rank=rank)
        return dict(tmap_a=self.tensor_map(a_ptr, b.dtype, (m, k), (cfg.tile_m, cfg.k_elements)),
                    tmap_b=self.tensor_map(b_dev.base, b.dtype, b.shape, cfg.b_box), k=k,
                    tiles_m=-(-m // cfg.tile_m), tiles_n=-(-n // cfg.tile_n))


def inputs(seed: int, world: int, shape, dtype: str) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape, dtype=np.float32).astype(DTYPES[dtype]) for _ in range(world)]


def assert_close(got: np.ndarray, ref: np.ndarray, dtype: str, world: int, what: str) -> None:
    """The GPU tests' tolerance: RTOL of the dtype times (|ref| + sqrt(world))."""
    bad = ~(np.abs(got.astype(np.float64) - ref) <= RTOL[dtype] * (np.abs(ref) + np.sqrt(world)))
    assert not bad.any(), f"{what}: {int(bad.sum())} of {bad.size} differ, first at " \
                          f"{np.unravel_index(int(np.argmax(bad)), bad.shape)}"


def assert_bits(got: np.ndarray, want: np.ndarray, what: str) -> None:
    bits = f"u{got.dtype.itemsize}"
    bad = got.view(bits) != want.view(bits)
    assert not bad.any(), f"{what}: {int(bad.sum())} of {bad.size} differ, first at " \
                          f"{np.unravel_index(int(np.argmax(bad)), bad.shape)}"


def assert_rel(got: np.ndarray, ref: np.ndarray, what: str, limit: float = 1.5e-2) -> None:
    """The fused GPU tests' rule: normwise relative error below ``limit``."""
    err = float(np.linalg.norm(got.astype(np.float64) - ref) / max(np.linalg.norm(ref), 1e-30))
    assert err < limit, f"{what}: relative error {err:.3g} (limit {limit})"
