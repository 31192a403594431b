"""pkptx/bench/bench_tma.py's kernels assemble on CPU (so the benchmark cannot rot between GPU runs): the
register copy built there, and the TMA bulk-copy configurations it picks for every message size."""
from __future__ import annotations

import pytest

from pkptx.bench import bench_tma


def test_register_copy_is_one_v4_load_and_store_per_step():
    k = bench_tma.register_copy()
    ptx = k.render()
    assert ptx.count("ld.global.v4.b32") == 1 and ptx.count("st.global.v4.b32") == 1
    k.compile(use_cache=False)


@pytest.mark.parametrize("nbytes", bench_tma.SIZES)
def test_tma_configs_spread_and_assemble(nbytes):
    cfg = bench_tma.tma_config(nbytes, 132)
    assert 512 <= cfg.chunk <= 16 * 1024 and cfg.chunk & (cfg.chunk - 1) == 0
    assert -(-nbytes // cfg.chunk) <= 132 or cfg.chunk == 16 * 1024
    kernel = bench_tma.bulk_copy.build(cfg)
    assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in kernel.render()
    kernel.compile()
