"""pkptx.gemm on the GPU against a float64 numpy reference, over hypothesis-chosen shapes and layouts;
and the cubin's machine code: HGMMA and UTMALDG present, no local-memory spills."""
from __future__ import annotations

import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pkptx.ops.gemm import GemmArgumentError, check_shapes, gemm
from pkptx.templates.kernels import gemm as kernel

DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32}
POISON = {"bf16": 0x7FC0, "f16": 0x7E00, "f32": 0x7FC00000}
BOUND = {"bf16": 1e-2, "f16": 2e-3, "f32": 2e-3}     # relative Frobenius error, inputs rounded to 16 bits


@st.composite
def problems(draw):
    m, n, k = (16 * draw(st.integers(1, hi)) for hi in (96, 96, 64))
    return (m, n, k, draw(st.sampled_from(["nk", "kn"])), draw(st.sampled_from(["bf16", "f16"])),
            draw(st.sampled_from(["bf16", "f16", "f32"])))


@pytest.mark.gpu
@settings(max_examples=40, deadline=None)
@given(problem=problems(), seed=st.integers(0, 2**32 - 1))
def test_gemm_matches_float64(gpu, problem, seed):
    from pkptx.launch import empty, from_numpy
    m, n, k, layout, dtype, out_dtype = problem
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k), dtype=np.float32).astype(DTYPES[dtype])
    b = rng.standard_normal((n, k) if layout == "nk" else (k, n), dtype=np.float32).astype(DTYPES[dtype])
    out = empty((m, n), DTYPES[out_dtype]).fill(POISON[out_dtype])
    gemm(from_numpy(a), from_numpy(b), out, b_layout=layout)
    got = out.to_numpy().astype(np.float64)
    ref = kernel.reference(a, b, layout)
    assert not np.isnan(got).any(), "unwritten (poisoned) outputs remain"
    err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    assert err < BOUND[out_dtype], err


def _disassembler():
    for tool, args in (("cuobjdump", ["--dump-sass"]), ("nvdisasm", ["-c"])):
        path = shutil.which(tool)
        if path:
            return [path, *args]
    return None


@pytest.mark.parametrize("cfg", [kernel.Config(), kernel.Config(b_layout="kn"), kernel.Config(out_dtype="f32")],
                         ids=["nk", "kn", "f32"])
def test_sass_uses_tensor_cores_and_tma_without_spills(cfg, tmp_path):
    tool = _disassembler()
    if tool is None:
        pytest.skip("needs cuobjdump or nvdisasm (CUDA toolkit) to read the machine code")
    compiled = kernel.build(cfg).compile()
    assert compiled.resources.spills == 0 and compiled.resources.stack_bytes == 0, compiled.resources
    cubin = tmp_path / "gemm.cubin"
    cubin.write_bytes(compiled.cubin.data)
    sass = subprocess.run([*tool, str(cubin)], capture_output=True, text=True, check=True).stdout
    assert "HGMMA.64x256x16.F32" in sass
    assert "UTMALDG" in sass and "UTMASTG" in sass
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
    with pytest.raises(GemmArgumentError, match="must both be bfloat16 or both float16"):
        check_shapes((64, 32), "bfloat16", (64, 32), "float16")
