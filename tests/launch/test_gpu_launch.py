"""Launches on a real GPU against numpy references: random sizes and dtypes, fresh data every example,
outputs poisoned (NaN or 0x5A bytes) before the run so a kernel that writes nothing cannot pass."""
from __future__ import annotations

import gc

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pkptx.errors import LaunchError
from pkptx.launch import (CachingPool, DeviceArray, DriverPool, LoadedKernel, LaunchConfig, Stream, capture, empty,
                          from_numpy, launch, time_cuda)
from tests.launch import kernels as K

pytestmark = pytest.mark.gpu
GPU_SETTINGS = settings(max_examples=20, deadline=None)
FLOATS = ("float32", "float64", "float16", "bfloat16")


@pytest.fixture(scope="module")
def kernels(gpu):
    out = {f"axpy_{d}": LoadedKernel.load(K.axpy(d).compile(), gpu) for d in (*FLOATS, "int32")}
    out.update({f"vec4_{d}": LoadedKernel.load(K.vec4_add(d).compile(), gpu) for d in ("float32", "int32")})
    out["block_sum"] = LoadedKernel.load(K.block_sum().compile(), gpu)
    out["cluster_ids"] = LoadedKernel.load(K.cluster_ids().compile(), gpu)      # .reqntid 128: the block is exact
    return out


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def random_host(rng, n, dtype):
    if dtype in ("int32",):
        return rng.integers(-1000, 1000, n).astype(np.int32)
    return rng.uniform(-1, 1, n).astype(np.dtype(dtype))


def poisoned(shape, dtype, stream=None) -> DeviceArray:
    out = empty(shape, dtype, stream=stream)
    return out.fill(float("nan") if dtype in FLOATS else 0x5A5A5A5A, stream)


def assert_close(got, ref, scale, dtype):
    """|got - ref| <= 2 eps * scale + smallest subnormal, with scale the sum of |terms| (the f64
    reference rounds twice where the kernel's fma rounds once)."""
    if dtype == "int32":
        np.testing.assert_array_equal(got, ref.astype(np.int32))
        return
    info = ml_dtypes.finfo(np.dtype(dtype))
    got64 = got.astype(np.float64)
    bound = 2 * float(info.eps) * scale + float(info.smallest_subnormal)
    bad = ~(np.abs(got64 - ref) <= bound)
    assert not bad.any(), f"{bad.sum()} of {bad.size} wrong, first at {np.argmax(bad)}: {got64[bad][:4]} vs {ref[bad][:4]}"


@GPU_SETTINGS
@given(n=st.integers(1, 200_000), dtype=st.sampled_from((*FLOATS, "int32")), block=st.sampled_from([32, 96, 256, 1024]),
       seed=st.integers(0, 2**32 - 1))
def test_axpy(kernels, n, dtype, block, seed):
    rng = np.random.default_rng(seed)
    x, y = random_host(rng, n, dtype), random_host(rng, n, dtype)
    a = int(rng.integers(-5, 5)) if dtype == "int32" else float(np.float32(rng.uniform(-2, 2)))
    out = poisoned(n, dtype)
    kernels[f"axpy_{dtype}"][cdiv(n, block), block](out, from_numpy(x), from_numpy(y), a, n)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    assert_close(out.to_numpy(), a * x64 + y64, np.abs(a * x64) + np.abs(y64), dtype)


@GPU_SETTINGS
@given(n=st.integers(1, 100_000), dtype=st.sampled_from(["float32", "int32"]), block=st.sampled_from([64, 128, 512]),
       seed=st.integers(0, 2**32 - 1))
def test_vec4_loads(kernels, n, dtype, block, seed):
    rng = np.random.default_rng(seed)
    x, y = random_host(rng, n, dtype), random_host(rng, n, dtype)
    out = poisoned(n, dtype)
    stream = Stream()
    threads = cdiv(n, 4)                         # one 16-byte vector (or the tail) per thread
    kernels[f"vec4_{dtype}"][cdiv(threads, block), block](out, from_numpy(x, stream), from_numpy(y, stream), n,
                                                          stream=stream)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    assert_close(out.to_numpy(stream), x64 + y64, np.abs(x64) + np.abs(y64), dtype)


