"""Where does the fused ring's time go beside the attention in step (4 ranks, MPS)? The ring kernel is
rebuilt with parts taken out (``RING_VARIANT``, one per process: each needs its own PKPTX_CACHE_DIR, as the
disk cache keys on the source, not on these patches): ``normal``; ``nowait``: the loaders never wait for a
peer's piece (results wrong, the pushes run as before); ``nopush``: the communicators raise the flags
without moving data; ``neither``: both (the ring's runs and maps over whatever the slots hold). Each is
timed in step (a tiny all_gather before each repeat, its time subtracted), beside the attention over
gathered K/V in step. B=4, H=16, D=128, non-causal, ``RING_PROBE_TOKENS`` lengths; ``RING_LABEL`` names
the row (probe/ring_variants.sh; ``PKG`` there runs another checkout's package). Not a test."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import pkptx  # noqa: E402
from pkptx.bench.common import checked_ms  # noqa: E402
from pkptx.launch import Device, Stream, SymmetricHeap, World, empty, from_numpy  # noqa: E402
from pkptx.templates.kernels import ring_attention  # noqa: E402

VARIANT = os.environ.get("RING_VARIANT", "normal")
LENGTHS = [int(n) for n in os.environ.get("RING_PROBE_TOKENS", "3072,24576").split(",")]


def patch():
    """Take the variant's parts out of the ring kernel's module; refuse one this source does not have."""
    if VARIANT not in ("normal", "nowait", "nopush", "neither"):
        sys.exit(f"RING_VARIANT must be normal, nowait, nopush or neither, got {VARIANT!r}")
    if VARIANT in ("nopush", "neither") and not hasattr(ring_attention, "stream_copy"):
        sys.exit(f"RING_VARIANT={VARIANT}: this ring kernel does not push through stream_copy")
    if VARIANT in ("nowait", "neither"):
        ring_attention.await_piece = lambda ctx, *args, **kwargs: ctx.b.fence_proxy_async("global")
    if VARIANT in ("nopush", "neither"):
        ring_attention.stream_copy = lambda *args, **kwargs: None


def main():
    patch()
    world = World()
    Device(world.device_ordinal()).set_current()
    stream, w, bf16 = Stream(), world.size, ml_dtypes.bfloat16
    rng = np.random.default_rng(5 + world.rank)
    rand = lambda *shape: rng.standard_normal(shape, dtype=np.float32).astype(bf16)  # noqa: E731
    batch, h, d = 4, 16, 128
    biggest = max(LENGTHS)
    heap = SymmetricHeap(world, 2 * batch * biggest * h * d * 2 * 2 + (256 << 20))
    tiny, tiny_all = heap.alloc((1, 256), np.float32), heap.alloc((w, 256), np.float32)
    line_up = lambda: pkptx.all_gather(tiny, world, dim=0, out=tiny_all, stream=stream)  # noqa: E731
    timed = lambda fn: checked_ms(fn, stream, repeats=7)  # noqa: E731
    results = {}
    for n in LENGTHS:
        s = n // w
        q = from_numpy(rand(batch, s, h, d))
        out, ring_out = empty((batch, s, h, d), bf16), empty((batch, s, h, d), bf16)
        k_shard, v_shard = heap.alloc((batch, s, h, d), bf16), heap.alloc((batch, s, h, d), bf16)
        k_full, v_full = heap.alloc((batch, n, h, d), bf16), heap.alloc((batch, n, h, d), bf16)
        k_shard.local.copy_from_numpy(rand(batch, s, h, d))
        v_shard.local.copy_from_numpy(rand(batch, s, h, d))
        world.barrier(what="inputs")
        pkptx.all_gather(k_shard, world, dim=1, out=k_full, stream=stream)
        pkptx.all_gather(v_shard, world, dim=1, out=v_full, stream=stream)
        attend = lambda: pkptx.attention(q, k_full.local, v_full.local, out=out, stream=stream)  # noqa: E731
        ring = lambda: pkptx.ring_attention(q, k_shard.local, v_shard.local, world, out=ring_out,  # noqa: E731
                                            stream=stream)
        attend()
        ring()
        pkptx.synchronize(stream)
        diff = float(np.abs(ring_out.to_numpy().astype(np.float32) - out.to_numpy().astype(np.float32)).max())
        lined = timed(line_up)
        results[n] = (timed(lambda: (line_up(), attend())) - lined, timed(lambda: (line_up(), ring())) - lined,
                      timed(ring), diff)
        for buf in (v_full, k_full, v_shard, k_shard):
            buf.free()
    every = world.allgather(results, what="rows")
    if world.rank == 0:
        for n in LENGTHS:
            att = [every[r][n][0] for r in range(w)]
            ring_step = [every[r][n][1] for r in range(w)]
            ring_free = [every[r][n][2] for r in range(w)]
            label = os.environ.get("RING_LABEL", VARIANT)
            print(f"| {w} | {label} | {n} | {max(att):.3f} | {max(ring_step):.3f} | {max(ring_free):.3f} | "
                  f"{max(ring_step) / max(att):.3f} | {every[0][n][3]:.2g} |", flush=True)
    heap.close()
    world.close()


if __name__ == "__main__":
    main()
