"""When the fused kernels are chosen over gemm-then-collective (no GPU needed)."""
from __future__ import annotations

import pytest

from pkptx.ops.fused import overlap_pays
from pkptx.templates.kernels.gemm import Config

CFG = Config()           # 128 x 256 tiles


@pytest.mark.parametrize("m, n, world, row_sharded, expected", [
    (8192, 8192, 8, True, True),          # 2048 tiles, 1024 rows per rank: fuse
    (8192, 8192, 1, True, False),         # nothing to communicate
    (1024, 1024, 4, True, False),         # 32 tiles: under two waves of 132 SMs
    (8192 + 128 * 3, 8192, 8, True, False),   # rows per rank do not tile
    (8192 + 128 * 3, 8192, 8, False, True),   # ... which GEMM+AR does not need
])
def test_overlap_pays(m, n, world, row_sharded, expected):
    assert overlap_pays(m, n, CFG, world, 132, row_sharded=row_sharded) is expected
