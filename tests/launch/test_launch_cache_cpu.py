"""The launch cache of the local ops (pkptx.ops.launches) over the fake driver: a repeated call makes no
tensor map and packs nothing (one argument buffer for every launch), other operands make a new launch,
a cached launch pins no operand, and what has no cheap key is never cached. The sequence-parallel ops
keep their calls the same way in a plan of their heap, their arguments the same at every call (the kernels
count their launches on the device)."""
from __future__ import annotations

import ctypes
import gc
import weakref

import numpy as np
import pytest

import pkptx
from tests.launch.test_capture_cpu import fake, heap  # noqa: F401  (the fixtures)
from pkptx.launch import LoadedKernel, Stream, empty
from pkptx.launch.array import DeviceArray
from pkptx.ops import common, launches, plan as plans, sequence
from pkptx.ops.gemm import GemmArgumentError, gemm


def _operands(m=128, n=256, k=64, stream=None):
    return empty((m, k), "bfloat16", stream=stream), empty((n, k), "bfloat16", stream=stream), \
        empty((m, n), "bfloat16", stream=stream)


def test_a_repeated_gemm_is_one_prepared_launch(fake):
    stream = Stream(non_blocking=True)
    a, b, c = _operands(stream=stream)
    gemm(a, b, c, stream=stream)
    encodes, before = fake.calls.count("cuTensorMapEncodeTiled"), len(fake.launches)
    for _ in range(50):
        assert gemm(a, b, c, stream=stream) is c
    repeated = fake.launches[before:]
    assert len(repeated) == 50 and len({launch[2] for launch in repeated}) == 1     # one packed buffer
    assert fake.calls.count("cuTensorMapEncodeTiled") == encodes
    other = empty((128, 256), "bfloat16", stream=stream)
    gemm(a, b, other, stream=stream)
    assert fake.launches[-1][2] != repeated[0][2]          # another output: another launch


def test_a_cached_launch_pins_no_operand(fake):
    a, b, c = _operands()
    gemm(a, b, c)
    refs = [weakref.ref(x) for x in (a, b, c)]
    del a, b, c
    gc.collect()
    assert all(r() is None for r in refs)


def test_same_memory_seen_another_way_is_another_key(fake):
    a = empty((128, 64), "bfloat16")
    flat = DeviceArray(a.ptr, (64, 128), a.dtype, owner=a)
    assert launches.operand_key(a) != launches.operand_key(flat)
    assert launches.operand_key(None) == ()


class TorchLike:
    """What the key reads of a torch tensor: data_ptr(), shape, stride(), dtype."""

    def __init__(self, ptr, shape, dtype):
        self.ptr, self.shape, self.dtype = ptr, tuple(shape), dtype

    def data_ptr(self):
        return self.ptr

    def stride(self):
        return tuple(int(np.prod(self.shape[i + 1:])) for i in range(len(self.shape)))


class DLPackOnly:
    def __dlpack__(self, stream=None):
        raise AssertionError("not reached")


def test_keys_of_other_producers():
    t = TorchLike(0x7000, (4, 8), "torch.bfloat16")
    assert launches.operand_key(t) == (0x7000, (4, 8), (8, 1), "torch.bfloat16")
    assert launches.operand_key(DLPackOnly()) is None
    assert launches.launch_key("gemm", (t, DLPackOnly()), ()) is None      # never cached


def test_a_bad_call_is_refused_every_time_and_never_cached(fake):
    a, b, _ = _operands()
    bad = empty((128, 255), "bfloat16")
    for _ in range(2):
        with pytest.raises(GemmArgumentError, match="out must be 128 x 256"):
            gemm(a, b, bad)
    assert not any(key[0] == "gemm" and key[1][2] == launches.operand_key(bad) for key in launches._launches)


def _sequence_call(op: str, heap):
    """A call of ``op`` at world 1 with operands made once, and the kernel it launches."""
    q, kv = empty((1, 128, 2, 64), "bfloat16"), empty((1, 128, 2, 64), "bfloat16")
    if op == "ring_attention":
        out, lse = empty((1, 128, 2, 64), "bfloat16"), empty((1, 2, 128), np.float32)
        return lambda: pkptx.ring_attention(q, kv, kv, heap.world, out=out, lse=lse, heap=heap)
    out, lse = heap.alloc((1, 128, 2, 64), "bfloat16"), heap.alloc((1, 2, 128), np.float32)
    return lambda: pkptx.ulysses_attention(q, kv, kv, heap.world, out=out, lse=lse, heap=heap)


def _packed(fake, kernel: LoadedKernel) -> bytes:
    """The packed arguments of the last launch (the fake keeps their ``void**`` address; slot 0 starts
    the buffer)."""
    return ctypes.string_at(ctypes.c_void_p.from_address(fake.launches[-1][2]).value, kernel.packer.size)


@pytest.mark.parametrize("op", ["ring_attention", "ulysses_attention"])
def test_a_repeated_sequence_call_is_one_prepared_launch_whose_arguments_never_change(heap, fake, monkeypatch, op):
    call = _sequence_call(op, heap)
    first = call()
    (kernel,) = [k for k in common._loaded.values() if k.compiled.entry.startswith(op.split("_")[0])]
    packed = _packed(fake, kernel)
    prepared, prepare = [], LoadedKernel.prepare
    monkeypatch.setattr(LoadedKernel, "prepare", lambda *a, **kw: prepared.append(a) or prepare(*a, **kw))
    encodes, before = fake.calls.count("cuTensorMapEncodeTiled"), len(fake.launches)
    for _ in range(5):
        assert call() is first
        assert _packed(fake, kernel) == packed        # what a graph replays: the same bytes every time
    repeated = fake.launches[before:]
    assert len(repeated) == 5 and len({launch[2] for launch in repeated}) == 1 and not prepared
    assert fake.calls.count("cuTensorMapEncodeTiled") == encodes


def test_the_kept_sequence_calls_and_buffers_go_with_their_heap_and_pin_no_operand(heap, fake):
    q, kv, out = (empty((1, 128, 2, 64), "bfloat16") for _ in range(3))
    pkptx.ring_attention(q, kv, kv, heap.world, out=out, heap=heap)
    assert plans._states[heap].get("ring_attention").local(launches.launch_key(
        "ring_attention", (q, kv, kv, out, None), (False, None, None, None, None, None))) is not None
    refs = [weakref.ref(x) for x in (q, kv, out)]
    del q, kv, out
    gc.collect()
    assert all(r() is None for r in refs)
    ident = id(heap)
    heap.close()
    assert heap not in plans._states and not any(k[0] == ident for k in sequence._workspace.items)
