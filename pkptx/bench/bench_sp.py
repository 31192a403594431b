"""Sequence-parallel attention, fused against the sequential composition of pkptx's own parts, bf16, D=128.

- Ring (non-causal, as the paper measures it): ``ring_attention`` vs ``all_gather`` of K and V along the
  sequence, then ``attention`` of the local Q over the gathered K/V. H=16.
- Ulysses (causal): ``ulysses_attention`` vs ``all_to_all`` of Q, K, V (scatter heads, gather sequence),
  ``attention`` on the local heads, ``all_to_all`` back. H=128.
Lengths are total tokens over all ranks (the paper's are multiples of 768; B=16 there, here what fits
one shared GPU: ``--ring-batch``, ``--ulysses-batch``). The sequential composition is timed as one unit, as
it runs in a model: its collectives line the ranks up, so their attentions run side by side as the fused
launches' do. The attention step is timed the same way, in step: a tiny all_gather before each repeat lines
the ranks up (its own time subtracted). Timed alone, with nothing lining the ranks up, a rank's attention
drifts beside the others' GPU spins and, under MPS, runs faster than in step (31 against 38.5 ms at 4
ranks: HBM and power less shared; probe/sequential_probe.py), so that column flatters the composition
and is shown only for comparison. The unoverlapped share of communication is (fused - attention in
step) / (communication alone): 0 means it hid completely. Each fused result is checked against the
composition before it is timed. Run under MPI: ``python -m pkptx bench sp --ranks 4
--mps``; with every rank on one GPU the figures measure the protocol, the overlap and the SM split, not
NVLink.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np

from .common import checked_ms, report, sharing
from .progress import progress


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--ring-lengths", default="3072,6144,12288,24576")
    ap.add_argument("--ulysses-lengths", default="3072,6144,12288")
    ap.add_argument("--ring-batch", type=int, default=4)
    ap.add_argument("--ulysses-batch", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--num-comm-sms", type=int, default=None, help="default: the ops' choice from the shapes")
    ap.add_argument("--ring-relay", default=None, metavar="LANES,STAGES,CHUNK",
                    help="the ring communicators' relay (threads, shared-memory stages each, bytes a chunk); "
                         "default: ring_attention's")
    args = ap.parse_args(argv)
    import ml_dtypes

    import pkptx
    from ..launch import Device, Stream, SymmetricHeap, World, empty, from_numpy
    from ..templates.kernels import ring_attention
    ring_config = None
    if args.ring_relay:
        lanes, stages, chunk = map(int, args.ring_relay.split(","))
        ring_config = dataclasses.replace(ring_attention.default_config("bf16", 128, False), relay_lanes=lanes,
                                          relay_stages=stages, relay_chunk=chunk)
    world = World()
    Device(world.device_ordinal()).set_current()
    stream, w, bf16, d = Stream(), world.size, ml_dtypes.bfloat16, 128
    batches = {"ring": args.ring_batch, "ulysses": args.ulysses_batch}
    ring_lengths = [n for n in map(int, filter(None, args.ring_lengths.split(","))) if n % (2 * w) == 0]
    ulysses_lengths = [n for n in map(int, filter(None, args.ulysses_lengths.split(","))) if n % w == 0]
    biggest = max([0] + [args.ring_batch * n * 16 * d * 2 * 6 for n in ring_lengths]
                  + [args.ulysses_batch * n * 128 * d * 2 * 7 // w for n in ulysses_lengths])
    heap = SymmetricHeap(world, 3 * biggest + (256 << 20))   # the steps' buffers and the ops' workspaces
    rng = np.random.default_rng(11 + world.rank)
    rows = []
    tiny, tiny_all = heap.alloc((1, 64), np.float32), heap.alloc((w, 64), np.float32)

    def line_up():
        pkptx.all_gather(tiny, world, dim=0, out=tiny_all, stream=stream)

    def timed(fn):
        return checked_ms(fn, stream, repeats=args.repeats)

    def rand(*shape):
        return rng.standard_normal(shape, dtype=np.float32).astype(bf16)

    def rel(x, y):
        x, y = x.astype(np.float64), y.astype(np.float64)
        return float(np.linalg.norm(x - y) / max(np.linalg.norm(y), 1e-30))

    def in_step(fn):
        return max(0.0, timed(lambda: (line_up(), fn())) - timed(line_up))

    def row(op, n, err, t_fused, t_seq, attend, t_comm, causal):
        flops = 4 * batches[op] * (16 if op == "ring" else 128) * n * n * d / w * (0.5 if causal else 1.0)
        t_attn = in_step(attend)
        rows.append([op, "causal" if causal else "full", batches[op], n, f"{err:.1e}", t_fused, t_seq, t_attn,
                     timed(attend), t_comm, f"{t_seq / t_fused:.3f}", f"{max(0.0, t_fused - t_attn) / t_comm:.2f}",
                     f"{flops / t_fused / 1e9:.0f}"])

    for n in progress(ring_lengths, "ring lengths", show=world.rank == 0):
        s, h, batch = n // w, 16, args.ring_batch
        q, out, plain = from_numpy(rand(batch, s, h, d)), empty((batch, s, h, d), bf16), empty((batch, s, h, d), bf16)
        k_shard, v_shard = heap.alloc((batch, s, h, d), bf16), heap.alloc((batch, s, h, d), bf16)
        k_full, v_full = heap.alloc((batch, n, h, d), bf16), heap.alloc((batch, n, h, d), bf16)
        k_shard.local.copy_from_numpy(rand(batch, s, h, d))
        v_shard.local.copy_from_numpy(rand(batch, s, h, d))
        world.barrier(what="ring inputs")

        def fused():
            pkptx.ring_attention(q, k_shard.local, v_shard.local, world, out=out, num_comm_sms=args.num_comm_sms,
                                 stream=stream, config=ring_config)

        def gather():
            pkptx.all_gather(k_shard, world, dim=1, out=k_full, stream=stream)
            pkptx.all_gather(v_shard, world, dim=1, out=v_full, stream=stream)

        def attend():
            pkptx.attention(q, k_full.local, v_full.local, out=plain, stream=stream)

        fused()
        gather()
        attend()
        pkptx.synchronize(stream)
        err = rel(out.to_numpy(), plain.to_numpy())
        row("ring", n, err, timed(fused), timed(lambda: (gather(), attend())), attend, timed(gather), False)
        for buf in (v_full, k_full, v_shard, k_shard):
            buf.free()

    for n in progress(ulysses_lengths, "ulysses lengths", show=world.rank == 0):
        s, h, batch = n // w, 128, args.ulysses_batch
        q, k, v = (from_numpy(rand(batch, s, h, d)) for _ in range(3))
        out = heap.alloc((batch, s, h, d), bf16)
        lse = heap.alloc((batch, h, s), np.float32)
        shards = [heap.alloc((batch, s, h, d), bf16) for _ in range(3)]
        heads = [heap.alloc((batch, n, h // w, d), bf16) for _ in range(4)]
        back = heap.alloc((batch, s, h, d), bf16)
        for buf, x in zip(shards, (q, k, v)):
            buf.local.copy_from_numpy(x.to_numpy())
        world.barrier(what="ulysses inputs")

        def fused():
            pkptx.ulysses_attention(q, k, v, world, causal=True, out=out, lse=lse, heap=heap,
                                    num_comm_sms=args.num_comm_sms, stream=stream)

        def scatter():
            for src, dst in zip(shards, heads):
                pkptx.all_to_all(src, world, scatter_dim=2, gather_dim=1, out=dst, stream=stream)

        def attend():
            pkptx.attention(heads[0].local, heads[1].local, heads[2].local, causal=True, out=heads[3].local,
                            stream=stream)

        def gather():
            pkptx.all_to_all(heads[3], world, scatter_dim=1, gather_dim=2, out=back, stream=stream)

        fused()
        scatter()
        attend()
        gather()
        pkptx.synchronize(stream)
        err = rel(out.local.to_numpy(), back.local.to_numpy())
        t_comm = timed(scatter) + timed(gather)
        row("ulysses", n, err, timed(fused), timed(lambda: (scatter(), attend(), gather())), attend, t_comm,
            True)
        for buf in [back] + heads[::-1] + shards[::-1] + [lse, out]:
            buf.free()
    suffix, sharing_note = sharing(world)
    if world.rank == 0:
        gpus = Device.available()
        report(f"sequence-parallel attention vs collective-then-attention, {w} rank(s) on {min(gpus, w)} GPU(s)"
               f"{suffix}",
               ["op", "mask", "B", "tokens", "rel diff", "fused ms", "sequential ms", "attention in step ms",
                "attention alone ms", "comm ms", "speedup", "unoverlapped comm", "fused TFLOP/s per rank"], rows,
               sharing_note + "D=128, bf16; ring H=16 (non-causal), Ulysses H=128 (causal); sequential = the "
               "collectives and the attention timed as one unit (speedup = sequential / fused); attention in step: a "
               "tiny all_gather lines the ranks up before each repeat (its time subtracted); alone: nothing lines "
               "them up, so a rank's attention may run beside the others' spins (flatters the composition); "
               "unoverlapped comm = (fused - attention in step) / comm; "
               f"num_comm_sms={args.num_comm_sms or 'auto'}; ring relay {args.ring_relay or 'default'}; "
               "median of CUDA events, GPU time (a GPU spin before each repeat "
               "hides the host).", args.record)
    heap.close()
    world.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
