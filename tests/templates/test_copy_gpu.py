"""The bulk-copy kernel on the GPU: any size (multiple of 16, tails included), stage count, chunk and
grid copies exactly, and touches nothing past the end."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pkptx.templates.kernels import copy

GUARD = 4096        # bytes after the copied range that must keep their poison


@pytest.mark.gpu
@settings(max_examples=30, deadline=None)
@given(nbytes=st.integers(1, 1 << 18).map(lambda v: 16 * v), chunk=st.sampled_from([16, 1024, 2048, 4096, 32768]),
       stages=st.integers(2, 12), ctas=st.integers(1, 300), seed=st.integers(0, 2**32 - 1))
def test_bulk_copy_is_exact(gpu, nbytes, chunk, stages, ctas, seed):
    assume(chunk * stages <= 192 * 1024)
    from pkptx.launch import Kernel, empty, from_numpy
    from pkptx.toolchain import build_cached
    src_host = np.frombuffer(np.random.default_rng(seed).bytes(nbytes), np.uint8)
    dst = empty(nbytes + GUARD, "uint8").fill(0xA5)
    cfg = copy.Config(chunk=chunk, stages=stages)
    kernel = Kernel.load(build_cached(copy.build, cfg), gpu)
    kernel[ctas, 32, cfg.smem_bytes](dst, from_numpy(src_host), nbytes)
    got = dst.to_numpy()
    np.testing.assert_array_equal(got[:nbytes], src_host)
    assert (got[nbytes:] == 0xA5).all(), "the copy wrote past its end"
