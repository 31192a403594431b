"""pkptx.gemm on the GPU against a float64 numpy reference, over hypothesis-chosen shapes (tails in M
and N, K a multiple of 16 only), layouts, dtypes and schedules (the model's, or any candidate it weighs,
split-K and 64-row tiles included); fp8 inputs with per-tensor scales likewise; split-K giving the same
bits twice; and the cubin's machine code: HGMMA (QGMMA for fp8) and UTMALDG present, no local-memory
spills."""
from __future__ import annotations

import re
import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pkptx.ops.gemm import GemmArgumentError, GemmConfig, check_shapes, gemm
from pkptx.ops.gemm_plan import TILE_RATE, candidates
from pkptx.templates.kernels import gemm as kernel

DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32,
          "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
POISON = {"bf16": 0x7FC0, "f16": 0x7E00, "f32": 0x7FC00000}
BOUND = {"bf16": 1e-2, "f16": 2e-3, "f32": 2e-3}     # relative Frobenius error, inputs rounded to 16 bits
FP8_BOUND = {"bf16": 1e-2, "f16": 4e-3, "f32": 4e-3}  # fp8 inputs exact in the reference; the tensor cores'
                                                      # fp8 accumulation keeps fewer mantissa bits than f32


@st.composite
def problems(draw):
    m = draw(st.one_of(st.integers(1, 64), st.integers(1, 1024)))        # few rows: the swapped schedules too
    n, k = 8 * draw(st.integers(1, 128)), 16 * draw(st.integers(1, 160))
    return (m, n, k, draw(st.sampled_from(["nk", "kn"])), draw(st.sampled_from(["bf16", "f16"])),
            draw(st.sampled_from(["bf16", "f16", "f32"])))


@st.composite
def schedules(draw, m, n, k, layout, sms):
    """None (the model's choice) or any schedule the model weighs for this shape, split-K included."""
    options = candidates(m, n, k, sm_count=sms, smem_limit=227 * 1024, shapes=tuple(TILE_RATE),
                         epilogues=("tma", "direct"), k_major_b=layout == "nk")
    split = [c for c in options if c.splits > 1]
    return draw(st.one_of(st.none(), st.sampled_from(options), *([st.sampled_from(split)] if split else [])))


def _run(problem, seed, config, scales=None):
    """(a, b, C) of one gemm on fresh random inputs and a poisoned C; ``scales``: fp8's (scale_a,
    scale_b) as floats (None: the op's default of 1)."""
    from pkptx.launch import empty, from_numpy
    m, n, k, layout, dtype, out_dtype = problem
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k), dtype=np.float32).astype(DTYPES[dtype])
    b = rng.standard_normal((n, k) if layout == "nk" else (k, n), dtype=np.float32).astype(DTYPES[dtype])
    out = empty((m, n), DTYPES[out_dtype]).fill_bits(POISON[out_dtype])
    given = {} if scales is None else {name: from_numpy(np.array([value], np.float32))
                                       for name, value in zip(("scale_a", "scale_b"), scales)}
    gemm(from_numpy(a), from_numpy(b), out, b_layout=layout, config=config, **given)
    return a, b, out.to_numpy()


def _fp8_error(problem, seed, config, scales):
    """Relative Frobenius error of an fp8 gemm against scale_a · scale_b · A·Bᵀ in float64, after checking
    that no poisoned output is left."""
    a, b, got = _run(problem, seed, config, scales)
    got = got.astype(np.float64)
    assert not np.isnan(got).any(), f"{np.isnan(got).sum()} unwritten (poisoned) outputs remain"
    ref = kernel.reference(a, b) * (1.0 if scales is None else float(np.float32(scales[0]) * np.float32(scales[1])))
    return np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)


@st.composite
def fp8_problems(draw):
    m = draw(st.one_of(st.integers(1, 64), st.integers(1, 1024)))
    n, k = 8 * draw(st.integers(1, 128)), 16 * draw(st.integers(1, 200))
    return (m, n, k, "nk", draw(st.sampled_from(["e4m3", "e5m2"])), draw(st.sampled_from(["bf16", "f16", "f32"])))


