"""``pkptx.gemm(a, b, out=None, stream=None)``: C = A · Bᵀ with the warp-specialized TMA/wgmma kernel."""
from __future__ import annotations

from ..errors import PkptxError
from ..launch import Device, Kernel, TensorMap, as_dtype, empty, from_dlpack
from ..launch.array import DeviceArray
from ..launch.status import DEFAULT_TIMEOUT_NS, device_status
from ..templates.kernels import gemm as kernel
from ..toolchain import build_cached

_NAMES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}
_loaded: dict = {}


class GemmArgumentError(PkptxError, ValueError):
    """A gemm argument of the wrong shape, dtype or layout (raised before any GPU work)."""


def _as_array(x, name: str) -> DeviceArray:
    if isinstance(x, DeviceArray):
        return x
    try:
        return from_dlpack(x)
    except Exception as exc:
        raise GemmArgumentError(f"gemm: {name} must be a DeviceArray or a DLPack device array, got "
                                f"{type(x).__name__}") from exc


def check_shapes(a_shape, a_dtype, b_shape, b_dtype, out_shape=None, out_dtype=None) -> tuple[int, int, int]:
    """(M, N, K) after checking every rule of the kernel; no GPU needed."""
    if len(a_shape) != 2 or len(b_shape) != 2:
        raise GemmArgumentError(f"gemm: a and b must be 2-D, got a{tuple(a_shape)} and b{tuple(b_shape)}")
    (m, k), (n, kb) = a_shape, b_shape
    if kb != k:
        raise GemmArgumentError(f"gemm: b must be N x K with K = a.shape[1] = {k} (C = A·Bᵀ), got b{tuple(b_shape)}")
    for name, value in (("M", m), ("N", n), ("K", k)):
        if value <= 0 or value % 16:
            raise GemmArgumentError(f"gemm: {name} = {value} must be a positive multiple of 16")
    if _NAMES.get(str(a_dtype)) not in ("bf16", "f16") or str(a_dtype) != str(b_dtype):
        raise GemmArgumentError(f"gemm: a and b must both be bfloat16 or both float16, got {a_dtype} and {b_dtype}")
    if out_shape is not None and tuple(out_shape) != (m, n):
        raise GemmArgumentError(f"gemm: out must be {m} x {n}, got {tuple(out_shape)}")
    if out_dtype is not None and _NAMES.get(str(out_dtype)) not in ("bf16", "f16", "f32"):
        raise GemmArgumentError(f"gemm: out dtype must be bfloat16, float16 or float32, got {out_dtype}")
    return m, n, k


def choose_config(m: int, n: int, k: int, dtype: str, out_dtype: str) -> kernel.Config:
    """Tile shape per problem: 128x256 when there are enough tiles to fill the device, else 128x128."""
    sms = Device.current().sm_count
    if (m // 128) * (n // 256) >= sms or n % 256 == 0 and n >= 2048:
        return kernel.Config(dtype=dtype, out_dtype=out_dtype, tile_m=128, tile_n=256, stages=4)
    return kernel.Config(dtype=dtype, out_dtype=out_dtype, tile_m=128, tile_n=128, stages=6)


def gemm(a, b, out=None, *, stream=None, config: kernel.Config | None = None,
         timeout_ns: int = DEFAULT_TIMEOUT_NS) -> DeviceArray:
    """C = A · Bᵀ for A (M x K) and B (N x K), both row-major bf16 or f16; C (M x N) bf16 unless ``out``
    says otherwise. Returns ``out`` (allocated when None)."""
    a, b = _as_array(a, "a"), _as_array(b, "b")
    out = _as_array(out, "out") if out is not None else None
    out_dtype = out.dtype if out is not None else a.dtype
    m, n, k = check_shapes(a.shape, a.dtype, b.shape, b.dtype, out.shape if out is not None else None, out_dtype)
    for name, arr in (("a", a), ("b", b)) + ((("out", out),) if out is not None else ()):
        if not arr.is_contiguous:
            raise GemmArgumentError(f"gemm: {name} must be C-contiguous")
    cfg = config or choose_config(m, n, k, _NAMES[str(a.dtype)], _NAMES[str(out_dtype)])
    if out is None:
        out = empty((m, n), as_dtype(out_dtype))
    device = Device.current()
    key = (cfg, device.ordinal)
    if key not in _loaded:
        _loaded[key] = Kernel.load(build_cached(kernel.build, cfg), device)
    tmap_a = TensorMap.tiled(a, box=(cfg.tile_m, kernel.TILE_K), swizzle=128)
    tmap_b = TensorMap.tiled(b, box=(cfg.tile_n, kernel.TILE_K), swizzle=128)
    tiles_m, tiles_n = -(-m // cfg.tile_m), -(-n // cfg.tile_n)
    grid = min(device.sm_count, tiles_m * tiles_n)
    status = device_status(device)
    _loaded[key][grid, 128 * (1 + cfg.consumers), cfg.smem_bytes](
        tmap_a, tmap_b, out, m, n, k, tiles_m, tiles_n, 0, 1, status.ptr, timeout_ns, 0, stream=stream)
    return out


__all__ = ["gemm", "check_shapes", "choose_config", "GemmArgumentError"]
