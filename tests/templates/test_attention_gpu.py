"""pkptx.attention and attention_merge on the GPU against the float64 numpy reference, over
hypothesis-chosen batch, heads (GQA), sequence lengths (S_q != S_k, tails), head dim, dtype and
causality; outputs are poisoned (NaN) first, the log-sum-exp is checked, and merging the results over
two key halves must equal attention over all keys. Each case prints its error."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pkptx.templates.kernels import attention as kernel
from pkptx.templates.kernels import attention_merge as merge

DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
POISON = float("nan")   # DeviceArray.fill converts the value to the dtype: a NaN, not a bit pattern
BOUND = 1e-2          # relative Frobenius error, inputs rounded to 16 bits, P rounded to 16 bits
SEQS = st.one_of(st.sampled_from([1, 77, 128, 1000]), st.integers(1, 700))


def case(batch, seq_q, seq_k, heads, kv_heads, dim, causal, dtype, stride=False):
    """``stride``: the fixed-stride kernel (a forced config; the op draws its tasks from the stream's
    counter, which every launch must leave at 0 for the next: the examples run one after another on one
    stream)."""
    return dict(batch=batch, seq_q=seq_q, seq_k=seq_k, heads=heads, kv_heads=kv_heads, dim=dim, causal=causal,
                dtype=dtype, stride=stride)


@st.composite
def cases(draw):
    kv_heads = draw(st.sampled_from([1, 2, 4]))
    return case(draw(st.integers(1, 3)), draw(SEQS), draw(SEQS), kv_heads * draw(st.sampled_from([1, 2, 3])),
                kv_heads, draw(st.sampled_from([64, 128])), draw(st.booleans()), draw(st.sampled_from(["bf16", "f16"])),
                draw(st.booleans()))


def host_inputs(c, seed):
    rng = np.random.default_rng(seed)
    dt = DTYPES[c["dtype"]]
    q = rng.standard_normal((c["batch"], c["seq_q"], c["heads"], c["dim"]), dtype=np.float32).astype(dt)
    k, v = (rng.standard_normal((c["batch"], c["seq_k"], c["kv_heads"], c["dim"]), dtype=np.float32).astype(dt)
            for _ in range(2))
    return q, k, v


def run(q, k, v, *, causal, dtype, stride=False):
    """(O, LSE) from pkptx.attention into poisoned outputs."""
    from pkptx.launch import empty, from_numpy
    from pkptx.ops.attention import attention
    out = empty(q.shape, DTYPES[dtype]).fill(POISON)
    lse = empty((q.shape[0], q.shape[2], q.shape[1]), np.float32).fill(POISON)
    config = kernel.default_config(dtype, q.shape[3], drawn=False) if stride else None
    attention(from_numpy(q), from_numpy(k), from_numpy(v), causal=causal, out=out, lse=lse, config=config)
    return out, lse


def errors(got, got_lse, want, want_lse) -> tuple[float, float]:
    """(relative Frobenius error of O, largest LSE error over rows that see a key)."""
    err = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
    finite = np.isfinite(want_lse)
    lse_err = float(np.abs(got_lse[finite] - want_lse[finite]).max()) if finite.any() else 0.0
    return float(err), lse_err


def check(c, got, got_lse, want, want_lse):
    assert not np.isnan(got).any(), f"{c}: unwritten (poisoned) or NaN outputs remain"
    assert not np.isnan(got_lse).any(), f"{c}: unwritten (poisoned) or NaN LSE remain"
    err, lse_err = errors(got, got_lse, want, want_lse)
    print(f"attention {c}: rel err {err:.2e}, LSE err {lse_err:.2e}")
    assert err <= BOUND, f"{c}: relative error {err:.3e} > {BOUND}"
    assert (np.isneginf(got_lse) == np.isneginf(want_lse)).all(), f"{c}: rows with no key must have LSE -inf"
    assert lse_err <= 1e-2, f"{c}: LSE error {lse_err:.3e}"


@pytest.mark.gpu
@settings(max_examples=30, deadline=None)
@given(c=cases(), seed=st.integers(0, 2**32 - 1))
@example(c=case(1, 4097, 4097, 2, 1, 128, True, "bf16"), seed=0)
@example(c=case(1, 4097, 1000, 1, 1, 64, False, "bf16"), seed=1)
@example(c=case(2, 77, 1, 4, 2, 128, False, "f16"), seed=2)
@example(c=case(1, 1000, 77, 3, 1, 64, True, "bf16"), seed=3)      # causal, S_q > S_k: rows with no key
@example(c=case(1, 1, 1000, 2, 2, 128, True, "bf16"), seed=4)
@example(c=case(2, 4097, 1000, 4, 2, 128, True, "bf16", stride=True), seed=6)
@example(c=case(3, 1000, 77, 2, 1, 64, False, "f16", stride=True), seed=7)
def test_attention_matches_float64(gpu, c, seed):
    q, k, v = host_inputs(c, seed)
    out, lse = run(q, k, v, causal=c["causal"], dtype=c["dtype"], stride=c["stride"])
    want, want_lse = kernel.reference(q, k, v, causal=c["causal"])
    check(c, out.to_numpy().astype(np.float64), lse.to_numpy().astype(np.float64), want, want_lse)


@pytest.mark.gpu
@settings(max_examples=8, deadline=None)
@given(c=cases(), seed=st.integers(0, 2**32 - 1), cut=st.floats(0.05, 0.95))
@example(c=case(1, 300, 1000, 2, 1, 128, False, "bf16"), seed=5, cut=0.5)
def test_merge_of_key_halves_equals_attention_over_all_keys(gpu, c, seed, cut):
    from pkptx.launch import empty
    from pkptx.ops.attention import attention_merge
    c = {**c, "causal": False, "seq_k": max(2, c["seq_k"])}
    q, k, v = host_inputs(c, seed)
    split = max(1, min(c["seq_k"] - 1, int(cut * c["seq_k"])))
    halves = [run(q, k[:, lo:hi], v[:, lo:hi], causal=False, dtype=c["dtype"])
              for lo, hi in ((0, split), (split, c["seq_k"]))]
    (oa, la), (ob, lb) = halves
    out = empty(q.shape, DTYPES[c["dtype"]]).fill(POISON)
    lse = empty(la.shape, np.float32).fill(POISON)
    attention_merge(oa, la, ob, lb, out=out, lse=lse)
    want, want_lse = kernel.reference(q, k, v)
    check({**c, "split": split}, out.to_numpy().astype(np.float64), lse.to_numpy().astype(np.float64), want,
          want_lse)
    # and the merge kernel itself against its reference on the same halves
    ref, ref_lse = merge.reference(oa.to_numpy(), la.to_numpy(), ob.to_numpy(), lb.to_numpy())
    assert np.linalg.norm(out.to_numpy().astype(np.float64) - ref) <= 1e-2 * np.linalg.norm(ref)
    np.testing.assert_allclose(lse.to_numpy(), ref_lse, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_default_outputs_and_dlpack_inputs(gpu):
    """out=None allocates; no lse skips it; DLPack producers are accepted (our own DeviceArrays)."""
    from pkptx.launch import from_numpy
    from pkptx.ops.attention import attention
    c = case(1, 200, 300, 4, 2, 64, True, "bf16")
    q, k, v = host_inputs(c, 7)

    class Wrapped:          # a foreign DLPack producer
        def __init__(self, arr):
            self.arr = arr

        def __dlpack__(self, **kw):
            return self.arr.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.arr.__dlpack_device__()

    out = attention(*(Wrapped(from_numpy(x)) for x in (q, k, v)), causal=True)
    want, _ = kernel.reference(q, k, v, causal=True)
    got = out.to_numpy().astype(np.float64)
    err = np.linalg.norm(got - want) / np.linalg.norm(want)
    print(f"attention {c} (out=None, DLPack): rel err {err:.2e}")
    assert err <= BOUND


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", kernel.LAUNCHED, ids=lambda c: c.name)
def test_launched_kernels_do_not_spill(gpu, cfg):
    """The configs the op launches, as loaded (the driver's JIT for setmaxnreg ones): no local memory,
    but the 8 bytes the JIT has left at D=128 since the consumers wait for drawn tasks (H100, 2026-12-05)."""
    from pkptx.launch import Device
    from pkptx.ops.common import load
    fn = load(kernel.build, cfg, Device.current()).function
    print(f"{cfg.name}: {fn.num_regs} registers at entry, {fn.local_bytes} local bytes")
    assert fn.local_bytes <= (8 if cfg.head_dim == 128 else 0), (cfg.name, fn.local_bytes)
