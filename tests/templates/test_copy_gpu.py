"""pkptx.bulk_copy on the GPU: any size (multiple of 16, tails included), stage count, chunk and
grid copies exactly and touches nothing past the end; bad arguments fail before any GPU work."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pkptx.ops.common import ArgumentError
from pkptx.ops.copy import bulk_copy
from pkptx.templates.kernels import copy

GUARD = 4096        # bytes after the copied range that must keep their poison


@pytest.mark.gpu
@settings(max_examples=30, deadline=None)
@given(nbytes=st.integers(1, 1 << 18).map(lambda v: 16 * v), chunk=st.sampled_from([16, 1024, 2048, 4096, 32768]),
       stages=st.integers(2, 12), ctas_per_sm=st.integers(1, 16), seed=st.integers(0, 2**32 - 1))
def test_bulk_copy_is_exact(gpu, nbytes, chunk, stages, ctas_per_sm, seed):
    assume(chunk * stages * ctas_per_sm <= 192 * 1024)
    from pkptx.launch import empty, from_numpy
    from pkptx.ops.collectives import synchronize
    src_host = np.frombuffer(np.random.default_rng(seed).bytes(nbytes), np.uint8)
    dst = empty(nbytes + GUARD, "uint8").fill(0xA5)
    bulk_copy(dst, from_numpy(src_host), nbytes, config=copy.Config(chunk=chunk, stages=stages),
              ctas_per_sm=ctas_per_sm)
    synchronize(what="bulk_copy")
    got = dst.to_numpy()
    np.testing.assert_array_equal(got[:nbytes], src_host)
    assert (got[nbytes:] == 0xA5).all(), "the copy wrote past its end"


@pytest.mark.parametrize("bad, match", [(dict(dst="not an array"), "dst must be a contiguous DeviceArray"),
                                        (dict(nbytes=24), "multiple of 16"), (dict(nbytes=1 << 20), "0..4096"),
                                        (dict(ctas_per_sm=0), "ctas_per_sm")])
def test_bulk_copy_rejects_bad_arguments(bad, match, monkeypatch):
    from pkptx.launch.array import DeviceArray
    for name, value in (("is_contiguous", True), ("ptr", 0x10000), ("nbytes", 4096)):
        monkeypatch.setattr(DeviceArray, name, property(lambda self, v=value: v))
    arr = object.__new__(DeviceArray)          # a 4 KiB array's description; no GPU memory behind it
    args = {"dst": arr, "src": arr, "nbytes": None, "ctas_per_sm": 4, **bad}
    with pytest.raises(ArgumentError, match=match):
        bulk_copy(args["dst"], args["src"], args["nbytes"], ctas_per_sm=args["ctas_per_sm"])
