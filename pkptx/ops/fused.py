"""Host APIs of the fused kernels: ``ag_gemm``, ``gemm_rs``, ``gemm_ar`` (pk-design 7).

Each checks its arguments before any GPU work and launches one persistent kernel: ``num_comm_sms``
communicator blocks (AG+GEMM, GEMM+AR) beside the compute blocks. What a call needs beyond its
operands, the flag arrays of the fused kernels (stamped with each launch's device-side epoch, never
reset) and the unfused path's scratch, belongs to the op's plan (:mod:`.plan`): made on the first call
with a shape, freed when the bounded cache evicts it or the heap closes. Operands that peers write
into are SymmetricBuffers (``ag_gemm``'s ``a_shard``, the ``out`` of ``gemm_rs`` and ``gemm_ar``); every
other operand is a DeviceArray, a DLPack array or a SymmetricBuffer (its local copy). ``out`` follows
the collectives' rule: required where the output is symmetric, else ``None`` allocates one.
"""
from __future__ import annotations

import json
import os

import numpy as np

from ..launch import Device, DeviceArray, empty, from_numpy
from ..launch.flags import FlagArray
from ..launch.occupancy import context_sm_count
from ..launch.status import device_timeout_ns
from ..launch.symmetric import SymmetricBuffer
from ..launch.tensormap import TensorMap
from ..templates.gemm_parts import TILE_K
from ..templates.kernels import ag_gemm as ag_kernel
from ..templates.kernels import gemm as gemm_kernel
from ..templates.kernels import gemm_ar as ar_kernel
from ..templates.kernels import gemm_rs as rs_kernel
from . import collectives
from .common import ArgumentError, dtype_name, load
from .gemm import GemmArgumentError, check_shapes, choose_config, gemm
from .launches import array, tensor_map
from .gemm_plan import all_reduce_comm_sms
from .plan import HeapOps, Plan, buffer_key, heap_ops


def _operand(x, name: str) -> DeviceArray:
    """A local operand: a DeviceArray, a DLPack array, or a SymmetricBuffer's local copy."""
    return x.local if isinstance(x, SymmetricBuffer) else array(x, "fused op", name, GemmArgumentError)


def _ident(x: DeviceArray) -> tuple:
    """What a plan's local launches are keyed by: the operand's address and layout."""
    return (x.ptr, x.shape, x.strides, str(x.dtype))


def _peer_tensor_maps(buf: SymmetricBuffer, shape, box) -> DeviceArray:
    """A device table of every rank's tensor map over ``buf`` (one 128-byte map per rank)."""
    maps = b"".join(TensorMap.tiled(ptr, buf.dtype, shape, box=box, swizzle=128).data for ptr in buf.peer_ptrs)
    return from_numpy(np.frombuffer(maps, dtype=np.uint8).copy())


def _plan_for(state: HeapOps, what: str, key, stream, owned=lambda: ()) -> Plan:
    """The op's plan for ``key`` (the same on every rank), owning what ``owned()`` allocates."""
    plan = state.get(key)
    return plan if plan is not None else state.make(what, key, stream, lambda: Plan(owned=owned()))


def _run_with_flags(state: HeapOps, what: str, key, stream, count: int, local_key, launch) -> None:
    """Run the plan for ``key``, which owns a FlagArray of ``count`` counters in the heap, through its
    one launch for these local operands (``launch(flags)`` prepares it, once per ``local_key``)."""
    plan = _plan_for(state, what, key, stream, lambda: [FlagArray(state.heap, count)])
    flags = plan.owned[0]
    state.run(plan, plan.local(local_key, lambda: (launch(flags).launch,)), stream)


def _prepare(state: HeapOps, kernel, cfg, timeout_ns: int, *, num_comm_sms: int, **values):
    """A persistent grid (what this context can hold at once) on the heap's progress flags."""
    return state.prepare(kernel, timeout_ns, num_comm_sms=num_comm_sms, **values)


def _plan(a: DeviceArray, b: DeviceArray, out_dtype, b_layout: str, m: int, n: int, k: int) -> gemm_kernel.Config:
    device = Device.current()
    return choose_config(m, n, k, dtype_name(a.dtype), dtype_name(out_dtype), b_layout,
                         sm_count=context_sm_count(device), smem_limit=device.smem_per_block_optin)


