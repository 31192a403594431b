"""Under mpirun, every rank checks pkptx's collectives against numpy on hypothesis-chosen cases.

Every rank draws the same cases (derandomized hypothesis, no database) and builds every rank's input
from the case's seed, so each can compute the float64 reference itself. A failing case is recorded,
not raised, so the ranks never diverge (hypothesis would shrink differently on each).
"""
from __future__ import annotations

import os
import sys
import traceback

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "launch"))
from mpi_programs.launcher import report  # noqa: E402

import ml_dtypes  # noqa: E402
from pkptx.launch import Device  # noqa: E402
from pkptx.launch.symmetric import SymmetricHeap  # noqa: E402
from pkptx.launch.world import World  # noqa: E402
from pkptx.ops import collectives  # noqa: E402
from pkptx.templates.kernels.all_reduce import reference  # noqa: E402

DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32}
RTOL = {"bf16": 2.0 ** -7, "f16": 2.0 ** -10, "f32": 1e-5}
POISON = {"bf16": 0x7FC0, "f16": 0x7E00, "f32": 0x7FC00000}


def inputs(seed: int, world: int, n: int, dtype: str) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(n, dtype=np.float32).astype(DTYPES[dtype]) for _ in range(world)]


def main() -> None:
    world = World()
    device = Device(world.device_ordinal()).set_current()
    heap = SymmetricHeap(world, 64 << 20, path=os.environ.get("PKPTX_PATH", "vmm"))
    failures, cases = [], []

    @settings(max_examples=int(os.environ.get("PKPTX_EXAMPLES", "25")), derandomize=True, database=None,
              deadline=None, suppress_health_check=list(HealthCheck))
    @given(n=st.one_of(st.integers(1, 300), st.integers(1, 200_000)), dtype=st.sampled_from(sorted(DTYPES)),
           op=st.sampled_from(["sum", "max", "min"]), algorithm=st.sampled_from(["one_shot", "two_shot"]),
           seed=st.integers(0, 2**31))
    def all_reduce_case(n, dtype, op, algorithm, seed):
        case = dict(n=n, dtype=dtype, op=op, algorithm=algorithm, seed=seed)
        cases.append(case)
        data = inputs(seed, world.size, n, dtype)
        src = heap.alloc((n,), DTYPES[dtype])
        dst = heap.alloc((n,), DTYPES[dtype]) if algorithm == "one_shot" else None
        try:
            src.local.copy_from_numpy(data[world.rank])
            (dst or src).local.fill(POISON[dtype]) if dst is not None else None
            device.synchronize()
            world.barrier(what="inputs written")
            result = collectives.all_reduce(src, world, op=op, out=dst, algorithm=algorithm)
            collectives.synchronize(what=f"all_reduce {case}")
            got = result.local.to_numpy().astype(np.float64)
            ref = reference(data, op)
            bound = RTOL[dtype] * (np.abs(ref) + np.sqrt(world.size))
            bad = ~(np.abs(got - ref) <= bound)
            if bad.any():
                i = int(np.argmax(bad))
                failures.append(dict(case, bad=int(bad.sum()), first=i, got=float(got[i]), ref=float(ref[i])))
        except Exception:
            failures.append(dict(case, error=traceback.format_exc()[-1500:]))
        finally:
            world.barrier(what="case done")
            if dst is not None:
                dst.free()
            src.free()

    all_reduce_case()
    report(world.rank, "all_reduce", cases=len(cases), failures=failures)
    heap.close()
    world.close()


if __name__ == "__main__":
    main()
