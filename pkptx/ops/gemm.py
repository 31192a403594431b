"""``pkptx.gemm(a, b, out=None, *, b_layout="nk", scale_a=None, scale_b=None, stream=None, config=None)``:
the warp-specialized TMA/wgmma GEMM, scheduled per shape by :mod:`.gemm_plan` (tile shape, stages,
deterministic split-K); bf16, f16, or fp8 with per-tensor scales."""
from __future__ import annotations

from dataclasses import replace

import ml_dtypes
import numpy as np

from ..errors import PTXBuildError
from ..launch import Device, LaunchConfig, empty
from ..launch.array import DeviceArray
from ..launch.device import as_stream
from ..launch.occupancy import context_sm_count, partial_context, persistent_grid
from ..launch.status import device_status, device_timeout_ns
from ..templates.gemm_parts import FP8_TYPES, k_block_elements
from ..templates.kernels import gemm as kernel
from .common import ArgumentError, dtype_name, load
from .gemm_plan import MAX_SPLITS, GemmConfig, choose_config, plan, stream_k_split, workspace_bytes
from .launches import array, launch, task_counter, tensor_map


class GemmArgumentError(ArgumentError):
    """A gemm argument of the wrong shape, dtype or layout (raised before any GPU work)."""


_FP8_NAMES = {np.dtype(ml_dtypes.float8_e4m3fn): "e4m3", np.dtype(ml_dtypes.float8_e5m2): "e5m2"}


def _as_array(x, name: str) -> DeviceArray:
    return array(x, "gemm", name, GemmArgumentError)


def input_name(dtype) -> str | None:
    """The kernel's name of an input dtype: bf16, f16, e4m3 (float8_e4m3fn), e5m2, or None."""
    name = dtype_name(dtype)
    if name in ("bf16", "f16"):
        return name
    try:
        return _FP8_NAMES.get(np.dtype(dtype))
    except (TypeError, ValueError):
        return None


def check_shapes(a_shape, a_dtype, b_shape, b_dtype, out_shape=None, out_dtype=None, *,
                 b_layout: str = "nk") -> tuple[int, int, int]:
    """(M, N, K) after checking every rule of the kernel; no GPU needed."""
    if b_layout not in ("nk", "kn"):
        raise GemmArgumentError(f"gemm: b_layout must be 'nk' (B is N x K, C = A·Bᵀ) or 'kn' (B is K x N, "
                                f"C = A·B), got {b_layout!r}")
    if len(a_shape) != 2 or len(b_shape) != 2:
        raise GemmArgumentError(f"gemm: a and b must be 2-D, got a{tuple(a_shape)} and b{tuple(b_shape)}")
    m, k = a_shape
    n, kb = b_shape if b_layout == "nk" else b_shape[::-1]
    if kb != k:
        want = "N x K" if b_layout == "nk" else "K x N"
        raise GemmArgumentError(f"gemm: with b_layout={b_layout!r}, b must be {want} with K = a.shape[1] = {k}, "
                                f"got b{tuple(b_shape)}")
    for name, value, step in (("M", m, 1), ("N", n, 8), ("K", k, 16)):
        if value <= 0 or value % step:
            raise GemmArgumentError(f"gemm: {name} = {value} must be a positive multiple of {step}"
                                    + (" (16-byte rows for TMA)" if name == "N" else ""))
    if input_name(a_dtype) is None or str(a_dtype) != str(b_dtype):
        raise GemmArgumentError(f"gemm: a and b must have one dtype, bfloat16, float16, float8_e4m3fn or float8_e5m2, "
                                f"got {a_dtype} and {b_dtype}")
    if input_name(a_dtype) in FP8_TYPES and b_layout != "nk":
        raise GemmArgumentError("gemm: fp8 a and b need b_layout='nk' (B is N x K): the tensor cores read 8-bit "
                                "operands K-major only")
    if out_shape is not None and tuple(out_shape) != (m, n):
        raise GemmArgumentError(f"gemm: out must be {m} x {n}, got {tuple(out_shape)}")
    if out_dtype is not None and dtype_name(out_dtype) not in ("bf16", "f16", "f32"):
        raise GemmArgumentError(f"gemm: out dtype must be bfloat16, float16 or float32, got {out_dtype}")
    return m, n, k


