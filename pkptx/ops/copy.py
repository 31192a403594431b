"""``bulk_copy``: device-to-device copy through shared memory with TMA bulk copies (``cp.async.bulk``).

An SM-driven alternative to the copy engine (``cuMemcpyDtoDAsync``): one issuing thread per CTA, so
it can run beside compute kernels or inside a captured graph with everything else. On the H200 it
reaches 0.96 of cuMemcpyDtoDAsync at 1 GiB (bench/RESULTS.md).
"""
from __future__ import annotations

from ..launch import Device, LaunchConfig
from ..launch.array import DeviceArray
from ..launch.occupancy import context_sm_count
from ..launch.status import device_status, device_timeout_ns
from ..templates.kernels import copy as kernel
from .common import ArgumentError, load
from .launches import launch


def bulk_copy(dst: DeviceArray, src: DeviceArray, nbytes: int | None = None, *, config: kernel.Config | None = None,
              ctas_per_sm: int = kernel.CTAS_PER_SM, stream=None, timeout_ns: int | None = None, timeout: float | None = None) -> DeviceArray:
    """Copy the first ``nbytes`` (default: all of ``src``) of ``src`` into ``dst``; returns ``dst``.

    Both must be contiguous device arrays on the current device; ``nbytes`` a multiple of 16 that fits
    both (TMA moves 16-byte units). Queued on ``stream``; a copy that stalls past the timeout
    (``timeout=`` seconds, default ``PKPTX_TIMEOUT_S`` or 60 s) is reported by :func:`pkptx.synchronize`."""
    for name, arr in (("dst", dst), ("src", src)):
        if not isinstance(arr, DeviceArray) or not arr.is_contiguous:
            raise ArgumentError(f"bulk_copy: {name} must be a contiguous DeviceArray, got {type(arr).__name__}")
        if arr.ptr % 16:
            raise ArgumentError(f"bulk_copy: {name} address {arr.ptr:#x} must be 16-byte aligned")
    nbytes = src.nbytes if nbytes is None else nbytes
    if not isinstance(nbytes, int) or nbytes % 16 or not 0 <= nbytes <= min(src.nbytes, dst.nbytes):
        raise ArgumentError(f"bulk_copy: nbytes={nbytes!r} must be a multiple of 16 in 0..{min(src.nbytes, dst.nbytes)}"
                            " (the smaller array)")
    if not isinstance(ctas_per_sm, int) or not 1 <= ctas_per_sm <= 32:
        raise ArgumentError(f"bulk_copy: ctas_per_sm must be an int in 1..32, got {ctas_per_sm!r}")
    if nbytes == 0:
        return dst
    launch("bulk_copy", (dst, src), (nbytes, config, ctas_per_sm, timeout_ns, timeout), stream,
           lambda: _prepare(dst, src, nbytes, config or kernel.Config(), ctas_per_sm,
                            device_timeout_ns(None, timeout, timeout_ns, "bulk_copy: timeout")))
    return dst


def _prepare(dst, src, nbytes, cfg, ctas_per_sm, timeout_ns):
    device = Device.current()
    launchable = load(kernel.build, cfg, device)
    grid = min(context_sm_count(device) * ctas_per_sm, -(-nbytes // cfg.chunk))     # no block waits on another
    return launchable.prepare(LaunchConfig(grid, launchable.threads), dst=dst.ptr, src=src.ptr, nbytes=nbytes,
                              status=device_status(device).ptr, timeout_ns=timeout_ns).launch
