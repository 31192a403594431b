"""``pkptx.attention(q, k, v, *, causal=False, scale=None, out=None, lse=None, stream=None)`` and
``pkptx.attention_merge(out_a, lse_a, out_b, lse_b, *, out=None, lse=None, stream=None)``.

Layout (B, S, H, D), C-contiguous: q (B, S_q, H, D), k and v (B, S_k, H_kv, D) with H_kv dividing H
(grouped-query attention), bf16 or f16, D 64 or 128; out like q; lse (B, H, S_q) float32, the natural
log of each row's softmax denominator (with the scale applied), for merging partial results.
"""
from __future__ import annotations

import math

from ..launch import Device, LaunchConfig, empty
from ..launch.occupancy import context_sm_count, persistent_grid
from ..launch.array import DeviceArray
from ..launch.status import device_status, device_timeout_ns
from ..templates.attention_parts import BOX_COLS, BOX_ROWS, ROWS
from ..templates.kernels import attention as kernel
from ..templates.kernels import attention_merge as merge_kernel
from .common import ArgumentError, dtype_name, load
from .launches import array, launch, task_counter, tensor_map

HEAD_DIMS = (64, 128)
BOX = (1, BOX_ROWS, 1, BOX_COLS)          # one 64-row x 64-column TMA box of one (batch, head)
MERGE_BLOCKS_PER_SM = 8


class AttentionArgumentError(ArgumentError):
    """An attention argument of the wrong shape, dtype or layout (raised before any GPU work)."""


def grid_size(kernel, tasks: int) -> int:
    """Blocks of the persistent attention grid (the one place that sizes it): what this context can hold
    at once (pkptx.launch.occupancy), at most one per task."""
    return persistent_grid(kernel, work=tasks)


def by_query_block(causal: bool, drawn: bool) -> int:
    """The task order (the kernel's ``by_query_block``): 0 keeps the tasks of one (batch, head) together,
    longest first, so the blocks running at once share their heads' K/V in L2; 1 puts one query block
    of every (batch, head) together, which only a causal mask under a fixed stride needs (every block
    then gets a mix of long and short tasks). Drawn tasks balance the lengths by themselves: causal,
    by (batch, head) ran 8-30 % faster at 1-16k keys than by query block (H100, bench/RESULTS.md
    2026-12-06)."""
    return int(causal and not drawn)


def operand_array(x, op: str, name: str) -> DeviceArray:
    arr = array(x, op, name, AttentionArgumentError)
    if not arr.is_contiguous or arr.ptr % 16:
        raise AttentionArgumentError(f"{op}: {name} must be C-contiguous and 16-byte aligned")
    return arr


def _check_like(op: str, name: str, shape, dtype, want_shape, want_dtype) -> None:
    if shape is not None and tuple(shape) != tuple(want_shape):
        raise AttentionArgumentError(f"{op}: {name} must have shape {tuple(want_shape)}, got {tuple(shape)}")
    if dtype is not None and dtype_name(dtype) != want_dtype:
        raise AttentionArgumentError(f"{op}: {name} must be {want_dtype}, got {dtype}")


def check_attention(q_shape, q_dtype, k_shape, k_dtype, v_shape, v_dtype, out_shape=None, out_dtype=None,
                    lse_shape=None, lse_dtype=None, *, causal=False, scale=None) -> tuple:
    """(batch, seq_q, seq_k, heads, kv_heads, head_dim) after checking every rule; no GPU needed."""
    op = "attention"
    for name, shape in (("q", q_shape), ("k", k_shape), ("v", v_shape)):
        if len(shape) != 4 or min(shape) < 1:
            raise AttentionArgumentError(f"{op}: {name} must be 4-D (B, S, H, D) with no empty dimension, "
                                         f"got {tuple(shape)}")
    batch, seq_q, heads, dim = q_shape
    if tuple(k_shape) != tuple(v_shape):
        raise AttentionArgumentError(f"{op}: k and v must have one shape, got {tuple(k_shape)} and {tuple(v_shape)}")
    kb, seq_k, kv_heads, kd = k_shape
    if kb != batch or kd != dim:
        raise AttentionArgumentError(f"{op}: k and v must be (B={batch}, S_k, H_kv, D={dim}) like q, got "
                                     f"{tuple(k_shape)}")
    if dim not in HEAD_DIMS:
        raise AttentionArgumentError(f"{op}: head dim D must be one of {HEAD_DIMS}, got {dim}")
    if heads % kv_heads:
        raise AttentionArgumentError(f"{op}: K/V heads ({kv_heads}) must divide q heads ({heads})")
    dtype = dtype_name(q_dtype)
    if dtype not in ("bf16", "f16") or dtype_name(k_dtype) != dtype or dtype_name(v_dtype) != dtype:
        raise AttentionArgumentError(f"{op}: q, k and v must all be bfloat16 or all float16, got {q_dtype}, "
                                     f"{k_dtype} and {v_dtype}")
    if batch * heads * seq_q >= 2**31 or max(seq_q, seq_k) >= 2**30:
        raise AttentionArgumentError(f"{op}: B·H·S_q = {batch * heads * seq_q} must be below 2**31 and sequences "
                                     "below 2**30 (32-bit indexes)")
    _check_like(op, "out", out_shape, out_dtype, q_shape, dtype)
    _check_like(op, "lse", lse_shape, lse_dtype, (batch, heads, seq_q), "f32")
    if not isinstance(causal, bool):
        raise AttentionArgumentError(f"{op}: causal must be True or False, got {causal!r}")
    if scale is not None and not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise AttentionArgumentError(f"{op}: scale must be None (1/sqrt(D)) or a positive finite number, got {scale!r}")
    return batch, seq_q, seq_k, heads, kv_heads, dim


