"""MoE kernels on the GPU against float64 numpy: grouped_gemm on uneven groups (0 and 1 rows, sizes that are
not multiples of 128, both weight layouts), and dispatch, fused dispatch+GEMM and combine at 1 to 4 ranks
(the MPI program ``programs/moe_program.py``) against a float64 reference of the MoE layer."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pkptx.templates.kernels import grouped_gemm as kernel
from tests.helpers.gpu import rank_env, sharing_cases, sharing_env
from tests.helpers.mpi import run_program_cases

DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32}
POISON = {"bf16": 0x7FC0, "f16": 0x7E00, "f32": 0x7FC00000}
BOUND = {"bf16": 1e-2, "f16": 2e-3, "f32": 2e-3}


@st.composite
def grouped_problems(draw):
    sizes = draw(st.lists(st.one_of(st.sampled_from([0, 1, 127, 128, 129]), st.integers(0, 400)), min_size=1,
                          max_size=12))
    n, k = 16 * draw(st.integers(1, 40)), 16 * draw(st.integers(1, 24))
    return (sizes, n, k, draw(st.sampled_from(["nk", "kn"])), draw(st.sampled_from(["bf16", "f16"])),
            draw(st.sampled_from(["bf16", "f32"])), draw(st.integers(0, 70)))


@pytest.mark.gpu
@settings(max_examples=12, deadline=None)
@given(problem=grouped_problems(), seed=st.integers(0, 2**32 - 1))
@example(problem=([0, 1, 0, 300, 129, 0], 256, 128, "nk", "bf16", "bf16", 0), seed=1)
@example(problem=([0, 0, 0], 64, 64, "kn", "bf16", "f32", 5), seed=2)
@example(problem=([1000], 2048, 512, "nk", "bf16", "bf16", 0), seed=3)
def test_grouped_gemm_matches_float64(gpu, problem, seed):
    from pkptx.launch import empty, from_numpy
    from pkptx.ops.moe import grouped_gemm
    sizes, n, k, layout, dtype, out_dtype, spare = problem
    rng = np.random.default_rng(seed)
    offsets = np.cumsum(sizes).astype(np.int32)
    t = int(offsets[-1]) + spare                     # rows past the last group are left alone
    if t == 0:
        return
    x = rng.standard_normal((t, k), dtype=np.float32).astype(DTYPES[dtype])
    e = len(sizes)
    w = rng.standard_normal((e, n, k) if layout == "nk" else (e, k, n), dtype=np.float32).astype(DTYPES[dtype])
    out = empty((t, n), DTYPES[out_dtype]).fill_bits(POISON[out_dtype])
    grouped_gemm(from_numpy(x), from_numpy(w), from_numpy(offsets), out=out, w_layout=layout)
    got = out.to_numpy().astype(np.float64)
    used = int(offsets[-1])
    assert np.isnan(got[used:]).all(), "rows past the last group were written"
    got, ref = got[:used], kernel.reference(x, w, offsets, layout)[:used]
    assert not np.isnan(got).any(), "unwritten (poisoned) rows remain inside the groups"
    if used:
        err = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)
        assert err < BOUND[out_dtype], err


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(8, 512, 1024, 1792), (64, 128, 896, 256), (256, 32, 896, 256)],
                         ids=["mixtral-like", "deepseek-like", "256-experts"])
def test_grouped_gemm_against_torch(gpu, shape):
    """Same numbers as torch._grouped_mm (where torch is installed), at shrunken issue shapes."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("torch has no _grouped_mm")
    from pkptx.launch import from_dlpack
    from pkptx.ops.moe import grouped_gemm
    e, rows, k, n = shape
    x = torch.randn(e * rows, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16)
    offs = torch.arange(1, e + 1, device="cuda", dtype=torch.int32) * rows
    want = torch._grouped_mm(x, w.transpose(-2, -1), offs=offs).float()
    got = torch.full((e * rows, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    grouped_gemm(from_dlpack(x), from_dlpack(w), from_dlpack(offs), out=from_dlpack(got))
    torch.cuda.synchronize()
    err = (got.float() - want).norm() / want.norm()
    assert err.item() < 1e-2, err.item()


# ------------------------------------------------------------------------------------- 1 to 4 ranks
@pytest.mark.gpu
@pytest.mark.mpi
@pytest.mark.parametrize("ranks, shares, hog", sharing_cases([1, 2, 3, 4]))
def test_moe_layer_matches_numpy(gpu, ranks, shares, hog):
    """Dispatch, fused dispatch + GEMM, and combine, as ``programs/moe_program.py`` checks them."""
    env = rank_env(PKPTX_EXAMPLES="2" if hog else "3", **sharing_env(shares, hog))
    run_program_cases(ranks, "moe_program.py", "moe", env=env, timeout=240)
