"""Host APIs of the fused kernels: ``ag_gemm``, ``gemm_rs``, ``gemm_ar`` (pk-design 7).

Each checks its arguments before any GPU work, keeps per-buffer flag arrays whose counters only grow
(the launch count is the epoch), and launches one persistent kernel: ``num_comm_sms`` communicator
blocks (AG+GEMM, GEMM+AR) beside the compute blocks.
"""
from __future__ import annotations

import numpy as np

from ..launch import Device, DeviceArray, empty, from_numpy
from ..launch.flags import FlagArray
from ..launch.status import DEFAULT_TIMEOUT_NS, device_status
from ..launch.symmetric import SymmetricBuffer
from ..launch.tensormap import TensorMap
from ..templates.gemm_parts import TILE_K
from ..templates.kernels import ag_gemm as ag_kernel
from ..templates.kernels import gemm as gemm_kernel
from ..templates.kernels import gemm_ar as ar_kernel
from ..templates.kernels import gemm_rs as rs_kernel
from . import collectives
from .common import ArgumentError, load, ordered_args
from .gemm import _NAMES, _as_array, _tensor_map, check_shapes, choose_config

_MASK32 = (1 << 32) - 1
_epochs: dict = {}
_flag_arrays: dict = {}
_tmap_tables: dict = {}


def _epoch(key) -> int:
    _epochs[key] = (_epochs.get(key, 0) + 1) & _MASK32
    return _epochs[key]


def _flags(buf: SymmetricBuffer, count: int) -> FlagArray:
    """A flag array beside ``buf`` (same heap), made once per buffer and count."""
    key = (id(buf.heap), buf.offset, count)
    if key not in _flag_arrays:
        _flag_arrays[key] = FlagArray(buf.heap, count)
    return _flag_arrays[key]


def _peer_tensor_maps(buf: SymmetricBuffer, shape, box) -> DeviceArray:
    """A device table of every rank's tensor map over ``buf`` (one 128-byte map per rank)."""
    key = (id(buf.heap), buf.offset, tuple(shape), box)
    if key not in _tmap_tables:
        maps = b"".join(TensorMap.tiled(ptr, buf.dtype, shape, box=box, swizzle=128).data for ptr in buf.peer_ptrs)
        _tmap_tables[key] = from_numpy(np.frombuffer(maps, dtype=np.uint8).copy())
    return _tmap_tables[key]


def _launch(kernel, cfg, buf: SymmetricBuffer, world, *, num_comm_sms: int, rounds: int, stream, timeout_ns,
            **values) -> None:
    state = collectives._state(buf)
    device = Device.current()
    grid = device.sm_count
    args = dict(values, rank=world.rank, world=world.size, status=device_status(device).ptr, timeout_ns=timeout_ns,
                num_comm_sms=num_comm_sms, barrier_base=state.total,
                **state.layout_args("flags", state.flags.buffer))
    kernel[grid, 128 * (1 + cfg.consumers), cfg.smem_bytes](*ordered_args(kernel, args), stream=stream)
    state.total = (state.total + rounds * world.size * grid) & _MASK32


def _plan(a: DeviceArray, b: DeviceArray, out_dtype, b_layout: str, m: int, n: int, k: int) -> gemm_kernel.Config:
    device = Device.current()
    return choose_config(m, n, k, _NAMES[str(a.dtype)], _NAMES[str(out_dtype)], b_layout,
                         sm_count=device.sm_count, smem_limit=device.smem_per_block_optin)


