"""What the MPI test programs (``tests/templates/programs``) share around each hypothesis case: a
failure is recorded with its case, never raised, so every rank runs the same cases and collectives;
after each case the ranks meet and free its symmetric buffers (in reverse, as every rank allocated
them in the same order)."""
from __future__ import annotations

import contextlib
import traceback


@contextlib.contextmanager
def recorded(world, failures: list, case: dict, buffers: list):
    """Run one case: an exception becomes ``failures.append(case + traceback)``; then a host barrier
    and ``buf.free()`` for each of ``buffers``."""
    try:
        yield
    except Exception:
        failures.append(dict(case, error=traceback.format_exc()[-1500:]))
    finally:
        world.barrier(what="case done")
        for buf in reversed(buffers):
            buf.free()


def finish(world, heap, section: str, cases: list, failures: list) -> None:
    """Report this rank's outcome under ``section``, then close the heap and the world."""
    from tests.helpers.mpi import report
    report(world.rank, section, cases=len(cases), failures=failures, all_cases=cases)
    heap.close()
    world.close()


def start(heap_bytes: int = 256 << 20):
    """(world, device, heap, hog): this rank's World, its GPU made current, a symmetric heap, and the
    ``PKPTX_TEST_HOG_MS`` work to start once the inputs are written."""
    from pkptx.launch import Device, SymmetricHeap, World
    from tests.helpers.hog import hog_from_env
    world = World()
    device = Device(world.device_ordinal()).set_current()
    return world, device, SymmetricHeap(world, heap_bytes), hog_from_env()


def rel_err(got, ref) -> float:
    """Relative Frobenius error of ``got`` against the float64 ``ref``."""
    import numpy as np
    return float(np.linalg.norm(got.astype(np.float64) - ref) / max(np.linalg.norm(ref), 1e-30))
