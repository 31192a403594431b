"""Sequence parallelism: ``ring_attention(q, k, v, world, *, causal=False, ...)`` and
``ulysses_attention(q, k, v, world, *, causal=False, ...)``, each one persistent launch.

Layouts as :func:`pkptx.attention`: (B, S, H, D), bf16/f16, D 64/128, K/V heads dividing Q heads. Every
rank passes its sequence shard (S rows, the same S on every rank); the result is its shard of attention
over the whole sequence. Ring, causal: the shard is the rank's zigzag chunks (r and 2·world-1-r of the
full sequence cut into 2·world chunks; :func:`pkptx.templates.kernels.ring_attention.shard`), so S must be
even. Ulysses: the shards are contiguous (rank r holds rows r·S..), heads are split over the ranks.

Each launch has ``num_comm_sms`` communicator blocks (none at world 1; None: chosen from the shapes by
:func:`auto_comm_sms` and agreed by the ranks; when given, as given: no communicator waits on another,
so ranks may differ). The receive buffers
live in a symmetric heap: ``heap=`` one of yours, else a private one per world that
grows (re-made, collectively) when a call needs more. Calls on one rank go on one stream. A rank that
never calls makes the others' kernels give up after the timeout (``timeout=`` seconds, default the
world's; or ``timeout_ns=``); :func:`pkptx.synchronize` then raises
a DeviceTimeoutError naming it. Every argument is checked before any GPU work (``check_ring`` and
``check_ulysses`` do it on shapes alone).

A call's launch is prepared once per operands and options (the key of :func:`.launches.launch_key`) and
kept in the op's plan on the heap (:mod:`.plan`), so a repeated call is a lookup and a launch. The
kernels count their launches in a word of their own flag array (device memory, advanced by each launch:
:func:`pkptx.templates.progress.read_launch_count`), so their arguments never change between calls and a
captured call replays correctly; ``heap.reset()`` zeroes those flags with the heap's own.
"""
from __future__ import annotations

import math

import numpy as np

from ..launch import Device, DeviceArray, empty, from_numpy
from ..launch.flags import FlagArray
from ..launch.status import device_timeout_ns
from ..launch.symmetric import SymmetricHeap
from ..launch.occupancy import context_sm_count
from ..launch.symmetric import SymmetricBuffer
from ..launch.tensormap import TensorMap
from ..templates.kernels import ring_attention as ring_kernel
from ..templates.kernels import ulysses as ulysses_kernel
from .attention import AttentionArgumentError, BOX, check_attention, operand_array, optional_array, shape_dtype
from .common import dtype_name, load
from .launches import launch_key, tensor_map
from .plan import Kept, buffer_key, heap_state, run_kept

SM_FLOPS = 4.5e12             # attention FLOP/s of one H200 SM (bf16; ~600 TFLOP/s over 132 SMs)
MIN_COMM_SMS = 8              # communicators at least (a quarter of the SMs at most): auto_comm_sms
SM_PUSH = 6e9                 # bytes/s a communicator block averaged over the fused launch (ring or Ulysses
                              # pieces): H200, MPS, 2 and 4 ranks, 8 communicators (bench/RESULTS.md
                              # 2026-12-04). Not its copy rate: a block pushes ~40 GB/s alone and 35-37 GB/s
                              # beside an attention (probe/push_probe.py, probe/push_beside_probe.py, H100,
                              # 2026-12-05); kept, as MIN_COMM_SMS decides at every benchmarked shape
HEAP_SLACK = 8 << 20          # room beside the receive buffers for flag arrays and peer tables
BOX5 = (1,) + BOX             # (B, chunk slot, rows, H, D) views: one 64 x 64 box of one (batch, slot, head)


class SequenceArgumentError(AttentionArgumentError):
    """A ring/Ulysses attention argument that cannot work (raised before any GPU work)."""


