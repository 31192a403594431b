"""NCCL-style host APIs over symmetric buffers: one kernel launch per collective, no reset kernel.

``all_reduce(buf, world, op="sum", out=None, stream=None)``, ``all_gather(buf, world, dim=, out=)``,
``reduce_scatter(buf, world, dim=, op=, out=)`` and ``all_to_all(buf, world, scatter_dim=,
gather_dim=, out=)`` queue the collective on ``stream`` and return at once. The ``out`` rule (every op):
``out=None`` means in place where the op has an in-place form (all_reduce, all_gather, reduce_scatter),
and is refused where it has none (all_to_all). A rank that never joins makes the others' kernels give
up after the timeout (``timeout=`` seconds, default the world's); :func:`synchronize` then raises a
DeviceTimeoutError naming it on every waiting rank, and marks the heap out of step until
``heap.reset()``. Every argument is checked before any GPU work; the ``check_*`` functions do those
checks (and plan the launch) on shapes and dtypes alone, without a GPU. The first call with given
arguments builds a plan (:mod:`.plan`); later calls, and graph replays, only launch it.
"""
from __future__ import annotations

import functools

import numpy as np

from ..launch import Device
from ..launch.device import as_stream
from ..launch.status import DEFAULT_TIMEOUT_NS, device_timeout_ns
from ..launch.symmetric import SymmetricBuffer
from ..templates.kernels import all_gather as all_gather_kernel
from ..templates.kernels import all_reduce as all_reduce_kernel
from ..templates.kernels import all_to_all as all_to_all_kernel
from ..templates.kernels import reduce_scatter as reduce_scatter_kernel
from ..templates.runs import MAX_UNITS, RunMap, normalize_dim, split_at, unit_bytes
from .common import ArgumentError, dtype_name, load
from .plan import Plan, buffer_key, check_status, heap_ops, lookup

OPS = ("sum", "max", "min")
__all__ = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "synchronize", "DEFAULT_TIMEOUT_NS"]


def _check_buffer(fn: str, name: str, buf, world) -> str:
    if not isinstance(buf, SymmetricBuffer):
        raise ArgumentError(f"{fn}: {name} must be a SymmetricBuffer (SymmetricHeap.alloc), got "
                            f"{type(buf).__name__}")
    if buf.heap.world is not world:
        raise ArgumentError(f"{fn}: {name} belongs to another World than the one passed")
    dtype = dtype_name(buf.dtype)
    if dtype is None:
        raise ArgumentError(f"{fn}: {name} dtype must be bfloat16, float16 or float32, got {buf.dtype}")
    return dtype


