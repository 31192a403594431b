"""``pkptx.primitives`` exports ParallelKittens' eight primitives (pk-design 3) and the pipeline, each
the one implementation (no second spelling), and ``reduce``/``all_reduce`` are reduce_vector's two forms."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

import pkptx.primitives as prim
from pkptx.primitives import p2p, pipeline, sync, tile

from scratch import TARGETS, Scratch

EIGHT = {"store_async": p2p, "store_add_async": p2p, "reduce": tile, "all_reduce": tile, "signal": sync,
         "signal_all": sync, "wait": sync, "barrier": sync}


def test_the_eight_primitives_and_the_pipeline_are_exported_once():
    for name, module in EIGHT.items():
        assert name in prim.__all__ and getattr(prim, name) is getattr(module, name), name
    assert prim.Pipeline is pipeline.Pipeline and "Pipeline" in prim.__all__
    assert all(hasattr(prim, name) for name in prim.__all__)


@settings(max_examples=20, deadline=None)
@given(ty=st.sampled_from(["bf16", "f16", "f32"]), op=st.sampled_from(["sum", "max", "min"]),
       multicast=st.booleans(), write_all=st.booleans(), target=st.sampled_from(TARGETS))
def test_reduce_and_all_reduce_are_reduce_vector_without_and_with_write_all(ty, op, multicast, write_all, target):
    def lines(fn, **kw):
        sc = Scratch(target=target)
        off = sc.u64reg(0)
        out = sc.raw(lambda b: fn(b, sc.bound["x"], off, ty=ty, op=op, world=sc.world, rank=sc.rank,
                                  multicast=multicast, dst=sc.bound["y"], **kw))
        sc.assemble()
        return out

    named = prim.all_reduce if write_all else prim.reduce
    assert lines(named) == lines(tile.reduce_vector, write_all=write_all)