@pytest.mark.gpu
@settings(max_examples=15, deadline=None)
@given(problem=fp8_problems(), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_fp8_gemm_matches_float64(gpu, problem, seed, data):
    """fp8 A and B with per-tensor scales (or none: 1) under the model's schedule or any it weighs."""
    from pkptx.launch.occupancy import context_sm_count
    m, n, k, _, dtype, out_dtype = problem
    options = candidates(m, n, k, sm_count=context_sm_count(gpu), smem_limit=227 * 1024, shapes=tuple(TILE_RATE),
                         epilogues=("tma", "direct"), k_major_b=True, dtype=dtype)
    config = data.draw(st.one_of(st.none(), st.sampled_from(options)), label="config")
    scales = data.draw(st.one_of(st.none(), st.tuples(st.floats(0.01, 4.0), st.floats(0.01, 4.0))), label="scales")
    err = _fp8_error(problem, seed, config, scales)
    assert err < FP8_BOUND[out_dtype], (err, config)


@pytest.mark.gpu
@pytest.mark.parametrize("problem, config", [
    ((1000, 1000, 4000, "nk", "e4m3", "bf16"), None),
    ((128, 4096, 8192, "nk", "e4m3", "bf16"), GemmConfig(128, 256, 4, 4)),
    ((100, 3000, 8192, "nk", "e5m2", "f32"), GemmConfig(64, 64, 8, 4, k_split=2)),
    ((16, 2048, 16384, "nk", "e4m3", "bf16"), GemmConfig(64, 16, 12, 2, epilogue="direct", swap=True, k_split=4)),
    ((777, 1288, 4096, "nk", "e4m3", "f16"), GemmConfig(128, 192, 4, pingpong=True)),
    ((3000, 5000, 2000, "nk", "e4m3", "bf16"), GemmConfig(128, 240, 4, stream_k=True)),
    ((3000, 5000, 2000, "nk", "e4m3", "bf16"), GemmConfig(256, 152, 3)),
])
def test_fp8_schedules_same_bits_twice_and_close(gpu, problem, config):
    """fp8 on split-K, k-split, swapped, ping-pong and stream-K schedules: the same bits twice, float64-close."""
    scales = (0.37, 2.5)
    first, second = (_run(problem, 4, config, scales)[2] for _ in range(2))
    assert first.tobytes() == second.tobytes()
    assert _fp8_error(problem, 4, config, scales) < FP8_BOUND[problem[5]]


@pytest.mark.gpu
@settings(max_examples=20, deadline=None)
@given(problem=problems(), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_gemm_matches_float64(gpu, problem, seed, data):
    from pkptx.launch.occupancy import context_sm_count
    m, n, k, layout, dtype, out_dtype = problem
    config = data.draw(schedules(m, n, k, layout, context_sm_count(gpu)), label="config")
    a, b, got = _run(problem, seed, config)
    got = got.astype(np.float64)
    ref = kernel.reference(a, b, layout)
    assert not np.isnan(got).any(), "unwritten (poisoned) outputs remain"
    err = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)
    assert err < BOUND[out_dtype], (err, config)


@pytest.mark.gpu
@pytest.mark.parametrize("problem, config", [
    ((128, 4096, 8192, "nk", "bf16", "bf16"), GemmConfig(128, 256, 4, 4)),
    ((16, 2048, 16384, "kn", "bf16", "f32"), GemmConfig(64, 256, 5, 16)),
    ((1000, 1000, 4000, "nk", "f16", "f16"), GemmConfig(128, 192, 4, 3)),
    ((1000, 1000, 4000, "nk", "bf16", "f32"), GemmConfig(128, 128, 7, 4, epilogue="direct")),
    ((128, 4096, 8192, "nk", "bf16", "bf16"), None),
    ((16, 2048, 16384, "nk", "bf16", "f32"), GemmConfig(128, 16, 12, 8, epilogue="direct", swap=True)),
    ((37, 1000, 4000, "nk", "f16", "bf16"), GemmConfig(64, 48, 8, 3, epilogue="direct", swap=True)),
    ((100, 3000, 8192, "nk", "bf16", "f32"), GemmConfig(64, 64, 8, 4, k_split=2)),
    ((16, 2048, 16384, "nk", "bf16", "bf16"), GemmConfig(64, 16, 12, 2, epilogue="direct", swap=True, k_split=4)),
    ((3000, 5000, 2000, "nk", "bf16", "bf16"), GemmConfig(128, 256, 4, stream_k=True)),
    ((2560, 2560, 8192, "nk", "f16", "f32"), GemmConfig(128, 224, 4, stream_k=True)),
    ((2000, 1000, 4000, "nk", "bf16", "bf16"), GemmConfig(64, 128, 8, k_split=2, stream_k=True)),
    ((2000, 1504, 4000, "kn", "bf16", "f16"), GemmConfig(128, 128, 7, epilogue="direct", stream_k=True)),
    ((3000, 5000, 2000, "nk", "bf16", "bf16"), GemmConfig(128, 240, 4)),
    ((777, 1288, 4096, "nk", "f16", "f32"), GemmConfig(128, 224, 4)),
    ((3000, 5000, 2000, "nk", "bf16", "bf16"), GemmConfig(256, 160, 3)),
    ((3000, 5000, 2000, "nk", "bf16", "bf16"), GemmConfig(256, 152, 3)),
    ((777, 1304, 4096, "nk", "bf16", "f32"), GemmConfig(128, 200, 4)),
    ((777, 1288, 4096, "kn", "f16", "f32"), GemmConfig(256, 128, 4, epilogue="direct")),
])
def test_split_k_same_bits_twice_and_close(gpu, problem, config):
    """Deterministic: the same bits on a second run, whichever slice arrives last each time; and the
    counters left at 0 (a second run that read stale tickets would lose or double partials). Also
    stream-K (whole waves, then the last wave's tiles cut into k-runs), the tile widths whose last
    columns the TMA epilogue stores from registers, and 256-row tiles."""
    a, b, first = _run(problem, 1, config)
    _, _, second = _run(problem, 1, config)
    assert first.tobytes() == second.tobytes()
    ref = kernel.reference(a, b, problem[3])
    err = np.linalg.norm(first.astype(np.float64) - ref) / np.linalg.norm(ref)
    assert err < BOUND[problem[5]], err


@pytest.mark.gpu
@pytest.mark.parametrize("problem, config", [
    ((1000, 1000, 4000, "nk", "bf16", "bf16"), GemmConfig(128, 192, 4, pingpong=True)),
    ((777, 1288, 4096, "kn", "f16", "f32"), GemmConfig(128, 128, 6, pingpong=True)),
    ((3000, 504, 2000, "nk", "bf16", "f16"), GemmConfig(64, 256, 4, pingpong=True)),
    ((1, 4104, 1024, "nk", "bf16", "bf16"), GemmConfig(128, 16, 12, epilogue="direct", swap=True)),
    ((45, 777 * 8, 2048, "nk", "f16", "f32"), GemmConfig(64, 48, 10, epilogue="direct", swap=True)),
    ((1000, 1000, 4000, "kn", "bf16", "bf16"), GemmConfig(64, 128, 8, k_split=2)),
    ((777, 1288, 4096, "nk", "f16", "f32"), GemmConfig(128, 64, 8, k_split=4)),
    ((9, 777 * 8, 2048, "nk", "bf16", "bf16"), GemmConfig(64, 16, 12, epilogue="direct", swap=True, k_split=2)),
])
def test_pingpong_and_swapped_match_float64(gpu, problem, config):
    """Ping-pong schedules (two warpgroups taking whole tiles in turn), swapped ones (Cᵀ = B·Aᵀ for a
    few rows, stored transposed) and k-split accumulators on tails in M and N, both B layouts, every
    output type."""
    a, b, got = _run(problem, 2, config)
    got = got.astype(np.float64)
    rows, cols = np.nonzero(np.isnan(got))
    assert not rows.size, (f"{rows.size} unwritten (poisoned) outputs remain, rows {rows.min()}-{rows.max()}, "
                           f"columns {cols.min()}-{cols.max()}")
    ref = kernel.reference(a, b, problem[3])
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < BOUND[problem[5]]


@pytest.mark.gpu
@pytest.mark.parametrize("problem, config", [
    ((1000, 1000, 4000, "nk", "bf16", "bf16"), None),
    ((2048, 2048, 16384, "nk", "bf16", "f32"), None),
    ((1000, 1000, 4000, "nk", "bf16", "bf16"), GemmConfig(128, 192, 4, pingpong=True)),
    ((100, 3000, 8192, "nk", "bf16", "bf16"), GemmConfig(64, 64, 8, 4, k_split=2)),
    ((37, 1000, 4000, "nk", "f16", "bf16"), GemmConfig(64, 48, 8, 3, epilogue="direct", swap=True)),
    ((3000, 5000, 2000, "nk", "bf16", "bf16"), GemmConfig(128, 256, 4, stream_k=True)),
])
def test_drawn_tiles_in_a_partial_context(gpu, monkeypatch, problem, config):
    """Where the context has fewer SMs than the device (an MPS share), the op launches the drawn kernel:
    every tile once (poisoned C fully written), float64-close, the same bits twice (the counter left at 0
    for the next launch on the stream)."""
    from collections import OrderedDict

    import pkptx.ops.gemm as op
    from pkptx.ops import launches
    monkeypatch.setattr(launches, "_launches", OrderedDict())     # no launch prepared for the whole device
    monkeypatch.setattr(op, "partial_context", lambda device=None: True)
    drawn, load = [], op.load
    monkeypatch.setattr(op, "load", lambda factory, cfg, device: drawn.append(cfg.drawn) or load(factory, cfg, device))
    a, b, first = _run(problem, 3, config)
    _, _, second = _run(problem, 3, config)
    assert drawn and all(drawn), "the op built the drawn kernel"
    assert first.tobytes() == second.tobytes()
    got = first.astype(np.float64)
    assert not np.isnan(got).any(), f"{np.isnan(got).sum()} unwritten (poisoned) outputs"
    ref = kernel.reference(a, b, problem[3])
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < BOUND[problem[5]]


def _disassembler():
    for tool, args in (("cuobjdump", ["--dump-sass"]), ("nvdisasm", ["-c"])):
        path = shutil.which(tool)
        if path:
            return [path, *args]
    return None


@pytest.mark.parametrize("cfg", [kernel.Config(), kernel.Config(b_layout="kn"), kernel.Config(out_dtype="f32"),
                                 kernel.Config(split_k=True), kernel.Config(tile_m=64, stages=5, split_k=True),
                                 kernel.Config(epilogue="direct"), kernel.Config(tile_n=192, pingpong=True),
                                 kernel.Config(drawn=True), kernel.Config(dtype="e4m3"),
                                 kernel.Config(dtype="e5m2", tile_n=128, stages=6, split_k=True)],
                         ids=["nk", "kn", "f32", "split", "split64", "direct", "pingpong", "drawn", "e4m3", "e5m2"])
def test_sass_uses_tensor_cores_and_tma_without_spills(cfg, tmp_path):
    tool = _disassembler()
    if tool is None:
        pytest.skip("needs cuobjdump or nvdisasm (CUDA toolkit) to read the machine code")
    compiled = kernel.build(cfg).compile()
    assert compiled.resources.spills == 0 and compiled.resources.stack_bytes == 0, compiled.resources
    cubin = tmp_path / "gemm.cubin"
    cubin.write_bytes(compiled.cubin.data)
    sass = subprocess.run([*tool, str(cubin)], capture_output=True, text=True, check=True).stdout
    mma = rf"QGMMA\.64x{cfg.tile_n}x32\.F32" if cfg.scaled else rf"HGMMA\.64x{cfg.tile_n}x16\.F32"
    assert re.search(mma, sass), mma
    assert "UTMALDG" in sass and ("UTMASTG" in sass) == (cfg.epilogue == "tma")
    assert "LDL" not in sass and "STL" not in sass


@pytest.mark.parametrize("shapes, layout, message", [
    (((64, 32), (64, 48)), "nk", "K = a.shape"),
    (((64, 40), (64, 40)), "nk", "multiple of 16"),
    (((64, 32, 1), (64, 32)), "nk", "2-D"),
    (((64, 32), (32, 64)), "tn", "b_layout"),
])
def test_bad_shapes_raise_before_gpu_work(shapes, layout, message):
    with pytest.raises(GemmArgumentError, match=message):
        check_shapes(shapes[0], "bfloat16", shapes[1], "bfloat16", b_layout=layout)


def test_mixed_dtypes_raise():
    with pytest.raises(GemmArgumentError, match="must have one dtype"):
        check_shapes((64, 32), "bfloat16", (64, 32), "float16")
    with pytest.raises(GemmArgumentError, match="must have one dtype"):
        check_shapes((64, 32), ml_dtypes.float8_e4m3fn, (64, 32), ml_dtypes.float8_e5m2)
    with pytest.raises(GemmArgumentError, match="must have one dtype"):
        check_shapes((64, 32), "int8", (64, 32), "int8")


def test_fp8_needs_k_major_b():
    with pytest.raises(GemmArgumentError, match="b_layout='nk'"):
        check_shapes((64, 32), ml_dtypes.float8_e4m3fn, (32, 64), ml_dtypes.float8_e4m3fn, b_layout="kn")


@pytest.mark.parametrize("dtype, scales, message", [
    ("bf16", {"scale_a": None, "scale_b": 2.0}, "scale_b applies to fp8 inputs only"),
    ("e4m3", {"scale_a": 1.0, "scale_b": None}, "scale_a must be a DeviceArray or a DLPack"),
])
def test_bad_scales_raise_before_gpu_work(dtype, scales, message):
    from pkptx.ops.gemm import _scales
    with pytest.raises(GemmArgumentError, match=message):
        _scales(dtype, scales["scale_a"], scales["scale_b"], device=None, stream=None)