@GPU_SETTINGS
@given(n=st.integers(1, 300_000), log_block=st.integers(5, 10), extra_smem=st.sampled_from([0, 100 * 1024]),
       seed=st.integers(0, 2**32 - 1))
def test_shared_memory_reduction(kernels, n, log_block, extra_smem, seed):
    block = 1 << log_block
    blocks = cdiv(n, block)
    x = np.random.default_rng(seed).uniform(-1, 1, n).astype(np.float32)
    out = poisoned(blocks, "float32")
    smem = max(block * 4, extra_smem)            # > 48 KB exercises the opt-in attribute
    kernels["block_sum"][blocks, block, smem](out, from_numpy(x), n)
    padded = np.zeros(blocks * block)
    padded[:n] = x
    parts = padded.reshape(blocks, block)
    scale = log_block * np.abs(parts).sum(axis=1)
    assert_close(out.to_numpy(), parts.sum(axis=1), scale, "float32")


@pytest.mark.parametrize("cluster", [1, 2, 4, 8])
def test_cluster_launch(kernels, cluster):
    blocks = cluster * 6
    out = poisoned(blocks * 3, "int32")
    launch(None, LaunchConfig(blocks, 128, cluster=cluster), kernels["cluster_ids"], out)
    ids = out.to_numpy().reshape(blocks, 3)
    b = np.arange(blocks)
    np.testing.assert_array_equal(ids, np.stack([b % cluster, np.full(blocks, cluster), b // cluster], axis=1))


def test_invalid_configs_fail_before_the_driver(kernels):
    out = empty(3 * 16, "int32")
    with pytest.raises(LaunchError, match=r"expected exactly \(128, 1, 1\), the block the kernel is written for"):
        kernels["cluster_ids"][16, 64](out)
    with pytest.raises(LaunchError, match="grid.x=6 is not a multiple of cluster.x=4"):
        kernels["cluster_ids"].launch(LaunchConfig(6, 128, cluster=4), out)
    with pytest.raises(LaunchError, match="dynamic_smem=.*expected at most"):
        kernels["block_sum"][1, 32, 10 ** 6](out, out, 1)
    with pytest.raises(LaunchError, match=r"argument 2 'n' \(\.u32\) got -1"):
        kernels["block_sum"][1, 32, 128](out, out, -1)


def test_launch_compiled_kernel_directly(gpu):
    compiled = K.axpy("float32").compile()
    x = np.arange(1000, dtype=np.float32)
    out = poisoned(1000, "float32")
    launch(None, LaunchConfig(4, 256), compiled, out, from_numpy(x), from_numpy(x), 2.0, 1000)
    np.testing.assert_array_equal(out.to_numpy(), 3 * x)


def test_graph_capture_and_replay(kernels):
    stream = Stream()
    n = 4096
    x = from_numpy(np.ones(n, np.float32), stream)
    y = from_numpy(np.zeros(n, np.float32), stream)
    k = kernels["axpy_float32"][n // 256, 256]
    stream.synchronize()
    with capture(stream) as cap:
        k(y, x, y, 1.0, n, stream=stream)        # y += x, twice per replay
        k(y, x, y, 1.0, n, stream=stream)
    np.testing.assert_array_equal(y.to_numpy(stream), 0)    # capture runs nothing
    cap.graph.replay(5, stream)
    np.testing.assert_array_equal(y.to_numpy(stream), 10)


def test_capture_100_launches_on_a_non_blocking_stream(kernels):
    """The issue #20 case: 100 launches captured on Stream(non_blocking=True), replayed 3 times; an
    array freed during the capture must not invalidate it (its free waits for the capture's end)."""
    stream = Stream(non_blocking=True)
    n = 4096
    x = from_numpy(np.ones(n, np.float32), stream)
    y = from_numpy(np.zeros(n, np.float32), stream)
    doomed = from_numpy(np.ones(n, np.float32), stream)
    k = kernels["axpy_float32"][n // 256, 256]
    k(y, x, y, 1.0, n, stream=stream)                    # eager first: the native config exists
    stream.synchronize()
    with capture(stream) as cap:
        del doomed                                       # cuMemFreeAsync here would break the capture
        gc.collect()
        for _ in range(100):
            k(y, x, y, 1.0, n, stream=stream)
    np.testing.assert_array_equal(y.to_numpy(stream), 1)
    cap.graph.replay(3, stream)
    np.testing.assert_array_equal(y.to_numpy(stream), 301)


def test_capture_refuses_the_default_stream(gpu):
    with pytest.raises(LaunchError, match="default stream cannot be captured"):
        with capture(None):
            pass


def test_timing_is_positive(kernels):
    n = 1 << 20
    x = from_numpy(np.ones(n, np.float32))
    stream = Stream()
    k = kernels["axpy_float32"][n // 256, 256]
    timing = time_cuda(lambda: k(x, x, x, 1.0, n, stream=stream), stream=stream, repeats=5, flush_l2=True)
    assert 0 < timing.min_ms <= timing.median_ms <= timing.max_ms


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "float8_e4m3fn", "int8", "int64",
                                   "uint16", "bool"])
def test_array_round_trip_and_fill(gpu, dtype):
    rng = np.random.default_rng(0)
    host = rng.integers(0, 256, 3 * 1000 * np.dtype(dtype).itemsize, dtype=np.uint8).view(dtype).reshape(3, 1000)
    dev = from_numpy(host)
    np.testing.assert_array_equal(dev.to_numpy().view(np.uint8), host.view(np.uint8))
    value = np.array(1.5 if dtype not in ("int8", "int64", "uint16", "bool") else 3).astype(dtype)
    np.testing.assert_array_equal(dev.fill(value).to_numpy().view(np.uint8),
                                  np.full(host.shape, value, dtype).view(np.uint8))


@pytest.mark.parametrize("dtype,pattern", [("float32", 0x3F800000), ("bfloat16", 0x7FC0), ("float64", -1),
                                           ("float64", 0x0123456789ABCDEF), ("uint8", 0xA5), ("int16", -2),
                                           ("complex64", 0x3F800000_00000000), ("float8_e4m3fn", 0x7F)])
@pytest.mark.parametrize("offset_elements", [0, 1])
def test_fill_bits_on_the_device(gpu, dtype, pattern, offset_elements):
    """Memset paths (periodic patterns) and the copy path (others), at aligned and shifted addresses."""
    itemsize = np.dtype(dtype).itemsize
    base = from_numpy(np.zeros(1001 * itemsize, np.uint8))
    view = DeviceArray.from_pointer(base.ptr + offset_elements * itemsize, (1000,), dtype, owner=base, device=gpu)
    view.fill_bits(pattern)
    got = base.to_numpy()
    element = (pattern & ((1 << (8 * itemsize)) - 1)).to_bytes(itemsize, "little")
    shifted = offset_elements * itemsize
    assert got[shifted:shifted + 1000 * itemsize].tobytes() == element * 1000
    assert not got[:shifted].any() and not got[shifted + 1000 * itemsize:].any()


@pytest.mark.parametrize("pool_cls", [DriverPool, CachingPool])
def test_pools_allocate_and_reuse(gpu, pool_cls):
    pool, stream = pool_cls(gpu), Stream()
    ptrs = []
    for _ in range(3):
        ptr = pool.allocate(1 << 20, stream.cu)
        DeviceArray.from_pointer(ptr, (1 << 18,), "float32", device=gpu).fill(1.0, stream)
        pool.free(ptr, 1 << 20, stream.cu)
        ptrs.append(ptr)
    stream.synchronize()
    if pool_cls is CachingPool:
        assert len(set(ptrs)) == 1, ptrs       # freed on the stream, handed out again on it


def test_empty_frees_back_to_the_pool(gpu):
    from pkptx.launch.driver import call
    gpu.synchronize()
    free_before = call("cuMemGetInfo")[0]
    for _ in range(200):
        empty(1 << 24, "uint8")               # 16 MiB each: would be 3.2 GB if never freed
    gc.collect()
    gpu.synchronize()
    assert call("cuMemGetInfo")[0] > free_before - (1 << 30)
