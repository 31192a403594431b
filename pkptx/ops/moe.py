"""Mixture-of-experts host APIs: ``grouped_gemm`` (one persistent launch over groups whose sizes live on
the GPU), and over a symmetric heap ``moe_dispatch``, ``moe_dispatch_gemm`` and ``moe_combine``.

Every argument is checked before any GPU work; the ``check_*`` functions do those checks on shapes and
dtypes alone, so they run without a GPU. Nothing here synchronizes with the host: group sizes,
routing counts and slots stay on the device.
"""
from __future__ import annotations

import numpy as np

from ..launch import Device, as_dtype, empty
from ..launch.array import DeviceArray
from ..launch.occupancy import context_sm_count, persistent_grid
from ..launch.status import DEFAULT_TIMEOUT_NS, device_status
from ..launch.tensormap import TensorMap
from ..templates.gemm_parts import TILE_K
from ..templates.kernels import grouped_gemm as grouped_kernel
from .common import ArgumentError, dtype_name, load, ordered_args
from .gemm import _as_array, _tensor_map, choose_config


class MoeArgumentError(ArgumentError):
    """A grouped_gemm or MoE argument of the wrong shape, dtype or value (raised before any GPU work)."""


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise MoeArgumentError(message)


def check_grouped(x_shape, x_dtype, w_shape, w_dtype, offsets_shape, offsets_dtype, out_shape=None,
                  out_dtype=None, *, w_layout: str = "nk") -> tuple[int, int, int, int]:
    """(T, N, K, E) after checking every rule of the grouped GEMM; no GPU needed."""
    fn = "grouped_gemm"
    _need(w_layout in ("nk", "kn"), f"{fn}: w_layout must be 'nk' (w is E x N x K) or 'kn' (E x K x N), got "
          f"{w_layout!r}")
    _need(len(x_shape) == 2, f"{fn}: x must be 2-D (T x K), got shape {tuple(x_shape)}")
    _need(len(w_shape) == 3, f"{fn}: w must be 3-D (E x N x K or E x K x N), got shape {tuple(w_shape)}")
    t, k = x_shape
    e, n, kw = (w_shape if w_layout == "nk" else (w_shape[0], w_shape[2], w_shape[1]))
    _need(kw == k, f"{fn}: w{tuple(w_shape)} with w_layout={w_layout!r} has K = {kw}, but x has K = {k}")
    _need(k > 0 and k % 16 == 0, f"{fn}: K = {k} must be a positive multiple of 16")
    _need(n > 0 and n % 16 == 0, f"{fn}: N = {n} must be a positive multiple of 16")
    _need(e >= 1, f"{fn}: w must hold at least one group (expert), got E = {e}")
    _need(dtype_name(x_dtype) in ("bf16", "f16") and str(x_dtype) == str(w_dtype),
          f"{fn}: x and w must both be bfloat16 or both float16, got {x_dtype} and {w_dtype}")
    _need(tuple(offsets_shape) == (e,), f"{fn}: offsets must have shape ({e},) (the end row of each group), "
          f"got {tuple(offsets_shape)}")
    _need(np.dtype(offsets_dtype) == np.int32, f"{fn}: offsets must be int32, got {offsets_dtype}")
    _need(t < 2**31, f"{fn}: T = {t} rows must fit in int32 offsets")
    if out_shape is not None:
        _need(tuple(out_shape) == (t, n), f"{fn}: out must be {t} x {n}, got {tuple(out_shape)}")
    if out_dtype is not None:
        _need(dtype_name(out_dtype) in ("bf16", "f16", "f32"),
              f"{fn}: out dtype must be bfloat16, float16 or float32, got {out_dtype}")
    return t, n, k, e


def max_groups_for(groups: int) -> int:
    """The group table a launch needs: the next power of two (at least 16)."""
    return max(16, 1 << (groups - 1).bit_length())


def plan_grouped(t: int, n: int, k: int, groups: int, dtype: str, out_dtype: str, w_layout: str, *, sm_count: int,
                 smem_limit: int) -> grouped_kernel.Config:
    """The GEMM's tile choice for the rows of all groups (plus a tail tile per group), with the group
    table's bytes taken from the shared-memory budget."""
    table = max_groups_for(groups)
    g = choose_config(t + 64 * groups, n, k, dtype, out_dtype, w_layout, sm_count=sm_count,
                      smem_limit=smem_limit - 4 * (table + 1) - grouped_kernel.STATIC_SLACK)
    return grouped_kernel.Config(g, max_groups=table)


