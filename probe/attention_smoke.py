"""Quick GPU check of pkptx.attention and attention_merge: one small case per config; max error, PASS/FAIL."""
import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
import numpy as np, ml_dtypes, pkptx  # noqa: E401
from pkptx.launch import empty, from_numpy; from pkptx.templates.kernels import attention as K  # noqa: E702
rng = np.random.default_rng(0)
for dt, d, causal, (b, sq, sk, h, hk) in [(dt, d, c, s) for dt in (ml_dtypes.bfloat16, np.float16) for d in (64, 128)
                                          for c in (False, True) for s in ((1, 256, 256, 2, 1), (2, 77, 300, 4, 2))]:
    q, k, v = (rng.standard_normal(s, dtype=np.float32).astype(dt) for s in ((b, sq, h, d), (b, sk, hk, d), (b, sk, hk, d)))
    lse = empty((b, h, sq), np.float32).fill(np.nan)
    o = pkptx.attention(from_numpy(q), from_numpy(k), from_numpy(v), causal=causal, lse=lse).to_numpy().astype(np.float64)
    ro, rl = K.reference(q, k, v, causal=causal); L = lse.to_numpy(); e, le = np.abs(o - ro).max(), np.abs(np.where(np.isneginf(rl) & (L == rl), 0, L - rl)).max()
    print(f"{np.dtype(dt).name} D={d} causal={causal} B,Sq,Sk,H,Hkv={b, sq, sk, h, hk}: max|dO|={e:.3g} max|dLSE|={le:.3g}",
          "PASS" if e < 0.05 and le < 1e-2 and not np.isnan(o).any() else "FAIL", flush=True)
