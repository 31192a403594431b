"""How ``pkptx.gemm`` schedules a problem: a cost model over the kernel's legal tile shapes, stage counts
and split-K factors, evaluated per shape (no table of benchmarked shapes). No GPU needed.

For a candidate (tile_m, tile_n, stages, splits) on ``sm_count`` persistent blocks (one per SM: every
candidate's stages fill most of the shared memory):

- work units = tiles * splits; waves = ceil(units / sm_count) (each block runs that many units);
- one unit's time = its k-blocks * (tile FLOPs / the tile shape's sustained rate) + a fixed per-unit
  cost (pipeline refill, the epilogue the tensor cores wait for) + for split-K the partial written and,
  on the slab's last slice, every partial read back;
- the compute path is waves * unit time; the memory path is the bytes that must come from HBM (A, B
  once, C once) at what the active SMs can pull, plus the epilogue (and split-K sum) of the last units,
  which only start once their bytes are in; the estimate is the larger.

A ping-pong schedule (two warpgroups take whole tiles in turn, :class:`kernel.Config` ``pingpong``) runs
its K loop at the rate of the cooperative kernel's same tile shape (measured on the H100 at 128 x 192
and 128 x 128, bench/RESULTS.md 2026-12-06) while one warpgroup's epilogue runs under the other's K
loop: only the last tile's epilogue is waited for. It holds the whole tile in one warpgroup's registers,
so only tiles of at most 192 columns (PINGPONG_TILES), and takes no split-K.

A problem of few rows (M <= SWAP_MAX_M, B given N x K) also gets the swapped schedules: the kernel
computes Cᵀ = B·Aᵀ, so N runs down the 64-row wgmma side and M is the wgmma's N (a multiple of 16 from
16), instead of a 64-row tile of which M fills only a part; the direct epilogue stores the tile
transposed. Those problems are bound by B's bytes: a narrow tile runs at the rate of a 64-wide one, its
stages are smaller, so more fit (up to NARROW_MAX_STAGES), and only 64-row tiles in one wave are weighed
(H100, bench/RESULTS.md 2026-12-06: 64 x 16 unsplit beat 128 x 16 in two K slices, 47.8 vs 50.8 us at
16x8192x8192, and K slices beyond one wave of units lost 3-50 %).

A k-block's wgmma run over 2 or 4 accumulators (``k_split``, :func:`k_split_of`) where the tile is
narrow: a chain of short m64nNk16 products then does not wait on each one's latency (H100, bench/RESULTS.md
2026-12-07: 512³ 0.909 -> 0.935 of cuBLAS, 1024³ 0.909 -> 0.929, 16x8192x8192 0.995 -> 1.001, the rest within
1 %). The fused and grouped kernels keep one (:func:`choose_config`): not measured there, and their
128-row tiles are where the H100 run saw the split lose up to 0.6 %.

Stream-K (``stream_k``, :mod:`..templates.stream_k`) runs the whole waves of tiles and cuts the tiles of a
partly filled last wave into equal k-block runs, one per block; its runs share less of A and B in L2
than a wave of whole tiles (STREAM_K_SLOWDOWN), so it is weighed only where the last wave is less than
STREAM_K_FILL full. With B given N x K, one width per tile height in FITTED_WIDTHS (128 rows; 256 rows:
two chains a warpgroup, whole tiles) is fitted to the waves (:func:`fitted_width`; C's columns past the
last whole 64-column box stored from registers) and weighed beside DEFAULT_TILES, at a share interpolated
between the measured widths' (:func:`tile_rate`).

Split-K is considered only when the tiles leave more than a tenth of the device idle at ``splits=1``:
where tiles already fill the SMs, splitting only adds partial traffic. The constants are H200 figures
(bench/RESULTS.md); ``probe/gemm_sweep_probe.py`` measures every candidate to refit them.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from ..templates.gemm_parts import BOX_COLS, FP8_TYPES, N_STEP, NARROW_STEP, TILE_K, k_block_elements
from ..templates.kernels import gemm as kernel
from ..templates.split_k import slab_bytes

PEAK_PER_SM = 6.35e12         # bf16 FLOP/s of one SM in the K loop of a 128 x 256 tile (fitted: 8192³, 8192²x1024)
TILE_RATE = {                 # sustained share of PEAK_PER_SM per tile shape (wgmma width, operand reuse), refitted
    (128, 256): 1.0, (128, 192): 0.9, (128, 128): 0.8, (128, 64): 0.52,    # by probe/gemm_fit.py to the sweep
    (64, 256): 0.62, (64, 192): 0.66, (64, 128): 0.62, (64, 64): 0.28,     # of 2026-12-04 (stepped k-block ring)
    (128, 240): 0.98, (128, 224): 0.96,   # C's last 48 or 32 columns stored from registers; H100 sweep 2026-12-07:
                                          # 128x240 102.0 us at 3000x5000x2000 (128x256 103.4), 128x224 155.0 at
                                          # 2560²x8192 (128x256 170.3)
    (256, 128): 0.97, (256, 152): 0.95,   # 256-row tiles (two chains a warpgroup; 144 to 192 columns: 3 stages):
    (256, 160): 0.95, (256, 192): 0.96,   # shares at which the model orders them among 128-row tiles as the H100
    (256, 144): 0.90,                     # sweeps of 2026-12-07 22:00-22:30 did at 10 shapes (bench/RESULTS.md);
}                                         # 256 x 144 lost 5 % to 128 x 224 at 12000x4000x3008
# fp8 inputs (shares of twice the FLOP rate): 128-row tiles of 128 and 192 columns keep closer to 128 x 256
# than in bf16. Set by hand on probe/data/gemm_sweep_fp8_2026-12-07.txt (H100): the picks' geometric-mean
# regret 1.015 -> 1.010, 512x4096x32768 unsplit on 128 x 128 at 0.99 of cuBLAS instead of two K slices of
# 128 x 256 at 0.90 (probe/gemm_fit.py --fp8's own fit also raised 64 x 256 to 0.92: 6 % lost at 256x8192x8192).
FP8_TILE_RATE = {**TILE_RATE, (128, 192): 0.96, (128, 128): 0.92}
DEFAULT_TILES = ((128, 256), (128, 192), (128, 128), (64, 256), (64, 192), (64, 128), (64, 64))
FITTED_WIDTHS = {128: (128, 256), 256: (128, 192)}     # tile rows: the widths fitted_width chooses among (B N x K)
PINGPONG_TILES = ((128, 192), (128, 128))
HBM_BYTES_PER_S = 4.0e12      # sustained HBM read bandwidth of the whole device
SM_BYTES_PER_S = 45e9         # what one SM's TMA loads sustain when few SMs are busy
L2_BYTES_PER_S = 50e9         # one SM's generic f32 partial stores/loads (split-K; refitted to the 2026-12-03 sweep)
TAIL_UNITS = 2                # units whose epilogue (and split-K sum) a memory-bound schedule still runs after
                              # the last bytes arrive (fitted: probe/data/gemm_sweep_2026-12-03.txt)
UNIT_OVERHEAD_S = 1.0e-6      # per work unit: pipeline refill, ...
EPILOGUE_BYTES_PER_S = {      # ... and the epilogue the tensor cores wait for, per epilogue kind
    "tma": 32e9,              # fitted: 3 us for a 128 x 256 bf16 tile
    "direct": 64e9,           # a guess until probe/gemm_sweep_probe.py measures it (not chosen by default)
}
FILL_ENOUGH = 0.9             # wave efficiency at splits=1 above which split-K is never considered
STREAM_K_FILL = 0.85          # ... and above which stream-K is not: on the H100 (bench/RESULTS.md 2026-12-07) it lost
                              # 0.5-11 % at 0.91-0.97 (3000x5000x2000, 4096³, 6144x2048x4096, 16384x5120x5120,
                              # 8192²x1024)
                              # and won 2.5-7 % at 0.76 (2560x4096x4096, 2560x2560x8192)
STREAM_K_SLOWDOWN = 1.5       # the cut tiles' k-blocks against a whole tile's: runs at different K offsets share
                              # less of A and B in L2 (fitted to the same sweep: 1.3-2.5)
MIN_SLICE_BLOCKS = 8          # k-blocks per K slice, at least: a shorter slice spends more on refill and on its
                              # partial's round trip than it saves (512³: 6.2 us whole, 7.2 us in two slices,
                              # probe/data/gemm_sweep_2026-12-03.txt)
MAX_SPLITS = 16
MAX_STAGES = 8
NARROW_MAX_STAGES = 12        # a swapped tile's stages are small: more of them keep more of B in flight
SWAP_MAX_M = 48               # M up to which the swapped schedules are weighed (a narrower tile than 64)


@dataclass(frozen=True)
class GemmConfig:
    """The schedule of one gemm call: tile shape, pipeline stages, K slices (``splits > 1``: the
    deterministic split-K kernel), tile rows walked together. ``gemm(..., config=GemmConfig(...))``
    forces it (checked against the problem first); dtypes and layout come from the arguments."""
    tile_m: int = 128
    tile_n: int = 256
    stages: int = 4
    splits: int = 1
    group_m: int = 8
    epilogue: str = "tma"        # or "direct": C stored from registers (kernel.Config.epilogue)
    pingpong: bool = False       # whole tiles taken in turn by two warpgroups (kernel.Config.pingpong)
    swap: bool = False           # compute Cᵀ = B·Aᵀ: tile_m spans N, tile_n spans M (direct epilogue, B N x K)
    k_split: int = 1             # accumulators a k-block's wgmma alternate over (kernel.Config.k_split)
    stream_k: bool = False       # whole waves of tiles, then the last wave's tiles cut into equal k-runs

    def kernel_config(self, dtype: str, out_dtype: str, b_layout: str) -> kernel.Config:
        """The kernel this schedule runs (raises PTXBuildError for an illegal tile or too many stages)."""
        return kernel.Config(dtype=dtype, out_dtype=out_dtype, b_layout=b_layout, tile_m=self.tile_m,
                             tile_n=self.tile_n, stages=self.stages, group_m=self.group_m,
                             split_k=self.splits > 1, epilogue=self.epilogue, pingpong=self.pingpong,
                             transpose_c=self.swap, k_split=self.k_split, stream_k=self.stream_k)

    def kernel_problem(self, m: int, n: int) -> tuple[int, int]:
        """(rows, columns) of the product the kernel computes: C's, or Cᵀ's when swapped."""
        return (n, m) if self.swap else (m, n)

    @property
    def label(self) -> str:
        return (f"{self.tile_m}x{self.tile_n}/{self.stages}" + (f"/k{self.splits}" if self.splits > 1 else "")
                + ("/d" if self.epilogue == "direct" else "")
                + ("/pp" if self.pingpong else "") + ("/sw" if self.swap else "") + ("/stream" if self.stream_k else "")
                + (f"/ks{self.k_split}" if self.k_split > 1 else ""))


def tiles_of(m: int, n: int, tile_m: int, tile_n: int) -> int:
    return -(-m // tile_m) * -(-n // tile_n)


def max_stages(tile_m: int, tile_n: int, smem_limit: int, epilogue: str = "tma", pingpong: bool = False) -> int:
    """As many stages as fit beside the epilogue staging (kernel.Config.smem_bytes, one stage a step)."""
    one = kernel.Config(tile_m=tile_m, tile_n=tile_n, stages=1, epilogue=epilogue, pingpong=pingpong)
    per_stage = one.a_bytes + one.b_bytes
    cap = MAX_STAGES if tile_n >= 64 else NARROW_MAX_STAGES
    return min(cap, (smem_limit - one.smem_bytes + per_stage) // per_stage)


def stream_k_split(tiles: int, k_blocks: int, workers: int) -> tuple[int, int] | None:
    """(whole tiles, stream-K tiles) of a stream-K launch on ``workers`` blocks: every full wave whole,
    the partly filled last one cut; None where stream-K does not apply: the tiles fill whole waves or
    one partial wave (split-K's case), a worker's run would be empty, or the kernel's 32-bit run
    arithmetic (workers * stream k-blocks) would overflow."""
    waves = -(-tiles // workers)
    whole = (waves - 1) * workers
    cut = tiles - whole
    if waves < 2 or cut == workers or cut * k_blocks < workers or workers * cut * k_blocks >= 2**32:
        return None
    return whole, cut


def fill(units: int, sm_count: int) -> float:
    """Useful share of the block-slots the units occupy: units / (waves * blocks)."""
    return units / (-(-units // sm_count) * sm_count)


def estimate_s(cfg: GemmConfig, m: int, n: int, k: int, out_bytes: int, sm_count: int, dtype: str = "bf16") -> float:
    """Modelled seconds for ``cfg`` on an M x N x K problem of ``dtype`` inputs (see the module
    docstring). An fp8 k-block holds twice the K of a 16-bit one in the same bytes and its wgmma run at
    twice the rate, so a k-block costs the same."""
    tiles = tiles_of(*cfg.kernel_problem(m, n), cfg.tile_m, cfg.tile_n)
    k_blocks = -(-k // k_block_elements(dtype))
    units = tiles * cfg.splits
    waves = -(-units // sm_count)
    rate = tile_rate(cfg.tile_m, max(cfg.tile_n, 64), dtype)      # a narrow tile: a 64-wide one's rate
    block_s = 2 * cfg.tile_m * cfg.tile_n * TILE_K / (PEAK_PER_SM * rate)     # a 16-bit k-block at the 16-bit peak
    epilogue_s = cfg.tile_m * cfg.tile_n * out_bytes / EPILOGUE_BYTES_PER_S[cfg.epilogue]
    reduce_s = (1 + cfg.splits) * cfg.tile_m * cfg.tile_n * 4 / L2_BYTES_PER_S if cfg.splits > 1 else 0.0
    unit_s = -(-k_blocks // cfg.splits) * block_s + UNIT_OVERHEAD_S + reduce_s
    compute_s = waves * unit_s + epilogue_s if cfg.pingpong else waves * (unit_s + epilogue_s)
    if cfg.stream_k:                    # whole waves, then a run of the cut tiles' k-blocks per block: at most
        whole, cut = stream_k_split(tiles, k_blocks, sm_count)     # one partial written, and position 0
        run = -(-cut * k_blocks // sm_count)                         # reads the other runs' k / run partials
        partial_s = cfg.tile_m * cfg.tile_n * 4 / L2_BYTES_PER_S
        compute_s = (whole // sm_count * (unit_s + epilogue_s) + run * block_s * STREAM_K_SLOWDOWN
                     + 2 * UNIT_OVERHEAD_S + partial_s * (1 + k_blocks / run) + epilogue_s)
    active = min(units, sm_count)
    hbm_bytes = (m * k + n * k) * (1 if dtype in FP8_TYPES else 2) + m * n * out_bytes
    memory_s = hbm_bytes / min(HBM_BYTES_PER_S, active * SM_BYTES_PER_S)
    return max(compute_s, memory_s + TAIL_UNITS * (epilogue_s + reduce_s))


def tile_rate(tile_m: int, tile_n: int, dtype: str = "bf16") -> float:
    """The tile shape's sustained share of the peak: TILE_RATE for 16-bit inputs, FP8_TILE_RATE for fp8
    (whose k-blocks hold twice the K at twice the FLOP rate); a width between two measured ones of the
    same height, linearly between their shares."""
    table = FP8_TILE_RATE if dtype in FP8_TYPES else TILE_RATE
    if (tile_m, tile_n) in table:
        return table[tile_m, tile_n]
    widths = sorted(w for h, w in table if h == tile_m)
    below, above = max(w for w in widths if w < tile_n), min(w for w in widths if w > tile_n)
    share = (tile_n - below) / (above - below)
    return (1 - share) * table[tile_m, below] + share * table[tile_m, above]


def fitted_width(rows: int, cols: int, tile_m: int, sm_count: int, dtype: str = "bf16") -> int:
    """The width (a multiple of N_STEP within FITTED_WIDTHS[tile_m]) whose tiles cost the busiest block
    least: waves x width / the width's share (a narrower tile runs slower), ties to the wider.
    3000x5000 on 132 SMs: 128 x 232 (528 tiles, exactly 4 waves; 256 wide: 480, also 4), 256 x 152 (396 tiles
    in exactly 3 waves, as cuBLAS runs it)."""
    narrowest, widest = FITTED_WIDTHS[tile_m]
    return min(range(widest, narrowest - 1, -N_STEP),
               key=lambda w: -(-tiles_of(rows, cols, tile_m, w) // sm_count) * w / tile_rate(tile_m, w, dtype))


def k_split_of(tile_n: int, tile_m: int = 128) -> int:
    """Accumulators a k-block's wgmma alternate over: 4 for tiles narrower than 64 columns, 2 up to 128
    (per warpgroup), else 1 (a wide product already outlasts the next one's issue); 1 for a 256-row
    tile, whose two chains a warpgroup already alternate."""
    return 1 if tile_m > 128 else 4 if tile_n < 64 else 2 if tile_n <= 128 else 1


def candidates(m: int, n: int, k: int, *, sm_count: int, smem_limit: int, allow_split: bool = True,
               shapes=DEFAULT_TILES, epilogues=("tma",), pingpong=PINGPONG_TILES,
               k_major_b: bool = False, dtype: str = "bf16", fitted=tuple(FITTED_WIDTHS)) -> list[GemmConfig]:
    """Every schedule the model weighs for this problem: each tile shape in ``shapes`` and epilogue in
    ``epilogues`` with the most stages that fit, and where the tiles leave SMs idle, every split count
    that keeps slices at least MIN_SLICE_BLOCKS deep, and where whole waves come before one less than
    STREAM_K_FILL full, stream-K (runs at least MIN_SLICE_BLOCKS deep; 256-row tiles run whole); then the
    ping-pong schedule of each tile in ``pingpong`` (TMA epilogue, unsplit). ``k_major_b`` (B given N x K):
    tile widths that are not whole 64-column boxes (also, for each tile height in ``fitted``, its
    :func:`fitted_width`), and with M <= SWAP_MAX_M the swapped schedules (64 x M rounded up to 16, direct
    epilogue, at most one wave of units); B given K x N loads whole boxes only."""
    def split_counts(rows: int, cols: int, tile_m: int, tile_n: int) -> range:
        idle = allow_split and tile_m <= 128 and fill(tiles_of(rows, cols, tile_m, tile_n), sm_count) < FILL_ENOUGH
        k_blocks = -(-k // k_block_elements(dtype))
        return range(1, max(1, min(MAX_SPLITS, k_blocks // MIN_SLICE_BLOCKS) if idle else 1) + 1)

    def streams(tile_m: int, tile_n: int) -> bool:
        k_blocks, tiles = -(-k // k_block_elements(dtype)), tiles_of(m, n, tile_m, tile_n)
        split = (allow_split and tile_m <= 128 and fill(tiles, sm_count) < STREAM_K_FILL
                 and stream_k_split(tiles, k_blocks, sm_count))
        return bool(split) and -(-split[1] * k_blocks // sm_count) >= MIN_SLICE_BLOCKS

    if k_major_b:
        shapes = tuple(shapes) + tuple((tile_m, fitted_width(m, n, tile_m, sm_count, dtype)) for tile_m in fitted)
    out = []
    for epilogue in epilogues:
        for tile_m, tile_n in dict.fromkeys(s for s in shapes if k_major_b or s[1] % BOX_COLS == 0):
            stages = max_stages(tile_m, tile_n, smem_limit, epilogue)
            if stages >= 2:
                ks = k_split_of(tile_n, tile_m)
                out += [GemmConfig(tile_m, tile_n, stages, splits, epilogue=epilogue, k_split=ks)
                        for splits in split_counts(m, n, tile_m, tile_n)]
                if streams(tile_m, tile_n):
                    out.append(GemmConfig(tile_m, tile_n, stages, epilogue=epilogue, k_split=ks, stream_k=True))
    out += [GemmConfig(tile_m, tile_n, max_stages(tile_m, tile_n, smem_limit, pingpong=True), pingpong=True)
            for tile_m, tile_n in pingpong]
    if k_major_b and m <= SWAP_MAX_M:
        width = -(-m // NARROW_STEP) * NARROW_STEP
        tiles = tiles_of(n, m, 64, width)
        out += [GemmConfig(64, width, max_stages(64, width, smem_limit, "direct"), splits, epilogue="direct", swap=True,
                           k_split=k_split_of(width))
                for splits in split_counts(n, m, 64, width) if splits == 1 or tiles * splits <= sm_count]
    return out


@functools.lru_cache(maxsize=4096)
def plan(m: int, n: int, k: int, out_dtype: str, *, sm_count: int, smem_limit: int, allow_split: bool = True,
         shapes=DEFAULT_TILES, epilogues=("tma",), pingpong=PINGPONG_TILES, k_major_b: bool = False,
         dtype: str = "bf16") -> GemmConfig:
    """The candidate with the least modelled time (ties: the earlier, i.e. wider tiles and fewer splits).
    Memoized: weighing the candidates costs 30-150 us of Python, more than the launch it picks for."""
    out_bytes = 4 if out_dtype == "f32" else 2
    options = candidates(m, n, k, sm_count=sm_count, smem_limit=smem_limit, allow_split=allow_split, shapes=shapes,
                         epilogues=epilogues, pingpong=pingpong, k_major_b=k_major_b, dtype=dtype)
    return min(options, key=lambda c: estimate_s(c, m, n, k, out_bytes, sm_count, dtype))


WHOLE_TILES = ((128, 256), (128, 128))     # what the fused and grouped kernels are built around


def choose_config(m: int, n: int, k: int, dtype: str, out_dtype: str, b_layout: str = "nk", *, sm_count: int,
                  smem_limit: int) -> kernel.Config:
    """The kernel for GEMM-shaped kernels that communicate or group whole 128-row tiles (GEMM+RS,
    AG+GEMM, GEMM+AR, grouped GEMM): the model's choice among WHOLE_TILES, without split-K, one
    accumulator set a k-block (see the module docstring)."""
    chosen = plan(m, n, k, out_dtype, sm_count=sm_count, smem_limit=smem_limit, allow_split=False,
                  shapes=WHOLE_TILES, pingpong=())
    return replace(chosen, k_split=1).kernel_config(dtype, out_dtype, b_layout)


def workspace_bytes(cfg: GemmConfig, m: int, n: int, workers: int) -> tuple[int, int]:
    """(partial bytes, ticket counters) split-K or stream-K needs for an M x N output on ``workers``
    blocks. Split-K: one f32 slab per slice per 64-row warpgroup slab, one counter per slab. Stream-K:
    two slabs per worker and warpgroup (its run's head and tail), one counter per cut tile's slab
    (at most ``workers`` tiles)."""
    consumers = cfg.tile_m // 64
    if cfg.stream_k:
        return 2 * workers * consumers * slab_bytes(cfg.tile_n), workers * consumers
    slabs = tiles_of(*cfg.kernel_problem(m, n), cfg.tile_m, cfg.tile_n) * consumers
    return slabs * cfg.splits * slab_bytes(cfg.tile_n), slabs


# One GEMM+AR communicator SM (bytes read + written): a load round trip of ~1.3 us under load (one 16-byte
# vector per thread in flight moved 9.9 GB/s per SM: bench_fused, MPS, 2 ranks, N=8192) and 8 vectors
# on 256 threads in flight per rank step give ~50 GB/s.
COMM_SM_BYTES_PER_S = 50e9


def all_reduce_comm_sms(m: int, n: int, k: int, out_bytes: int, world: int, sm_count: int,
                        tile: tuple[int, int]) -> int:
    """Communicator SMs for the fused GEMM + all-reduce, from a model of its two overlapped halves:
    the GEMM on ``sm_count - c`` SMs (:func:`estimate_s`) while the c communicators reduce this rank's
    1/world of the tiles (world copies read, world written: 2·M·N·out_bytes) at COMM_SM_BYTES_PER_S
    per SM; what they have not reduced by the GEMM's end, and at least the last wave's share (those
    tiles are done only then), is reduced by every SM (the compute blocks join the communicators), as
    fast as HBM allows.
    The c of least modelled time; 0 at world 1 (nothing to reduce)."""
    if world == 1:
        return 0
    reduce_bytes = 2 * m * n * out_bytes
    tiles = tiles_of(m, n, *tile)
    cfg = GemmConfig(*tile, stages=4)

    def fused_s(c: int) -> float:
        workers = sm_count - c
        gemm_s = estimate_s(cfg, m, n, k, out_bytes, workers)
        last_wave = (tiles - (-(-tiles // workers) - 1) * workers) / tiles
        during = min(reduce_bytes * (1 - last_wave), gemm_s * c * COMM_SM_BYTES_PER_S)
        return gemm_s + (reduce_bytes - during) / min(sm_count * COMM_SM_BYTES_PER_S, HBM_BYTES_PER_S)

    return min(range(1, sm_count // 2 + 1), key=fused_s)
