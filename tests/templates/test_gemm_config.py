"""The GEMM schedule model (pkptx.ops.gemm_plan) and the split-K index maths, with no GPU: every chosen
schedule is a legal kernel, split-K appears only where tiles leave SMs idle, forced configs are
checked, and every kernel the model can pick assembles without spills."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pkptx.errors import PTXBuildError
from pkptx.ops.gemm import GemmArgumentError, check_config, check_shapes
from pkptx.ops.gemm_plan import (DEFAULT_TILES, FILL_ENOUGH, FITTED_WIDTHS, MIN_SLICE_BLOCKS, PINGPONG_TILES, TILE_RATE,
                                 GemmConfig, SWAP_MAX_M, WHOLE_TILES, all_reduce_comm_sms, candidates, choose_config,
                                 estimate_s, fill, fitted_width, k_split_of, max_stages, plan, stream_k_split,
                                 tile_rate, tiles_of, workspace_bytes)
from pkptx.templates.gemm_parts import TILE_K
from pkptx.templates.kernels import gemm as kernel
from pkptx.toolchain import assemble

SMEM = 227 * 1024
H200 = 132


@st.composite
def shapes(draw):
    return (draw(st.integers(1, 20000)), 8 * draw(st.integers(1, 2500)), 16 * draw(st.integers(1, 2048)))


@settings(max_examples=300, deadline=None)
@given(shape=shapes(), sms=st.sampled_from([132, 66, 32, 114]), out=st.sampled_from(["bf16", "f32"]))
@example(shape=(2048, 2048, 16384), sms=132, out="bf16")
@example(shape=(128, 8192, 8192), sms=132, out="bf16")
@example(shape=(16, 8192, 8192), sms=132, out="f32")
@example(shape=(3000, 5000, 2000), sms=132, out="bf16")
def test_chosen_config_is_legal_and_splits_only_idle_machines(shape, sms, out):
    m, n, k = shape
    cfg = plan(m, n, k, out, sm_count=sms, smem_limit=SMEM)
    kcfg = check_config(cfg, m, n, k, "bf16", out, "nk")         # raises if illegal
    assert kcfg.smem_bytes <= SMEM and kcfg.split_k == (cfg.splits > 1)
    tiles = tiles_of(m, n, cfg.tile_m, cfg.tile_n)
    if cfg.splits > 1:
        assert fill(tiles, sms) < FILL_ENOUGH, "split-K where the tiles already fill the SMs"
        assert -(-k // TILE_K) // cfg.splits >= MIN_SLICE_BLOCKS
        units = tiles * cfg.splits      # a split must fill the waves better or bring more SMs in (memory-bound)
        assert fill(units, sms) > fill(tiles, sms) or min(units, sms) > tiles, "a split that adds nothing"
    # never worse, by the model, than the plain 128 x 256 schedule
    plain, out_bytes = GemmConfig(stages=max_stages(128, 256, SMEM)), 4 if out == "f32" else 2
    assert estimate_s(cfg, m, n, k, out_bytes, sms) <= estimate_s(plain, m, n, k, out_bytes, sms)


@pytest.mark.parametrize("shape, want", [
    ((8192, 8192, 8192), GemmConfig(128, 256, 4, 1)),     # many waves of the widest tile
    ((2048, 2048, 16384), GemmConfig(128, 256, 4, 1)),    # 128 tiles fill 132 SMs: no split
])
def test_large_problems_keep_the_widest_tile_unsplit(shape, want):
    assert plan(*shape, "bf16", sm_count=H200, smem_limit=SMEM) == want


@pytest.mark.parametrize("shape", [(128, 8192, 8192), (16, 8192, 8192), (64, 4096, 16384), (1024, 1024, 16384)])
def test_few_tile_problems_fill_the_device(shape):
    """By smaller tiles or K slices (measured on the H200: either wins, depending on the shape)."""
    cfg = plan(*shape, "bf16", sm_count=H200, smem_limit=SMEM)
    units = tiles_of(shape[0], shape[1], cfg.tile_m, cfg.tile_n) * cfg.splits
    assert units >= 0.75 * H200, cfg


@given(shape=shapes(), sms=st.sampled_from([132, 66]))
def test_whole_tile_kernels_get_128_row_tiles_unsplit(shape, sms):
    """choose_config serves the fused and grouped kernels: 128-row tiles of 256 or 128 columns, no split."""
    cfg = choose_config(*shape, "bf16", "f32", "kn", sm_count=sms, smem_limit=SMEM)
    assert isinstance(cfg, kernel.Config) and (cfg.tile_m, cfg.tile_n) in WHOLE_TILES and not cfg.split_k
    assert (cfg.out_dtype, cfg.b_layout, cfg.stages) == ("f32", "kn", max_stages(cfg.tile_m, cfg.tile_n, SMEM))


def test_the_direct_epilogue_is_weighed_only_when_asked():
    shape = (128, 8192, 8192)
    both = candidates(*shape, sm_count=H200, smem_limit=SMEM, epilogues=("tma", "direct"))
    assert {c.epilogue for c in both} == {"tma", "direct"}
    assert plan(*shape, "bf16", sm_count=H200, smem_limit=SMEM).epilogue == "tma"
    assert all(c.stages >= max_stages(c.tile_m, c.tile_n, SMEM) for c in both)


def test_candidates_cover_every_tile_and_split_one():
    opts = candidates(128, 8192, 8192, sm_count=H200, smem_limit=SMEM, k_major_b=True)
    fitted = {(tile_m, fitted_width(128, 8192, tile_m, H200)) for tile_m in FITTED_WIDTHS}
    assert {(c.tile_m, c.tile_n) for c in opts} == set(DEFAULT_TILES) | fitted and set(DEFAULT_TILES) <= set(TILE_RATE)
    unfitted = candidates(128, 8192, 8192, sm_count=H200, smem_limit=SMEM, k_major_b=True, fitted=())
    assert {(c.tile_m, c.tile_n) for c in unfitted} == set(DEFAULT_TILES)
    boxed = candidates(128, 8192, 8192, sm_count=H200, smem_limit=SMEM)           # B K x N: whole 64-column boxes
    assert {(c.tile_m, c.tile_n) for c in boxed} == {t for t in DEFAULT_TILES if t[1] % 64 == 0}
    assert all(c.stages == max_stages(c.tile_m, c.tile_n, SMEM, pingpong=c.pingpong) for c in opts)
    assert {(c.tile_m, c.tile_n) for c in opts if c.pingpong} == set(PINGPONG_TILES)
    assert all(c.splits == 1 and c.epilogue == "tma" for c in opts if c.pingpong)
    assert {c.splits for c in opts} >= {1, 2, 4, 8}
    assert candidates(128, 8192, 8192, sm_count=H200, smem_limit=SMEM, allow_split=False, k_major_b=True) == \
        [c for c in opts if c.splits == 1]


@pytest.mark.parametrize("cfg, message", [
    (GemmConfig(splits=0), "splits"),
    (GemmConfig(splits=3), "splits"),             # K = 128: two k-blocks
    (GemmConfig(tile_m=96), "not a legal kernel"),
    (GemmConfig(stages=9), "not a legal kernel"),   # over 227 KB
    (GemmConfig(pingpong=True), "256 accumulator registers"),     # 128 x 256 in one warpgroup
    (GemmConfig(64, 256, 4, 2, pingpong=True), "no split-K"),
    (GemmConfig(128, 192, 5, pingpong=True), "over 227 KB"),   # two 16 KB staging buffers beside 5 x 40 KB
    (kernel.Config(), "GemmConfig"),
    (GemmConfig(128, 32, 8), "not a legal kernel"),                         # narrow tiles store from registers
])
def test_forced_config_is_checked(cfg, message):
    with pytest.raises(GemmArgumentError, match=message):
        check_config(cfg, 256, 256, 128, "bf16", "bf16", "nk")


def test_swap_needs_k_major_b_and_the_direct_epilogue():
    swapped = GemmConfig(128, 16, 8, epilogue="direct", swap=True)
    assert check_config(swapped, 16, 256, 128, "bf16", "bf16", "nk").transpose_c
    with pytest.raises(GemmArgumentError, match="b_layout='nk'"):
        check_config(swapped, 16, 256, 128, "bf16", "bf16", "kn")
    with pytest.raises(GemmArgumentError, match="direct"):
        check_config(GemmConfig(128, 16, 8, swap=True), 16, 256, 128, "bf16", "bf16", "nk")


@given(m=st.integers(1, 200), n=st.sampled_from([1024, 4096, 8192, 14336]), k=st.sampled_from([1024, 8192, 16384]))
def test_swapped_schedules_only_for_few_rows_and_k_major_b(m, n, k):
    """Swapped candidates exist exactly for M <= SWAP_MAX_M with k_major_b; their width is M rounded up
    to 16, and the schedule planned without k_major_b never swaps."""
    opts = candidates(m, n, k, sm_count=H200, smem_limit=SMEM, k_major_b=True)
    widths = {c.tile_n for c in opts if c.swap}
    assert widths == ({-(-m // 16) * 16} if m <= SWAP_MAX_M else set())
    assert all(c.epilogue == "direct" and check_config(c, m, n, k, "bf16", "bf16", "nk") for c in opts if c.swap)
    assert not plan(m, n, k, "bf16", sm_count=H200, smem_limit=SMEM).swap


@pytest.mark.parametrize("shape, want", [((16, 8192, 8192), GemmConfig(64, 16, 12, 1, epilogue="direct", swap=True)),
                                         ((32, 4096, 14336), GemmConfig(64, 32, 12, 2, epilogue="direct", swap=True)),
                                         ((16, 2048, 16384), GemmConfig(64, 16, 12, 3, epilogue="direct", swap=True))])
def test_few_rows_take_the_fastest_measured_swapped_schedule(shape, want):
    """The fastest of every candidate timed (H100, bench/RESULTS.md 2026-12-06): 1.019, 1.026 and 1.013
    of cuBLAS, where the best unswapped schedule ran 0.953, 1.025 and 0.971."""
    chosen = plan(*shape, "bf16", sm_count=H200, smem_limit=SMEM, k_major_b=True)
    assert chosen == replace(want, k_split=k_split_of(want.tile_n))


def test_tails_allowed_in_m_and_n():
    assert check_shapes((3000, 2000), "bfloat16", (5000, 2000), "bfloat16") == (3000, 5000, 2000)
    assert check_shapes((1, 16), "bfloat16", (8, 16), "bfloat16") == (1, 8, 16)
    with pytest.raises(GemmArgumentError, match="N = 5004 must be a positive multiple of 8"):
        check_shapes((3000, 2000), "bfloat16", (5004, 2000), "bfloat16")
    with pytest.raises(GemmArgumentError, match="K = 2008 must be a positive multiple of 16"):
        check_shapes((3000, 2008), "bfloat16", (5000, 2008), "bfloat16")


def test_workspace_holds_every_slice_of_every_slab():
    part, slabs = workspace_bytes(GemmConfig(128, 256, 4, 4), 200, 300, 132)
    assert slabs == 2 * 2 * 2 and part == slabs * 4 * 64 * 256 * 4
    part, slabs = workspace_bytes(GemmConfig(128, 16, 12, 4, epilogue="direct", swap=True), 10, 300, 132)
    assert slabs == 3 * 1 * 2 and part == slabs * 4 * 64 * 16 * 4      # tiles over N x M


def test_workspace_of_stream_k_is_two_slabs_a_worker():
    part, tickets = workspace_bytes(GemmConfig(128, 256, 4, stream_k=True), 3000, 5000, 132)
    assert tickets == 132 * 2 and part == 2 * 132 * 2 * 64 * 256 * 4


@given(tiles=st.integers(1, 2000), k_blocks=st.integers(1, 600), workers=st.integers(1, 200))
def test_stream_k_cuts_only_a_partly_filled_last_wave(tiles, k_blocks, workers):
    """stream_k_split: whole waves first, the rest (fewer than the workers) cut, every run non-empty,
    the kernel's 32-bit products safe; None where there is nothing to cut or no whole wave before it."""
    split = stream_k_split(tiles, k_blocks, workers)
    waves, rest = divmod(tiles, workers)
    refused = tiles <= workers or rest == 0 or rest * k_blocks < workers or workers * rest * k_blocks >= 2**32
    assert (split is None) == refused
    if split is not None:
        assert split == (waves * workers, rest)


