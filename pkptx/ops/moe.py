"""Mixture-of-experts host APIs: ``grouped_gemm`` (one persistent launch over groups whose sizes live on
the GPU), and over a symmetric heap ``moe_dispatch``, ``moe_dispatch_gemm`` and ``moe_combine``.

Every argument is checked before any GPU work; the ``check_*`` functions do those checks on shapes and
dtypes alone, so they run without a GPU. Nothing here synchronizes with the host: group sizes,
routing counts and slots stay on the device.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..launch import Device, LaunchConfig, as_dtype, empty
from ..launch.array import DeviceArray
from ..launch.flags import FlagArray
from ..launch.occupancy import context_sm_count, persistent_grid
from ..launch.status import device_status, device_timeout_ns
from ..launch.symmetric import SymmetricBuffer, SymmetricHeap
from ..templates.gemm_parts import TILE_K
from ..templates.kernels import grouped_gemm as grouped_kernel
from ..templates.kernels import moe_combine as combine_kernel
from ..templates.kernels import moe_dispatch as dispatch_kernel
from ..templates.kernels import moe_dispatch_gemm as fused_kernel
from .common import ArgumentError, dtype_name, load
from .gemm import choose_config
from .launches import array, launch, launch_key, tensor_map
from .plan import HeapOps, Kept, buffer_key, heap_ops, heap_state, run_kept


class MoeArgumentError(ArgumentError):
    """A grouped_gemm or MoE argument of the wrong shape, dtype or value (raised before any GPU work)."""


def _as_array(x, name: str) -> DeviceArray:
    return array(x, "moe", name, MoeArgumentError)


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
    tiles_m = -(-t // g.tile_m) + e          # every group adds at most one partial tile
    tiles_n = -(-n // g.tile_n)
    values = dict(tmap_a=tensor_map(x, (g.tile_m, TILE_K)), tmap_b=tensor_map(w, cfg.w_box),
                  tmap_c=tensor_map(out, g.c_box), k=k, tiles_m=tiles_m, tiles_n=tiles_n, offsets=offsets.ptr,
                  groups=e, rows=t, n=n, out=out.ptr)
    return values, tiles_m * tiles_n


def grouped_gemm(x, w, offsets, *, out=None, w_layout: str = "nk", stream=None,
                 config: grouped_kernel.Config | None = None, timeout_ns: int | None = None,
                 timeout: float | None = None):
    """``out[offsets[g-1]:offsets[g]] = x[offsets[g-1]:offsets[g]] · w[g]ᵀ`` (``w_layout="nk"``: w is
    E x N x K) or ``· w[g]`` (``"kn"``: E x K x N) for every group g, in one launch; ``offsets`` (int32,
    E entries, on the GPU, non-decreasing) holds each group's end row, as torch._grouped_mm's ``offs``.
    Rows past ``offsets[-1]`` are left as they were. Returns ``out`` (the caller's object; default: a new
    array of x's dtype). A repeated call with the same operands launches what the first prepared."""
    if out is None:
        xa, wa, oa = _as_array(x, "x"), _as_array(w, "w"), _as_array(offsets, "offsets")
        t, n, _, _ = check_grouped(xa.shape, xa.dtype, wa.shape, wa.dtype, oa.shape, oa.dtype, w_layout=w_layout)
        out = empty((t, n), xa.dtype, stream=stream)
    launch("grouped_gemm", (x, w, offsets, out), (w_layout, config, timeout_ns, timeout), stream,
           lambda: _prepare_grouped(x, w, offsets, out, w_layout, config, timeout_ns, timeout))
    return out


def _prepare_grouped(x, w, offsets, out, w_layout, config, timeout_ns, timeout):
    """The checked, planned and packed launch of one grouped GEMM (a no-op for no rows)."""
    x, w, offsets, out = (_as_array(a, name) for name, a in (("x", x), ("w", w), ("offsets", offsets), ("out", out)))
    t, n, k, e = check_grouped(x.shape, x.dtype, w.shape, w.dtype, offsets.shape, offsets.dtype, out.shape, out.dtype,
                               w_layout=w_layout)
    for name, arr in (("x", x), ("w", w), ("offsets", offsets), ("out", out)):
        _need(arr.is_contiguous, f"grouped_gemm: {name} must be C-contiguous")
    ns = device_timeout_ns(None, timeout, timeout_ns, "grouped_gemm: timeout")
    if t == 0:
        return lambda stream: None
    device = Device.current()
    cfg = config or plan_grouped(t, n, k, e, dtype_name(x.dtype), dtype_name(out.dtype), w_layout,
                                 sm_count=context_sm_count(device), smem_limit=device.smem_per_block_optin)
    _need(cfg.gemm.b_layout == w_layout and cfg.max_groups >= e,
          f"grouped_gemm: config {cfg.name} does not serve w_layout={w_layout!r} with {e} groups")
    kernel = load(grouped_kernel.build, cfg, device)
    values, work = grouped_args(cfg, x, w, offsets, out, t, n, k, e)
    grid = persistent_grid(kernel, work=work)
    return kernel.prepare(LaunchConfig(grid, kernel.threads), **values, rank=0, world=1,
                          status=device_status(device).ptr, timeout_ns=ns, num_comm_sms=0).launch


# ------------------------------------------------------------------------------------ expert parallelism

@dataclass(frozen=True)
class Routing:
    """Shapes of one rank's side of a dispatch (the same on every rank)."""
    tokens: int
    topk: int
    hidden: int
    num_experts: int
    world: int
    dtype: np.dtype

    @property
    def local(self) -> int:
        return self.num_experts // self.world

    @property
    def capacity(self) -> int:
        """Rows a rank can receive: every pair of every rank (all tokens to one rank's experts)."""
        return self.world * self.tokens * self.topk

    @property
    def blocks(self) -> int:
        return -(-self.capacity // dispatch_kernel.BLOCK_ROWS)


def check_routing(x_shape, x_dtype, ids_shape, ids_dtype, weights_shape, weights_dtype, world_size: int,
                  num_experts) -> Routing:
    """The dispatch's shapes after checking every rule; no GPU needed."""
    fn = "moe_dispatch"
    _need(isinstance(num_experts, int) and not isinstance(num_experts, bool) and num_experts >= 1,
          f"{fn}: num_experts must be a positive int, got {num_experts!r}")
    _need(num_experts % world_size == 0, f"{fn}: num_experts = {num_experts} must split evenly over the world "
          f"size {world_size} (experts per rank = num_experts / world)")
    _need(num_experts <= dispatch_kernel.Config().max_experts,
          f"{fn}: num_experts = {num_experts} is over the {dispatch_kernel.Config().max_experts} the route kernel "
          "holds")
    _need(len(x_shape) == 2 and x_shape[0] >= 1, f"{fn}: x must be 2-D (tokens x hidden) with a token, got "
          f"shape {tuple(x_shape)}")
    t, h = x_shape
    _need(dtype_name(x_dtype) in ("bf16", "f16"), f"{fn}: x must be bfloat16 or float16, got {x_dtype}")
    _need(h % 16 == 0 and h > 0, f"{fn}: hidden = {h} must be a positive multiple of 16")
    _need(len(ids_shape) == 2 and ids_shape[0] == t and ids_shape[1] >= 1,
          f"{fn}: topk_ids must be ({t}, k) for the {t} tokens of x, got {tuple(ids_shape)}")
    _need(np.dtype(ids_dtype) == np.int32, f"{fn}: topk_ids must be int32, got {ids_dtype}")
    _need(tuple(weights_shape) == tuple(ids_shape), f"{fn}: topk_weights must have topk_ids' shape "
          f"{tuple(ids_shape)}, got {tuple(weights_shape)}")
    _need(np.dtype(weights_dtype) == np.float32, f"{fn}: topk_weights must be float32, got {weights_dtype}")
    routing = Routing(t, ids_shape[1], h, num_experts, world_size, np.dtype(x_dtype))
    _need(routing.capacity < 2**31, f"{fn}: {routing.capacity} receive rows must fit in int32 slots")
    return routing


class _MoeState:
    """Per heap and routing shape: the symmetric buffers (receive rows, count matrix, arrival counters,
    ready flags with route's launch count) and the per-rank outputs of route (slots, receive layout)."""

    def __init__(self, ops: HeapOps, r: Routing):
        heap = ops.heap
        self.recv = heap.alloc((r.capacity, r.hidden), r.dtype)
        self.counts = heap.alloc((r.world, r.num_experts), np.uint32)
        self.arrivals = heap.alloc((r.blocks + 1,), np.uint32)      # and the fused GEMM's tile counter
        # kept by the heap's ops on its own, so that heap.reset() zeroes it (route counts its launches there)
        self.ready = ops.kept(("moe ready", r), lambda: FlagArray(heap, dispatch_kernel.READY_WORDS))
        self.slots = empty((r.tokens, r.topk), np.int32)
        self.order = empty((r.tokens * r.topk,), np.int32)
        self.offsets = empty((r.local,), np.int32)


def _moe_state(heap: SymmetricHeap, r: Routing) -> _MoeState:
    """The layer's buffers for this routing shape on ``heap``, made on first use, gone with the heap."""
    ops = heap_ops("moe_dispatch", heap, heap.world)
    return ops.kept(("moe", r), lambda: _MoeState(ops, r))


@dataclass
class Dispatch:
    """What a dispatch leaves on this rank. ``recv`` (capacity x hidden): rows grouped by local expert,
    ``offsets`` (int32, local experts): each expert's end row there (``grouped_gemm``'s offsets);
    ``slots`` (int32, tokens x k): where each pair landed on its expert's owner (-1: dropped); the
    routing it came from. Lives until the next dispatch of the same shapes on the same heap."""
    recv: DeviceArray
    offsets: DeviceArray
    slots: DeviceArray
    topk_ids: DeviceArray
    topk_weights: DeviceArray
    routing: Routing
    heap: SymmetricHeap


def _check_dispatch(x, topk_ids, topk_weights, world, num_experts, heap) -> tuple:
    """(x, topk_ids, topk_weights as DeviceArrays, Routing) after every check; no GPU work."""
    _need(isinstance(heap, SymmetricHeap) and heap.world is world,
          "moe_dispatch: heap must be a SymmetricHeap of the world passed")
    x, ids, weights = _as_array(x, "x"), _as_array(topk_ids, "topk_ids"), _as_array(topk_weights, "topk_weights")
    r = check_routing(x.shape, x.dtype, ids.shape, ids.dtype, weights.shape, weights.dtype, world.size, num_experts)
    for name, arr in (("x", x), ("topk_ids", ids), ("topk_weights", weights)):
        _need(arr.is_contiguous, f"moe_dispatch: {name} must be C-contiguous")
    return x, ids, weights, r


def _route(ids, weights, r: Routing, heap, timeout_ns) -> tuple[HeapOps, object, Dispatch, _MoeState]:
    """(the heap's ops, route's prepared launch: counts, exchange, slots, send order and the receive
    layout, the Dispatch it leaves, the layer's buffers)."""
    state = _moe_state(heap, r)
    kernel = load(dispatch_kernel.build_route, dispatch_kernel.Config(), Device.current())
    ops = heap_state(state.recv)
    route = ops.prepare(kernel, timeout_ns, work=1, ids=ids.ptr, pairs=r.tokens * r.topk, experts=r.num_experts,
                        local=r.local, slots=state.slots.ptr, order=state.order.ptr, recv_offsets=state.offsets.ptr,
                        blocks=r.blocks, **ops.layout_args("counts", state.counts),
                        **ops.layout_args("ready", state.ready.buffer), **ops.layout_args("arrivals", state.arrivals))
    return ops, route, Dispatch(state.recv.local, state.offsets, state.slots, ids, weights, r, heap), state


def _push_values(d: Dispatch, x: DeviceArray, state: _MoeState) -> dict:
    r, layouts = d.routing, heap_state(state.recv)
    return dict(x=x.ptr, pairs=r.tokens * r.topk, topk=r.topk, row_bytes=r.hidden * r.dtype.itemsize,
                ids=d.topk_ids.ptr, slots=d.slots.ptr, order=state.order.ptr, local=r.local,
                **layouts.layout_args("recv", state.recv),
                **layouts.layout_args("arrivals", state.arrivals))


def _kept(op: str, heap, world, key, stream, make):
    """What a call returns, its launches kept under ``key`` (None: never kept) by :func:`.plan.run_kept`;
    ``make()`` checks everything and returns (the heap's ops, the prepared launches, the result)."""
    _need(isinstance(heap, SymmetricHeap) and heap.world is world,
          f"{op}: heap must be a SymmetricHeap of the world passed")

    def kept():
        ops, launches, result = make()
        return ops, Kept(launches, result)
    return run_kept(op, heap, world, key, stream, kept).result


def moe_dispatch(x, topk_ids, topk_weights, world, num_experts: int, *, heap: SymmetricHeap, stream=None,
                 timeout_ns: int | None = None, timeout: float | None = None) -> Dispatch:
    """Send each token's row (x: tokens x hidden, bf16/f16) to the ranks owning its ``topk_ids``
    (int32, tokens x k; experts split evenly, rank d owns ``[d·E/W, (d+1)·E/W)``); rows arrive in
    ``Dispatch.recv`` grouped by local expert. Two launches (route, push), no host sync; when the
    stream reaches the end of the push, every rank's rows for this rank have arrived. Every rank passes
    the same shapes. A repeated call with the same operands launches what the first prepared."""
    op = "moe_dispatch"

    def make():
        xa, ids, weights, r = _check_dispatch(x, topk_ids, topk_weights, world, num_experts, heap)
        ns = device_timeout_ns(world, timeout, timeout_ns, f"{op}: timeout")
        ops, route, d, state = _route(ids, weights, r, heap, ns)
        cfg = dispatch_kernel.Config()
        push = ops.prepare(load(dispatch_kernel.build, cfg, Device.current()), ns,
                           work=-(-r.tokens * r.topk // cfg.warps), **_push_values(d, xa, state))
        return ops, (route, push), d
    key = launch_key(op, (x, topk_ids, topk_weights), (num_experts, timeout_ns, timeout))
    return _kept(op, heap, world, key, stream, make)


def default_comm_sms(blocks: int) -> int:
    """Pushing blocks of :func:`moe_dispatch_gemm` when the caller names none: a quarter of the ``blocks``
    the context holds, 1 to 16. Since pushers compute once their rows are out, the choice matters little:
    under MPS (bench/RESULTS.md 2026-12-05, DeepSeek-V3 and Mixtral shapes) 4, 8 and 16 are within 7 % of
    each other at 2 ranks (66 SMs) and 4 % at 4 ranks (32 SMs)."""
    return max(1, min(16, blocks // 4))


def moe_dispatch_gemm(x, topk_ids, topk_weights, w, world, num_experts: int, *, heap: SymmetricHeap, out=None,
                      w_layout: str = "nk", num_comm_sms: int | None = None, stream=None,
                      timeout_ns: int | None = None, timeout: float | None = None) -> tuple[Dispatch, DeviceArray]:
    """:func:`moe_dispatch` fused with the first expert GEMM: ``out[rows of local expert l] =
    recv[rows of l] · w[l]ᵀ`` (w: local experts x N x hidden, or x hidden x N for ``"kn"``), whose tiles
    start as soon as their rows have arrived. ``num_comm_sms`` blocks push rows, the rest compute, and the
    pushers join them once their rows are out (each pushing SM keeps ~170 KB of rows in flight). Default
    (:func:`default_comm_sms`): a quarter of the blocks the context holds, at most 16.
    Returns (the Dispatch, out: capacity x N; rows past the received ones are left as they were). A
    repeated call with the same operands and ``out`` launches what the first prepared (``out=None``: a
    new array every call, so nothing is kept)."""
    op = "moe_dispatch_gemm"

    def make():
        xa, ids, weights, r = _check_dispatch(x, topk_ids, topk_weights, world, num_experts, heap)
        ns = device_timeout_ns(world, timeout, timeout_ns, f"{op}: timeout")
        wa = _as_array(w, "w")
        outa = _as_array(out, "out") if out is not None else None
        out_dtype = outa.dtype if outa is not None else r.dtype
        _, n, k, e = check_grouped((r.capacity, r.hidden), r.dtype, wa.shape, wa.dtype, (wa.shape[0],), np.int32,
                                   outa.shape if outa is not None else None, out_dtype, w_layout=w_layout)
        _need(wa.is_contiguous, f"{op}: w must be C-contiguous")
        _need(e == r.local, f"{op}: w must hold this rank's {r.local} experts (num_experts / world), got {e}")
        device = Device.current()
        grouped = plan_grouped(r.capacity, n, k, e, dtype_name(r.dtype), dtype_name(out_dtype), w_layout,
                               sm_count=context_sm_count(device), smem_limit=device.smem_per_block_optin)
        kernel = load(fused_kernel.build, fused_kernel.Config(grouped), device)
        blocks = persistent_grid(kernel)
        comm = default_comm_sms(blocks) if num_comm_sms is None else num_comm_sms
        _need(isinstance(comm, int) and not isinstance(comm, bool) and 1 <= comm < blocks,
              f"{op}: num_comm_sms must be in 1..{blocks - 1} (the blocks this context holds at once, less one for "
              f"the GEMM), got {comm!r}")
        if outa is None:
            outa = empty((r.capacity, n), as_dtype(out_dtype), stream=stream)
        ops, route, d, state = _route(ids, weights, r, heap, ns)
        values, _ = grouped_args(grouped, d.recv, wa, d.offsets, outa, r.capacity, n, k, e)
        fused = ops.prepare(kernel, ns, num_comm_sms=comm, **values, **_push_values(d, xa, state))
        return ops, (route, fused), (d, outa)
    key = None if out is None else launch_key(op, (x, topk_ids, topk_weights, w, out),
                                              (num_experts, w_layout, num_comm_sms, timeout_ns, timeout))
    return _kept(op, heap, world, key, stream, make)


def moe_combine(y: SymmetricBuffer, dispatch: Dispatch, world, *, out=None, stream=None,
                timeout_ns: int | None = None, timeout: float | None = None) -> DeviceArray:
    """Bring the expert outputs back: ``out[t] = sum_k topk_weights[t, k] · y_owner[slot[t, k]]`` for this
    rank's tokens, where ``y`` (a capacity x N symmetric buffer, bf16/f16) holds each rank's expert
    outputs in its receive order (e.g. the second grouped GEMM's output over ``dispatch.offsets``).
    ``out``: tokens x N, bf16, f16 or f32 (default y's dtype; None: a new array every call, so nothing is
    kept). One launch between two rank barriers; a repeated call with the same operands launches what
    the first prepared."""
    op = "moe_combine"
    _need(isinstance(dispatch, Dispatch), f"{op}: dispatch must be what moe_dispatch returned, got "
          f"{type(dispatch).__name__}")
    _need(isinstance(y, SymmetricBuffer) and y.heap.world is world,
          f"{op}: y must be a SymmetricBuffer of the world passed (peers read it)")
    r = dispatch.routing

    def make():
        ns = device_timeout_ns(world, timeout, timeout_ns, f"{op}: timeout")
        _need(len(y.shape) == 2 and y.shape[0] == r.capacity and y.shape[1] % 8 == 0,
              f"{op}: y must be ({r.capacity}, N) with N a multiple of 8 (the receive capacity), got {y.shape}")
        _need(dtype_name(y.dtype) in ("bf16", "f16"), f"{op}: y must be bfloat16 or float16, got {y.dtype}")
        n = y.shape[1]
        outa = _as_array(out, "out") if out is not None else empty((r.tokens, n), y.dtype, stream=stream)
        _need(outa.shape == (r.tokens, n) and outa.is_contiguous and dtype_name(outa.dtype) in ("bf16", "f16", "f32"),
              f"{op}: out must be a contiguous ({r.tokens}, {n}) bf16, f16 or f32 array, got {outa.shape} "
              f"{outa.dtype}")
        cfg = combine_kernel.Config(dtype=dtype_name(y.dtype), out_dtype=dtype_name(outa.dtype))
        kernel = load(combine_kernel.build, cfg, Device.current())
        units = r.tokens * (n // 8)
        ops = heap_state(y)
        combine = ops.prepare(kernel, ns, work=-(-units // kernel.threads), ids=dispatch.topk_ids.ptr,
                              slots=dispatch.slots.ptr, weights=dispatch.topk_weights.ptr, units=units,
                              row_units=n // 8, topk=r.topk, local=r.local, out=outa.ptr, **ops.layout_args("y", y))
        return ops, (combine,), outa
    key = None if out is None else launch_key(op, (dispatch.topk_ids, dispatch.slots, dispatch.topk_weights, out),
                                              (buffer_key(y), r, timeout_ns, timeout))
    return _kept(op, y.heap, world, key, stream, make)


__all__ = ["grouped_gemm", "check_grouped", "plan_grouped", "MoeArgumentError", "moe_dispatch", "moe_dispatch_gemm",
           "moe_combine", "check_routing", "Dispatch", "Routing"]
