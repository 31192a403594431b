"""Under mpirun: collectives and fused ops captured into CUDA graphs and replayed, and the recovery after a
rank that refused a call.

``graphs``: each op is called once eagerly on a non-blocking stream (its plan, and the reference
result), then 100 calls are captured on that stream and the graph is replayed 3 times; the output must
equal the eager result (bit for bit, GEMM+RS within f32 rounding: its adds land in any order), and an
eager call after the replays too (the device-side epochs continue across graphs and eager calls).
``torch``: the same for all_reduce inside ``torch.cuda.graph`` when torch is installed.
``sp``: ring attention (causal, zigzag shards) and Ulysses attention, one call each captured; before each
of 3 replays new inputs go into the same buffers, and the replay must equal an eager call on those inputs
(bit for bit) and float64 attention over the whole sequence (the kernels count their launches on the
device, so a replay waits for its own launch's flags, not the capture's).
``moe``: moe_dispatch, a copy of the received rows and moe_combine captured, replayed with new tokens and
routings (checked against numpy: rows arrive in any order).
``recovery``: rank 1 refuses an all-reduce (bad op) while the others launch it; each waiting rank must
get a DeviceTimeoutError naming rank 1, the heap must then refuse calls, and after ``heap.reset()`` on
every rank good calls must give correct results. ``late``: rank 1 launches an all-reduce after the
others have given up on it; ranks 0, 2, ... must name rank 1, and rank 1 (whose closing barrier then
waits in vain) must name every other rank; a reset brings all back. Failures are recorded, not raised,
so ranks never diverge.
"""
from __future__ import annotations

import sys
import time
import traceback

import ml_dtypes
import numpy as np

import pkptx
from pkptx.errors import DeviceTimeoutError, HeapStateError
from pkptx.launch import Device, Stream, SymmetricHeap, World, capture, empty, from_numpy
from pkptx.ops import collectives, fused
from pkptx.ops.common import ArgumentError
from pkptx.templates.kernels import attention, ring_attention
from tests.helpers.mpi import report

BF16 = ml_dtypes.bfloat16
CALLS, REPLAYS = 100, 3


def data(seed, shape, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32).astype(dtype)


