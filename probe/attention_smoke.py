"""Quick GPU check of pkptx.attention: one small case per config; max error, PASS/FAIL; exit 1 on a FAIL.
``--small``: bf16 only, one odd shape (what compute-sanitizer runs in tools/gpu_check.py)."""
import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
import numpy as np, ml_dtypes, pkptx  # noqa: E401
from pkptx.launch import empty, from_numpy; from pkptx.templates.kernels import attention as K  # noqa: E702
rng, small, failed = np.random.default_rng(), "--small" in sys.argv, 0
dtypes, shapes = ((ml_dtypes.bfloat16,), ((2, 77, 300, 4, 2),)) if small else \
    ((ml_dtypes.bfloat16, np.float16), ((1, 256, 256, 2, 1), (2, 77, 300, 4, 2)))
for dt, d, causal, (b, sq, sk, h, hk) in [(dt, d, c, s) for dt in dtypes for d in (64, 128)
                                          for c in (False, True) for s in shapes]:
    q, k, v = (rng.standard_normal(s, dtype=np.float32).astype(dt) for s in ((b, sq, h, d), (b, sk, hk, d), (b, sk, hk, d)))
    lse = empty((b, h, sq), np.float32).fill(np.nan)
    o = pkptx.attention(from_numpy(q), from_numpy(k), from_numpy(v), causal=causal, lse=lse).to_numpy().astype(np.float64)
    ro, rl = K.reference(q, k, v, causal=causal); L = lse.to_numpy(); e, le = np.abs(o - ro).max(), np.abs(np.where(np.isneginf(rl) & (L == rl), 0, L - rl)).max()
    ok = e < 0.05 and le < 1e-2 and not np.isnan(o).any(); failed += not ok
    print(f"{np.dtype(dt).name} D={d} causal={causal} B,Sq,Sk,H,Hkv={b, sq, sk, h, hk}: max|dO|={e:.3g} max|dLSE|={le:.3g}",
          "PASS" if ok else "FAIL", flush=True)
sys.exit(1 if failed else 0)
