"""DLPack round trips with torch, CuPy and JAX on a GPU: zero-copy (same device pointer) and exact,
with the producer kept alive by the consumer."""
from __future__ import annotations

import gc
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pkptx.launch import LoadedKernel, from_dlpack, from_numpy
from tests.launch import kernels as K

pytestmark = pytest.mark.gpu
shapes = st.lists(st.integers(1, 64), min_size=1, max_size=3).map(tuple)


def host_data(shape, dtype, seed=0):
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).view(dtype).reshape(shape)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.fixture(scope="module")
def torch(gpu):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU for torch: torch.cuda.is_available() is False")
    return torch


@pytest.fixture(scope="module")
def cupy(gpu):
    return pytest.importorskip("cupy")


@pytest.fixture(scope="module")
def jax(gpu):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")   # leave the GPU to the others
    jax = pytest.importorskip("jax")
    try:
        device = jax.devices("gpu")[0]
    except RuntimeError as exc:
        pytest.skip(f"no CUDA GPU for jax: {exc}")
    return jax, device


TORCH_DTYPES = ["float32", "float16", "bfloat16", "int64", "uint8", "float8_e4m3fn"]   # same names in torch


def torch_to_numpy(torch, t, dtype):
    """Host copy of a torch tensor through a same-width integer view (torch.numpy() lacks bf16/fp8)."""
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[np.dtype(dtype).itemsize]
    return t.view(ints).cpu().numpy().view(dtype)


@settings(max_examples=20, deadline=None)
@given(shape=shapes, dtype=st.sampled_from(TORCH_DTYPES), seed=st.integers(0, 1000))
def test_torch_round_trip(torch, shape, dtype, seed):
    host = host_data(shape, dtype, seed)
    ours = from_numpy(host)
    t = torch.from_dlpack(ours)                              # pkptx -> torch
    assert t.data_ptr() == ours.ptr and tuple(t.shape) == shape
    assert t.dtype == getattr(torch, dtype)
    back = from_dlpack(t)                                     # torch -> pkptx
    assert back.ptr == ours.ptr
    assert same_bits(back.to_numpy(), host) and same_bits(torch_to_numpy(torch, t, dtype), host)


def test_torch_strided_view_and_lifetime(torch):
    t = torch.arange(600, dtype=torch.float32, device="cuda").reshape(20, 30)
    view = t[2:, ::3]
    arr = from_dlpack(view)
    assert arr.ptr == view.data_ptr() and arr.strides == (30, 3) and arr.shape == (18, 10)
    expected = view.cpu().numpy()
    del t, view
    gc.collect()
    torch.cuda.empty_cache()
    np.testing.assert_array_equal(arr.to_numpy(), expected)   # the producer is still alive


def test_exported_array_outlives_the_pkptx_handle(torch):
    host = np.arange(1000, dtype=np.float32)
    ours = from_numpy(host)
    t = torch.from_dlpack(ours)
    del ours
    gc.collect()
    t.add_(1)
    np.testing.assert_array_equal(t.cpu().numpy(), host + 1)


def test_kernel_takes_torch_tensors(torch, gpu):
    k = LoadedKernel.load(K.axpy("float32").compile(), gpu)
    x = torch.rand(5000, device="cuda")
    y = torch.rand(5000, device="cuda")
    out = torch.full((5000,), float("nan"), device="cuda")
    torch.cuda.synchronize()
    k[20, 256](out, x, y, 3.0, 5000)                          # pointers read from the tensors
    x64, y64 = x.cpu().numpy().astype(np.float64), y.cpu().numpy().astype(np.float64)
    np.testing.assert_allclose(out.cpu().numpy(), 3.0 * x64 + y64, rtol=2.4e-7)   # one f32 rounding


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "uint8", "float16", "complex64"])
def test_cupy_round_trip(cupy, dtype):
    host = host_data((7, 33), dtype)
    ours = from_numpy(host)
    c = cupy.from_dlpack(ours)
    assert c.data.ptr == ours.ptr
    assert same_bits(cupy.asnumpy(c), host)
    theirs = cupy.asarray(host)
    arr = from_dlpack(theirs)
    assert arr.ptr == theirs.data.ptr and same_bits(arr.to_numpy(), host)
    strided = theirs[::2, 1::4]
    view = from_dlpack(strided)
    assert view.ptr == strided.data.ptr and same_bits(view.to_numpy(), cupy.asnumpy(strided))


@pytest.mark.parametrize("dtype", ["float32", "int32", "bfloat16", "float16"])
def test_jax_round_trip(jax, dtype):
    jax_mod, device = jax
    host = host_data((16, 24), dtype)
    ours = from_numpy(host)
    j = jax_mod.dlpack.from_dlpack(ours)
    assert j.unsafe_buffer_pointer() == ours.ptr
    assert same_bits(np.asarray(j), host)
    theirs = jax_mod.device_put(host, device)
    arr = from_dlpack(theirs)
    assert arr.ptr == theirs.unsafe_buffer_pointer() and same_bits(arr.to_numpy(), host)
