"""How many blocks of a kernel can be resident at once in this context: the grid rule of every
persistent pkptx kernel.

A persistent kernel whose blocks wait on each other deadlocks when some of them are never resident. So
its grid is never a constant or the device's SM count: it is the SMs the *context* may use (under MPS
with ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``, or in a green context, fewer than the device has; read with
``cuCtxGetExecAffinity``) times the blocks per SM the occupancy calculator allows for the kernel's
block size and shared memory. Even this does not promise residency while other work shares the GPU,
which is why the kernels also take their roles from launch tickets (:mod:`pkptx.templates.progress`).
"""
from __future__ import annotations

from ..errors import CudaError, LaunchError
from .device import Device
from .driver import call, driver


def context_sm_count(device: Device | None = None) -> int:
    """SMs the current context of ``device`` may use (its execution affinity), cached per context."""
    device = (device or Device.current()).set_current()
    key = int(device.context)
    count = _sm_counts.get(key)
    if count is None:
        cu = driver()
        try:
            affinity = call("cuCtxGetExecAffinity", cu.CUexecAffinityType.CU_EXEC_AFFINITY_TYPE_SM_COUNT)
            count = int(affinity.param.smCount.val) or device.sm_count
        except CudaError:       # CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY: no limit beyond the device's
            count = device.sm_count
        count = _sm_counts[key] = min(count, device.sm_count)
    return count


_sm_counts: dict[int, int] = {}


def partial_context(device: Device | None = None) -> bool:
    """Whether the current context of ``device`` may use fewer SMs than the device has (an MPS share, a
    green context): there a grid's blocks need not all be resident at once."""
    device = device or Device.current()
    return context_sm_count(device) < device.sm_count


def blocks_per_sm(kernel, threads: int, smem: int) -> int:
    """``cuOccupancyMaxActiveBlocksPerMultiprocessor`` for a loaded kernel at this block and dynamic
    shared memory (the dynamic limit is raised first, so large windows are counted, not refused)."""
    fn = kernel.function
    fn.ensure_dynamic_smem(smem)
    key = (id(fn), threads, smem)
    count = _per_sm.get(key)
    if count is None:
        count = _per_sm[key] = int(call("cuOccupancyMaxActiveBlocksPerMultiprocessor", fn.handle, threads, smem))
    return count


_per_sm: dict[tuple, int] = {}


def persistent_grid(kernel, *, work: int | None = None) -> int:
    """Blocks for a persistent launch of ``kernel`` (at the block and dynamic shared memory it declares):
    what can be resident in this context, and no more than ``work`` blocks' worth of tasks. At least 1."""
    threads, smem = kernel.threads, kernel.compiled.dynamic_smem
    resident = context_sm_count(kernel.device) * blocks_per_sm(kernel, threads, smem)
    if resident < 1:
        raise LaunchError(f"{kernel.compiled.entry}: no block of {threads} threads with {smem} bytes of shared "
                          "memory fits on an SM")
    return max(1, min(resident, work if work is not None else resident))