def _check_shards(op: str, q_shape, q_dtype, k_shape, k_dtype, v_shape, v_dtype, world_size, out_shape, out_dtype,
                  lse_shape, lse_dtype, causal, scale, num_comm_sms, sm_count) -> tuple:
    """What both ops ask of their shards: attention's rules, one shard length, 32-bit indexes."""
    try:
        batch, seq_q, seq_k, heads, kv_heads, dim = check_attention(
            q_shape, q_dtype, k_shape, k_dtype, v_shape, v_dtype, out_shape, out_dtype, lse_shape, lse_dtype,
            causal=causal, scale=scale)
    except AttentionArgumentError as exc:
        raise SequenceArgumentError(str(exc).replace("attention:", f"{op}:", 1)) from None
    if not isinstance(world_size, int) or world_size < 1:
        raise SequenceArgumentError(f"{op}: world size must be a positive int, got {world_size!r}")
    if seq_q != seq_k:
        raise SequenceArgumentError(f"{op}: q and k/v must hold the same shard of the sequence (S = {seq_q} and "
                                    f"{seq_k})")
    if batch * world_size * seq_q * max(heads, 1) >= 2**31:
        raise SequenceArgumentError(f"{op}: B·world·S·H = {batch * world_size * seq_q * heads} must be below 2**31")
    if num_comm_sms is not None:
        limit = (sm_count or 2**31) - 1
        if not isinstance(num_comm_sms, int) or isinstance(num_comm_sms, bool) or not 1 <= num_comm_sms <= limit:
            raise SequenceArgumentError(f"{op}: num_comm_sms must be None or in 1..{limit} (this context's SMs "
                                        f"less one), got {num_comm_sms!r}")
    return batch, seq_q, heads, kv_heads, dim


