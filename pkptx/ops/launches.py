"""Launches of the ops on local arrays (gemm, grouped_gemm, attention, attention_merge), made once per
set of operands and replayed: a repeated call costs a dict lookup and one ``cuLaunchKernelEx``.

The first call with given operands imports them (DLPack), checks every argument, plans the schedule,
encodes the tensor maps and packs the arguments into a :class:`pkptx.launch.PreparedLaunch`; that
launch is kept under a key made of what the launch depends on: each operand's address, shape, strides
and dtype, read straight from a DeviceArray or a torch tensor's attributes (no DLPack import), plus the
op's options. A later call with an equal key launches it. Two arrays with equal keys are the same
memory seen the same way, so a launch made for one is right for the other, even after the first was
freed and the memory reused. A cached launch keeps addresses and tensor maps, never the operands
themselves, so it pins no user memory. Operands of other producers (CuPy, JAX) get no key: their calls
take the full path every time.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable

from ..launch import Device, TensorMap, from_dlpack
from ..launch.array import DeviceArray
from ..launch.device import stream_handle
from ..launch.status import device_status

MAX_LAUNCHES = 512
MAX_TENSOR_MAPS = 256

_launches: OrderedDict = OrderedDict()
_tensor_maps: dict = {}


def array(x, op: str, name: str, error: type) -> DeviceArray:
    """Operand ``x`` as a DeviceArray (a DLPack device array is viewed, not copied), or ``error``."""
    if isinstance(x, DeviceArray):
        return x
    try:
        return from_dlpack(x)
    except Exception as exc:
        raise error(f"{op}: {name} must be a DeviceArray or a DLPack device array, got {type(x).__name__}") from exc


def tensor_map(arr: DeviceArray, box: tuple, swizzle: int | None = 128) -> TensorMap:
    """The tiled map of ``arr`` with ``box`` (128-byte swizzle unless given), over its address alone (it
    keeps no reference to the array); encoded once per address, shape, strides, dtype, box and swizzle."""
    key = (arr.ptr, arr.shape, arr.strides, arr.dtype, box, swizzle)
    tmap = _tensor_maps.get(key)
    if tmap is None:
        if len(_tensor_maps) >= MAX_TENSOR_MAPS:
            _tensor_maps.pop(next(iter(_tensor_maps)))
        tmap = _tensor_maps[key] = TensorMap.tiled(arr.ptr, dtype=arr.dtype, shape=arr.shape, box=box, swizzle=swizzle,
                                                   strides_bytes=tuple(st * arr.itemsize for st in arr.strides))
    return tmap


def task_counter(op: str, stream) -> DeviceArray:
    """The two u32 words a drawn kernel of ``op`` takes its tasks from, one pair per op and stream:
    launches on one stream run one after another, and each leaves the pair at 0 for the next (a
    timed-out one may not; the device status's clear zeroes them)."""
    return device_status(Device.current()).zeroed_words((f"{op} tasks", stream_handle(stream)), 2)


def operand_key(x):
    """What a launch depends on of operand ``x`` (address, shape, strides, dtype), without importing it;
    None when ``x`` is of a kind that has no cheap key (then the call is never cached)."""
    if type(x) is DeviceArray:
        return x.ptr, x.shape, x.strides, x.dtype
    if x is None:
        return ()
    data_ptr, stride = getattr(x, "data_ptr", None), getattr(x, "stride", None)
    if data_ptr is None or stride is None:
        return None
    try:                                   # torch: the same facts from the tensor's own attributes
        return data_ptr(), x.shape, stride(), x.dtype
    except TypeError:
        return None


def launch_key(op: str, operands: tuple, options: tuple) -> tuple | None:
    """The cache key of a call: the op, its operands' keys and its options; None (not cached) when an
    operand has no key."""
    keys = tuple(operand_key(x) for x in operands)
    return None if None in keys else (op, keys, options)


def launch(op: str, operands: tuple, options: tuple, stream, make: Callable[[], Callable]) -> None:
    """Queue the launch of one call of ``op`` on ``stream``: the launch (a callable of the stream) kept
    under the call's key (its operands, ``options`` and the stream), else ``make()``'s, which is kept
    unless an operand has no key. The whole repeated call of a local op is this function."""
    key = launch_key(op, operands, options + (stream_handle(stream),))
    if key is None:
        make()(stream)
        return
    step = _launches.get(key)
    if step is None:
        step = _launches[key] = make()
        if len(_launches) > MAX_LAUNCHES:
            _launches.popitem(last=False)
    else:
        _launches.move_to_end(key)
    step(stream)


def clear() -> None:
    """Forget every cached launch."""
    _launches.clear()