def all_reduce(buf: SymmetricBuffer, world, *, op: str = "sum", out: SymmetricBuffer | None = None,
               algorithm: str = "auto", stream=None, timeout_ns: int | None = None,
               timeout: float | None = None) -> SymmetricBuffer:
    """Reduce ``buf`` over every rank into ``out`` (default: in place, into ``buf``).

    ``algorithm``: "one_shot" (each rank reads every peer's whole buffer; out of place only),
    "two_shot" (each rank reduces one slice and writes it everywhere), or "auto". Multimem forms are
    used when the heap has a multicast mapping. Returns the buffer holding the result.
    """
    key = ("all_reduce", buffer_key(buf), buffer_key(out), op, algorithm, timeout_ns, timeout)
    state, plan = lookup("all_reduce", buf, world, key)
    if plan is None:
        cfg, n_vec, work, ns = _check_all_reduce(buf, world, op, out, algorithm, timeout_ns, timeout)
        state = heap_ops("all_reduce", buf, world, stream)

        def make() -> Plan:
            kernel = load(all_reduce_kernel.build, cfg, state.device)
            launch = state.prepare(kernel, ns, work=-(-work // kernel.threads), n_vec=n_vec,
                                   **state.layout_args("src", buf), **state.layout_args("dst", out or buf))
            return Plan([launch.launch])
        plan = state.make("all_reduce", key, stream, make)
    state.run(plan, plan.steps, stream)
    return buf if out is None else out


def _check_all_reduce(buf, world, op, out, algorithm, timeout_ns, timeout):
    """(kernel Config, vectors, vectors of work, timeout ns) for an all-reduce, or ArgumentError; no GPU."""
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
    ns = device_timeout_ns(world, timeout, timeout_ns, "all_reduce: timeout")
    multicast = buf.multicast_ptr is not None and (out or buf).multicast_ptr is not None and op == "sum"
    cfg = all_reduce_kernel.Config(dtype=dtype, op=op, algorithm=algorithm, multicast=multicast)
    n_vec = -(-buf.nbytes // 16)        # heap allocations are padded to 16 bytes
    return cfg, n_vec, -(-n_vec // world.size) if algorithm == "two_shot" else n_vec, ns


# ------------------------------------------------------------------ collectives along tensor dims
def _dim(fn: str, what: str, dim, ndim: int) -> int:
    try:
        return normalize_dim(dim, ndim)
    except ValueError as exc:
        raise ArgumentError(f"{fn}: {what}: {exc}") from None


def _same_dtype(fn: str, dtype, out_dtype) -> str:
    name = dtype_name(dtype)
    if name is None:
        raise ArgumentError(f"{fn}: dtype must be bfloat16, float16 or float32, got {dtype}")
    if str(out_dtype) != str(dtype):
        raise ArgumentError(f"{fn}: out dtype must be {dtype} like the input, got {out_dtype}")
    return name


def _world(fn: str, world_size, rank) -> None:
    """The plans divide by ``world_size`` and index by ``rank``: refuse what no world has."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ArgumentError(f"{fn}: world_size={world_size!r}: expected an int >= 1")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ArgumentError(f"{fn}: rank={rank!r}: expected an int in 0..{world_size - 1}")


def _divisible(fn: str, shape, dim: int, world_size: int, what: str) -> None:
    if shape[dim] % world_size:
        raise ArgumentError(f"{fn}: {what} {shape}[{dim}] = {shape[dim]} must be a multiple of the world "
                            f"size {world_size}")


def _want_shape(fn: str, got, want) -> None:
    if tuple(got) != tuple(want):
        raise ArgumentError(f"{fn}: out must have shape {tuple(want)}, got {tuple(got)}")


def _in_units(fn: str, elements_map: RunMap, itemsize: int) -> tuple[int, RunMap]:
    """(unit width in bytes, the map in units), or ArgumentError when the unit index would not fit."""
    width = unit_bytes(elements_map.run * itemsize)
    units = elements_map.in_units(width // itemsize)
    if units.units > MAX_UNITS:
        raise ArgumentError(f"{fn}: {units.units} units of {width} bytes per rank is more than one launch "
                            f"indexes ({MAX_UNITS}); split the tensor")
    return width, units


def _memoized(check):
    """``check`` with its plans remembered (they depend on shapes alone, and planning costs more host
    time than the launch); unhashable arguments skip the memo so the checks can name them."""
    memo = functools.lru_cache(maxsize=256)(check)

    @functools.wraps(check)
    def plan(*args, **kwargs):
        try:
            return memo(*args, **kwargs)
        except TypeError:
            return check(*args, **kwargs)
    return plan


@_memoized
def check_all_gather(shape, dtype, out_shape, out_dtype, world_size: int, rank: int, *, dim, in_place: bool,
                     multicast: bool = False) -> tuple[all_gather_kernel.Config, RunMap]:
    """Check an all-gather of shards of ``shape`` into ``out_shape`` (in place: ``shape`` is the
    output's, the shard its slot ``rank``) and plan it: (kernel Config, this rank's RunMap in units).
    ``multicast``: the output has a multicast mapping. Raises ArgumentError; needs no GPU."""
    fn, shape = "all_gather", tuple(shape)
    _world(fn, world_size, rank)
    _same_dtype(fn, dtype, out_dtype)
    d = _dim(fn, "dim", dim, len(shape))
    if in_place:
        _divisible(fn, shape, d, world_size, "in place, the output")
        shard = shape[:d] + (shape[d] // world_size,) + shape[d + 1:]
    else:
        shard = tuple(shape)
        _want_shape(fn, out_shape, shard[:d] + (shard[d] * world_size,) + shard[d + 1:])
    outer, mid, inner = split_at(shard, d)
    elements = all_gather_kernel.run_map(outer, mid, inner, world_size, rank, in_place=in_place)
    width, units = _in_units(fn, elements, np.dtype(dtype).itemsize)
    return all_gather_kernel.Config(width=width, multicast=multicast and width == 16), units


@_memoized
def check_reduce_scatter(shape, dtype, out_shape, out_dtype, world_size: int, rank: int, *, dim, op,
                         in_place: bool, multicast: bool = False) -> tuple[reduce_scatter_kernel.Config, RunMap]:
    """Check a reduce-scatter of ``shape`` (the same on every rank) into ``out_shape`` (in place: the
    result lands in slot ``rank`` of the input) and plan it: (kernel Config, this rank's RunMap in
    units). ``multicast``: the input has a multicast mapping. Raises ArgumentError; needs no GPU."""
    fn, shape = "reduce_scatter", tuple(shape)
    _world(fn, world_size, rank)
    name = _same_dtype(fn, dtype, out_dtype)
    if op not in OPS:
        raise ArgumentError(f"{fn}: op must be one of {OPS}, got {op!r}")
    d = _dim(fn, "dim", dim, len(shape))
    _divisible(fn, shape, d, world_size, "the input")
    if not in_place:
        _want_shape(fn, out_shape, shape[:d] + (shape[d] // world_size,) + shape[d + 1:])
    outer, size, inner = split_at(shape, d)
    elements = reduce_scatter_kernel.run_map(outer, size // world_size, inner, world_size, rank, in_place=in_place)
    width, units = _in_units(fn, elements, np.dtype(dtype).itemsize)
    mc = multicast and reduce_scatter_kernel.switch_reduces(name, op, width)
    return reduce_scatter_kernel.Config(dtype=name, op=op, width=width, multicast=mc), units


@_memoized
def check_all_to_all(shape, dtype, out_shape, out_dtype, world_size: int, rank: int, *, scatter_dim,
                     gather_dim, in_place: bool = False) -> tuple[all_to_all_kernel.Config, RunMap]:
    """Check an all-to-all of ``shape`` into ``out_shape`` and plan it: (kernel Config, this rank's
    RunMap in units). Raises ArgumentError; needs no GPU."""
    fn, shape = "all_to_all", tuple(shape)
    _world(fn, world_size, rank)
    _same_dtype(fn, dtype, out_dtype)
    if in_place:
        raise ArgumentError(f"{fn}: out must be a separate buffer (peers write into it while this rank "
                            "still reads its input)")
    a = _dim(fn, "scatter_dim", scatter_dim, len(shape))
    g = _dim(fn, "gather_dim", gather_dim, len(shape))
    _divisible(fn, shape, a, world_size, "the input")
    _want_shape(fn, out_shape, all_to_all_kernel.out_shape(shape, a, g, world_size))
    elements = all_to_all_kernel.run_map(tuple(shape), a, g, world_size, rank)
    width, units = _in_units(fn, elements, np.dtype(dtype).itemsize)
    return all_to_all_kernel.Config(width=width), units


def _buffers(fn: str, buf, out, world, *, in_place_form: bool = True):
    """Check both buffers; (out, whether in place). ``out=None`` means in place where the op has an
    in-place form."""
    _check_buffer(fn, "buf", buf, world)
    if out is None:
        if not in_place_form:
            raise ArgumentError(f"{fn}: out= is required (this op has no in-place form)")
        out = buf
    _check_buffer(fn, "out", out, world)
    return out, out is buf or (out.heap is buf.heap and out.offset == buf.offset)


def _run_plan(fn: str, key, buf, out, world, stream, timeout_ns, timeout, check, build):
    """The op's plan (``check(out, in_place)`` -> (Config, RunMap) on a miss), run on ``stream``."""
    state, plan = lookup(fn, buf, world, key)
    if plan is None:
        target, in_place = _buffers(fn, buf, out, world, in_place_form=fn != "all_to_all")
        cfg, units = check(target, in_place)
        ns = device_timeout_ns(world, timeout, timeout_ns, f"{fn}: timeout")
        state = heap_ops(fn, buf, world, stream)

        def make() -> Plan:
            kernel = load(build, cfg, state.device)
            launch = state.prepare(kernel, ns, work=-(-units.units // kernel.threads), **units.args(cfg.width),
                                   **state.layout_args("src", buf), **state.layout_args("dst", target))
            return Plan([launch.launch])
        plan = state.make(fn, key, stream, make)
    state.run(plan, plan.steps, stream)
    return buf if out is None else out


def all_gather(buf: SymmetricBuffer, world, *, dim: int, out: SymmetricBuffer | None = None, stream=None,
               timeout_ns: int | None = None, timeout: float | None = None) -> SymmetricBuffer:
    """Concatenate every rank's ``buf`` along ``dim`` into ``out`` on every rank (any dim, any size).

    ``out=buf`` or ``out=None``: in place; ``buf`` then has the output's shape and this rank's shard
    already sits in its slot (``buf[..., rank*m:(rank+1)*m, ...]`` along ``dim``). Multicast stores are
    used when the output has a multicast mapping and rows are a multiple of 16 bytes. Returns ``out``.
    """
    key = ("all_gather", buffer_key(buf), buffer_key(out), dim, timeout_ns, timeout)

    def check(target, in_place):
        return check_all_gather(buf.shape, buf.dtype, target.shape, target.dtype, world.size, buf.rank, dim=dim,
                                in_place=in_place, multicast=target.multicast_ptr is not None)
    return _run_plan("all_gather", key, buf, out, world, stream, timeout_ns, timeout, check,
                     all_gather_kernel.build)


def reduce_scatter(buf: SymmetricBuffer, world, *, dim: int, op: str = "sum", out: SymmetricBuffer | None = None,
                   stream=None, timeout_ns: int | None = None, timeout: float | None = None) -> SymmetricBuffer:
    """Reduce ``buf`` over every rank and give rank r slice r along ``dim`` (``buf.shape[dim]`` a
    multiple of the world size), in ``out``; reduced in f32 for 16-bit inputs.

    ``out=buf`` or ``out=None``: in place; the result lands in this rank's slice of ``buf`` (the rest is
    left as it was). Multimem loads are used when ``buf`` has a multicast mapping and rows are a multiple
    of 16 bytes (not for f32 min/max). Returns ``out``.
    """
    key = ("reduce_scatter", buffer_key(buf), buffer_key(out), dim, op, timeout_ns, timeout)

    def check(target, in_place):
        return check_reduce_scatter(buf.shape, buf.dtype, target.shape, target.dtype, world.size, buf.rank, dim=dim,
                                    op=op, in_place=in_place, multicast=buf.multicast_ptr is not None)
    return _run_plan("reduce_scatter", key, buf, out, world, stream, timeout_ns, timeout, check,
                     reduce_scatter_kernel.build)


def all_to_all(buf: SymmetricBuffer, world, *, scatter_dim: int, gather_dim: int, out: SymmetricBuffer | None = None,
               stream=None, timeout_ns: int | None = None, timeout: float | None = None) -> SymmetricBuffer:
    """Rank r's ``out`` gathers, along ``gather_dim``, chunk r (along ``scatter_dim``) of every rank's
    ``buf``: ``out_r[..., g-chunk s, ...] = buf_s[..., a-chunk r, ...]``; out of place only (``out`` is
    required). Returns ``out``."""
    key = ("all_to_all", buffer_key(buf), buffer_key(out), scatter_dim, gather_dim, timeout_ns, timeout)

    def check(target, in_place):
        return check_all_to_all(buf.shape, buf.dtype, target.shape, target.dtype, world.size, buf.rank,
                                scatter_dim=scatter_dim, gather_dim=gather_dim, in_place=in_place)
    return _run_plan("all_to_all", key, buf, out, world, stream, timeout_ns, timeout, check,
                     all_to_all_kernel.build)


def synchronize(stream=None, *, what: str = "collective") -> None:
    """Wait for the stream (or the device), then raise if any bounded wait timed out; after a timeout,
    every heap launched on since the last check refuses ops until ``heap.reset()`` on every rank."""
    device = Device.current()
    if stream is None:
        device.synchronize()
    else:
        as_stream(stream).synchronize()
    check_status(device, what)
