"""Every host op binds its kernel's parameters by name and launches at the block and shared memory the
kernel declares, checked on the CPU over the fake driver at world 1 (a misspelt or missing argument
would otherwise fail only at a launch on a GPU): each call below must reach cuLaunchKernelEx, and every
launch it prepares names exactly the kernel's parameters (its signature), each with a value of the
parameter's kind."""
from __future__ import annotations

import ctypes

import ml_dtypes
import numpy as np
import pytest

import pkptx
from tests.launch.test_capture_cpu import fake, heap  # noqa: F401  (the fixtures)
from pkptx.errors import ArgumentError
from pkptx.isa import Kind
from pkptx.launch import Device, DeviceArray, LaunchConfig, LoadedKernel, TensorMap, empty
from pkptx.launch.status import device_status
from pkptx.ops import plan as plans

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
    x = heap.alloc((64, 32), BF16)
    return {
        "gemm": lambda: pkptx.gemm(a, b),
        "bulk_copy": lambda: pkptx.bulk_copy(empty((4096,), np.uint8), empty((4096,), np.uint8)),
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
        "all_reduce": lambda: pkptx.all_reduce(x, world),
        "all_gather": lambda: pkptx.all_gather(x, world, dim=0),
        "reduce_scatter": lambda: pkptx.reduce_scatter(x, world, dim=0),
        "all_to_all": lambda: pkptx.all_to_all(x, world, scatter_dim=0, gather_dim=1, out=heap.alloc((64, 32), BF16)),
    }


NAMES = ["gemm", "bulk_copy", "grouped_gemm", "attention", "attention_merge", "gemm_rs", "gemm_ar", "ag_gemm", "ring_attention",
         "ulysses_attention", "moe_dispatch", "moe_dispatch_gemm", "all_reduce", "all_gather", "reduce_scatter",
         "all_to_all"]


@pytest.fixture
def bindings(monkeypatch):
    """Every launch the ops prepare: (the kernel's signature, arguments by position, arguments by name)."""
    seen, prepare = [], LoadedKernel.prepare

    def recording(self, config, *args, **values):
        seen.append((self.signature, args, values))
        return prepare(self, config, *args, **values)
    monkeypatch.setattr(LoadedKernel, "prepare", recording)
    yield seen
    seen.clear()                # the arrays it holds go while the fake driver is installed


def _fits(p, value, heap) -> bool:
    """Whether ``value`` is what a host passes for parameter ``p``'s kind, at world 1 on the fake driver
    (whose device memory is host memory, so a peer table can be read)."""
    kind = p.kind
    if kind is Kind.TENSOR_MAP:
        return isinstance(value, TensorMap)
    if kind is Kind.STATUS:
        return value == device_status(Device.current()).ptr
    if kind is Kind.FLAGS:
        return value == plans._states[heap].flags.buffer.peer_table_ptr
    if kind is Kind.PEER_TABLE:             # a table whose one entry is an address in the heap
        base = heap.base_ptrs[0]
        return type(value) is int and base <= ctypes.c_uint64.from_address(value).value < base + heap.nbytes
    if kind is Kind.MULTICAST:              # the fake has no multicast
        return value == 0
    if kind is Kind.TENSOR_MAP_TABLE:
        return isinstance(value, DeviceArray) and value.nbytes % 128 == 0
    if kind is Kind.POINTER:
        return isinstance(value, DeviceArray) or (type(value) is int and value >= 0)
    return isinstance(value, float) if p.type.name == "f32" else type(value) is int


@pytest.mark.parametrize("name", NAMES)
def test_the_op_binds_its_kernels_signature_by_name(heap, fake, bindings, name):
    _calls(heap)[name]()
    assert bindings, f"{name} prepared no launch"
    for signature, args, values in bindings:
        assert not args, f"{name}: {signature.entry} was given {len(args)} arguments by position"
        assert sorted(values) == sorted(signature.names), signature.entry
        wrong = [f"{p.name} ({p.kind}): {values[p.name]!r:.60}" for p in signature.params
                 if not _fits(p, values[p.name], heap)]
        assert not wrong, f"{name}: {signature.entry} got values not of their kind: {wrong}"


def test_a_misspelt_or_missing_argument_names_the_kernel_and_the_kind(heap, fake):
    pkptx.gemm(_bf16(128, 64), _bf16(256, 64))
    (kernel,) = {k for k in pkptx.ops.common._loaded.values() if k.compiled.entry.startswith("gemm_")}
    values = {n: 0 for n in kernel.signature.names if n != "tmap_b"}
    with pytest.raises(ArgumentError, match=rf"kernel '{kernel.compiled.entry}': missing 'tmap_b' \(tensor_map: "
                                            r"a 128-byte tensor map \(TensorMap\)\); unexpected 'tmap_bb' "
                                            r"\(did you mean 'tmap_b'\?\)"):
        kernel.prepare(LaunchConfig(1, kernel.threads), **values, tmap_bb=0)
    launches = len(fake.launches)
    with pytest.raises(ArgumentError, match=r"missing 'status' \(status: the device status words"):
        kernel.prepare(LaunchConfig(1, kernel.threads), **{n: v for n, v in values.items() if n != "status"},
                       tmap_b=bytes(128))
    assert len(fake.launches) == launches


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


def test_repeated_moe_calls_are_their_kept_launches(heap, fake, bindings):
    """A second dispatch, fused dispatch+GEMM (given its out) or combine (given its out) with the same
    operands prepares nothing: it queues what the first prepared (and returns the same results)."""
    world = heap.world
    x, ids, weights, w = _bf16(16, 64), empty((16, 2), np.int32), empty((16, 2), np.float32), _bf16(4, 128, 64)
    d = pkptx.moe_dispatch(x, ids, weights, world, 4, heap=heap)
    out = empty((d.routing.capacity, 128), BF16)
    y = heap.alloc((d.routing.capacity, 64), BF16)
    combined = empty((16, 64), BF16)
    calls = [lambda: pkptx.moe_dispatch(x, ids, weights, world, 4, heap=heap),
             lambda: pkptx.moe_dispatch_gemm(x, ids, weights, w, world, 4, heap=heap, out=out, num_comm_sms=1),
             lambda: pkptx.moe_combine(y, d, world, out=combined)]
    for call in calls:
        first = call()
        prepared, launched = len(bindings), len(fake.launches)
        again = call()
        assert len(bindings) == prepared and len(fake.launches) > launched
        assert again is first or again == first
