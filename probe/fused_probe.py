"""Dev probe: GEMM+AR on the shape that failed (n=384, k=192), fresh, against gemm and the fallback."""
import os, sys
import ml_dtypes
import numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from pkptx.launch import Device, SymmetricHeap, World, from_numpy, empty
from pkptx.ops import collectives, fused
from pkptx.ops.gemm import gemm, choose_config
from pkptx.templates.kernels import gemm_ar
BF16 = ml_dtypes.bfloat16
world = World(); device = Device(world.device_ordinal()).set_current()
heap = SymmetricHeap(world, 64 << 20); w = world.size
def run(tag, m, n, k, fuse, comm):
    rng = np.random.default_rng(5)
    a = [rng.standard_normal((m, k), dtype=np.float32).astype(BF16) for _ in range(w)]
    bb = [rng.standard_normal((n, k), dtype=np.float32).astype(BF16) for _ in range(w)]
    ref = gemm_ar.reference(a, bb, "nk")
    out = heap.alloc((m, n), BF16); out.local.fill(0x7FC0); device.synchronize(); world.barrier(what="in")
    A, B = from_numpy(a[world.rank]), from_numpy(bb[world.rank])
    fused.gemm_ar(A, B, world, out=out, num_comm_sms=comm, fused=fuse)
    collectives.synchronize(what=tag)
    got = out.local.to_numpy().astype(np.float64)
    single = empty((m, n), BF16); gemm(A, B, single); device.synchronize()
    part = single.to_numpy().astype(np.float64)
    pref = a[world.rank].astype(np.float64) @ bb[world.rank].astype(np.float64).T
    bad = np.abs(got - ref) > 0.05 * (np.abs(ref) + 1)
    rows, cols = np.nonzero(bad)
    print(f"rank {world.rank} {tag} m={m} n={n} k={k} fused={fuse} comm={comm}: err={np.linalg.norm(got-ref)/np.linalg.norm(ref):.3g}"
          f" nan={np.isnan(got).sum()} bad={bad.sum()} rows {rows.min() if rows.size else '-'}..{rows.max() if rows.size else '-'}"
          f" cols {cols.min() if cols.size else '-'}..{cols.max() if cols.size else '-'} |got|max={np.nanmax(np.abs(got)):.3g}"
          f" |ref|max={np.abs(ref).max():.3g} plain-gemm err={np.linalg.norm(part-pref)/np.linalg.norm(pref):.3g}"
          f" cfg={choose_config(m, n, k, 'bf16', 'bf16', 'nk', sm_count=device.sm_count, smem_limit=device.smem_per_block_optin)}", flush=True)
    world.barrier(what="done"); out.free()
for args in [(128 * w, 384, 192, True, 4), (128 * w, 384, 192, False, 4), (128 * w, 384, 192, True, 4),
             (128 * w, 512, 192, True, 4), (128 * w, 256, 192, True, 4), (128 * w, 384, 512, True, 4),
             (256 * w, 384, 192, True, 4), (128 * w, 384, 64, True, 4), (128 * w, 384, 192, True, 1)]:
    run("case", *args)
heap.close(); world.close()
