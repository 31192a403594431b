"""Under mpirun: the MoE layer (dispatch, fused dispatch + first expert GEMM, second GEMM, combine) on
hypothesis-chosen token counts and routings, against a float64 numpy reference of the whole layer.

Every rank draws the same cases and builds every rank's inputs from the case seed, so each computes the
reference itself; the device's slots (any order inside a (source, expert) block) are gathered over MPI
to place the reference rows. Failures are recorded, not raised, so the ranks never diverge.
"""
from __future__ import annotations

import os

import ml_dtypes
import numpy as np
from hypothesis import example, given, strategies as st

from pkptx.launch import empty, from_numpy
from pkptx.ops import collectives, moe
from pkptx.templates.kernels import grouped_gemm, moe_combine, moe_dispatch
from tests.helpers.cases import finish, recorded, rel_err, start
from tests.helpers.mpi import hyp

BF16 = ml_dtypes.bfloat16
ROUTINGS = ["random", "one_expert", "twice_to_one_rank", "empty_expert"]


def routing(kind, rng, tokens, topk, experts, local, world):
    """One rank's top-k ids (distinct per token) for a routing kind."""
    if kind == "one_expert":                    # every token's first choice is expert 0
        rest = [rng.permutation(np.arange(1, experts))[:topk - 1] for _ in range(tokens)]
        return np.array([[0, *r] for r in rest], dtype=np.int32)
    if kind == "twice_to_one_rank":             # two experts of one rank for every token
        owner = rng.integers(0, world)
        pick = [owner * local + rng.permutation(local)[:2] for _ in range(tokens)]
        rest = [rng.permutation(np.setdiff1d(np.arange(experts), p))[:topk - 2] for p in pick]
        return np.array([[*p, *r] for p, r in zip(pick, rest)], dtype=np.int32)
    pool = np.arange(1, experts) if kind == "empty_expert" else np.arange(experts)     # expert 0 gets nothing
    return np.array([rng.permutation(pool)[:topk] for _ in range(tokens)], dtype=np.int32)


