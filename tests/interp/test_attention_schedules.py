"""The attention kernel's other schedules on the CPU interpreter: FlashAttention-3's ping-pong of the
software-pipelined loop (block j's Q·Kᵀ and block j-1's P·V issued in one turn) with setmaxnreg, and the
rescale threshold (O rescaled only when a row's maximum jumps), against float64. Keys grow along the
sequence so row maxima jump by a few log2 units from block to block: with threshold 2 some blocks rescale
and some keep the stale maximum; with 8 almost only the first does. ``sum_in_pv`` (the row sums from P·V,
a box of ones as V's next 64 columns; the op's D=64 kernels): also with the threshold and ping-pong, and the
op's D=64 kernels with the add trees instead. ``half_blocks``: blocks whose last 64 keys a warpgroup's rows
do not see (the diagonal, the 300 keys' end) at 64 keys, also in flat tasks and with turns; where the
op runs them (:func:`half_blocks_pay`)."""
from __future__ import annotations

from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import pkptx
from pkptx.launch import empty, from_numpy
from pkptx.templates.kernels.attention import Config, default_config, half_blocks_pay, reference

from tests.helpers.interpreted import interpreted_driver

HEADS = 4

CONFIGS = [Config(head_dim=128, overlap=True, pingpong=True, rebalance=True),
           Config(head_dim=128, overlap=True, pingpong=True, rebalance=True, rescale_threshold=8),
           Config(head_dim=128, pingpong=True, rescale_threshold=2),
           Config(head_dim=128, consumers=3, q_stages=1, rebalance=True, rescale_threshold=2),
           Config(head_dim=128, consumers=3, rebalance=True, o_in_q=True),
           Config(head_dim=64, consumers=3, q_stages=1, rescale_threshold=2),
           default_config("bf16", 64, drawn=True), default_config("bf16", 128, drawn=True),
           default_config("bf16", 64, drawn=True, flat=True),
           Config(head_dim=128, consumers=3, rebalance=True, o_in_q=True, drawn=True, flat=True),
           Config(head_dim=64, consumers=2, stages=3, flat=True),
           Config(head_dim=64, consumers=3, rebalance=True, stages=4, drawn=True, flat=True, pv_in_flight=True),
           Config(head_dim=64, consumers=2, stages=3, pv_in_flight=True), Config(head_dim=128, pv_in_flight=True),
           replace(default_config("bf16", 64, drawn=True, flat=True), sum_in_pv=False),
           replace(default_config("bf16", 64, drawn=True), sum_in_pv=False),
           Config(head_dim=64, consumers=2, stages=3, sum_in_pv=True, rescale_threshold=2),
           Config(head_dim=64, overlap=True, pingpong=True, sum_in_pv=True),
           default_config("bf16", 64, drawn=True, half_blocks=True),
           default_config("bf16", 128, drawn=True, half_blocks=True),
           replace(default_config("bf16", 64, drawn=True, flat=True), half_blocks=True),
           Config(head_dim=128, consumers=2, pingpong=True, half_blocks=True)]


@pytest.fixture(scope="module", autouse=True)
def interpreter():
    with interpreted_driver() as cu:
        yield cu


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_schedule_against_float64(cfg, causal, monkeypatch):
    """A 300-row tail (2 or 3 query blocks, the last one masked) and 4 heads on 2 blocks: 4 tasks or more a
    block, so turns run across tasks and every Q buffer is reused (after carrying O out with ``o_in_q``);
    O and LSE against float64."""
    from pkptx.ops import attention as op
    monkeypatch.setattr(op, "grid_size", lambda launchable, tasks: 2)
    rng = np.random.default_rng()
    seq, dim = 300, cfg.head_dim
    growth = np.linspace(0.3, 4.0, seq, dtype=np.float32)[None, :, None, None]
    q = rng.standard_normal((1, seq, HEADS, dim), dtype=np.float32).astype(ml_dtypes.bfloat16)
    k = (rng.standard_normal((1, seq, HEADS, dim), dtype=np.float32) * growth).astype(ml_dtypes.bfloat16)
    v = rng.standard_normal((1, seq, HEADS, dim), dtype=np.float32).astype(ml_dtypes.bfloat16)
    out = empty(q.shape, ml_dtypes.bfloat16).fill(np.nan)
    lse = empty((1, HEADS, seq), np.float32).fill(np.nan)
    pkptx.attention(from_numpy(q), from_numpy(k), from_numpy(v), causal=causal, out=out, lse=lse, config=cfg)
    pkptx.synchronize()
    ref, ref_lse = reference(q, k, v, causal=causal)
    got = out.to_numpy().astype(np.float64)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) <= 1e-2
    assert np.abs(lse.to_numpy() - ref_lse).max() < 2e-2


