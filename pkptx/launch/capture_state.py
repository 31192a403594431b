"""Whether a stream is being captured into a CUDA graph, for the calls a capture forbids.

During capture some calls invalidate the capture (and every later launch in it fails with
CUDA_ERROR_STREAM_CAPTURE_INVALIDATED): synchronous copies, memsets, allocations and frees,
context or stream synchronisation, queries, and a stream-ordered free of memory the graph did not
allocate. pkptx asks here before such a call and defers or refuses it.
"""
from __future__ import annotations

from .driver import check, driver, ensure_init


def capturing(stream) -> bool:
    """Whether work queued on ``stream`` (a CUstream, a handle, or None for the legacy stream) would be
    captured or is forbidden by a capture: ``cuStreamIsCapturing`` says ACTIVE or INVALIDATED, or
    (the legacy stream while a blocking stream captures) CUDA_ERROR_STREAM_CAPTURE_IMPLICIT."""
    ensure_init()
    cu = driver()
    handle = stream if isinstance(stream, cu.CUstream) else cu.CUstream(0 if stream is None else int(stream))
    err, status = cu.cuStreamIsCapturing(handle)
    if err == cu.CUresult.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT:
        return True
    check((err,), "cuStreamIsCapturing")
    return status != cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE
