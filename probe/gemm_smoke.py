"""Quick GPU check of pkptx.gemm on small odd shapes, one per path the sweep and the tests rely on
(split-K with 2 and 4 slices, fp8 plain / split / swapped, f32 out, stream-K, a tile width whose last
columns are stored from registers): relative error against float64,
PASS/FAIL, exit 1 on a FAIL. What compute-sanitizer runs in tools/gpu_check.py."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

from pkptx.launch import empty, from_numpy  # noqa: E402
from pkptx.ops.gemm import GemmConfig, gemm  # noqa: E402

DTYPES = {"bf16": ml_dtypes.bfloat16, "f32": np.float32, "e4m3": ml_dtypes.float8_e4m3fn,
          "e5m2": ml_dtypes.float8_e5m2}
CASES = [   # (m, n, k, input dtype, output dtype, schedule)
    (200, 264, 4000, "bf16", "bf16", GemmConfig(128, 256, 4, 2)),
    (200, 264, 4000, "bf16", "f32", GemmConfig(128, 128, 6, 4, k_split=2)),
    (300, 520, 1040, "e4m3", "bf16", None),
    (130, 264, 8192, "e4m3", "bf16", GemmConfig(128, 256, 4, 3)),
    (9, 1000, 2048, "e5m2", "f32", GemmConfig(64, 16, 12, 2, epilogue="direct", swap=True, k_split=4)),
    (2000, 1000, 4000, "bf16", "bf16", GemmConfig(64, 128, 8, k_split=2, stream_k=True)),
    (777, 1288, 4096, "bf16", "f32", GemmConfig(128, 224, 4)),
]


def main() -> int:
    rng, failed = np.random.default_rng(), 0
    for m, n, k, dtype, out_dtype, config in CASES:
        a = rng.standard_normal((m, k), dtype=np.float32).astype(DTYPES[dtype])
        b = rng.standard_normal((n, k), dtype=np.float32).astype(DTYPES[dtype])
        out = empty((m, n), DTYPES[out_dtype]).fill(np.nan)
        scale = 1.0
        if dtype in ("e4m3", "e5m2"):
            scales = [np.float32(rng.uniform(0.25, 2.0)) for _ in range(2)]
            scale = float(scales[0] * scales[1])
            gemm(from_numpy(a), from_numpy(b), out, config=config,
                 scale_a=from_numpy(np.array(scales[:1])), scale_b=from_numpy(np.array(scales[1:])))
        else:
            gemm(from_numpy(a), from_numpy(b), out, config=config)
        got = out.to_numpy().astype(np.float64)
        ref = a.astype(np.float64) @ b.astype(np.float64).T * scale
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        ok = err < 1e-2 and not np.isnan(got).any()
        failed += not ok
        print(f"{m}x{n}x{k} {dtype}->{out_dtype} {config.label if config else 'planned'}: rel err {err:.2e}",
              "PASS" if ok else "FAIL", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