def auto_comm_sms(comm_bytes: int, flops: float, sm_count: int | None, push: float = SM_PUSH) -> int:
    """Communicator blocks for ``num_comm_sms=None``: enough that the pushes take at most 2/3 of the
    attention's time on this context's SMs (at SM_FLOPS each, ``push`` bytes/s a communicator), at least
    MIN_COMM_SMS and at most a quarter of the SMs. Every task of the first wave needs the peers' data
    long before the attention's end, so too few leave compute blocks waiting (8 communicators beat the
    2-4 that the pushes' volume alone asks for, at every measured shape: with 2-4 the launch took about
    twice the attention). A communicator joins the attention once its pieces are sent, so more cost little
    (8 and 16 measured alike at 2 and 4 ranks, bench/RESULTS.md 2026-12-05 11:32)."""
    sms = sm_count or 132
    compute_s = flops / (sms * SM_FLOPS)
    budget = compute_s * push              # bytes one communicator moves in the attention's time
    need = 1 if comm_bytes == 0 else math.ceil(1.5 * comm_bytes / budget) if budget > 0 else sms
    most = max(1, sms // 4)
    return max(min(MIN_COMM_SMS, most), min(need, most))


def check_ring(q_shape, q_dtype, k_shape, k_dtype, v_shape, v_dtype, world_size: int, out_shape=None,
               out_dtype=None, lse_shape=None, lse_dtype=None, *, causal=False, scale=None, num_comm_sms=None,
               sm_count: int | None = None, config: ring_kernel.Config | None = None) -> dict:
    """The launch plan of a ring attention after checking every rule; no GPU needed."""
    op = "ring_attention"
    batch, seq, heads, kv_heads, dim = _check_shards(op, q_shape, q_dtype, k_shape, k_dtype, v_shape, v_dtype,
                                                     world_size, out_shape, out_dtype, lse_shape, lse_dtype, causal,
                                                     scale, num_comm_sms, sm_count)
    if causal and seq % 2:
        raise SequenceArgumentError(f"{op}: causal needs an even shard length S (the zigzag halves), got {seq}")
    cfg = config or ring_kernel.default_config(dtype_name(q_dtype), dim, causal)
    if type(cfg) is not ring_kernel.Config or \
            (cfg.attention.dtype, cfg.attention.head_dim, cfg.causal) != (dtype_name(q_dtype), dim, causal):
        raise SequenceArgumentError(f"{op}: config must be a ring_attention Config for {dtype_name(q_dtype)}, D={dim}, "
                                    f"causal={causal}, got {config!r}")
    chunk = seq // cfg.halves
    k_blocks = -(-chunk // ring_kernel.KEY_BLOCK)
    q_blocks = -(-chunk // cfg.attention.rows)
    return dict(cfg=cfg, batch=batch, seq=seq, heads=heads, kv_heads=kv_heads, dim=dim, chunk=chunk,
                k_blocks=k_blocks, q_blocks=q_blocks, tasks=batch * heads * cfg.halves * q_blocks,
                pieces=batch * cfg.halves * k_blocks,
                flags=ring_kernel.STARTED + world_size + batch * world_size * cfg.halves * k_blocks,
                row_bytes=kv_heads * dim * 2,
                num_comm_sms=0 if world_size == 1 else num_comm_sms or auto_comm_sms(
                    (world_size - 1) * 2 * batch * seq * kv_heads * dim * 2,
                    4 * batch * heads * seq * world_size * seq * dim * (0.5 if causal else 1.0), sm_count))


def check_ulysses(q_shape, q_dtype, k_shape, k_dtype, v_shape, v_dtype, world_size: int, out_shape=None,
                  out_dtype=None, lse_shape=None, lse_dtype=None, *, causal=False, scale=None, num_comm_sms=None,
                  sm_count: int | None = None) -> dict:
    """The launch plan of a Ulysses attention after checking every rule; no GPU needed."""
    op = "ulysses_attention"
    batch, seq, heads, kv_heads, dim = _check_shards(op, q_shape, q_dtype, k_shape, k_dtype, v_shape, v_dtype,
                                                     world_size, out_shape, out_dtype, lse_shape, lse_dtype, causal,
                                                     scale, num_comm_sms, sm_count)
    if heads % world_size or kv_heads % world_size:
        raise SequenceArgumentError(f"{op}: q heads ({heads}) and K/V heads ({kv_heads}) must both be multiples of "
                                    f"the world size {world_size} (each rank computes H/world heads)")
    group = heads // kv_heads
    cfg = ulysses_kernel.default_config(dtype_name(q_dtype), dim, causal)
    if group > cfg.attention.rows:
        raise SequenceArgumentError(f"{op}: at most {cfg.attention.rows} q heads per K/V head, got {group}")
    rows = ulysses_kernel.piece_rows(group, cfg.attention)
    row_pieces = -(-seq // rows)
    local_kv = kv_heads // world_size
    q_blocks = -(-seq // cfg.attention.rows)
    return dict(cfg=cfg, batch=batch, seq=seq, heads=heads, kv_heads=kv_heads, dim=dim, group=group,
                local_heads=heads // world_size, local_kv_heads=local_kv, q_blocks=q_blocks,
                tasks=batch * (heads // world_size) * world_size * q_blocks, piece_rows=rows, row_pieces=row_pieces,
                pieces=batch * local_kv * (world_size - 1) * row_pieces, piece_bytes=rows * dim * 2 * (group + 2),
                flags=ring_kernel.STARTED + world_size + batch * world_size * local_kv,
                num_comm_sms=0 if world_size == 1 else num_comm_sms or auto_comm_sms(
                    (world_size - 1) * batch * seq * (heads + 2 * kv_heads) * dim * 2 // world_size,
                    4 * batch * heads * (world_size * seq) ** 2 * dim / world_size * (0.5 if causal else 1.0),
                    sm_count))


# ------------------------------------------------------------------ receive buffers in a symmetric heap
class _Workspace:
    """Receive buffers per (purpose, shapes), in the caller's heap or a private one; forgotten when their
    heap closes (a later heap may have the same ``id``). Their flag arrays are kept by the heap's ops
    (:meth:`.plan.HeapOps.kept`), which zero them in ``heap.reset()``."""

    def __init__(self):
        self.private: dict[int, SymmetricHeap] = {}
        self.items: dict[tuple, object] = {}

    def heap(self, world, heap) -> SymmetricHeap | None:
        """``heap``, checked to be a SymmetricHeap of ``world``; for None, this world's private heap (None
        until a call makes it)."""
        if heap is None:
            return self.private.get(id(world))
        if not isinstance(heap, SymmetricHeap) or heap.world is not world:
            raise SequenceArgumentError("heap must be a SymmetricHeap of the world passed (or None)")
        return heap

    def get(self, world, heap, key, nbytes: int, make):
        """``make(heap)`` once per heap (checked by :meth:`heap`) and ``key``; None: the private heap,
        re-made larger when it has no room for ``nbytes`` more (every rank makes the same calls, so every
        rank does it at the same one)."""
        if heap is None:
            heap = self.private.get(id(world))
            if heap is None or heap.closed or ((id(heap), key) not in self.items
                                               and heap.free_bytes < nbytes + HEAP_SLACK):
                if heap is not None and not heap.closed:
                    Device.current().synchronize()            # no kernel still uses the old one
                    heap.close()
                else:
                    world.on_close(lambda: self.private.pop(id(world), None))
                heap = self.private[id(world)] = SymmetricHeap(world, 2 * (nbytes + HEAP_SLACK))
        if (id(heap), key) not in self.items:
            if not any(k[0] == id(heap) for k in self.items):       # its first: the items go with the heap
                heap.on_close(lambda ident=id(heap): self._drop(ident))
            self.items[(id(heap), key)] = make(heap)
        return self.items[(id(heap), key)]

    def _drop(self, ident: int) -> None:
        self.items = {k: v for k, v in self.items.items() if k[0] != ident}


_workspace = _Workspace()


def _view(arr: DeviceArray, shape) -> DeviceArray:
    return DeviceArray.from_pointer(arr.ptr, shape, arr.dtype, owner=arr)


def _inputs(op: str, q, k, v, out, lse):
    q, k, v = (operand_array(x, op, n) for n, x in (("q", q), ("k", k), ("v", v)))
    return q, k, v, optional_array(out, op, "out"), optional_array(lse, op, "lse")


_agreed: dict = {}


def _agree_comm_sms(op: str, world, p: dict, asked) -> int:
    """``num_comm_sms``: the caller's, or the largest of the ranks' automatic choices (their SM shares
    may differ), agreed once per shape, so no rank pushes slower than its peers' model asks. Correctness
    does not depend on it (no communicator waits on another)."""
    if asked is not None or world.size == 1:
        return p["num_comm_sms"]
    key = (op, id(world), p["batch"], p["seq"], p["heads"], p["kv_heads"], p["dim"], p["cfg"])
    if key not in _agreed:
        if not any(k[1] == id(world) for k in _agreed):      # a later World may reuse the id
            world.on_close(lambda: [_agreed.pop(k) for k in list(_agreed) if k[1] == id(world)])
        _agreed[key] = max(world.allgather(p["num_comm_sms"], what=f"{op}: num_comm_sms"))
    return _agreed[key]


def ring_attention(q, k, v, world, *, causal: bool = False, scale: float | None = None, out=None, lse=None,
                   heap: SymmetricHeap | None = None, num_comm_sms: int | None = None, stream=None,
                   timeout_ns: int | None = None, timeout: float | None = None,
                   config: ring_kernel.Config | None = None):
    """This rank's shard of softmax(scale·Q·Kᵀ [+ causal mask]) · V over the whole sequence, the K/V
    shards travelling around the ring inside one launch; ``lse`` (B, H, S) f32 gets the log-sum-exp.
    ``config``: the kernel's (attention and relay; the same on every rank), default
    :func:`ring_attention.default_config`. Returns ``out`` (the caller's object; a new DeviceArray when
    None). A repeated call with the same operands and options launches what the first prepared."""
    op = "ring_attention"
    if out is None:
        q_arr = operand_array(q, op, "q")
        out = empty(q_arr.shape, q_arr.dtype)
    key = launch_key(op, (q, k, v, out, lse), (causal, scale, num_comm_sms, timeout_ns, timeout, config))
    run_kept(op, _workspace.heap(world, heap), world, key, stream, lambda: _ring(op, q, k, v, out, lse, world, heap, causal, scale, num_comm_sms,
                                                     timeout_ns, timeout, config))
    return out


def _ring(op, q, k, v, out, lse, world, heap, causal, scale, num_comm_sms, timeout_ns, timeout, config):
    """(HeapOps, step) of a ring attention call, after every check."""
    q, k, v, out, lse = _inputs(op, q, k, v, out, lse)
    timeout_ns = device_timeout_ns(world, timeout, timeout_ns, f"{op}: timeout")
    p = check_ring(q.shape, q.dtype, k.shape, k.dtype, v.shape, v.dtype, world.size, *shape_dtype(out),
                   *shape_dtype(lse), causal=causal, scale=scale, num_comm_sms=num_comm_sms,
                   sm_count=context_sm_count(), config=config)
    cfg, w, halves = p["cfg"], world.size, p["cfg"].halves
    p["num_comm_sms"] = _agree_comm_sms(op, world, p, num_comm_sms)
    ring_shape = (p["batch"], w * p["seq"], p["kv_heads"], p["dim"])
    ring_bytes = 2 * math.prod(ring_shape) * 2 + 4 * p["flags"]
    key = ("ring", ring_shape, str(q.dtype), halves)
    kr, vr = _workspace.get(world, heap, key, ring_bytes, lambda h: (h.alloc(ring_shape, q.dtype),
                                                                     h.alloc(ring_shape, q.dtype)))
    state = heap_state(kr)
    # a flag reaches `lanes` per launch: kernels of other relay lanes count in flags of their own
    arrive = state.kept(key + ("arrive", cfg.lanes), lambda: FlagArray(kr.heap, p["flags"]))
    device = Device.current()
    kernel = load(ring_kernel.build, cfg, device)
    b, c, heads, kvh, d = p["batch"], p["chunk"], p["heads"], p["kv_heads"], p["dim"]
    maps = dict(tmap_q=_view(q, (b, halves, c, heads, d)), tmap_o=_view(out, (b, halves, c, heads, d)),
                tmap_k=_view(k, (b, halves, c, kvh, d)), tmap_v=_view(v, (b, halves, c, kvh, d)),
                tmap_kr=_view(kr.local, (b, w * halves, c, kvh, d)), tmap_vr=_view(vr.local, (b, w * halves, c, kvh, d)))
    scale = p["dim"] ** -0.5 if scale is None else float(scale)
    launch = state.prepare(kernel, timeout_ns, work=p["tasks"] + p["num_comm_sms"], num_comm_sms=p["num_comm_sms"],
                           **{n: tensor_map(a, BOX5) for n, a in maps.items()},
                           lse=lse.ptr if lse is not None else 0, k_local=k.ptr, v_local=v.ptr, tasks=p["tasks"],
                           q_blocks=p["q_blocks"], heads=heads, group=heads // kvh, chunk=c, k_blocks=p["k_blocks"],
                           pieces=p["pieces"], row_bytes=p["row_bytes"], scale_log2=scale * math.log2(math.e),
                           **state.layout_args("kr", kr), **state.layout_args("vr", vr),
                           **state.layout_args("arrive", arrive.buffer))
    return state, Kept((launch,))


def _map_table(buf: SymmetricBuffer, dtype, shape, box, swizzle) -> DeviceArray:
    """A device table of tensor maps, one per rank's copy of ``buf`` (made once per buffer and box, kept
    with its heap)."""
    def make():
        maps = b"".join(TensorMap.tiled(ptr, dtype, shape, box=box, swizzle=swizzle).data for ptr in buf.peer_ptrs)
        return from_numpy(np.frombuffer(maps, dtype=np.uint8).copy())
    return heap_state(buf).kept(("map_table", tuple(buf.peer_ptrs), str(dtype), tuple(shape), box, swizzle), make)


def _symmetric(op: str, name: str, buf, world, shape, dtype):
    if buf is None:
        return None
    if not isinstance(buf, SymmetricBuffer) or buf.heap.world is not world:
        raise SequenceArgumentError(f"{op}: {name} must be a SymmetricBuffer of this world (peers write into it)")
    if tuple(buf.shape) != tuple(shape) or dtype_name(buf.dtype) != dtype_name(dtype):
        raise SequenceArgumentError(f"{op}: {name} must be {tuple(shape)} {np.dtype(dtype)}, got {buf.shape} {buf.dtype}")
    return buf


def ulysses_attention(q, k, v, world, *, causal: bool = False, scale: float | None = None,
                      out: SymmetricBuffer | None = None, lse: SymmetricBuffer | None = None,
                      heap: SymmetricHeap | None = None, num_comm_sms: int | None = None, stream=None,
                      timeout_ns: int | None = None, timeout: float | None = None) -> SymmetricBuffer:
    """This rank's shard of attention over the whole sequence, each rank computing H/world heads: the
    all-to-all in, the attention and the all-to-all out in one launch. ``out`` (B, S, H, D) and ``lse``
    (B, H, S) f32 are SymmetricBuffers (peers store into them); when None, workspace buffers that the
    next call of the same shapes overwrites. Returns ``out``. A repeated call with the same operands and
    options launches what the first prepared."""
    op = "ulysses_attention"
    key = launch_key(op, (q, k, v), (buffer_key(out), buffer_key(lse), causal, scale, num_comm_sms,
                                     timeout_ns, timeout))
    step = run_kept(op, _workspace.heap(world, heap), world, key, stream, lambda: _ulysses(op, q, k, v, out, lse, world, heap, causal, scale,
                                                               num_comm_sms, timeout_ns, timeout))
    return step.result if out is None else out


def _ulysses(op, q, k, v, out, lse, world, heap, causal, scale, num_comm_sms, timeout_ns, timeout):
    """(HeapOps, step) of a Ulysses attention call, after every check."""
    q, k, v = (operand_array(x, op, n) for n, x in (("q", q), ("k", k), ("v", v)))
    timeout_ns = device_timeout_ns(world, timeout, timeout_ns, f"{op}: timeout")
    p = check_ulysses(q.shape, q.dtype, k.shape, k.dtype, v.shape, v.dtype, world.size, causal=causal, scale=scale,
                      num_comm_sms=num_comm_sms, sm_count=context_sm_count())
    out = _symmetric(op, "out", out, world, q.shape, q.dtype)
    lse = _symmetric(op, "lse", lse, world, (q.shape[0], q.shape[2], q.shape[1]), np.float32)
    cfg, w = p["cfg"], world.size
    p["num_comm_sms"] = _agree_comm_sms(op, world, p, num_comm_sms)
    b, s, d, hl, kvl, group = p["batch"], p["seq"], p["dim"], p["local_heads"], p["local_kv_heads"], p["group"]
    gathered = {"q": (b, w * s, hl, d), "k": (b, w * s, kvl, d), "v": (b, w * s, kvl, d)}
    nbytes = sum(math.prod(x) for x in gathered.values()) * 2 + 4 * p["flags"]

    key = ("ulysses", tuple(q.shape), tuple(k.shape), str(q.dtype))
    bufs = _workspace.get(world, heap, key, nbytes, lambda h: {x: h.alloc(shape, q.dtype)
                                                                for x, shape in gathered.items()})
    state = heap_state(bufs["q"])
    arrive = state.kept(key + ("arrive",), lambda: FlagArray(bufs["q"].heap, p["flags"]))
    if out is None:
        out = _workspace.get(world, heap, key + ("out",), q.nbytes, lambda h: h.alloc(q.shape, q.dtype))
    if lse is None:
        lse = _workspace.get(world, heap, key + ("lse",), 4 * b * q.shape[2] * s,
                             lambda h: h.alloc((b, q.shape[2], s), np.float32))
    device = Device.current()
    kernel = load(ulysses_kernel.build, cfg, device)
    rows = p["piece_rows"]
    heads_of = {"q": (p["heads"], hl, group), "k": (p["kv_heads"], kvl, 1), "v": (p["kv_heads"], kvl, 1)}
    maps, tables = {}, {}
    for x, arr in (("q", q), ("k", k), ("v", v)):
        total, local, box_heads = heads_of[x]
        maps[f"tmap_{x}"] = tensor_map(_view(arr, (b, 1, s, total, d)), BOX5)
        maps[f"tmap_{x}g_local"] = tensor_map(_view(bufs[x].local, (b, w, s, local, d)), BOX5)
        maps[f"tmap_{x}s"] = tensor_map(arr, (1, rows, box_heads, d), swizzle=None)
        tables[f"{x}g_tmaps"] = _map_table(bufs[x], q.dtype, (b, w, s, local, d), (1, 1, rows, box_heads, d),
                                           None)
    tables["o_tmaps"] = _map_table(out, q.dtype, q.shape, BOX, 128)
    scale = d ** -0.5 if scale is None else float(scale)
    launch = state.prepare(kernel, timeout_ns, work=p["tasks"] + p["num_comm_sms"], num_comm_sms=p["num_comm_sms"],
                           **maps, **tables, tasks=p["tasks"], q_blocks=p["q_blocks"], heads=p["heads"],
                           local_heads=hl, local_kv_heads=kvl, group=group, seq=s, piece_rows=rows,
                           row_pieces=p["row_pieces"], pieces=p["pieces"], piece_bytes=p["piece_bytes"],
                           scale_log2=scale * math.log2(math.e), **state.layout_args("arrive", arrive.buffer),
                           **state.layout_args("lse", lse))
    return state, Kept((launch,), out)


__all__ = ["ring_attention", "ulysses_attention", "check_ring", "check_ulysses", "SequenceArgumentError"]
