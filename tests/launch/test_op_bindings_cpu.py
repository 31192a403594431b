"""Every host op binds its kernel's parameters by name and launches at the block and shared memory the
kernel declares, checked on the CPU over the fake driver at world 1 (a misspelt or missing argument
would otherwise fail only at a launch on a GPU): each call below must reach cuLaunchKernelEx."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import pkptx
from tests.launch.test_capture_cpu import fake, heap  # noqa: F401  (the fixtures)
from pkptx.launch import empty

BF16 = ml_dtypes.bfloat16


def _bf16(*shape):
    return empty(shape, BF16)


def _calls(heap):
    world = heap.world
    a, b = _bf16(128, 64), _bf16(256, 64)
    q, kv = _bf16(1, 128, 2, 64), _bf16(1, 128, 2, 64)
    out_sym = heap.alloc((128, 256), np.float32)
    ids = empty((16, 2), np.int32)
    weights = empty((16, 2), np.float32)
    tokens = _bf16(16, 64)
    return {
        "gemm": lambda: pkptx.gemm(a, b),
        "grouped_gemm": lambda: pkptx.grouped_gemm(_bf16(128, 64), _bf16(2, 256, 64), empty((2,), np.int32)),
        "attention": lambda: pkptx.attention(q, kv, kv, lse=empty((1, 2, 128), np.float32)),
        "attention_merge": lambda: pkptx.attention_merge(q, empty((1, 2, 128), np.float32), q,
                                                         empty((1, 2, 128), np.float32)),
        "gemm_rs": lambda: pkptx.gemm_rs(a, b, world, out=out_sym, fused=True),
        "gemm_ar": lambda: pkptx.gemm_ar(a, b, world, out=heap.alloc((128, 256), BF16), fused=True),
        "ag_gemm": lambda: pkptx.ag_gemm(heap.alloc((128, 64), BF16), b, world, fused=True),
        "ring_attention": lambda: pkptx.ring_attention(q, kv, kv, world, heap=heap),
        "ulysses_attention": lambda: pkptx.ulysses_attention(q, kv, kv, world, heap=heap),
        "moe_dispatch": lambda: pkptx.moe_dispatch(tokens, ids, weights, world, 4, heap=heap),
        "moe_dispatch_gemm": lambda: pkptx.moe_dispatch_gemm(tokens, ids, weights, _bf16(4, 128, 64), world, 4,
                                                             heap=heap, num_comm_sms=1),
    }


NAMES = ["gemm", "grouped_gemm", "attention", "attention_merge", "gemm_rs", "gemm_ar", "ag_gemm", "ring_attention",
         "ulysses_attention", "moe_dispatch", "moe_dispatch_gemm"]


@pytest.mark.parametrize("name", NAMES)
def test_the_op_launches_its_kernel(heap, fake, name):
    before = len(fake.launches)
    _calls(heap)[name]()
    assert len(fake.launches) > before, f"{name} launched nothing"


def test_combine_after_a_dispatch(heap, fake):
    d = pkptx.moe_dispatch(_bf16(16, 64), empty((16, 2), np.int32), empty((16, 2), np.float32), heap.world, 4,
                           heap=heap)
    y = heap.alloc((d.routing.capacity, 64), BF16)
    before = len(fake.launches)
    pkptx.moe_combine(y, d, heap.world)
    assert len(fake.launches) > before