def cases(world, heap):
    """(name, setup, call, output, exact): setup() writes the inputs, call(stream) queues one op, output
    is the DeviceArray it writes. Every call is out of place (or idempotent), so 100 in a row equal one."""
    w, r = world.size, world.rank
    x, y = heap.alloc((1000, 24), np.float32), heap.alloc((1000, 24), np.float32)
    g_in, g_out = heap.alloc((96, 10), BF16), heap.alloc((96, 10 * w), BF16)
    s_in, s_out = heap.alloc((64 * w, 6), np.float32), heap.alloc((64, 6), np.float32)
    t_in, t_out = heap.alloc((2, 8 * w, 16), BF16), heap.alloc((2 * w, 8, 16), BF16)
    m, n, k = 128 * w, 256, 128
    a = from_numpy(data(r + 10, (m, k), BF16))
    b = from_numpy(data(r + 20, (n, k), BF16))
    rs_out = heap.alloc((m // w, n), np.float32)
    ar_out = heap.alloc((m, n), BF16)
    a_full = heap.alloc((m, k), BF16)
    ag_out = from_numpy(np.zeros((m, n), BF16))
    mine = data(r + 30, (m // w, k), BF16)
    return [
        ("all_reduce", lambda: x.local.copy_from_numpy(data(r, x.shape)),
         lambda s: collectives.all_reduce(x, world, out=y, algorithm="one_shot", stream=s), y.local, True),
        ("all_gather", lambda: g_in.local.copy_from_numpy(data(r + 1, g_in.shape, BF16)),
         lambda s: collectives.all_gather(g_in, world, dim=1, out=g_out, stream=s), g_out.local, True),
        ("reduce_scatter", lambda: s_in.local.copy_from_numpy(data(r + 2, s_in.shape)),
         lambda s: collectives.reduce_scatter(s_in, world, dim=0, out=s_out, stream=s), s_out.local, True),
        ("all_to_all", lambda: t_in.local.copy_from_numpy(data(r + 3, t_in.shape, BF16)),
         lambda s: collectives.all_to_all(t_in, world, scatter_dim=1, gather_dim=0, out=t_out, stream=s),
         t_out.local, True),
        ("gemm_rs", lambda: None,
         lambda s: fused.gemm_rs(a, b, world, out=rs_out, fused=True, stream=s), rs_out.local, False),
        ("gemm_ar", lambda: None,
         lambda s: fused.gemm_ar(a, b, world, out=ar_out, fused=True, num_comm_sms=2, stream=s),
         ar_out.local, True),
        ("ag_gemm", lambda: a_full.local.copy_from_numpy(
            np.concatenate([np.full((r * (m // w), k), np.nan, BF16), mine,
                            np.full(((w - r - 1) * (m // w), k), np.nan, BF16)])),
         lambda s: fused.ag_gemm(a_full, b, world, out=ag_out, fused=True, num_comm_sms=2, stream=s),
         ag_out, True),
    ]


def mismatch(got, want, exact):
    if exact:
        bad = got.view(np.uint8) != want.view(np.uint8)
        return None if not bad.any() else f"{int(bad.sum())} bytes differ"
    err = float(np.linalg.norm(got.astype(np.float64) - want) / max(np.linalg.norm(want.astype(np.float64)), 1e-30))
    return None if err < 1e-5 else f"relative error {err:g}"


def attempt(failures: list, op: str, world, check, done: str) -> None:
    """Run ``check()`` (what went wrong, or None) and record its failure or exception for ``op``, then meet
    the other ranks at ``done``: failures are recorded, never raised, so ranks never diverge."""
    try:
        bad = check()
        if bad:
            failures.append(dict(op=op, error=bad))
    except Exception:
        failures.append(dict(op=op, error=traceback.format_exc()[-1500:]))
    world.barrier(what=done)


def graphs(world, device, heap) -> dict:
    stream = Stream(non_blocking=True)
    failures, names = [], []
    for name, setup, call, output, exact in cases(world, heap):
        names.append(name)

        def poison(what: str) -> None:
            """NaN in the output everywhere before any rank runs again (so work not done shows)."""
            output.fill(float("nan"))
            device.synchronize()
            world.barrier(what=f"{name}: {what}")
        def check():
            setup()
            poison("inputs written")
            call(stream)                                   # the plan, and the eager result
            collectives.synchronize(stream, what=f"{name} eager")
            want = output.to_numpy()
            with capture(stream) as cap:
                for _ in range(CALLS):
                    call(stream)
            poison("captured")
            cap.graph.replay(REPLAYS, stream)
            collectives.synchronize(stream, what=f"{name} replays")
            bad = mismatch(output.to_numpy(), want, exact)
            poison("replayed")
            call(stream)                                   # eager again, after the graph's launches
            collectives.synchronize(stream, what=f"{name} eager after replays")
            return bad or mismatch(output.to_numpy(), want, exact)
        attempt(failures, name, world, check, f"{name} done")
    return dict(cases=names, failures=failures)


SP_BOUND = 1.5e-2       # relative Frobenius error of O against float64 (bf16 inputs, P rounded to bf16)
SP_LSE_BOUND = 2e-2     # |LSE - float64 LSE|


def sp_graphs(world, device, heap) -> dict:
    stream = Stream(non_blocking=True)
    failures, names = [], []
    w, r = world.size, world.rank
    batch, shard, heads, dim = 1, 128, 2 * w, 64           # Ulysses: heads and K/V heads split over the ranks
    lse_shape = (batch, heads, shard)
    for op, causal in (("ring", True), ("ulysses", False)):
        names.append(op)

        def inputs(seed, op=op, causal=causal):
            """This rank's shards of a full (Q, K, V) drawn from ``seed`` (the same on every rank), and of
            float64 (O, LSE) over the whole sequence."""
            rng = np.random.default_rng(seed)
            full = [rng.standard_normal((batch, w * shard, heads, dim), dtype=np.float32).astype(BF16)
                    for _ in range(3)]
            want, want_lse = attention.reference(*full, causal=causal)
            zigzag = causal and op == "ring"
            return ([ring_attention.shard(x, r, w, causal=zigzag) for x in full],
                    ring_attention.shard(want, r, w, causal=zigzag),
                    ring_attention.shard(want_lse, r, w, causal=zigzag, axis=2))

        mine, ref, ref_lse = inputs(0)
        q, k, v = (from_numpy(x) for x in mine)
        if op == "ring":
            outputs = (empty(q.shape, BF16), empty(lse_shape, np.float32))

            def call(s, causal=causal, outputs=outputs, q=q, k=k, v=v):
                pkptx.ring_attention(q, k, v, world, causal=causal, out=outputs[0], lse=outputs[1], heap=heap,
                                     stream=s)
        else:
            symmetric = (heap.alloc(q.shape, BF16), heap.alloc(lse_shape, np.float32))      # peers store into them
            outputs = tuple(x.local for x in symmetric)

            def call(s, causal=causal, symmetric=symmetric, q=q, k=k, v=v):
                pkptx.ulysses_attention(q, k, v, world, causal=causal, out=symmetric[0], lse=symmetric[1],
                                        heap=heap, stream=s)

        def poison(what: str, op=op, outputs=outputs) -> None:
            """NaN in the outputs on every rank before any rank runs again (peers may store into them)."""
            for x in outputs:
                x.fill(float("nan"))
            device.synchronize()
            world.barrier(what=f"sp {op}: {what}")

        def result(what: str, ref, ref_lse, op=op, outputs=outputs):
            """(O, LSE) on the host after ``what`` ran on the stream, and what is wrong with them, or None."""
            collectives.synchronize(stream, what=f"sp {op} {what}")
            got, got_lse = (x.to_numpy() for x in outputs)
            err = float(np.linalg.norm(got.astype(np.float64) - ref) / max(np.linalg.norm(ref), 1e-30))
            lse_err = float(np.abs(got_lse.astype(np.float64) - ref_lse).max())
            bad = None if err < SP_BOUND and lse_err < SP_LSE_BOUND else \
                f"{what}: relative error {err:.3g}, LSE error {lse_err:.3g} (NaN: work not done)"
            return (got, got_lse), bad

        def check(mine=mine, ref=ref, ref_lse=ref_lse):         # rebound by each replay
            poison("first inputs written")
            call(stream)                                   # the plan
            _, bad = result("eager", ref, ref_lse)
            with capture(stream) as cap:
                call(stream)
            for replay in range(1, REPLAYS + 1):
                mine, ref, ref_lse = inputs(replay)
                for dev, x in zip((q, k, v), mine):
                    dev.copy_from_numpy(x)
                poison(f"inputs of replay {replay} written")
                cap.graph.replay(1, stream)
                replayed, wrong = result(f"replay {replay}", ref, ref_lse)
                bad = bad or wrong
                poison(f"replay {replay} read")
                call(stream)                               # eager on the same inputs, after the replay
                eager, wrong = result(f"eager after replay {replay}", ref, ref_lse)
                bad = bad or wrong or next((f"replay {replay} differs from the eager call" for a, b in
                                            zip(replayed, eager) if a.tobytes() != b.tobytes()), None)
            return bad
        attempt(failures, op, world, check, f"sp {op} done")
    return dict(cases=names, failures=failures)


def moe_graph(world, device, heap) -> dict:
    """moe_dispatch, a bulk copy of the received rows into a symmetric y, and moe_combine, captured once and
    replayed with new tokens and routings in the same buffers: combine then gives each token its row
    times the sum of its top-k weights, whatever order the rows arrived in (so it is checked against
    numpy, not bit for bit against an eager call)."""
    stream = Stream(non_blocking=True)
    tokens, hidden, topk, experts = 64, 64, 2, 2 * world.size
    rng = np.random.default_rng(100 + world.rank)

    def draw():
        x = rng.standard_normal((tokens, hidden), dtype=np.float32).astype(BF16)
        ids = np.stack([rng.permutation(experts)[:topk] for _ in range(tokens)]).astype(np.int32)
        return x, ids, rng.random((tokens, topk), dtype=np.float32)

    host = draw()
    x, ids, weights = (from_numpy(a) for a in host)
    combined = empty((tokens, hidden), np.float32)
    failures = []

    def call(s):
        d = pkptx.moe_dispatch(x, ids, weights, world, experts, heap=heap, stream=s)
        if "y" not in ys:                                  # made by the first call, never in the capture
            ys["y"] = heap.alloc(d.recv.shape, BF16)
        y = ys["y"]
        pkptx.bulk_copy(y.local, d.recv, stream=s)
        pkptx.moe_combine(y, d, world, out=combined, stream=s)

    def check(what):
        collectives.synchronize(stream, what=f"moe {what}")
        want = host[0].astype(np.float64) * host[2].sum(axis=1, keepdims=True)
        err = float(np.linalg.norm(combined.to_numpy() - want) / np.linalg.norm(want))
        if not err < 1e-2:
            failures.append(f"{what}: relative error {err:.3g} (NaN: work not done)")

    ys: dict = {}
    try:
        call(stream)                                       # the plans, and y
        check("eager")
        with capture(stream) as cap:
            call(stream)
        for replay in range(1, REPLAYS + 1):
            host = draw()
            for dev, a in zip((x, ids, weights), host):
                dev.copy_from_numpy(a)
            combined.fill(float("nan"))
            device.synchronize()
            world.barrier(what=f"moe: inputs of replay {replay} written")
            cap.graph.replay(1, stream)
            check(f"replay {replay}")
            world.barrier(what=f"moe: replay {replay} read")
    except Exception:
        failures.append(traceback.format_exc()[-1500:])
    world.barrier(what="moe done")
    return dict(failures=failures)


def torch_graph(world, heap) -> dict:
    try:
        import torch
    except ImportError:
        return dict(skipped="torch is not installed")
    x, y = heap.alloc((4096,), np.float32), heap.alloc((4096,), np.float32)
    x.local.copy_from_numpy(data(world.rank + 5, x.shape))
    torch.cuda.synchronize()
    world.barrier(what="torch: inputs written")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        collectives.all_reduce(x, world, out=y, algorithm="one_shot", stream=side)   # warm-up: the plan
    collectives.synchronize(side, what="torch warm-up")
    want = y.local.to_numpy()
    y.local.fill(0)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        s = torch.cuda.current_stream()                 # the capture stream, passed as a torch stream
        for _ in range(10):
            collectives.all_reduce(x, world, out=y, algorithm="one_shot", stream=s)
    for _ in range(REPLAYS):
        graph.replay()
    torch.cuda.synchronize()
    collectives.synchronize(what="torch replays")
    bad = mismatch(y.local.to_numpy(), want, True)
    return dict(failures=[bad] if bad else [])


def recovery(world, device, heap) -> dict:
    out = dict(failures=[])
    x = heap.alloc((5000,), np.float32)
    collectives.all_reduce(x, world)        # every rank has this heap's flags before one refuses a call
    collectives.synchronize(what="recovery: warm-up")
    x.local.copy_from_numpy(np.full(5000, world.rank + 1, np.float32))
    device.synchronize()
    world.barrier(what="recovery: inputs written")
    try:
        collectives.all_reduce(x, world, op="mean" if world.rank == 1 else "sum", timeout=2.0)
        collectives.synchronize(what="recovery: the call rank 1 refused")
        out["failures"].append("no DeviceTimeoutError")
    except ArgumentError as exc:
        out["refused"] = str(exc)
    except DeviceTimeoutError as exc:
        out.update(timeout=str(exc), missing=exc.missing)
        try:
            collectives.all_reduce(x, world)
            out["failures"].append("a poisoned heap took a call")
        except HeapStateError as refused:
            out["poisoned"] = str(refused)
    heap.reset()
    x.local.copy_from_numpy(np.full(5000, world.rank + 1, np.float32))
    device.synchronize()
    world.barrier(what="recovery: inputs written again")
    for i in range(3):
        collectives.all_reduce(x, world, timeout=10.0)
        collectives.synchronize(what=f"recovery: good call {i}")
        want = (world.size * (world.size + 1) // 2) * world.size ** i
        got = x.local.to_numpy()
        if not np.all(got == want):
            out["failures"].append(f"after reset, call {i}: got {got[:3]}, expected {want}")
    return out


def late(world, device, heap) -> dict:
    out = dict(failures=[])
    x = heap.alloc((5000,), np.float32)
    x.local.fill(1.0)
    collectives.all_reduce(x, world)
    collectives.synchronize(what="late: warm-up")
    device.synchronize()
    world.barrier(what="late: ready")
    if world.rank == 1:
        time.sleep(3.0)                            # the others give up after 1 s
    collectives.all_reduce(x, world, timeout=1.0)
    try:
        collectives.synchronize(what="late all_reduce")
        out["failures"].append("no DeviceTimeoutError")
    except DeviceTimeoutError as exc:
        out.update(timeout=str(exc), missing=exc.missing)
    heap.reset()
    x.local.fill(1.0)
    device.synchronize()
    world.barrier(what="late: after reset")
    collectives.all_reduce(x, world)
    collectives.synchronize(what="late: after reset")
    if not np.all(x.local.to_numpy() == world.size):
        out["failures"].append("wrong all_reduce after the reset")
    return out


def main() -> None:
    world = World()
    device = Device(world.device_ordinal()).set_current()
    heap = SymmetricHeap(world, 64 << 20)
    wanted = sys.argv[1:] or ["graphs", "sp", "moe", "torch", "recovery", "late"]
    if "graphs" in wanted:
        report(world.rank, "graphs", **graphs(world, device, heap))
    if "sp" in wanted:
        report(world.rank, "sp", **sp_graphs(world, device, heap))
    if "moe" in wanted:
        report(world.rank, "moe", **moe_graph(world, device, heap))
    if "torch" in wanted:
        report(world.rank, "torch", **torch_graph(world, heap))
    if "recovery" in wanted and world.size > 1:
        report(world.rank, "recovery", **recovery(world, device, heap))
    if "late" in wanted and world.size > 1:
        report(world.rank, "late", **late(world, device, heap))
    heap.close()
    world.close()


if __name__ == "__main__":
    main()