def _gemm_args(cfg, a_map_source, b: DeviceArray, k: int, m: int, n: int) -> dict:
    return dict(tmap_a=a_map_source, tmap_b=tensor_map(b, cfg.b_box), k=k, tiles_m=-(-m // cfg.tile_m),
                tiles_n=-(-n // cfg.tile_n))


def overlap_pays(m: int, n: int, cfg, world_size: int, sm_count: int, *, row_sharded: bool) -> bool:
    """Fuse only when every rank's rows tile evenly (row-sharded kernels) and there are at least two
    waves of output tiles: with fewer, the communication has nothing to hide behind."""
    if row_sharded and (m % world_size or (m // world_size) % cfg.tile_m):
        return False
    return world_size > 1 and -(-m // cfg.tile_m) * -(-n // cfg.tile_n) >= 2 * sm_count


def tune_num_comm_sms(op: str, run, world, shape_key, candidates=(2, 4, 8, 16, 32)) -> int:
    """The ``num_comm_sms`` that makes ``run(num_comm_sms)`` fastest, agreed by every rank (the one with
    the best slowest-rank time), cached in the pkptx cache directory by op, shape, world and device."""
    from ..launch import time_cuda
    from ..toolchain import cache_dir
    device = Device.current()
    sms = context_sm_count(device)      # an MPS share or green context changes the best split
    key = f"{op}|{shape_key}|w{world.size}|{device.name}|{sms}"
    path = (cache_dir() / "tune.json") if cache_dir() else None
    table = json.loads(path.read_text()) if path and path.exists() else {}
    if key in table:
        return int(table[key])
    legal = [c for c in candidates if 1 <= c < sms]
    mine = [time_cuda(lambda c=c: run(c), warmup=1, repeats=5).median_ms for c in legal]
    collectives.synchronize(what=f"tuning {op}")
    slowest = np.max(np.array(world.allgather(mine, what=f"tune {op}")), axis=0)
    best = int(legal[int(np.argmin(slowest))])
    if path and world.rank == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        table[key] = best
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(table, indent=1))
        os.replace(tmp, path)
    return best


def _check_comm_sms(op: str, num_comm_sms) -> None:
    sms = context_sm_count()
    if num_comm_sms != "auto" and (not isinstance(num_comm_sms, int) or isinstance(num_comm_sms, bool) or
                                   not 1 <= num_comm_sms < sms):
        raise ArgumentError(f"{op}: num_comm_sms must be 'auto' or in 1..{sms - 1} (this context's SMs less "
                            f"one), got {num_comm_sms!r}")


def _comm_sms(op: str, num_comm_sms, run, world, shape_key) -> int:
    """``num_comm_sms`` itself, or for "auto" the tuned choice (``run(c)`` launches with ``c``)."""
    return tune_num_comm_sms(op, run, world, shape_key) if num_comm_sms == "auto" else num_comm_sms


def gemm_rs(a, b_shard, world, *, out: SymmetricBuffer, b_layout: str = "nk", stream=None, fused: bool | None = None,
            timeout_ns: int | None = None, timeout: float | None = None) -> SymmetricBuffer:
    """``out`` (M/W x N) on rank r = rows r·M/W.. of sum over ranks of A_r·B_rᵀ. A_r (M x K_r) and B_r
    are this rank's K-shards. ``out`` is zeroed here and reduced into by every rank's kernel."""
    a, b = _operand(a, "a"), _operand(b_shard, "b_shard")
    m, n, k = check_shapes(a.shape, a.dtype, b.shape, b.dtype, b_layout=b_layout)
    if not isinstance(out, SymmetricBuffer) or out.heap.world is not world:
        raise ArgumentError("gemm_rs: out must be a SymmetricBuffer of this world")
    if m % world.size or out.shape != (m // world.size, n) or dtype_name(out.dtype) not in ("bf16", "f32"):
        raise ArgumentError(f"gemm_rs: out must be a ({m // world.size}, {n}) bf16 or f32 buffer with "
                            f"M = {m} divisible by the world size {world.size}; got {out.shape} {out.dtype}")
    ns = device_timeout_ns(world, timeout, timeout_ns, "gemm_rs: timeout")
    state = heap_ops("gemm_rs", out, world, stream)
    cfg = rs_kernel.Config(_plan(a, b, out.dtype, b_layout, m, n, k))
    rows = m // world.size
    if fused is None:
        fused = overlap_pays(m, n, cfg.gemm, world.size, context_sm_count(), row_sharded=True)
    if not fused:
        plan = _plan_for(state, "gemm_rs", ("gemm_rs scratch", (m, n), str(out.dtype)), stream,
                         lambda: [out.heap.alloc((m, n), out.dtype)])
        partial = plan.owned[0]
        gemm(a, b, partial.local, b_layout=b_layout, stream=stream)
        return collectives.reduce_scatter(partial, world, dim=0, out=out, stream=stream, timeout_ns=ns)
    if rows % cfg.gemm.tile_m:
        raise ArgumentError(f"gemm_rs: M / world = {rows} must be a multiple of the {cfg.gemm.tile_m}-row tile")
    plan = _plan_for(state, "gemm_rs", ("gemm_rs", buffer_key(out), cfg, ns), stream)

    def launches():
        kernel = load(rs_kernel.build, cfg, state.device)
        c_maps = _peer_tensor_maps(out, out.shape, cfg.gemm.c_box)
        launch = _prepare(state, kernel, cfg.gemm, ns, num_comm_sms=0, rows_per_rank=rows, c_tmaps=c_maps,
                          **_gemm_args(cfg.gemm, tensor_map(a, (cfg.gemm.tile_m, TILE_K)), b, k, m, n))
        zero = out.local
        return (lambda s: zero.fill(0, stream=s), launch.launch)

    state.run(plan, plan.local((_ident(a), _ident(b)), launches), stream)
    return out


def ag_gemm(a_shard: SymmetricBuffer, b, world, *, out=None, b_layout: str = "nk", num_comm_sms=4,
            stream=None, fused: bool | None = None, timeout_ns: int | None = None,
            timeout: float | None = None) -> DeviceArray:
    """C (M x N_r) = all-gather of A's row shards, times this rank's B_r. ``a_shard`` is a symmetric
    (M x K) buffer in which this rank has written its rows [r·M/W, (r+1)·M/W); the kernel fills in the
    rest on every rank while it computes. ``out=None``: a new array (pass ``out`` for repeated calls
    and inside graph captures)."""
    if not isinstance(a_shard, SymmetricBuffer) or a_shard.heap.world is not world:
        raise ArgumentError("ag_gemm: a_shard must be a SymmetricBuffer of this world (the full M x K shape)")
    b = _operand(b, "b")
    out = _operand(out, "out") if out is not None else None
    out_dtype = out.dtype if out is not None else a_shard.dtype
    m, n, k = check_shapes(a_shard.shape, a_shard.dtype, b.shape, b.dtype, b_layout=b_layout)
    _check_comm_sms("ag_gemm", num_comm_sms)
    ns = device_timeout_ns(world, timeout, timeout_ns, "ag_gemm: timeout")
    state = heap_ops("ag_gemm", a_shard, world, stream)
    cfg = ag_kernel.Config(_plan(a_shard.local, b, out_dtype, b_layout, m, n, k))
    out = out if out is not None else empty((m, n), a_shard.dtype)
    if fused is None:
        fused = overlap_pays(m, n, cfg.gemm, world.size, context_sm_count(), row_sharded=True)
    if not fused:          # in place: this rank's rows are already in their slot
        collectives.all_gather(a_shard, world, dim=0, out=a_shard, stream=stream, timeout_ns=ns)
        return gemm(a_shard.local, b, out, b_layout=b_layout, stream=stream)
    if m % world.size or (m // world.size) % cfg.gemm.tile_m:
        raise ArgumentError(f"ag_gemm: M / world = {m}/{world.size} must be a multiple of {cfg.gemm.tile_m}")
    num_comm_sms = _comm_sms("ag_gemm", num_comm_sms, lambda c: ag_gemm(
        a_shard, b, world, out=out, b_layout=b_layout, num_comm_sms=c, stream=stream, fused=True,
        timeout_ns=ns), world, (m, n, k))
    def launch(ready: FlagArray):
        kernel = load(ag_kernel.build, cfg, state.device)
        return _prepare(state, kernel, cfg.gemm, ns, num_comm_sms=num_comm_sms,
                        **_gemm_args(cfg.gemm, tensor_map(a_shard.local, (cfg.gemm.tile_m, TILE_K)), b, k, m, n),
                        tmap_c=tensor_map(out, cfg.gemm.c_box), rows_per_rank=m // world.size, row_bytes=k * 2,
                        **state.layout_args("a", a_shard), **state.layout_args("ready", ready.buffer))

    _run_with_flags(state, "ag_gemm", ("ag_gemm", buffer_key(a_shard), cfg, num_comm_sms, ns), stream,
                    -(-m // cfg.gemm.tile_m) + 1, (_ident(b), _ident(out)), launch)    # and the tile counter
    return out


def gemm_ar(a, b, world, *, out: SymmetricBuffer, b_layout: str = "nk", num_comm_sms="model", stream=None,
            fused: bool | None = None, timeout_ns: int | None = None, timeout: float | None = None) -> SymmetricBuffer:
    """``out`` (M x N, the same on every rank) = sum over ranks of A_r·B_rᵀ for this rank's K-shards.
    ``num_comm_sms``: an int, "auto" (timed once per shape), or "model" (bytes to reduce against the
    GEMM's modelled time, :func:`pkptx.ops.gemm_plan.all_reduce_comm_sms`). At world 1 the sum is the
    partial itself: the plain GEMM on every SM, fused or not."""
    a, b = _operand(a, "a"), _operand(b, "b")
    m, n, k = check_shapes(a.shape, a.dtype, b.shape, b.dtype, b_layout=b_layout)
    if not isinstance(out, SymmetricBuffer) or out.heap.world is not world or out.shape != (m, n):
        raise ArgumentError(f"gemm_ar: out must be a ({m}, {n}) SymmetricBuffer of this world")
    if dtype_name(out.dtype) not in ("bf16", "f16", "f32"):
        raise ArgumentError(f"gemm_ar: out dtype must be bfloat16, float16 or float32, got {out.dtype}")
    if num_comm_sms != "model":
        _check_comm_sms("gemm_ar", num_comm_sms)
    ns = device_timeout_ns(world, timeout, timeout_ns, "gemm_ar: timeout")
    if world.size == 1:
        gemm(a, b, out.local, b_layout=b_layout, stream=stream, timeout_ns=ns)
        return out
    state = heap_ops("gemm_ar", out, world, stream)
    cfg = ar_kernel.Config(_plan(a, b, out.dtype, b_layout, m, n, k), multicast=out.multicast_ptr is not None)
    if num_comm_sms == "model":
        num_comm_sms = all_reduce_comm_sms(m, n, k, out.dtype.itemsize, world.size, context_sm_count(),
                                           (cfg.gemm.tile_m, cfg.gemm.tile_n))
    if fused is None:
        fused = overlap_pays(m, n, cfg.gemm, world.size, context_sm_count(), row_sharded=False)
    if not fused:
        gemm(a, b, out.local, b_layout=b_layout, stream=stream)
        return collectives.all_reduce(out, world, stream=stream, timeout_ns=ns)
    num_comm_sms = _comm_sms("gemm_ar", num_comm_sms, lambda c: gemm_ar(
        a, b, world, out=out, b_layout=b_layout, num_comm_sms=c, stream=stream, fused=True,
        timeout_ns=ns), world, (m, n, k))
    def launch(done: FlagArray):
        kernel = load(ar_kernel.build, cfg, state.device)
        return _prepare(state, kernel, cfg.gemm, ns, num_comm_sms=num_comm_sms,
                        **_gemm_args(cfg.gemm, tensor_map(a, (cfg.gemm.tile_m, TILE_K)), b, k, m, n),
                        tmap_c=tensor_map(out.local, cfg.gemm.c_box), m=m, n=n,
                        **state.layout_args("c", out), **state.layout_args("done", done.buffer))

    slots = -(-m // cfg.gemm.tile_m) * -(-n // cfg.gemm.tile_n) * world.size * cfg.gemm.consumers
    _run_with_flags(state, "gemm_ar", ("gemm_ar", buffer_key(out), cfg, num_comm_sms, ns), stream,
                    slots + 2, (_ident(a), _ident(b)), launch)     # and the two task counters
    return out
