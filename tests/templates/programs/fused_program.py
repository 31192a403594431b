"""Under mpirun: AG+GEMM, GEMM+RS and GEMM+AR (fused, and the gemm-then-collective fallback) on
hypothesis-chosen shapes against float64 numpy.

Every rank draws the same cases and builds every rank's shards from the case seed, so each computes
the reference itself; failures are recorded, not raised, so the ranks never diverge.
"""
from __future__ import annotations


import ml_dtypes
import numpy as np
from hypothesis import given, strategies as st

from pkptx.launch import from_numpy
from pkptx.ops import collectives, fused
from pkptx.templates.kernels import ag_gemm, gemm_ar, gemm_rs
from tests.helpers.cases import finish, recorded, rel_err, start
from tests.helpers.mpi import hyp

BF16 = ml_dtypes.bfloat16


def shards(seed, world, shape):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape, dtype=np.float32).astype(BF16) for _ in range(world)]


def main() -> None:
    world, device, heap, hog = start()
    failures, cases = [], []
    w = world.size

    def ready():
        """Inputs written everywhere; then (``PKPTX_TEST_HOG_MS``) half of the SMs taken by other work."""
        device.synchronize()
        world.barrier(what="inputs written")
        hog()

    @hyp(18)
    @given(op=st.sampled_from(["ag_gemm", "gemm_rs", "gemm_ar"]), mb=st.integers(1, 3), n=st.sampled_from([256, 384, 512]),
           k=st.sampled_from([64, 192, 512]), layout=st.sampled_from(["nk", "kn"]), seed=st.integers(0, 2**31),
           fuse=st.sampled_from([True, True, False]), comm=st.sampled_from([4, 4, 1, "auto"]))
    def case(op, mb, n, k, layout, seed, fuse, comm):
        m = 128 * mb * w
        cases.append(dict(op=op, m=m, n=n, k=k, layout=layout, fused=fuse, num_comm_sms=comm))
        bshape = (n, k) if layout == "nk" else (k, n)
        buffers = []
        with recorded(world, failures, cases[-1], buffers):
            if op == "ag_gemm":
                a_rows = shards(seed, w, (m // w, k))
                b_local = shards(seed + 1, w, bshape)[world.rank]
                a_full = heap.alloc((m, k), BF16)
                buffers.append(a_full)
                full = np.full((m, k), np.nan, dtype=BF16)        # other ranks' rows: poison until gathered
                full[world.rank * (m // w):(world.rank + 1) * (m // w)] = a_rows[world.rank]
                a_full.local.copy_from_numpy(full)
                got = from_numpy(np.full((m, n), np.nan, dtype=BF16))
                ready()
                fused.ag_gemm(a_full, from_numpy(b_local), world, out=got, b_layout=layout, fused=fuse,
                              num_comm_sms=comm)
                collectives.synchronize(what="ag_gemm")
                ref = ag_gemm.reference(a_rows, b_local, layout)
                err = rel_err(got.to_numpy(), ref)
            else:
                a_parts = shards(seed, w, (m, k))
                b_parts = shards(seed + 1, w, bshape)
                out_shape = (m // w, n) if op == "gemm_rs" else (m, n)
                out = heap.alloc(out_shape, np.float32 if op == "gemm_rs" else BF16)
                buffers.append(out)
                out.local.fill(0x7FC00000 if op == "gemm_rs" else 0x7FC0)
                ready()
                A, B = from_numpy(a_parts[world.rank]), from_numpy(b_parts[world.rank])
                if op == "gemm_rs":
                    fused.gemm_rs(A, B, world, out=out, b_layout=layout, fused=fuse)
                    ref = gemm_rs.reference(a_parts, b_parts, w, layout)[world.rank]
                else:
                    fused.gemm_ar(A, B, world, out=out, b_layout=layout, num_comm_sms=comm, fused=fuse)
                    ref = gemm_ar.reference(a_parts, b_parts, layout)
                collectives.synchronize(what=op)
                err = rel_err(out.local.to_numpy(), ref)
            cases[-1]["err"] = err
            if not err < 1.5e-2:
                failures.append(cases[-1])

    case()
    finish(world, heap, "fused", cases, failures)


if __name__ == "__main__":
    main()
