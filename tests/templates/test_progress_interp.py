"""The device-side launch state (:mod:`pkptx.templates.progress`) run on the CPU interpreter, several
ranks in one machine: the same kernel arguments launched again and again (what a CUDA graph replay
does) give correct results every time, with ranks running different grid sizes and two different
collectives sharing the heap's flags; the counters the kernels leave are what the next launch reads."""
from __future__ import annotations

import numpy as np
import pytest

from pkptx.interp import Machine
from pkptx.templates.kernels import all_gather, all_reduce
from pkptx.templates.progress import ARRIVED, FINISHED, LAUNCH_BASE, ROUNDS, STARTED, flag_words

THREADS = 64


class Ranks:
    """Per-rank buffers in one interpreter machine, each with every rank's address in a peer table."""

    def __init__(self, machine: Machine, world: int):
        self.m, self.world = machine, world
        self.status = [machine.alloc(32, name="status", rank=r, fill=0) for r in range(world)]

    def symmetric(self, nbytes: int, name: str):
        copies = [self.m.alloc(nbytes, name=name, rank=r, fill=0) for r in range(self.world)]
        tables = [self.m.from_numpy(np.array([c.base for c in copies], np.uint64), name=f"{name}_peers", rank=r)
                  for r in range(self.world)]
        return copies, tables

    def launch(self, kernel, grids, tables: dict, values: dict) -> None:
        """Every rank launches ``kernel`` (``values[rank]``: its own arguments); ``m.run()`` runs them."""
        for r in range(self.world):
            args = dict(values[r], rank=r, world=self.world, status=self.status[r], timeout_ns=10**9,
                        num_comm_sms=grids[r], **{f"{n}_peers": t[r] for n, t in tables.items()},
                        **{f"{n}_mc": 0 for n in tables})
            self.m.launch(kernel, grids[r], THREADS, *(args[p.name] for p in kernel.params), rank=r)


@pytest.mark.parametrize("world, seed", [(1, 0), (2, 1), (3, 2)])
def test_repeated_launches_with_the_same_arguments_stay_in_step(world, seed):
    m = Machine(seed=seed)
    ranks = Ranks(m, world)
    n_vec, rows, row = 40, 3, 8                      # all_reduce: 40 f32x4; all_gather: 3 rows of 8 f32
    flags, flag_tables = ranks.symmetric(4 * flag_words(world), "flags")
    src, src_tables = ranks.symmetric(16 * n_vec, "src")
    shard, shard_tables = ranks.symmetric(4 * rows * row, "shard")
    gathered, gathered_tables = ranks.symmetric(4 * rows * row * world, "gathered")
    reduce_k = all_reduce.build(all_reduce.Config(dtype="f32", algorithm="two_shot", threads=THREADS))
    gather_k = all_gather.build(all_gather.Config(width=4, threads=THREADS))
    gather_args = {r: all_gather.run_map(rows, row, 1, world, r, in_place=False).args(4) for r in range(world)}
    grids = [1 + (r + seed) % 3 for r in range(world)]           # ranks run different grid sizes
    rng = np.random.default_rng(seed)
    for launch in range(3):
        xs = [rng.standard_normal(4 * n_vec).astype(np.float32) for _ in range(world)]
        parts = [rng.standard_normal(rows * row).astype(np.float32) for _ in range(world)]
        for r in range(world):
            src[r].write(xs[r])
            shard[r].write(parts[r])
        ranks.launch(reduce_k, grids, {"src": src_tables, "dst": src_tables, "flags": flag_tables},
                     {r: dict(n_vec=n_vec) for r in range(world)})
        m.run()                                      # one stream per rank: the next launch follows this one
        ranks.launch(gather_k, grids, {"src": shard_tables, "dst": gathered_tables, "flags": flag_tables},
                     gather_args)
        m.run()
        want_gather = np.concatenate([p.reshape(rows, 1, row) for p in parts], axis=1).reshape(-1)
        for r in range(world):
            assert not ranks.status[r].read(np.uint32, (8,)).any(), f"launch {launch}: rank {r} timed out"
            np.testing.assert_allclose(src[r].read(np.float32, (4 * n_vec,)), sum(xs), rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(gathered[r].read(np.float32, (rows * row * world,)), want_gather)
    for r in range(world):
        words = flags[r].read(np.uint32, (flag_words(world),))
        launches = 2 * 3
        assert words[ROUNDS] == 2 * launches                          # two barrier rounds per collective
        assert list(words[ARRIVED:]) == [2 * launches] * world         # every rank's last arrival
        assert words[STARTED] == words[FINISHED] == words[LAUNCH_BASE] == grids[r] * launches
