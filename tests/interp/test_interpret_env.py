"""``PKPTX_INTERPRET=1``: a user's script on the public launch API, and the host ops, on the CPU interpreter,
against numpy. The first test runs an example script in a fresh process with the variable set; the others
select the interpreter's driver in this process as the variable does (:mod:`tests.helpers.interpreted`)."""
from __future__ import annotations

import dataclasses
import functools
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import pkptx
from pkptx.errors import LaunchError, SettingError
from pkptx.interp import MemoryFault, UnsupportedError
from pkptx.isa import Kernel, Param, address, f32, u32, u64
from pkptx.launch import (DLPackError, Event, LaunchConfig, LoadedKernel, Stream, SymmetricHeap, World, capture, empty,
                          device_synchronize, from_numpy, time_cuda, time_cuda_alternating)
from pkptx.launch import driver as pkdriver

from tests.helpers.interpreted import interpreted_driver

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
DTYPES = (np.float32, np.float16, ml_dtypes.bfloat16, np.uint8, np.int64)


@pytest.fixture(scope="module", autouse=True)
def interpreter():
    with interpreted_driver() as cu:
        yield cu


def test_example_script_in_a_fresh_process():
    env = dict(os.environ, PKPTX_INTERPRET="1", PYTHONPATH=os.path.abspath(ROOT))
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "hello_ptx.py")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "scaled 1000 floats on pkptx interpreter" in out.stdout


def test_chosen_once_and_checked(monkeypatch):
    chosen = pkdriver.driver()
    monkeypatch.setenv("PKPTX_INTERPRET", "0")
    assert pkdriver.driver() is chosen and pkdriver.interpreted()
    monkeypatch.setenv("PKPTX_INTERPRET", "yes")
    monkeypatch.setattr(pkdriver, "_selected", None)
    with pytest.raises(SettingError, match="PKPTX_INTERPRET='yes'"):
        pkdriver.driver()


@functools.cache
def axpy(name: str = "axpy"):
    """y[i] = alpha * x[i] + y[i] for i < n (a mul, then an add: numpy's float32 rounding)."""
    k = Kernel(name, [Param("y", u64, pointer=True), Param("x", u64, pointer=True), ("n", u32), ("alpha", f32)],
               max_threads=256)
    b = k.builder()
    i = b.mad(u32, b.special("ctaid.x"), b.special("ntid.x"), b.special("tid.x"), mode="lo")
    with b.if_then(b.setp("lt", u32, i, b.load_param("n"))):
        off = b.mul(u32, i, 4, mode="wide")
        py, px = b.add(u64, b.load_param("y"), off), b.add(u64, b.load_param("x"), off)
        ax = b.mul(f32, b.ld(f32, address(px), space="global"), b.load_param("alpha"))
        b.st(f32, address(py), b.add(f32, ax, b.ld(f32, address(py), space="global")), space="global")
    b.ret()
    return k.compile()


@settings(max_examples=15)
@given(n=st.integers(1, 3000), block=st.sampled_from([32, 96, 256]), alpha=st.floats(-4, 4, width=32),
       seed=st.integers(0, 2**32 - 1))
def test_builder_kernel_through_the_launch_api(n, block, alpha, seed):
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((2, n), dtype=np.float32)
    stream = Stream()
    xs, ys = from_numpy(x, stream), from_numpy(y, stream)
    k = LoadedKernel.load(axpy())
    grid = -(-n // block)
    k[grid, block](ys, xs, n, alpha, stream=stream)
    once = y + np.float32(alpha) * x
    k.prepare(LaunchConfig(grid, block), ys, xs, n, alpha).launch(stream)
    stream.synchronize()
    assert np.array_equal(ys.to_numpy(stream), once + np.float32(alpha) * x)


@settings(max_examples=25)
@given(shape=st.lists(st.integers(1, 17), min_size=1, max_size=3).map(tuple), dtype=st.sampled_from(DTYPES),
       value=st.integers(0, 100), seed=st.integers(0, 2**32 - 1))
def test_arrays_copy_and_fill(shape, dtype, value, seed):
    host = np.random.default_rng(seed).integers(0, 256, size=np.prod(shape) * np.dtype(dtype).itemsize,
                                                dtype=np.uint8).view(dtype).reshape(shape)
    dev = from_numpy(host)
    assert np.array_equal(dev.to_numpy().view(np.uint8), host.view(np.uint8))
    fresh = empty(shape, dtype)
    assert (fresh.to_numpy().view(np.uint8) == 0xFF).all()          # never written: the NaN poison
    assert np.array_equal(fresh.copy_from_numpy(host).to_numpy().view(np.uint8), host.view(np.uint8))
    assert np.array_equal(dev.fill(value).to_numpy(), np.full(shape, value, dtype))
    assert (dev.fill_bits(-1).to_numpy().view(np.uint8) == 0xFF).all()


@pytest.mark.parametrize("layout, out_dtype", [("nk", ml_dtypes.bfloat16), ("kn", ml_dtypes.bfloat16),
                                               ("nk", np.float32)])
def test_gemm_128x256x64(layout, out_dtype):
    m, n, k = 128, 256, 64
    rng = np.random.default_rng()
    a = rng.standard_normal((m, k), dtype=np.float32).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((n, k) if layout == "nk" else (k, n), dtype=np.float32).astype(ml_dtypes.bfloat16)
    out = empty((m, n), out_dtype).fill(np.nan)
    pkptx.gemm(from_numpy(a), from_numpy(b), out, b_layout=layout)
    pkptx.synchronize()
    b64 = b.astype(np.float64)
    ref = a.astype(np.float64) @ (b64.T if layout == "nk" else b64)
    got = out.to_numpy().astype(np.float64)
    err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    assert err <= 1e-2, f"relative Frobenius error {err:.3g}"


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("drawn", [False, True])
def test_attention_with_reversed_rounds(causal, drawn, monkeypatch):
    """A tail (300 rows: 3 query blocks), 2 heads: 6 tasks on 2 blocks; with a fixed stride (a forced
    config) round 1 runs reversed (attention.zigzag), drawn (the op's default) they go head by head;
    O and LSE against float64."""
    from pkptx.ops import attention as op
    from pkptx.templates.kernels import attention as kernel
    monkeypatch.setattr(op, "grid_size", lambda launchable, tasks: 2)
    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal((1, 300, 2, 64), dtype=np.float32).astype(ml_dtypes.bfloat16) for _ in range(3))
    out = empty(q.shape, ml_dtypes.bfloat16).fill(np.nan)
    lse = empty((1, 2, 300), np.float32).fill(np.nan)
    pkptx.attention(from_numpy(q), from_numpy(k), from_numpy(v), causal=causal, out=out, lse=lse,
                    config=kernel.default_config("bf16", 64, drawn=drawn))
    pkptx.synchronize()
    ref, ref_lse = kernel.reference(q, k, v, causal=causal)
    got = out.to_numpy().astype(np.float64)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) <= 1e-2
    assert np.abs(lse.to_numpy() - ref_lse).max() < 2e-2