def main() -> None:
    world, device, heap, hog = start()
    failures, cases = [], []
    w = world.size

    @hyp(12)
    @given(tokens=st.sampled_from([1, 7, 64, 130, 300]), local=st.sampled_from([1, 2, 3]), topk=st.integers(1, 4),
           hidden=st.sampled_from([64, 256, 1024]), ffn=st.sampled_from([128, 384]),
           kind=st.sampled_from(ROUTINGS), seed=st.integers(0, 2**31), comm=st.sampled_from([2, 8]))
    @example(tokens=64, local=2, topk=2, hidden=256, ffn=128, kind="twice_to_one_rank", seed=1, comm=4)
    @example(tokens=130, local=2, topk=2, hidden=64, ffn=128, kind="one_expert", seed=2, comm=2)
    @example(tokens=7, local=3, topk=1, hidden=64, ffn=128, kind="empty_expert", seed=3, comm=2)
    def case(tokens, local, topk, hidden, ffn, kind, seed, comm):
        experts = local * w
        topk = min(topk, experts)
        if kind == "twice_to_one_rank" and (local < 2 or topk < 2):
            kind = "random"
        if kind == "empty_expert" and experts < topk + 1:
            kind = "random"
        cases.append(dict(tokens=tokens, local=local, topk=topk, hidden=hidden, ffn=ffn, kind=kind, world=w))
        rng = np.random.default_rng(seed)
        xs = [rng.standard_normal((tokens, hidden), dtype=np.float32).astype(BF16) for _ in range(w)]
        ids = [routing(kind, rng, tokens, topk, experts, local, w) for _ in range(w)]
        wts = [rng.random((tokens, topk), dtype=np.float32) for _ in range(w)]
        w1 = (rng.standard_normal((experts, ffn, hidden), dtype=np.float32) / np.sqrt(hidden)).astype(BF16)
        w2 = (rng.standard_normal((experts, hidden, ffn), dtype=np.float32) / np.sqrt(ffn)).astype(BF16)
        me = world.rank
        mine = slice(me * local, (me + 1) * local)
        lay = moe_dispatch.layout(ids, experts)
        buffers = []
        with recorded(world, failures, cases[-1], buffers):
            x, i, wt = from_numpy(xs[me]), from_numpy(ids[me]), from_numpy(wts[me])
            w1_local, w2_local = from_numpy(np.ascontiguousarray(w1[mine])), from_numpy(np.ascontiguousarray(w2[mine]))
            device.synchronize()
            world.barrier(what="inputs written")
            hog()
            problems = []

            def gathered_slots(d):
                slots = d.slots.to_numpy()
                problems.extend(moe_dispatch.check_slots(ids[me], slots, me, lay))
                return world.allgather(slots, what="slots")

            # 1. dispatch alone: the receive layout and the rows
            d = moe.moe_dispatch(x, i, wt, world, experts, heap=heap)
            collectives.synchronize(what="moe_dispatch")
            if not np.array_equal(d.offsets.to_numpy(), lay.offsets[me]):
                problems.append(f"offsets {d.offsets.to_numpy()} != {lay.offsets[me]}")
            rows = int(lay.offsets[me, -1])
            ref_recv = moe_dispatch.reference(xs, ids, gathered_slots(d), experts)[me]
            if not np.array_equal(d.recv.to_numpy()[:rows].astype(np.float64), ref_recv):
                problems.append("dispatch: received rows differ from the sent ones")
            # 2. fused dispatch + first GEMM, against the layer's first half
            d.recv.fill_bits(0x7FC0)                                  # poison: the fused run must refill it
            h = empty((d.routing.capacity, ffn), BF16).fill_bits(0x7FC0)
            d, h = moe.moe_dispatch_gemm(x, i, wt, w1_local, world, experts, heap=heap, out=h, num_comm_sms=comm)
            collectives.synchronize(what="moe_dispatch_gemm")
            slots_all = gathered_slots(d)
            ref_recv = moe_dispatch.reference(xs, ids, slots_all, experts)[me]
            ref_h = grouped_gemm.reference(ref_recv, w1[mine], lay.offsets[me])
            err_h = rel_err(h.to_numpy()[:rows], ref_h) if rows else 0.0
            if not err_h < 1.5e-2 or np.isnan(h.to_numpy()[:rows]).any():
                problems.append(f"dispatch_gemm: relative error {err_h}")
            # 3. second GEMM into a symmetric y, then combine, against the whole layer
            y = heap.alloc((d.routing.capacity, hidden), BF16)
            buffers.append(y)
            y.local.fill_bits(0x7FC0)
            moe.grouped_gemm(h, w2_local, d.offsets, out=y.local)
            out = empty((tokens, hidden), np.float32).fill_bits(0x7FC00000)
            moe.moe_combine(y, d, world, out=out)
            collectives.synchronize(what="moe_combine")
            ys = [np.zeros((int(lay.offsets[r, -1]), hidden)) for r in range(w)]
            for r in range(w):
                recv_r = moe_dispatch.reference(xs, ids, slots_all, experts)[r]
                h_r = grouped_gemm.reference(recv_r, w1[r * local:(r + 1) * local], lay.offsets[r])
                ys[r] = grouped_gemm.reference(h_r, w2[r * local:(r + 1) * local], lay.offsets[r])
            ref_out = moe_combine.reference(ys, ids[me], slots_all[me], wts[me], local)
            err_out = rel_err(out.to_numpy(), ref_out)
            if not err_out < 2e-2 or np.isnan(out.to_numpy()).any():
                problems.append(f"combine: relative error {err_out}")
            cases[-1].update(err_h=err_h, err_out=err_out)
            if problems:
                failures.append(dict(cases[-1], problems=problems[:6]))

    case()
    finish(world, heap, "moe", cases, failures)


if __name__ == "__main__":
    main()