def test_stream_k_is_weighed_only_below_its_fill():
    """3000x5000x2000 on 128 x 256 tiles fills 0.91 of its last wave: no stream-K schedule; 2560²x8192
    fills 0.76: stream-K on 128 x 256 is among the candidates, and with pingpong or split-K refused."""
    def streamed(m, n, k):
        return {(c.tile_m, c.tile_n) for c in candidates(m, n, k, sm_count=132, smem_limit=SMEM) if c.stream_k}
    assert (128, 256) not in streamed(3000, 5000, 2000)
    assert (128, 256) in streamed(2560, 2560, 8192)
    assert GemmConfig(128, 256, 4, stream_k=True).label == "128x256/4/stream"
    for bad in (dict(pingpong=True), dict(split_k=True)):
        with pytest.raises(PTXBuildError, match="stream"):
            kernel.Config(tile_n=192, stream_k=True, **bad)


@given(k_blocks=st.integers(1, 4096), splits=st.integers(1, 16))
def test_k_slices_partition_the_k_loop(k_blocks, splits):
    """The device's slice bounds (split_k.k_range): floor(s * kb / S); contiguous, disjoint, covering,
    and none empty when splits <= k_blocks."""
    bounds = [(s * k_blocks // splits, (s * k_blocks + k_blocks) // splits) for s in range(splits)]
    assert bounds[0][0] == 0 and bounds[-1][1] == k_blocks
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    if splits <= k_blocks:
        assert all(hi > lo for lo, hi in bounds)


def _kernel_configs():
    """Every kernel the model can choose on a 227 KB device, both out types, split or not; the layouts
    and f16 on the widest tiles (they change loads, not registers)."""
    for tile_m, tile_n in TILE_RATE:
        cuts_k = tile_m <= 128                  # a 256-row tile runs whole
        for split in (False, True)[:1 + cuts_k]:
            for out in ("bf16", "f32"):
                yield kernel.Config(out_dtype=out, tile_m=tile_m, tile_n=tile_n,
                                    stages=max_stages(tile_m, tile_n, SMEM), split_k=split)
        if cuts_k:
            yield kernel.Config(tile_m=tile_m, tile_n=tile_n, stages=max_stages(tile_m, tile_n, SMEM), stream_k=True)
    for tile_n in (256, 192):
        yield kernel.Config(b_layout="kn", dtype="f16", out_dtype="f16", tile_n=tile_n,
                            stages=max_stages(128, tile_n, SMEM), split_k=True)
    for tile_m, tile_n in TILE_RATE:        # the direct epilogue the probe measures
        for split, out in ((False, "bf16"), (True, "f32"))[:1 + (tile_m <= 128)]:
            yield kernel.Config(out_dtype=out, tile_m=tile_m, tile_n=tile_n, split_k=split, epilogue="direct",
                                stages=max_stages(tile_m, tile_n, SMEM, "direct"))
    for tile_m in (128, 64):                 # swapped: M as a narrow tile, stored transposed
        for tile_n in range(16, SWAP_MAX_M + 1, 16):
            for split in (False, True):
                yield kernel.Config(tile_m=tile_m, tile_n=tile_n, split_k=split, epilogue="direct", transpose_c=True,
                                    stages=max_stages(tile_m, tile_n, SMEM, "direct"))


# A kernel whose consumers take the producer's registers (setmaxnreg; a 256-row tile's 160 accumulators)
# is assembled by the driver on the device, where setmaxnreg holds (CompiledKernel.jit): offline, ptxas
# ignores it and spills. The GPU tests run those.
KERNELS = [cfg for cfg in _kernel_configs() if not cfg.rebalance]


@pytest.mark.parametrize("cfg", KERNELS, ids=[kernel.build(c).name for c in KERNELS])
def test_every_schedulable_kernel_assembles_without_spills(cfg):
    k = kernel.build(cfg)
    res = assemble(k.render(), "sm_90a").resources
    assert res.spills == 0 and res.stack_bytes == 0, (k.name, res)
    assert res.shared_bytes + cfg.smem_bytes <= SMEM + 1024 * 4, (k.name, res)


@given(n=st.sampled_from([2048, 4096, 8192, 16384]), world=st.sampled_from([2, 4, 8]),
       sms=st.sampled_from([132, 66, 32]))
def test_all_reduce_comm_sms_model(n, world, sms):
    """Legal (1 .. half the SMs), and a small share once the GEMM dwarfs the bytes to reduce (the GEMM
    grows as N³/W, the bytes as N²)."""
    c = all_reduce_comm_sms(n, n, n // world, 2, world, sms, (128, 256))
    assert 1 <= c <= sms // 2
    if n == 16384:
        assert c <= sms // 8


def test_all_reduce_at_world_one_needs_no_communicators():
    assert all_reduce_comm_sms(4096, 4096, 4096, 2, 1, 132, (128, 256)) == 0


@pytest.mark.parametrize("tile_m, tile_n", [(64, 256), (64, 128), (128, 192), (128, 128)])
def test_max_stages_counts_both_ping_pong_staging_buffers(tile_m, tile_n):
    """The stages max_stages allows for a ping-pong schedule fit beside two warpgroups' staging, one more
    does not."""
    stages = max_stages(tile_m, tile_n, SMEM, pingpong=True)
    cfg = GemmConfig(tile_m, tile_n, stages, pingpong=True)
    assert check_config(cfg, 256, 256, 128, "bf16", "bf16", "nk").smem_bytes <= SMEM
    if stages < 8:
        with pytest.raises(GemmArgumentError, match="227 KB"):
            check_config(GemmConfig(tile_m, tile_n, stages + 1, pingpong=True), 256, 256, 128, "bf16", "bf16", "nk")


def test_k_light_problems_take_the_ping_pong_schedule():
    """Where a tile's K loop is short, the epilogue the cooperative kernel waits for weighs most: the
    ping-pong schedule hides it (H100, bench/RESULTS.md 2026-12-06: 186.6 vs 197.6 us)."""
    assert plan(8192, 8192, 1024, "bf16", sm_count=H200, smem_limit=SMEM) == GemmConfig(128, 192, 4, pingpong=True)


def test_a_tile_width_that_fits_the_waves():
    """3000x5000x2000: 128 x 256 tiles leave the 4th wave 64 % full (480 on 132 SMs); 256 x 152 tiles fill
    exactly 3 waves (396), as cuBLAS's 256 x 152 kernel does: 98.1 us against 128 x 240's 102.1 on the H100
    (bench/RESULTS.md 2026-12-07 22:00), C's last 24 columns of each tile stored from registers."""
    assert plan(3000, 5000, 2000, "bf16", sm_count=H200, smem_limit=SMEM, k_major_b=True) == GemmConfig(256, 152, 3)
    assert fitted_width(3000, 5000, 128, H200) == 232


@given(rows=st.integers(1, 20000), cols=st.integers(1, 20000), tile_m=st.sampled_from(sorted(FITTED_WIDTHS)),
       sms=st.sampled_from([132, 114, 66, 7]))
def test_fitted_width_costs_the_busiest_block_least(rows, cols, tile_m, sms):
    """No legal width of the range costs the busiest block less (waves x width / its share); a wider one
    that costs as little is not passed over; the kernel takes the width."""
    def busiest(w):
        return -(-tiles_of(rows, cols, tile_m, w) // sms) * w / tile_rate(tile_m, w)
    width = fitted_width(rows, cols, tile_m, sms)
    narrowest, widest = FITTED_WIDTHS[tile_m]
    assert narrowest <= width <= widest and width % 8 == 0
    assert all(busiest(width) < busiest(w) or (busiest(width) == busiest(w) and w < width)
               for w in range(narrowest, widest + 1, 8) if w != width)
    kernel.Config(tile_m=tile_m, tile_n=width, stages=max_stages(tile_m, width, SMEM))


@given(tile_m=st.sampled_from(sorted(FITTED_WIDTHS)), step=st.integers(0, 16), fp8=st.booleans())
def test_a_width_between_measured_ones_takes_a_share_between_theirs(tile_m, step, fp8):
    narrowest, widest = FITTED_WIDTHS[tile_m]
    width = min(widest, narrowest + 8 * step)
    dtype = "e4m3" if fp8 else "bf16"
    measured = sorted(w for h, w in TILE_RATE if h == tile_m)
    below, above = max(w for w in measured if w <= width), min(w for w in measured if w >= width)
    lo, hi = sorted((tile_rate(tile_m, below, dtype), tile_rate(tile_m, above, dtype)))
    assert lo <= tile_rate(tile_m, width, dtype) <= hi


def test_drawn_is_the_plain_gemms():
    """A composing kernel draws its tasks through its own counters: a drawn GEMM config there is refused,
    not silently run at a fixed stride."""
    from pkptx.errors import PTXBuildError
    from pkptx.templates.kernels import gemm_ar
    with pytest.raises(PTXBuildError, match="drawn is the plain GEMM's"):
        gemm_ar.build(gemm_ar.Config(kernel.Config(drawn=True)))


@pytest.mark.parametrize("cfg, maps", [(kernel.Config(), ("tmap_a", "tmap_b", "tmap_c")),
                                       (kernel.Config(tile_m=64, tile_n=64, stages=8, epilogue="direct"),
                                        ("tmap_a", "tmap_b")),
                                       (kernel.Config(split_k=True), ("tmap_a", "tmap_b", "tmap_c"))])
def test_tensor_maps_are_prefetched_before_the_barrier_setup(cfg, maps):
    """Thread 0 asks for every tensor map the kernel loads or stores through before it initialises the stage
    barriers, so the descriptor fetches overlap that setup rather than the first load or the last store."""
    ptx = kernel.build(cfg).render()
    first_init = ptx.index("mbarrier.init")
    prefetched = [line.split("[")[1].split("_generic")[0] for line in ptx[:first_init].splitlines()
                  if "prefetch.tensormap" in line]
    assert prefetched == [f"%{name}" for name in maps]
    assert "prefetch.tensormap" not in ptx[first_init:]
