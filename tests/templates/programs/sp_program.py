"""Under mpirun: ring and Ulysses attention on hypothesis-chosen shapes against float64 numpy over the
whole sequence and against single-GPU pkptx.attention over it; or (``absent-<op>``) the last rank
skipping a call, which must give the others a DeviceTimeoutError naming it.

argv[1]: comma-separated modes, each ``ring``, ``ulysses``, ``absent-ring`` or ``absent-ulysses``. Every rank draws the same cases
and builds the full sequence from the case seed, so each computes the references itself; failures are
recorded, not raised, so the ranks never diverge. Outputs are poisoned (NaN) before every call.
"""
from __future__ import annotations

import sys
import time
import traceback

import ml_dtypes
import numpy as np
from hypothesis import example, given, strategies as st

import pkptx
from pkptx.errors import DeviceTimeoutError
from pkptx.launch import Device, SymmetricHeap, World, empty, from_numpy
from pkptx.templates.kernels import attention, ring_attention
from tests.helpers.hog import hog_from_env
from tests.helpers.mpi import hyp, report

DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
BOUND = 1.5e-2          # relative Frobenius error against float64 (16-bit inputs, P rounded to 16 bits)
GPU_BOUND = 1e-2        # against single-GPU pkptx.attention over the whole sequence


def shard_of(op: str, x, rank: int, world: int, causal: bool, axis: int = 1):
    """Ring, causal: zigzag; otherwise contiguous along the sequence."""
    return ring_attention.shard(x, rank, world, causal=causal and op == "ring", axis=axis)


def rel_err(got, ref) -> float:
    return float(np.linalg.norm(got.astype(np.float64) - ref) / max(np.linalg.norm(ref), 1e-30))


def run_op(op: str, q, k, v, world, causal, heap, **kw):
    """(O, LSE) on the host, from outputs poisoned before the call. Ring: plain device arrays and the op's
    private heap; Ulysses: symmetric buffers of ``heap`` (peers store into them), freed afterwards."""
    lse_shape = (q.shape[0], q.shape[2], q.shape[1])
    if op == "ring":
        out, lse = empty(q.shape, q.dtype).fill(float("nan")), empty(lse_shape, np.float32).fill(float("nan"))
        pkptx.ring_attention(from_numpy(q), from_numpy(k), from_numpy(v), world, causal=causal, out=out, lse=lse,
                             **kw)
        pkptx.synchronize(what=op)
        return out.to_numpy(), lse.to_numpy()
    out, lse = heap.alloc(q.shape, q.dtype), heap.alloc(lse_shape, np.float32)
    try:
        out.local.fill(float("nan"))
        lse.local.fill(float("nan"))
        Device.current().synchronize()
        world.barrier(what="outputs poisoned")       # before any peer stores into them
        pkptx.ulysses_attention(from_numpy(q), from_numpy(k), from_numpy(v), world, causal=causal, out=out,
                                lse=lse, heap=heap, **kw)
        pkptx.synchronize(what=op)
        return out.local.to_numpy(), lse.local.to_numpy()
    finally:
        lse.free()
        out.free()


def main() -> None:
    """Each mode of argv[1] (comma-separated) in turn, in one world; an ``absent-`` mode must come last
    (the skipped call leaves the ranks' flag epochs apart)."""
    world = World()
    device = Device(world.device_ordinal()).set_current()
    heap = SymmetricHeap(world, 512 << 20)
    for mode in sys.argv[1].split(","):
        if mode.startswith("absent-"):
            absent(mode.removeprefix("absent-"), world, heap)
        else:
            run_cases(mode, world, device, heap)
    heap.close()
    world.close()


