"""The fused kernels' work distribution, as pure Python (templates/schedule.py mirrors the device code):
every tile computed once per rank, reduced or pushed by exactly its owner, and every remote row block an
AG+GEMM consumer waits for is pushed by some communicator."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from pkptx.templates import schedule as S

worlds = st.integers(1, 16)


@settings(max_examples=200)
@given(world=worlds, tiles_m_per_rank=st.integers(1, 6), tiles_n=st.integers(1, 8), blocks=st.integers(1, 40))
def test_gemm_rs_computes_every_tile_once_and_sends_it_to_its_owner(world, tiles_m_per_rank, tiles_n, blocks):
    tiles_m, tile_rows = tiles_m_per_rank * world, 128
    tiles = tiles_m * tiles_n
    rows_per_rank = tiles_m_per_rank * tile_rows
    split = S.Split(blocks, 0)
    for rank in range(world):
        done = [S.staggered(t, tiles, world, rank) for b in range(blocks) for t in S.compute_tasks(split, b, tiles)]
        assert sorted(done) == list(range(tiles))                  # each tile once on every rank
        for tile in done:
            row = (tile // tiles_n) * tile_rows
            owner = S.row_owner(row, rows_per_rank)
            assert 0 <= owner < world and 0 <= row - owner * rows_per_rank < rows_per_rank


@settings(max_examples=200)
@given(world=worlds, tiles=st.integers(1, 300), comm=st.integers(1, 16), blocks=st.integers(17, 40))
def test_gemm_ar_owner_reduces_each_tile_exactly_once(world, tiles, comm, blocks):
    split = S.Split(blocks, comm)
    handled = {}
    for rank in range(world):
        for b in range(blocks):
            for tile in S.comm_tasks(split, b, tiles, world=world, rank=rank, rank_major=True):
                assert S.owner(tile, world) == rank                 # only the owner reduces it
                handled[tile] = handled.get(tile, 0) + 1
    assert handled == {t: 1 for t in range(tiles)}


@settings(max_examples=200)
@given(world=worlds, blocks_per_rank=st.integers(1, 6), tiles_n=st.integers(1, 6), comm=st.integers(1, 8),
       blocks=st.integers(9, 40))
def test_ag_gemm_pushes_every_row_block_its_consumers_wait_for(world, blocks_per_rank, tiles_n, comm, blocks):
    tiles_m = blocks_per_rank * world
    split = S.Split(blocks, comm)
    pushed = set()
    for rank in range(world):
        for b in range(blocks):
            for task in S.comm_tasks(split, b, blocks_per_rank):
                pushed.add(rank * blocks_per_rank + task)           # the device's push_block
    assert pushed == set(range(tiles_m))                           # so no wait is left unsatisfied
    for rank in range(world):
        order = [S.own_rows_first(tm, tiles_m, blocks_per_rank, rank) for tm in range(tiles_m)]
        assert sorted(order) == list(range(tiles_m))
        assert {S.row_owner(tm, blocks_per_rank) for tm in order[:blocks_per_rank]} == {rank}


def test_fused_kernels_take_the_world_size_at_run_time():
    """One cubin serves world sizes 2, 4, 8, ...: ``world`` is a kernel parameter, not a build input."""
    import dataclasses

    from pkptx.templates.kernels import ag_gemm, gemm_ar, gemm_rs
    for module in (ag_gemm, gemm_rs, gemm_ar):
        kernel = module.build(module.Config())
        assert {"rank", "world"} <= {p.name for p in kernel.params}
        assert not any("world" in f.name for f in dataclasses.fields(module.Config))
        assert kernel.compile().resources.spills == 0