@pytest.mark.parametrize("seq_q, seq_k", [(77, 300), (250, 250), (450, 130)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dim", [64, 128])
def test_partial_block_first(dim, causal, seq_q, seq_k):
    """The op's own configs: query blocks end at the last row, so the first block starts before row 0
    (whole padding warpgroups, never stored, no LSE) and a remainder under 64 rows is clipped at the
    end; S_q != S_k with the causal diagonal bottom-right. O and LSE against float64."""
    from pkptx.templates.kernels.attention import default_config
    rng = np.random.default_rng()
    q = rng.standard_normal((2, seq_q, 2, dim), dtype=np.float32).astype(ml_dtypes.bfloat16)
    k, v = (rng.standard_normal((2, seq_k, 1, dim), dtype=np.float32).astype(ml_dtypes.bfloat16) for _ in range(2))
    out = empty(q.shape, ml_dtypes.bfloat16).fill(np.nan)
    lse = empty((2, 2, seq_q), np.float32).fill(np.nan)
    pkptx.attention(from_numpy(q), from_numpy(k), from_numpy(v), causal=causal, out=out, lse=lse)
    pkptx.synchronize()
    assert default_config("bf16", dim).rows == 192 and seq_q % 192 not in (0, 64, 128)
    ref, ref_lse = reference(q, k, v, causal=causal)
    got, got_lse = out.to_numpy().astype(np.float64), lse.to_numpy()
    assert not np.isnan(got).any() and not np.isnan(got_lse).any(), "poison left in O or LSE"
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) <= 1e-2
    assert (np.isneginf(got_lse) == np.isneginf(ref_lse)).all()
    finite = np.isfinite(ref_lse)
    assert np.abs(got_lse[finite] - ref_lse[finite]).max() < 2e-2


@settings(max_examples=15, deadline=None)
@given(batch=st.integers(1, 2), kv_heads=st.integers(1, 2), group=st.integers(1, 2), seq_q=st.integers(65, 420),
       seq_k=st.integers(1, 300), causal=st.booleans(), blocks=st.integers(1, 3))
def test_flat_tasks_cover_every_slice_once(batch, kv_heads, group, seq_q, seq_k, causal, blocks):
    """Flat tasks (runs of 3 slices across heads, two K/V runs interleaved, warpgroups past the last slice)
    on 1-3 blocks, any S_q the op allows, S_k, GQA and mask: every row's O and LSE against float64,
    poison first, so a slice computed twice or never (or a past-the-end warpgroup storing) shows."""
    from pkptx.ops import attention as op
    rng = np.random.default_rng()
    heads = kv_heads * group
    q = rng.standard_normal((batch, seq_q, heads, 64), dtype=np.float32).astype(ml_dtypes.bfloat16)
    k, v = (rng.standard_normal((batch, seq_k, kv_heads, 64), dtype=np.float32).astype(ml_dtypes.bfloat16)
            for _ in range(2))
    out = empty(q.shape, ml_dtypes.bfloat16).fill(np.nan)
    lse = empty((batch, heads, seq_q), np.float32).fill(np.nan)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(op, "grid_size", lambda launchable, tasks: blocks)
        pkptx.attention(from_numpy(q), from_numpy(k), from_numpy(v), causal=causal, out=out, lse=lse,
                        config=default_config("bf16", 64, drawn=True, flat=True))
        pkptx.synchronize()
    ref, ref_lse = reference(q, k, v, causal=causal)
    got, got_lse = out.to_numpy().astype(np.float64), lse.to_numpy()
    assert not np.isnan(got).any() and not np.isnan(got_lse).any(), "poison left in O or LSE"
    assert np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30) <= 1e-2
    assert (np.isneginf(got_lse) == np.isneginf(ref_lse)).all()
    finite = np.isfinite(ref_lse)
    assert np.abs(got_lse[finite] - ref_lse[finite]).max(initial=0) < 2e-2


def test_flat_config_needs_two_slices_a_head():
    """The op refuses a flat config whose tasks could span three heads (S_q <= 64 with 3 consumers)."""
    from pkptx.ops.attention import AttentionArgumentError
    q = from_numpy(np.ones((1, 64, 2, 64), dtype=ml_dtypes.bfloat16))
    with pytest.raises(AttentionArgumentError, match="S_q > 64"):
        pkptx.attention(q, q, q, config=default_config("bf16", 64, drawn=True, flat=True))


@pytest.mark.parametrize("causal, seq_q, seq_k, pays", [
    (False, 1024, 1024, False), (True, 1024, 1024, True), (True, 77, 77, True), (True, 1792, 1792, True),
    (True, 2048, 2048, False), (True, 4096, 4096, False), (True, 128, 4096, False), (True, 4096, 1024, True),
    (True, 4096, 2048, False)])
def test_half_blocks_where_they_save_more_than_they_cost(causal, seq_q, seq_k, pays):
    """Half blocks save 32 keys a row that sees any; the op runs them where that beats their cost a block
    (measured: they won at 1k keys causal and lost at 2k and 4k), and never without a mask."""
    assert half_blocks_pay(causal, seq_q, seq_k) is pays
