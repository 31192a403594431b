"""Where a block-pair GEMM (GemmConfig.cluster=2) leaves C unwritten or wrong, beside the same schedule in
single blocks: per case, the NaN-poisoned outputs left (count and row/column range) and the relative
error of the rest. Needs a GPU.

    python probe/gemm_pair_check.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pkptx import gemm, synchronize  # noqa: E402
from pkptx.launch import empty, from_numpy  # noqa: E402
from pkptx.ops.gemm import GemmConfig  # noqa: E402

CASES = [  # (m, n, k, B layout, input dtype, output dtype, tile_m, tile_n, stages)
    (777, 1288, 4096, "kn", np.float16, np.float32, 128, 128, 6),     # the failing GPU test case
    (777, 1288, 4096, "nk", np.float16, np.float32, 128, 128, 6),
    (777, 1288, 4096, "kn", np.float16, np.float16, 128, 128, 6),
    (768, 1280, 4096, "kn", np.float16, np.float32, 128, 128, 6),     # no tails
    (777, 1288, 128, "kn", np.float16, np.float32, 128, 128, 6),      # fewer k-blocks than stages
]


def main() -> int:
    rng = np.random.default_rng(5)
    for m, n, k, layout, dtype, out_dtype, tile_m, tile_n, stages in CASES:
        a = rng.standard_normal((m, k), dtype=np.float32).astype(dtype)
        b = rng.standard_normal((n, k) if layout == "nk" else (k, n), dtype=np.float32).astype(dtype)
        b64 = b.astype(np.float64)
        ref = a.astype(np.float64) @ (b64.T if layout == "nk" else b64)
        for cluster in (1, 2):
            out = empty((m, n), out_dtype).fill(np.nan)
            gemm(from_numpy(a), from_numpy(b), out, b_layout=layout,
                 config=GemmConfig(tile_m, tile_n, stages, cluster=cluster))
            synchronize()
            got = out.to_numpy().astype(np.float64)
            rows, cols = np.nonzero(np.isnan(got))
            where = f"rows {rows.min()}-{rows.max()} cols {cols.min()}-{cols.max()}" if rows.size else ""
            err = np.linalg.norm(np.nan_to_num(got) - ref) / np.linalg.norm(ref)
            print(f"{m}x{n}x{k} {layout} {np.dtype(dtype).name}->{np.dtype(out_dtype).name} {tile_m}x{tile_n}/{stages}"
                  f" cluster {cluster}: {rows.size} NaN {where}; rel err {err:.1e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
