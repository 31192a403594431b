"""The attention kernel's index maps and block schedule, checked on the CPU: the accumulator fragment
covers S once, P's packed registers are exactly wgmma's A fragment, the TMA boxes land where the
descriptors read, a numpy emulation of the kernel's blocked online softmax (same block bounds, masks,
-inf guards and 16-bit P) matches the float64 reference, the reference matches a naive loop, and
merging the results over two key halves equals attention over all keys."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pkptx.primitives.wgmma import fragment_coords
from pkptx.templates import attention_parts as parts
from pkptx.templates.kernels import attention as kernel
from pkptx.templates.kernels import attention_merge as merge


@pytest.mark.parametrize("n", [64, 128])
def test_accumulator_fragment_covers_s_once(n):
    seen = np.zeros((64, n), dtype=int)
    for warp in range(4):
        for lane in range(32):
            for _, row, col in fragment_coords(n):
                seen[16 * warp + lane // 4 + row, col + 2 * (lane % 4)] += 1
    assert (seen == 1).all()


def a_fragment(j: int, half: int, lane: int) -> tuple[int, int]:
    """(row, column) within a warp's 16 x 16 A tile of element ``half`` of .b32 register ``j``
    (PTX ISA, wgmma .m64nNk16 register fragment for A, the m16n8k16 layout per warp)."""
    group, in_group = lane // 4, lane % 4
    return group + 8 * (j % 2), 8 * (j // 2) + 2 * in_group + half


@pytest.mark.parametrize("n", [64, 128])
def test_p_registers_are_the_a_fragment(n):
    coords = {reg: (row, col) for reg, row, col in fragment_coords(n)}
    for t, step in enumerate(parts.p_operand_pairs(n)):
        for j, pair in enumerate(step):
            for half, reg in enumerate(pair):
                for lane in (0, 5, 30):
                    row, col = coords[reg]
                    want_row, want_col = a_fragment(j, half, lane)
                    assert (row + lane // 4, col + 2 * (lane % 4)) == (want_row, 16 * t + want_col), (t, j, half)


@pytest.mark.parametrize("head_dim, block_k", [(64, 64), (64, 128), (128, 64), (128, 128)])
def test_boxes_land_where_the_descriptors_read(head_dim, block_k):
    """K: the B operand of S reads key r of columns 64*db.. at k_box_offset(db, 0) + 128*r; V: the
    transposed B operand of P·V reads (key r, column c) at v_box_offset(0, r // 64) + (c // 64) x the
    leading offset + 128*(r % 64). Both must be inside the box TMA wrote for that key and column."""
    lead = parts.v_box_offset(1, 0, head_dim) - parts.v_box_offset(0, 0, head_dim)
    boxes = set()
    for r in range(block_k):
        for db in range(head_dim // 64):
            kk = r // 64
            assert parts.k_box_offset(db, 0, block_k) + 128 * r == parts.k_box_offset(db, kk, block_k) + 128 * (r % 64)
            assert parts.v_box_offset(0, kk, head_dim) + db * lead == parts.v_box_offset(db, kk, head_dim)
            boxes.add(parts.v_box_offset(db, kk, head_dim))
            boxes.add(("k", parts.k_box_offset(db, kk, block_k)))
    per_tensor = block_k // 64 * head_dim // 64
    assert len(boxes) == 2 * per_tensor
    assert {b for b in boxes if isinstance(b, int)} == {i * parts.BOX_BYTES for i in range(per_tensor)}
    assert {b[1] for b in boxes if isinstance(b, tuple)} == {i * parts.BOX_BYTES for i in range(per_tensor)}
    qs = {parts.q_box_offset(wg, db, head_dim) for wg in range(3) for db in range(head_dim // 64)}
    assert qs == {i * parts.BOX_BYTES for i in range(3 * head_dim // 64)}


def round16(x, dtype):
    return x.astype(dtype).astype(np.float32)


def emulate(q, k, v, cfg: kernel.Config, *, causal: bool, scale: float):
    """The kernel's algorithm in numpy, block by block: per task and warpgroup, the K/V blocks of
    kv_end, masks only on blocks past the warpgroup's first row's key limit, exp2 with the scale
    folded in, the -inf guard, P rounded to 16 bits, O / l and LSE at the end."""
    batch, seq_q, heads, dim = q.shape
    seq_k, group = k.shape[1], heads // k.shape[2]
    diag = seq_k - seq_q if causal else seq_k
    c = np.float32(scale * math.log2(math.e))
    out = np.full(q.shape, np.nan, dtype=np.float32)
    lse = np.full((batch, heads, seq_q), np.nan, dtype=np.float32)
    dt = ml_dtypes.bfloat16 if cfg.dtype == "bf16" else np.float16
    for bb in range(batch):
        for h in range(heads):
            kh = k[bb, :, h // group].astype(np.float32)
            vh = v[bb, :, h // group].astype(np.float32)
            for qb in range(-(-seq_q // cfg.rows)):
                first = qb * cfg.rows
                blocks = -(-parts.kv_end(first, cfg.rows, seq_q, seq_k, diag) // cfg.block_k)
                for wg in range(cfg.consumers):
                    rows = first + 64 * wg + np.arange(64)
                    qw = np.zeros((64, dim), np.float32)
                    qw[rows < seq_q] = q[bb, rows[rows < seq_q], h]
                    limits = np.array([parts.key_limit(r, seq_k, diag) for r in rows])
                    m = np.full(64, -np.inf, np.float32)
                    l = np.zeros(64, np.float32)
                    o = np.zeros((64, dim), np.float32)
                    for j in range(blocks):
                        keys = j * cfg.block_k + np.arange(cfg.block_k)
                        kj, vj = np.zeros((cfg.block_k, dim), np.float32), np.zeros((cfg.block_k, dim), np.float32)
                        kj[keys < seq_k], vj[keys < seq_k] = kh[keys[keys < seq_k]], vh[keys[keys < seq_k]]
                        s = qw @ kj.T
                        if (j + 1) * cfg.block_k > parts.key_limit(first + 64 * wg, seq_k, diag):
                            s = np.where(keys[None, :] < limits[:, None], s, -np.inf)
                        new = np.maximum(m, s.max(axis=1) * c)
                        base = np.where(new == -np.inf, 0, new).astype(np.float32)
                        corr = np.exp2(m - base)
                        p = np.exp2(s * c - base[:, None])
                        l = l * corr + p.sum(axis=1)
                        o = o * corr[:, None] + round16(p, dt) @ vj
                        m = new
                    inv = np.where(l == 0, 0, 1 / np.where(l == 0, 1, l))
                    keep = rows < seq_q
                    out[bb, rows[keep], h] = (o * inv[:, None])[keep]
                    with np.errstate(divide="ignore"):
                        lse[bb, h, rows[keep]] = ((m + np.log2(l)) * math.log(2))[keep]
    return out, lse


def naive(q, k, v, *, causal, scale):
    """Row-by-row float64 softmax attention, the definition."""
    batch, seq_q, heads, dim = q.shape
    seq_k, group = k.shape[1], heads // k.shape[2]
    out, lse = np.zeros(q.shape), np.zeros((batch, heads, seq_q))
    for bb in range(batch):
        for h in range(heads):
            for i in range(seq_q):
                keys = [j for j in range(seq_k) if not causal or j <= i + seq_k - seq_q]
                if not keys:
                    lse[bb, h, i] = -np.inf
                    continue
                s = np.array([float(np.dot(q[bb, i, h].astype(np.float64), k[bb, j, h // group])) * scale
                              for j in keys])
                w = np.exp(s - s.max())
                out[bb, i, h] = (w / w.sum()) @ v[bb, keys, h // group].astype(np.float64)
                lse[bb, h, i] = s.max() + math.log(w.sum())
    return out, lse


@st.composite
def problems(draw, max_seq=300):
    kv_heads = draw(st.sampled_from([1, 2]))
    return dict(batch=draw(st.integers(1, 2)), seq_q=draw(st.integers(1, max_seq)),
                seq_k=draw(st.integers(1, max_seq)), heads=kv_heads * draw(st.sampled_from([1, 2])),
                kv_heads=kv_heads, dim=draw(st.sampled_from([64, 128])), causal=draw(st.booleans()))


def inputs(p, seed, dtype=ml_dtypes.bfloat16):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((p["batch"], p["seq_q"], p["heads"], p["dim"]), dtype=np.float32).astype(dtype)
    k, v = (rng.standard_normal((p["batch"], p["seq_k"], p["kv_heads"], p["dim"]), dtype=np.float32).astype(dtype)
            for _ in range(2))
    return q, k, v


def rel_err(got, want):
    return np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)


def assert_lse_close(got, want):
    assert (np.isneginf(got) == np.isneginf(want)).all(), "rows with no key must have LSE -inf"
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-3)


@settings(max_examples=25, deadline=None)
@given(p=problems(), seed=st.integers(0, 2**32 - 1), consumers=st.sampled_from([1, 2, 3]),
       block_k=st.sampled_from([64, 128]))
@example(p=dict(batch=1, seq_q=77, seq_k=33, heads=2, kv_heads=1, dim=64, causal=True), seed=1, consumers=3,
         block_k=128)                       # S_q > S_k: rows that see no key
@example(p=dict(batch=2, seq_q=1, seq_k=257, heads=1, kv_heads=1, dim=128, causal=True), seed=2, consumers=2,
         block_k=128)
def test_emulated_kernel_matches_reference(p, seed, consumers, block_k):
    cfg = kernel.Config(head_dim=p["dim"], block_k=block_k, consumers=consumers, stages=1)
    q, k, v = inputs(p, seed)
    scale = p["dim"] ** -0.5
    got, got_lse = emulate(q, k, v, cfg, causal=p["causal"], scale=scale)
    want, want_lse = kernel.reference(q, k, v, causal=p["causal"])
    assert not np.isnan(got).any() and not np.isnan(got_lse).any()
    assert rel_err(got, want) < 1e-2
    assert_lse_close(got_lse, want_lse)


@settings(max_examples=10, deadline=None)
@given(p=problems(max_seq=20), seed=st.integers(0, 2**32 - 1))
def test_reference_is_softmax_attention(p, seed):
    q, k, v = inputs(p, seed)
    scale = 0.3
    got, got_lse = kernel.reference(q, k, v, causal=p["causal"], scale=scale)
    want, want_lse = naive(q, k, v, causal=p["causal"], scale=scale)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    assert_lse_close(got_lse, want_lse)


@settings(max_examples=15, deadline=None)
@given(p=problems(max_seq=60), seed=st.integers(0, 2**32 - 1), cut=st.floats(0, 1))
def test_merge_of_key_halves_is_attention_over_all_keys(p, seed, cut):
    """Non-causal halves [K1; K2] (K1 may be empty: its LSE is -inf for every row)."""
    q, k, v = inputs(p, seed)
    split = int(cut * p["seq_k"])
    want, want_lse = kernel.reference(q, k, v)
    parts_ = []
    for lo, hi in ((0, split), (split, p["seq_k"])):
        if hi > lo:
            parts_.append(kernel.reference(q, k[:, lo:hi], v[:, lo:hi]))
        else:
            parts_.append((np.zeros(q.shape), np.full((p["batch"], p["heads"], p["seq_q"]), -np.inf)))
    (oa, la), (ob, lb) = parts_
    got, got_lse = merge.reference(oa, la, ob, lb)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got_lse, want_lse, rtol=1e-12)


def test_merge_of_two_empty_halves_is_empty():
    shape = (1, 3, 2, 64)
    none = np.full((1, 2, 3), -np.inf)
    got, got_lse = merge.reference(np.zeros(shape), none, np.zeros(shape), none)
    assert (got == 0).all() and np.isneginf(got_lse).all()