def optional_array(x, op: str, name: str):
    return None if x is None else operand_array(x, op, name)


def shape_dtype(arr):
    return (None, None) if arr is None else (arr.shape, arr.dtype)


def attention(q, k, v, *, causal: bool = False, scale: float | None = None, out=None, lse=None, stream=None,
              config: kernel.Config | None = None, timeout_ns: int | None = None, timeout: float | None = None):
    """softmax(scale·Q·Kᵀ [+ causal mask, aligned bottom-right]) · V per (batch, head); returns ``out``
    (the caller's object; allocated like q when None) and writes the per-row log-sum-exp into ``lse``
    when it is given. A repeated call with the same operands launches what the first prepared."""
    if out is None:
        q_arr = operand_array(q, "attention", "q")
        out = empty(q_arr.shape, q_arr.dtype, stream=stream)
    launch("attention", (q, k, v, out, lse), (causal, scale, config, timeout_ns, timeout), stream,
           lambda: _prepare(q, k, v, out, lse, causal, scale, config, timeout_ns, timeout, stream))
    return out


def _prepare(q, k, v, out, lse, causal, scale, config, timeout_ns, timeout, stream):
    """The checked and packed launch of one attention call."""
    q, k, v, out = (operand_array(x, "attention", n) for n, x in (("q", q), ("k", k), ("v", v), ("out", out)))
    lse = optional_array(lse, "attention", "lse")
    batch, seq_q, seq_k, heads, kv_heads, dim = check_attention(
        q.shape, q.dtype, k.shape, k.dtype, v.shape, v.dtype, out.shape, out.dtype, *shape_dtype(lse),
        causal=causal, scale=scale)
    device = Device.current()
    cfg = config or kernel.default_config(dtype_name(q.dtype), dim, drawn=True,
                                          flat=kernel.flat_tasks(causal, dim, seq_q),
                                          half_blocks=kernel.half_blocks_pay(causal, seq_q, seq_k))
    if (cfg.dtype, cfg.head_dim) != (dtype_name(q.dtype), dim):
        raise AttentionArgumentError(f"attention: config is for {cfg.dtype}, D={cfg.head_dim}; the inputs are "
                                     f"{dtype_name(q.dtype)}, D={dim}")
    slices = -(-seq_q // ROWS)          # a head's slices of 64 query rows (one consumer warpgroup's)
    if cfg.flat and slices < cfg.consumers - 1:
        raise AttentionArgumentError(f"attention: a flat config with {cfg.consumers} consumer warpgroups needs S_q > "
                                     f"{ROWS * (cfg.consumers - 2)}, got {seq_q}")
    launchable = load(kernel.build, cfg, device)
    q_blocks = slices if cfg.flat else -(-seq_q // cfg.rows)
    tasks = -(-batch * heads * slices // cfg.consumers) if cfg.flat else batch * heads * q_blocks
    scale = dim ** -0.5 if scale is None else float(scale)
    return launchable.prepare(
        LaunchConfig(grid_size(launchable, tasks), launchable.threads),
        tmap_q=tensor_map(q, BOX), tmap_k=tensor_map(k, BOX), tmap_v=tensor_map(v, BOX),
        tmap_o=tensor_map(out, BOX), lse=lse.ptr if lse is not None else 0, tasks=tasks, q_blocks=q_blocks,
        heads=heads, group=heads // kv_heads, seq_q=seq_q, seq_k=seq_k, diag=seq_k - seq_q if causal else seq_k,
        scale_log2=scale * math.log2(math.e), by_query_block=by_query_block(causal, cfg.drawn),
        task_counter=task_counter("attention", stream).ptr if cfg.drawn else 0, rank=0, world=1,
        status=device_status(device).ptr,
        timeout_ns=device_timeout_ns(None, timeout, timeout_ns, "attention: timeout"), num_comm_sms=0,
        slices=batch * heads * slices).launch


def check_merge(out_a_shape, out_a_dtype, lse_a_shape, lse_a_dtype, out_b_shape, out_b_dtype, lse_b_shape,
                lse_b_dtype, out_shape=None, out_dtype=None, lse_shape=None, lse_dtype=None) -> tuple:
    """(batch, seq, heads, head_dim) after checking every rule of attention_merge; no GPU needed."""
    op = "attention_merge"
    if len(out_a_shape) != 4 or min(out_a_shape) < 1 or out_a_shape[3] % merge_kernel.VALUES:
        raise AttentionArgumentError(f"{op}: out_a must be 4-D (B, S, H, D) with D a multiple of "
                                     f"{merge_kernel.VALUES}, got {tuple(out_a_shape)}")
    dtype = dtype_name(out_a_dtype)
    if dtype not in ("bf16", "f16"):
        raise AttentionArgumentError(f"{op}: out_a must be bfloat16 or float16, got {out_a_dtype}")
    batch, seq, heads, dim = out_a_shape
    if batch * seq * heads * dim >= 2**31:
        raise AttentionArgumentError(f"{op}: B·S·H·D = {batch * seq * heads * dim} must be below 2**31")
    for name, shape, dt, want_shape, want in (
            ("out_b", out_b_shape, out_b_dtype, out_a_shape, dtype), ("out", out_shape, out_dtype, out_a_shape, dtype),
            ("lse_a", lse_a_shape, lse_a_dtype, (batch, heads, seq), "f32"),
            ("lse_b", lse_b_shape, lse_b_dtype, (batch, heads, seq), "f32"),
            ("lse", lse_shape, lse_dtype, (batch, heads, seq), "f32")):
        _check_like(op, name, shape, dt, want_shape, want)
    return batch, seq, heads, dim


def attention_merge(out_a, lse_a, out_b, lse_b, *, out=None, lse=None, stream=None):
    """Combine two partial attention results over disjoint key sets: returns ``out`` (allocated like
    out_a when None; it may be out_a itself) and writes the merged log-sum-exp into ``lse`` when given
    (a separate array: the threads of a row read lse_a and lse_b until the row is done)."""
    op = "attention_merge"
    if out is None:
        a = operand_array(out_a, op, "out_a")
        out = empty(a.shape, a.dtype, stream=stream)
    launch(op, (out_a, lse_a, out_b, lse_b, out, lse), (), stream,
           lambda: _prepare_merge(out_a, lse_a, out_b, lse_b, out, lse))
    return out


def _prepare_merge(out_a, lse_a, out_b, lse_b, out, lse):
    op = "attention_merge"
    arrays = {n: operand_array(x, op, n) for n, x in (("out_a", out_a), ("lse_a", lse_a), ("out_b", out_b),
                                                       ("lse_b", lse_b), ("out", out))}
    lse = optional_array(lse, op, "lse")
    out = arrays["out"]
    batch, seq, heads, dim = check_merge(*(x for name, arr in arrays.items() if name != "out"
                                           for x in (arr.shape, arr.dtype)), out.shape, out.dtype, *shape_dtype(lse))
    if lse is not None and lse.ptr in (arrays["lse_a"].ptr, arrays["lse_b"].ptr):
        raise AttentionArgumentError(f"{op}: lse must not be lse_a or lse_b (merge into a separate array)")
    cfg = merge_kernel.Config(dtype=dtype_name(out.dtype))
    device = Device.current()
    vectors = batch * seq * heads * dim // merge_kernel.VALUES
    grid = max(1, min(-(-vectors // cfg.threads), context_sm_count(device) * MERGE_BLOCKS_PER_SM))
    return load(merge_kernel.build, cfg, device).prepare(
        LaunchConfig(grid, cfg.threads), out=out.ptr, out_a=arrays["out_a"].ptr, out_b=arrays["out_b"].ptr,
        lse_out=lse.ptr if lse is not None else 0, lse_a=arrays["lse_a"].ptr, lse_b=arrays["lse_b"].ptr,
        vectors=vectors, row_vectors=dim // merge_kernel.VALUES, heads=heads, seq=seq).launch


__all__ = ["attention", "attention_merge", "check_attention", "check_merge", "grid_size", "AttentionArgumentError"]
