"""Two ranks on GPU 0; rank 1 never signals. Rank 0's bounded wait must give up after ``timeout_ns``,
the host must raise DeviceTimeoutError naming the rank, the flag and the value, and the GPU must stay
usable for the next kernel of the same process.

Sections: ``primitive`` (the wait primitive in a one-warp kernel, raised by collectives.synchronize),
``collective`` (a whole all_reduce that rank 1 skips: the prologue barrier of the collective template
times out). Each reports what it saw; the test (test_gpu_timeout.py) judges.
"""
from __future__ import annotations

import os
import time
import traceback

import numpy as np

from pkptx.errors import DeviceTimeoutError
from pkptx.ops import collectives
from tests.helpers.mpi import report
from tests.primitives.programs import prim_kernels as P
from tests.primitives.programs.harness import Env, empty, view

TIMEOUT_NS = 500_000_000          # 0.5 s
FLAG, EXPECTED = 3, 5


def layout(name, buf):
    return {f"{name}_peers": buf.peer_table_ptr, f"{name}_mc": 0}


def usable(env: Env, bufs: dict, what: str) -> dict:
    """Kernels that must work after the timeout, in the same process: a bounded wait on a flag the host
    already set (returns at once), and a peer_load/peer_store copy checked against the host data."""
    flags = bufs["flags"]
    view(flags.local_ptr, (8,), np.uint32, flags).copy_from_numpy(np.array([0, 0, 0, 0, 7, 0, 0, 0], np.uint32))
    out = empty((1,), np.uint32)
    out.fill(0)
    env.launch(P.wait_only(), 1, 32, out=out, index=4, expected=7, timeout_ns=TIMEOUT_NS, **layout("flags", flags))
    data = (np.arange(4096, dtype=np.uint64) * 2654435761 % 2**32).astype(np.uint32)
    src, dst = (view(bufs[n].local_ptr, (4096,), np.uint32, bufs[n]) for n in ("a", "b"))
    src.copy_from_numpy(data)
    dst.fill(0)
    env.launch(P.peer_copy(4), 8, P.VEC_THREADS, src_rank=env.rank, dst_rank=env.rank, count=1024,
               **layout("src", bufs["a"]), **layout("dst", bufs["b"]))
    collectives.synchronize(what=f"{what}: the kernels after the timeout")
    return dict(wait_value=int(out.to_numpy()[0]), copy_ok=bool(np.array_equal(dst.to_numpy(), data)))


def primitive(env: Env, bufs: dict) -> dict:
    flags = bufs["flags"]
    if env.rank != 0:
        return dict(role="silent")                    # rank 1: never signals flag 3 on rank 0
    view(flags.local_ptr, (8,), np.uint32, flags).fill(0)
    out = empty((1,), np.uint32)
    out.fill(0xFFFFFFFF)
    env.device.synchronize()
    start = time.monotonic()
    env.launch(P.wait_only(), 1, 32, out=out, index=FLAG, expected=EXPECTED, timeout_ns=TIMEOUT_NS,
               **layout("flags", flags))
    result = dict(role="waiter", raised=None, message="")
    try:
        collectives.synchronize(what="wait_only")
    except DeviceTimeoutError as exc:
        result.update(raised="DeviceTimeoutError", message=str(exc))
    except Exception as exc:                            # noqa: BLE001 (reported, judged by the test)
        result.update(raised=type(exc).__name__, message=str(exc)[:2000])
    result["elapsed_s"] = time.monotonic() - start
    result["out_untouched"] = int(out.to_numpy()[0]) == 0xFFFFFFFF     # the thread exited before writing
    try:
        collectives.synchronize(what="status after the report")       # the status words were cleared
        result["cleared"] = True
    except Exception as exc:                            # noqa: BLE001
        result["cleared"] = f"{type(exc).__name__}: {exc}"
    result.update(usable(env, bufs, "primitive"))
    return result


def collective(env: Env, bufs: dict) -> dict:
    import ml_dtypes
    buf = env.heap.alloc((4096,), ml_dtypes.bfloat16)
    buf.local.copy_from_numpy(np.ones(4096, ml_dtypes.bfloat16))
    env.device.synchronize()
    env.world.barrier(what="collective: inputs")
    collectives.all_reduce(buf, env.world)              # both ranks: creates the flag state everywhere
    collectives.synchronize(what="all_reduce on both ranks")
    first_ok = bool(np.all(buf.local.to_numpy().astype(np.float32) == env.size))
    env.world.barrier(what="collective: first all_reduce done")
    result = dict(first_ok=first_ok)
    if env.rank == 0:
        start = time.monotonic()
        collectives.all_reduce(buf, env.world, timeout_ns=TIMEOUT_NS)
        try:
            collectives.synchronize(what="all_reduce without rank 1")
            result["raised"] = None
        except DeviceTimeoutError as exc:
            result.update(raised="DeviceTimeoutError", message=str(exc))
        except Exception as exc:                        # noqa: BLE001
            result.update(raised=type(exc).__name__, message=str(exc)[:2000])
        result["elapsed_s"] = time.monotonic() - start
        result.update(usable(env, bufs, "collective"))
    return result


def main() -> None:
    if os.environ.get("PKPTX_DISABLE_MULTICAST") != "1":
        raise SystemExit("set PKPTX_DISABLE_MULTICAST=1")
    env = Env(heap_bytes=8 << 20)
    report(env.rank, "setup", ok=True, size=env.size)
    bufs = {"flags": env.heap.alloc((8,), np.uint32), "a": env.heap.alloc((4096,), np.uint32),
            "b": env.heap.alloc((4096,), np.uint32)}
    for name, fn in (("primitive", primitive), ("collective", collective)):
        try:
            report(env.rank, name, **fn(env, bufs))
        except Exception:
            report(env.rank, name, error=traceback.format_exc()[-3000:])
        env.world.barrier(what=f"{name} done", timeout=120)
    env.close()


if __name__ == "__main__":
    main()