def run_cases(op: str, world, device, heap) -> None:
    """Hypothesis-chosen cases of ``op``, reported as section ``op``."""
    w, rank = world.size, world.rank
    failures, cases = [], []
    hog = hog_from_env()

    @hyp(12)
    @given(batch=st.integers(1, 2), kv_heads=st.sampled_from([1, 2]), group=st.sampled_from([1, 2, 3]),
           shard=st.one_of(st.sampled_from([1, 2, 64, 129, 256]), st.integers(1, 300)),
           dim=st.sampled_from([64, 128]), causal=st.booleans(), dtype=st.sampled_from(["bf16", "f16"]),
           seed=st.integers(0, 2**31))
    @example(batch=1, kv_heads=1, group=1, shard=300, dim=128, causal=True, dtype="bf16", seed=1)
    @example(batch=2, kv_heads=2, group=2, shard=77, dim=64, causal=False, dtype="f16", seed=2)
    def case(batch, kv_heads, group, shard, dim, causal, dtype, seed):
        if op == "ring" and causal:
            shard += shard % 2                      # zigzag halves
        heads = kv_heads * group
        if op == "ulysses":                         # heads (and K/V heads) split over the ranks
            kv_heads *= w
            heads = kv_heads * group
        seq = shard * w
        c = dict(op=op, batch=batch, heads=heads, kv_heads=kv_heads, shard=shard, dim=dim, causal=causal,
                 dtype=dtype)
        cases.append(c)
        try:
            rng = np.random.default_rng(seed)
            dt = DTYPES[dtype]
            q = rng.standard_normal((batch, seq, heads, dim), dtype=np.float32).astype(dt)
            k, v = (rng.standard_normal((batch, seq, kv_heads, dim), dtype=np.float32).astype(dt) for _ in range(2))
            want, want_lse = attention.reference(q, k, v, causal=causal)
            full = empty(q.shape, dt).fill(float("nan"))
            pkptx.attention(from_numpy(q), from_numpy(k), from_numpy(v), causal=causal, out=full)
            device.synchronize()
            world.barrier(what="inputs ready")
            hog()
            mine = [shard_of(op, x, rank, w, causal) for x in (q, k, v)]
            got, got_lse = run_op(op, *mine, world, causal, heap)
            ref = shard_of(op, want, rank, w, causal)
            ref_lse = shard_of(op, want_lse, rank, w, causal, axis=2)
            c["err"] = rel_err(got, ref)
            c["err_vs_gpu"] = rel_err(got, shard_of(op, full.to_numpy().astype(np.float64), rank, w, causal))
            c["lse_err"] = float(np.abs(got_lse - ref_lse).max())
            if np.isnan(got).any() or np.isnan(got_lse).any():
                failures.append(dict(c, error="NaN (poison) left in the output"))
            elif not (c["err"] < BOUND and c["err_vs_gpu"] < GPU_BOUND and c["lse_err"] < 2e-2):
                failures.append(c)
        except Exception:
            failures.append(dict(c, error=traceback.format_exc()[-1500:]))
        finally:
            world.barrier(what="case done")

    case()
    report(rank, op, cases=len(cases), failures=failures, all_cases=cases)


def absent(op: str, world, heap) -> None:
    """One call on every rank (so the receive buffers exist everywhere), then the last rank sits out
    a second one: the others' kernels must give up within the budget and name it."""
    w, rank = world.size, world.rank
    dt = ml_dtypes.bfloat16
    rng = np.random.default_rng(0)
    heads = 2 * w
    q, k, v = (rng.standard_normal((1, 128, heads, 64), dtype=np.float32).astype(dt) for _ in range(3))
    result = dict(role="absent" if rank == w - 1 else "waiting")
    try:
        ring = op == "ring"
        call = pkptx.ring_attention if ring else pkptx.ulysses_attention
        args = [from_numpy(x) for x in (q, k, v)]
        call(*args, world, heap=None if ring else heap)
        pkptx.synchronize(what=op)
        world.barrier(what="first call done")
        if rank != w - 1:
            start = time.monotonic()
            try:
                call(*args, world, heap=None if ring else heap, timeout_ns=500_000_000)
                pkptx.synchronize(what=op)
                result.update(raised=None)
            except DeviceTimeoutError as exc:
                result.update(raised="DeviceTimeoutError", message=str(exc))
            result["elapsed_s"] = time.monotonic() - start
    except Exception:
        result["error"] = traceback.format_exc()[-1500:]
    world.barrier(what="absent test done")
    report(rank, "absent", **result)


if __name__ == "__main__":
    main()
