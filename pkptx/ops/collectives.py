"""NCCL-style host APIs over symmetric buffers: one kernel launch per collective, no reset kernel.

``all_reduce(buf, world, op="sum", out=None, stream=None)`` and friends queue the collective on
``stream`` and return at once. A rank that never joins makes the others' kernels give up after
``timeout_ns``; :func:`synchronize` then raises a DeviceTimeoutError naming it.
"""
from __future__ import annotations

from ..launch import Device
from ..launch.flags import FlagArray
from ..launch.status import DEFAULT_TIMEOUT_NS, device_status
from ..launch.symmetric import SymmetricBuffer
from ..templates.collective import ROUNDS_PER_LAUNCH
from ..templates.kernels import all_reduce as all_reduce_kernel
from .common import ArgumentError, load, ordered_args

DTYPE_NAMES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}
OPS = ("sum", "max", "min")
_MASK32 = (1 << 32) - 1


class _HeapState:
    """Per symmetric heap: the barrier flags and their running total (the same on every rank)."""

    def __init__(self, heap):
        self.flags = FlagArray(heap, 1)
        self.total = 0

    def layout_args(self, name: str, buf: SymmetricBuffer) -> dict:
        return {f"{name}_peers": buf.peer_table_ptr, f"{name}_mc": buf.multicast_ptr or 0}

    def launch(self, kernel, nblocks: int, threads: int, world_size: int, stream, timeout_ns: int,
               **values) -> None:
        device = Device.current()
        args = dict(values, rank=self.flags.buffer.rank, world=world_size, status=device_status(device).ptr,
                    timeout_ns=timeout_ns, num_comm_sms=nblocks, barrier_base=self.total,
                    **self.layout_args("flags", self.flags.buffer))
        kernel[nblocks, threads](*ordered_args(kernel, args), stream=stream)
        self.total = (self.total + ROUNDS_PER_LAUNCH * world_size * nblocks) & _MASK32


_states: dict[int, _HeapState] = {}


def _state(buf: SymmetricBuffer) -> _HeapState:
    state = _states.get(id(buf.heap))
    if state is None:
        state = _states[id(buf.heap)] = _HeapState(buf.heap)
        buf.heap.world.on_close(lambda: _states.pop(id(buf.heap), None))
    return state


def _check_buffer(fn: str, name: str, buf, world) -> str:
    if not isinstance(buf, SymmetricBuffer):
        raise ArgumentError(f"{fn}: {name} must be a SymmetricBuffer (SymmetricHeap.alloc), got "
                            f"{type(buf).__name__}")
    if buf.heap.world is not world:
        raise ArgumentError(f"{fn}: {name} belongs to another World than the one passed")
    dtype = DTYPE_NAMES.get(str(buf.dtype))
    if dtype is None:
        raise ArgumentError(f"{fn}: {name} dtype must be bfloat16, float16 or float32, got {buf.dtype}")
    return dtype


def _grid(n_vec: int, threads: int) -> int:
    return max(1, min(Device.current().sm_count, -(-n_vec // threads)))


def all_reduce(buf: SymmetricBuffer, world, *, op: str = "sum", out: SymmetricBuffer | None = None,
               algorithm: str = "auto", stream=None, timeout_ns: int = DEFAULT_TIMEOUT_NS) -> SymmetricBuffer:
    """Reduce ``buf`` over every rank into ``out`` (default: in place, into ``buf``).

    ``algorithm``: "one_shot" (each rank reads every peer's whole buffer; out of place only),
    "two_shot" (each rank reduces one slice and writes it everywhere), or "auto". Multimem forms are
    used when the heap has a multicast mapping. Returns the buffer holding the result.
    """
    dtype = _check_buffer("all_reduce", "buf", buf, world)
    if op not in OPS:
        raise ArgumentError(f"all_reduce: op must be one of {OPS}, got {op!r}")
    if out is not None:
        _check_buffer("all_reduce", "out", out, world)
        if out.shape != buf.shape or out.dtype != buf.dtype:
            raise ArgumentError(f"all_reduce: out must match buf ({buf.shape}, {buf.dtype}), got "
                                f"({out.shape}, {out.dtype})")
    in_place = out is None or out.offset == buf.offset
    if algorithm == "auto":
        algorithm = "two_shot" if in_place or buf.nbytes > (1 << 20) else "one_shot"
    if algorithm not in ("one_shot", "two_shot"):
        raise ArgumentError(f"all_reduce: algorithm must be auto, one_shot or two_shot, got {algorithm!r}")
    if algorithm == "one_shot" and in_place:
        raise ArgumentError("all_reduce: one_shot needs out= a separate buffer (peers still read buf)")
    multicast = buf.multicast_ptr is not None and (out or buf).multicast_ptr is not None and op == "sum"
    cfg = all_reduce_kernel.Config(dtype=dtype, op=op, algorithm=algorithm, multicast=multicast)
    kernel = load(all_reduce_kernel.build, cfg, Device.current())
    n_vec = -(-buf.nbytes // 16)        # heap allocations are padded to 16 bytes
    work = -(-n_vec // world.size) if algorithm == "two_shot" else n_vec
    state = _state(buf)
    dst = out or buf
    state.launch(kernel, _grid(work, cfg.threads), cfg.threads, world.size, stream, timeout_ns, n_vec=n_vec,
                 **state.layout_args("src", buf), **state.layout_args("dst", dst))
    return dst


def synchronize(stream=None, *, what: str = "collective") -> None:
    """Wait for the stream (or the device), then raise if any bounded wait timed out."""
    device = Device.current()
    if stream is None:
        device.synchronize()
    else:
        stream.synchronize()
    device_status(device).check(what)