def check_config(cfg, m: int, n: int, k: int, dtype: str, out_dtype: str, b_layout: str) -> kernel.Config:
    """The kernel of a forced ``config`` after checking it fits this problem; no GPU needed."""
    if not isinstance(cfg, GemmConfig):
        raise GemmArgumentError(f"gemm: config must be a pkptx.ops.gemm.GemmConfig, got {type(cfg).__name__}")
    if cfg.swap and b_layout != "nk":
        raise GemmArgumentError("gemm: config.swap computes Cᵀ = B·Aᵀ from K-major operands: it needs "
                                f"b_layout='nk', got {b_layout!r}")
    depth = k_block_elements(dtype)
    k_blocks = -(-k // depth)
    if not isinstance(cfg.splits, int) or not 1 <= cfg.splits <= min(MAX_SPLITS, k_blocks):
        raise GemmArgumentError(f"gemm: config.splits = {cfg.splits!r} must be in 1..{min(MAX_SPLITS, k_blocks)} "
                                f"(at most one K slice per {depth}-deep k-block, K = {k})")
    try:
        return cfg.kernel_config(dtype, out_dtype, b_layout)
    except PTXBuildError as exc:
        raise GemmArgumentError(f"gemm: config {cfg} is not a legal kernel: {exc}") from None


_workspaces: dict = {}


def _split_workspace(device: Device, stream, cfg: GemmConfig, m: int, n: int,
                     workers: int) -> tuple[DeviceArray, DeviceArray]:
    """(f32 partials, u32 ticket counters) for a split-K or stream-K launch, one pair per device and
    stream, grown on demand. The counters are zeroed once: every launch leaves them at 0 again (the
    arrival that completes a slab resets its counter), so calls need no memset; launches on one stream
    never overlap."""
    part_bytes, slabs = workspace_bytes(cfg, m, n, workers)
    s = as_stream(stream)
    key = (device.ordinal, s.handle)
    have = _workspaces.get(key)
    if have is None or have[0].nbytes < part_bytes or have[1].size < slabs:
        size = max(part_bytes, have[0].nbytes if have else 0)
        count = max(slabs, have[1].size if have else 0)
        have = _workspaces[key] = (empty((size // 4,), np.float32, stream=s),
                                   empty((count,), np.uint32, stream=s).fill(0, stream=s))
    return have


_unit_scales: dict = {}


def _scales(dtype: str, scale_a, scale_b, device: Device, stream) -> dict:
    """The kernel's scale parameters: for fp8 inputs each scale as a one-element float32 device array
    (None: 1.0, one f32 word per device and stream); for 16-bit inputs none may be given."""
    if dtype not in FP8_TYPES:
        for name, scale in (("scale_a", scale_a), ("scale_b", scale_b)):
            if scale is not None:
                raise GemmArgumentError(f"gemm: {name} applies to fp8 inputs only; a and b are {dtype}")
        return {}
    values = {}
    for name, scale in (("scale_a", scale_a), ("scale_b", scale_b)):
        if scale is None:
            key = (device.ordinal, as_stream(stream).handle)
            if key not in _unit_scales:
                _unit_scales[key] = empty((1,), np.float32, stream=stream).fill(1.0, stream=stream)
            scale = _unit_scales[key]
        arr = _as_array(scale, name)
        if arr.dtype != np.float32 or arr.size != 1:
            raise GemmArgumentError(f"gemm: {name} must be a one-element float32 device array (a per-tensor "
                                    f"scale), got {arr.dtype} of shape {arr.shape}")
        values[name] = arr
    return values


def gemm(a, b, out=None, *, b_layout: str = "nk", scale_a=None, scale_b=None, stream=None,
         config: GemmConfig | None = None, timeout_ns: int | None = None, timeout: float | None = None):
    """C = A·Bᵀ (``b_layout="nk"``: B is N x K) or C = A·B (``"kn"``: B is K x N) for row-major bf16/f16
    A (M x K) and B; C (M x N) has A's dtype unless ``out`` (bf16, f16 or f32) is given. fp8 A and B
    (float8_e4m3fn or float8_e5m2, B N x K) give C = scale_a · scale_b · A·Bᵀ, bf16 unless ``out`` says
    otherwise; ``scale_a``/``scale_b`` are one-element float32 device arrays (per-tensor scales, read on
    the GPU: no host sync), None for 1. Returns ``out``
    (the caller's object; a new DeviceArray when None). ``config`` forces a schedule
    (:class:`GemmConfig`: tile, stages, K splits) instead of the model's. Split-K results are
    deterministic: the same bits every run. ``timeout=`` (seconds; default ``PKPTX_TIMEOUT_S`` or 60 s)
    bounds the kernel's waits. In a partial context (an MPS share, a green context) the blocks draw their
    tiles from a counter: not all of them may be resident at once there, and a fixed stride would leave
    the late ones a share to run after the others. A repeated call with the same operands launches what
    the first prepared (:mod:`.launches`)."""
    if out is None:
        a_arr, b_arr = _as_array(a, "a"), _as_array(b, "b")
        m, n, _ = check_shapes(a_arr.shape, a_arr.dtype, b_arr.shape, b_arr.dtype, b_layout=b_layout)
        fp8 = input_name(a_arr.dtype) in FP8_TYPES
        out = empty((m, n), ml_dtypes.bfloat16 if fp8 else a_arr.dtype, stream=stream)
    launch("gemm", (a, b, out, scale_a, scale_b), (b_layout, config, timeout_ns, timeout), stream,
           lambda: _prepare(a, b, out, b_layout, stream, config, timeout_ns, timeout, scale_a, scale_b))
    return out


def _prepare(a, b, out, b_layout, stream, config, timeout_ns, timeout, scale_a, scale_b):
    """The checked, planned and packed launch of one gemm (:meth:`PreparedLaunch.launch`)."""
    a, b, out = _as_array(a, "a"), _as_array(b, "b"), _as_array(out, "out")
    m, n, k = check_shapes(a.shape, a.dtype, b.shape, b.dtype, out.shape, out.dtype, b_layout=b_layout)
    for name, arr in (("a", a), ("b", b), ("out", out)):
        if not arr.is_contiguous:
            raise GemmArgumentError(f"gemm: {name} must be C-contiguous")
    device = Device.current()
    names = input_name(a.dtype), dtype_name(out.dtype)
    scales = _scales(names[0], scale_a, scale_b, device, stream)
    schedule = config or plan(m, n, k, names[1], sm_count=context_sm_count(device),
                              smem_limit=device.smem_per_block_optin, k_major_b=b_layout == "nk",
                              dtype=names[0])
    cfg = replace(check_config(schedule, m, n, k, *names, b_layout), drawn=partial_context(device))
    launchable = load(kernel.build, cfg, device)
    rows, cols = schedule.kernel_problem(m, n)
    first, second = (b, a) if schedule.swap else (a, b)         # swapped: Cᵀ = B·Aᵀ
    tiles_m, tiles_n = -(-rows // cfg.tile_m), -(-cols // cfg.tile_n)
    grid = persistent_grid(launchable, work=tiles_m * tiles_n * schedule.splits)
    values = dict(
        tmap_a=tensor_map(first, (cfg.tile_m, cfg.k_elements)), tmap_b=tensor_map(second, cfg.b_box), k=k,
        tiles_m=tiles_m, tiles_n=tiles_n, rank=0, world=1, status=device_status(device).ptr,
        timeout_ns=device_timeout_ns(None, timeout, timeout_ns, "gemm: timeout"), num_comm_sms=0, **scales)
    if cfg.epilogue == "tma":
        values.update(tmap_c=tensor_map(out, cfg.c_box))
    if cfg.epilogue == "direct" or cfg.c_tail:
        values.update(c=out.ptr, m=rows, n=cols)
    if cfg.drawn:
        values.update(task_counter=task_counter("gemm", stream).ptr)
    if cfg.split_k:                      # the launch keeps its workspace (arrays, not addresses)
        partials, tickets = _split_workspace(device, stream, schedule, m, n, grid)
        values.update(splits=schedule.splits, split_ws=partials, split_tickets=tickets)
    if cfg.stream_k:
        split = stream_k_split(tiles_m * tiles_n, -(-k // cfg.k_elements), grid)
        if split is None:
            raise GemmArgumentError(f"gemm: config {schedule.label} (stream-K) needs whole waves of tiles before a "
                                    f"partly filled one on this context's {grid} blocks: {tiles_m * tiles_n} tiles "
                                    f"of {cfg.tile_m} x {cfg.tile_n} at M x N x K = {m} x {n} x {k}")
        partials, tickets = _split_workspace(device, stream, schedule, m, n, grid)
        values.update(dp_tiles=split[0], sk_workers=grid, sk_ws=partials, sk_tickets=tickets)
    return launchable.prepare(LaunchConfig(grid, launchable.threads), **values).launch


__all__ = ["gemm", "check_shapes", "check_config", "choose_config", "plan", "GemmConfig", "GemmArgumentError"]