def _gemm_args(cfg, a_map_source, b: DeviceArray, k: int, m: int, n: int) -> dict:
    return dict(tmap_a=a_map_source, tmap_b=_tensor_map(b, cfg.b_box), k=k, tiles_m=-(-m // cfg.tile_m),
                tiles_n=-(-n // cfg.tile_n))


def gemm_rs(a, b_shard, world, *, out: SymmetricBuffer, b_layout: str = "nk", stream=None,
            timeout_ns: int = DEFAULT_TIMEOUT_NS) -> SymmetricBuffer:
    """``out`` (M/W x N) on rank r = rows r·M/W.. of sum over ranks of A_r·B_rᵀ. A_r (M x K_r) and B_r
    are this rank's K-shards. ``out`` is zeroed here and reduced into by every rank's kernel."""
    a, b = _as_array(a, "a"), _as_array(b_shard, "b_shard")
    m, n, k = check_shapes(a.shape, a.dtype, b.shape, b.dtype, b_layout=b_layout)
    if not isinstance(out, SymmetricBuffer) or out.heap.world is not world:
        raise ArgumentError("gemm_rs: out must be a SymmetricBuffer of this world")
    if m % world.size or out.shape != (m // world.size, n) or _NAMES.get(str(out.dtype)) not in ("bf16", "f32"):
        raise ArgumentError(f"gemm_rs: out must be a ({m // world.size}, {n}) bf16 or f32 buffer with "
                            f"M = {m} divisible by the world size {world.size}; got {out.shape} {out.dtype}")
    cfg = rs_kernel.Config(_plan(a, b, out.dtype, b_layout, m, n, k))
    rows = m // world.size
    if rows % cfg.gemm.tile_m:
        raise ArgumentError(f"gemm_rs: M / world = {rows} must be a multiple of the {cfg.gemm.tile_m}-row tile")
    out.local.fill(0, stream=stream)
    kernel = load(rs_kernel.build, cfg, Device.current())
    c_maps = _peer_tensor_maps(out, out.shape, cfg.gemm.c_box)
    _launch(kernel, cfg.gemm, out, world, num_comm_sms=0, rounds=2, stream=stream, timeout_ns=timeout_ns,
            **_gemm_args(cfg.gemm, _tensor_map(a, (cfg.gemm.tile_m, TILE_K)), b, k, m, n),
            rows_per_rank=rows, c_tmaps=c_maps)
    return out


def ag_gemm(a_shard: SymmetricBuffer, b, world, *, out=None, b_layout: str = "nk", num_comm_sms: int = 4,
            stream=None, timeout_ns: int = DEFAULT_TIMEOUT_NS) -> DeviceArray:
    """C (M x N_r) = all-gather of A's row shards, times this rank's B_r. ``a_shard`` is a symmetric
    (M x K) buffer in which this rank has written its rows [r·M/W, (r+1)·M/W); the kernel fills in the
    rest on every rank while it computes."""
    if not isinstance(a_shard, SymmetricBuffer) or a_shard.heap.world is not world:
        raise ArgumentError("ag_gemm: a_shard must be a SymmetricBuffer of this world (the full M x K shape)")
    b = _as_array(b, "b")
    out_dtype = out.dtype if out is not None else a_shard.dtype
    m, n, k = check_shapes(a_shard.shape, a_shard.dtype, b.shape, b.dtype, b_layout=b_layout)
    cfg = ag_kernel.Config(_plan(a_shard.local, b, out_dtype, b_layout, m, n, k))
    if m % world.size or (m // world.size) % cfg.gemm.tile_m:
        raise ArgumentError(f"ag_gemm: M / world = {m}/{world.size} must be a multiple of {cfg.gemm.tile_m}")
    if not 1 <= num_comm_sms < Device.current().sm_count:
        raise ArgumentError(f"ag_gemm: num_comm_sms must be in 1..{Device.current().sm_count - 1}")
    out = _as_array(out, "out") if out is not None else empty((m, n), a_shard.dtype)
    ready = _flags(a_shard, -(-m // cfg.gemm.tile_m))
    kernel = load(ag_kernel.build, cfg, Device.current())
    state = collectives._state(a_shard)
    _launch(kernel, cfg.gemm, a_shard, world, num_comm_sms=num_comm_sms, rounds=1, stream=stream,
            timeout_ns=timeout_ns, **_gemm_args(cfg.gemm, _tensor_map(a_shard.local, (cfg.gemm.tile_m, TILE_K)), b,
                                               k, m, n),
            tmap_c=_tensor_map(out, cfg.gemm.c_box), rows_per_rank=m // world.size, row_bytes=k * 2,
            epoch=_epoch(("ag", id(ready))), **state.layout_args("a", a_shard),
            **state.layout_args("ready", ready.buffer))
    return out


def gemm_ar(a, b, world, *, out: SymmetricBuffer, b_layout: str = "nk", num_comm_sms: int = 8, stream=None,
            timeout_ns: int = DEFAULT_TIMEOUT_NS) -> SymmetricBuffer:
    """``out`` (M x N, the same on every rank) = sum over ranks of A_r·B_rᵀ for this rank's K-shards."""
    a, b = _as_array(a, "a"), _as_array(b, "b")
    m, n, k = check_shapes(a.shape, a.dtype, b.shape, b.dtype, b_layout=b_layout)
    if not isinstance(out, SymmetricBuffer) or out.heap.world is not world or out.shape != (m, n):
        raise ArgumentError(f"gemm_ar: out must be a ({m}, {n}) SymmetricBuffer of this world")
    if _NAMES.get(str(out.dtype)) not in ("bf16", "f16", "f32"):
        raise ArgumentError(f"gemm_ar: out dtype must be bfloat16, float16 or float32, got {out.dtype}")
    if not 1 <= num_comm_sms < Device.current().sm_count:
        raise ArgumentError(f"gemm_ar: num_comm_sms must be in 1..{Device.current().sm_count - 1}")
    cfg = ar_kernel.Config(_plan(a, b, out.dtype, b_layout, m, n, k), multicast=out.multicast_ptr is not None)
    tiles = -(-m // cfg.gemm.tile_m) * -(-n // cfg.gemm.tile_n)
    done = _flags(out, tiles)
    kernel = load(ar_kernel.build, cfg, Device.current())
    state = collectives._state(out)
    _launch(kernel, cfg.gemm, out, world, num_comm_sms=num_comm_sms, rounds=1, stream=stream, timeout_ns=timeout_ns,
            **_gemm_args(cfg.gemm, _tensor_map(a, (cfg.gemm.tile_m, TILE_K)), b, k, m, n),
            tmap_c=_tensor_map(out.local, cfg.gemm.c_box), m=m, n=n, epoch=_epoch(("ar", id(done))),
            **state.layout_args("c", out), **state.layout_args("done", done.buffer))
    return out