@settings(max_examples=10)
@given(units=st.integers(1, 4096), seed=st.integers(0, 2**32 - 1))
def test_bulk_copy(units, seed):
    nbytes = 16 * units
    host = np.random.default_rng(seed).integers(0, 256, size=nbytes + 64, dtype=np.uint8)
    src, dst = from_numpy(host), empty((nbytes + 64,), np.uint8).fill(0xAB)
    pkptx.bulk_copy(dst, src, nbytes)
    pkptx.synchronize()
    got = dst.to_numpy()
    assert np.array_equal(got[:nbytes], host[:nbytes]) and (got[nbytes:] == 0xAB).all()


def test_events_and_time_cuda_read_the_host_clock():
    xs = from_numpy(np.ones(512, np.float32))
    k = LoadedKernel.load(axpy())[2, 256]
    start, end = Event().record(), Event()
    k(xs, xs, 512, 1.0)
    end.record()
    end.synchronize()
    assert start.elapsed_ms(end) > 0
    timing = time_cuda(lambda: k(xs, xs, 512, 1.0), warmup=1, repeats=3)
    assert len(timing.samples_ms) == 3 and timing.min_ms > 0
    device_synchronize()
    assert (xs.to_numpy() == 2.0 ** 5).all()         # five launches, each doubling x in place


def test_time_cuda_alternating_takes_the_repeats_in_turn():
    xs, ys = from_numpy(np.ones(512, np.float32)), from_numpy(np.ones(256, np.float32))
    k = LoadedKernel.load(axpy())[2, 256]
    calls = []
    ours = lambda: (calls.append("ours"), k(xs, xs, 512, 1.0))        # noqa: E731
    theirs = lambda: (calls.append("theirs"), k(ys, ys, 256, 1.0))    # noqa: E731
    timings = time_cuda_alternating((ours, theirs), warmup=1, repeats=3)
    assert calls == ["ours", "theirs"] + ["ours", "theirs"] * 3
    assert [len(t.samples_ms) for t in timings] == [3, 3] and min(t.min_ms for t in timings) > 0
    device_synchronize()
    assert (xs.to_numpy() == 2.0 ** 4).all() and (ys.to_numpy() == 2.0 ** 4).all()
    with pytest.raises(LaunchError, match="at least one function"):
        time_cuda_alternating((), repeats=3)


def test_a_fault_is_raised_by_the_launch_that_made_it():
    xs = from_numpy(np.zeros(100, np.float32))
    k = LoadedKernel.load(axpy())
    with pytest.raises(MemoryFault, match="out-of-bounds 4-byte global access") as info:
        k[1, 128](xs, xs, 128, 1.0)
    assert "test_interpret_env.py" in str(info.value)          # the line of axpy() that emitted the load
    k[1, 128](xs, xs, 100, 1.0)                                # the failed launch left nothing behind
    assert (xs.to_numpy() == 0).all()


def test_what_is_not_modelled_says_so():
    with pytest.raises(UnsupportedError, match="cuStreamBeginCapture .*graphs"):
        with capture(Stream()):
            pass
    with pytest.raises(UnsupportedError, match="SymmetricHeap"):
        SymmetricHeap(World.single(), 1 << 21)
    with pytest.raises(DLPackError, match="not CUDA memory"):
        from_numpy(np.zeros(4, np.float32)).__dlpack__()
    foreign = dataclasses.replace(axpy("axpy_from_elsewhere"), source=None)
    with pytest.raises(UnsupportedError, match="kernel 'axpy_from_elsewhere'.*builder"):
        LoadedKernel.load(foreign)