def grouped_args(cfg: grouped_kernel.Config, x: DeviceArray, w: DeviceArray, offsets: DeviceArray,
                 out: DeviceArray, t: int, n: int, k: int, e: int) -> tuple[dict, int]:
    """(kernel arguments of the grouped GEMM's own parameters, upper bound on its tasks)."""
    g = cfg.gemm
    w_box = (1, g.tile_n, TILE_K) if g.b_layout == "nk" else (1, TILE_K, 64)
    tiles_m = -(-t // g.tile_m) + e          # every group adds at most one partial tile
    tiles_n = -(-n // g.tile_n)
    values = dict(tmap_a=_tensor_map(x, (g.tile_m, TILE_K)), tmap_b=_weight_map(w, w_box),
                  tmap_c=_tensor_map(out, g.c_box), k=k, tiles_m=tiles_m, tiles_n=tiles_n, offsets=offsets.ptr,
                  groups=e, rows=t, n=n, out=out.ptr)
    return values, tiles_m * tiles_n


_wmaps: dict = {}


def _weight_map(w: DeviceArray, box) -> TensorMap:
    """The 3-D map over the experts' weights (cached like the GEMM's 2-D maps)."""
    key = (w.ptr, w.shape, str(w.dtype), box)
    if key not in _wmaps:
        if len(_wmaps) >= 64:
            _wmaps.pop(next(iter(_wmaps)))
        _wmaps[key] = TensorMap.tiled(w, box=box, swizzle=128)
    return _wmaps[key]


def grouped_gemm(x, w, offsets, *, out=None, w_layout: str = "nk", stream=None,
                 config: grouped_kernel.Config | None = None, timeout_ns: int = DEFAULT_TIMEOUT_NS) -> DeviceArray:
    """``out[offsets[g-1]:offsets[g]] = x[offsets[g-1]:offsets[g]] · w[g]ᵀ`` (``w_layout="nk"``: w is
    E x N x K) or ``· w[g]`` (``"kn"``: E x K x N) for every group g, in one launch; ``offsets`` (int32,
    E entries, on the GPU, non-decreasing) holds each group's end row, as torch._grouped_mm's ``offs``.
    Rows past ``offsets[-1]`` are left as they were. Returns ``out`` (default: x's dtype)."""
    x, w, offsets = _as_array(x, "x"), _as_array(w, "w"), _as_array(offsets, "offsets")
    out = _as_array(out, "out") if out is not None else None
    out_dtype = out.dtype if out is not None else x.dtype
    t, n, k, e = check_grouped(x.shape, x.dtype, w.shape, w.dtype, offsets.shape, offsets.dtype,
                               out.shape if out is not None else None, out_dtype, w_layout=w_layout)
    for name, arr in (("x", x), ("w", w), ("offsets", offsets)) + ((("out", out),) if out is not None else ()):
        _need(arr.is_contiguous, f"grouped_gemm: {name} must be C-contiguous")
    if out is None:
        out = empty((t, n), as_dtype(out_dtype), stream=stream)
    if t == 0:
        return out
    device = Device.current()
    cfg = config or plan_grouped(t, n, k, e, dtype_name(x.dtype), dtype_name(out_dtype), w_layout,
                                 sm_count=context_sm_count(device), smem_limit=device.smem_per_block_optin)
    _need(cfg.gemm.b_layout == w_layout and cfg.max_groups >= e,
          f"grouped_gemm: config {cfg.name} does not serve w_layout={w_layout!r} with {e} groups")
    kernel = load(grouped_kernel.build, cfg, device)
    values, work = grouped_args(cfg, x, w, offsets, out, t, n, k, e)
    threads = 128 * (1 + cfg.gemm.consumers)
    grid = persistent_grid(kernel, threads, cfg.gemm.smem_bytes, work=work)
    args = ordered_args(kernel, dict(values, rank=0, world=1, status=device_status(device).ptr,
                                     timeout_ns=timeout_ns, num_comm_sms=0))
    kernel[grid, threads, cfg.gemm.smem_bytes](*args, stream=stream)
    return out


__all__ = ["grouped_gemm", "check_grouped", "plan_grouped", "MoeArgumentError"]
