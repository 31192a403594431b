"""Shared host plumbing for the ops: the error of a bad argument, dtype names, kernel loading."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..errors import ArgumentError
from ..launch import Device, LoadedKernel
from ..toolchain import build_cached

_loaded: dict = {}
_DTYPE_NAMES = {np.dtype(ml_dtypes.bfloat16): "bf16", np.dtype(np.float16): "f16", np.dtype(np.float32): "f32"}


def dtype_name(dtype) -> str | None:
    """The kernels' name of ``dtype`` ("bf16", "f16", "f32"), or None for any other dtype."""
    try:
        return _DTYPE_NAMES.get(np.dtype(dtype))
    except (TypeError, ValueError):
        return None


def load(factory, config, device: Device) -> LoadedKernel:
    """The kernel ``factory(config)`` built (cached on disk) and loaded on ``device`` (cached)."""
    key = (factory.__module__, factory.__qualname__, config, device.ordinal)   # a module may have several builds
    kernel = _loaded.get(key)
    if kernel is None:
        kernel = _loaded[key] = LoadedKernel.load(build_cached(factory, config), device)
    return kernel


__all__ = ["ArgumentError", "dtype_name", "load"]
