"""Launch benchmarks: (1) host cost of one launch of an empty kernel, pkptx against CuPy and bare
cuda.bindings in the same run; (2) host cost of one call of the ops on small problems (planned or cached,
as every call after the first), against torch's nearest op; (3) a cp.async.bulk copy kernel against
cuMemcpyDtoDAsync at 1 GiB.

    python -m pkptx bench launch [--record] [--quick]
"""
from __future__ import annotations

import contextlib
import ctypes
import sys
import tempfile
from pathlib import Path

import numpy as np

from .. import isa
from ..isa import Param
from ..isa import types as T
from ..launch import Device, LoadedKernel, LaunchConfig, Stream, empty, from_numpy, launch
from ..launch.driver import call, check, driver
from ..ops.collectives import synchronize
from ..ops.copy import bulk_copy
from ..templates.kernels import copy as copy_kernel
from .common import event_ms, host_us_interleaved, parse_args, report

COPY_SWEEP = ((copy_kernel.Config().chunk, copy_kernel.Config().stages, copy_kernel.CTAS_PER_SM),
              (64 << 10, 3, 1), (4 << 10, 12, 4), (2 << 10, 12, 8), (2 << 10, 6, 12), (1 << 10, 16, 12),
              (2 << 10, 8, 16), (4 << 10, 8, 8))
# (chunk bytes, stages, CTAs per SM); the first row is the kernel's default (copy.py says how it was chosen)
EMPTY_PARAMS = [Param("a", T.u64, pointer=True), Param("b", T.u64, pointer=True), Param("n", T.u32)]
EMPTY_CUDA = 'extern "C" __global__ void empty(const float* a, const float* b, unsigned n) {}'


def empty_kernel() -> isa.Kernel:
    """``empty(a, b, n)``: ``ret`` only, the launch path with nothing on the GPU side."""
    k = isa.Kernel("empty", EMPTY_PARAMS)
    k.builder().ret()
    return k


def bench_overhead(args) -> None:
    """Host microseconds per launch of the same empty kernel, several ways, in one run."""
    cu = driver()
    device = Device(0).set_current()
    compiled = empty_kernel().compile()
    k = LoadedKernel.load(compiled, device)
    x, y = empty(1024, "float32"), empty(1024, "float32")
    calls = 1000 if args.quick else 5000
    cfg = LaunchConfig(1, 32)
    bound = k[1, 32]
    prepared = k.prepare(cfg, x, y, 1024)
    paths = [("pkptx k[grid, block](...)", lambda: bound(x, y, 1024)),
             ("pkptx k.prepare(cfg, ...).launch(): packed once", prepared.launch),
             ("pkptx k.launch(cfg, ...)", lambda: k.launch(cfg, x, y, 1024)),
             ("pkptx launch(None, cfg, k, ...)", lambda: launch(None, cfg, k, x, y, 1024))]

    k.launch(cfg, x, y, 1024)                       # builds the native config the raw rows reuse
    native, fn, ok = k._natives[(cfg, 0)], k.function.handle, cu.CUresult.CUDA_SUCCESS
    values, types = (x.ptr, y.ptr, 1024), (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32)
    prebuilt = k.packer.pack((x, y, 1024))

    def raw(*a, fn_name="cuLaunchKernelEx"):
        f = getattr(cu, fn_name)

        def go():
            err = f(*a)[0]
            if err != ok:
                check((err,), fn_name)
        return go
    paths += [("cuda.bindings cuLaunchKernelEx, (values, types)", raw(native, fn, (values, types), 0)),
              ("cuda.bindings cuLaunchKernelEx, prebuilt void**", raw(native, fn, prebuilt, 0)),
              ("cuda.bindings cuLaunchKernel, (values, types)",
               raw(fn, 1, 1, 1, 32, 1, 1, 0, 0, (values, types), 0, fn_name="cuLaunchKernel"))]
    with cupy_paths(compiled) as theirs:
        paths += theirs
        for _, go in paths:
            go()
        device.synchronize()                         # every path works before any is timed
        rows = [[label, us] for (label, _), us in zip(paths, host_us_interleaved([go for _, go in paths], calls))]
    pk, pre, cupy_us = rows[0][1], rows[1][1], next((r[1] for r in rows if r[0] == "CuPy RawKernel"), None)
    for r in rows:
        r.append(f"{r[1] / cupy_us:.2f}" if cupy_us else "-")
    note = (f"pkptx k[grid, block]: {pk:.2f} us per launch, prepared: {pre:.2f} us" +
            (f"; CuPy RawKernel {cupy_us:.2f} us; ratios {pk / cupy_us:.2f} (goal <= 1.00) and {pre / cupy_us:.2f} "
             "(prepared, what the ops' plans launch; goal <= 0.75)" if cupy_us else "; CuPy not available") +
            "; rounds of every path interleaved, median of 9")
    report("Launch overhead: empty kernel, host us per launch", ["launch path", "us/launch", "vs CuPy"], rows,
           note, args.record)


@contextlib.contextmanager
def cupy_paths(compiled):
    """CuPy on the same kernel from CUDA C (RawKernel) and on the same cubin (RawModule)."""
    try:
        import cupy
    except ImportError:
        yield []
        return
    paths = []
    cx = cupy.empty(1024, cupy.float32)
    n = np.uint32(1024)
    try:
        rk = cupy.RawKernel(EMPTY_CUDA, "empty")
        rk((1,), (32,), (cx, cx, n))
        paths.append(("CuPy RawKernel", lambda: rk((1,), (32,), (cx, cx, n))))
    except Exception as exc:       # NVRTC missing or failing: report it, keep the other rows
        print(f"CuPy RawKernel unavailable: {type(exc).__name__}: {exc}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "empty.cubin"
        path.write_bytes(compiled.cubin.data)
        mod_fn = cupy.RawModule(path=str(path)).get_function("empty")
        paths.append(("CuPy RawModule function (same cubin)", lambda: mod_fn((1,), (32,), (cx, cx, n))))
        yield paths


def bench_bulk_copy(args) -> None:
    """cp.async.bulk copy of 1 GiB against cuMemcpyDtoDAsync; bandwidth counts bytes read + written."""
    device = Device(0).set_current()
    nbytes = (256 if args.quick else 1024) << 20
    repeats = 5 if args.quick else 20
    stream = Stream(device)
    host = np.frombuffer(np.random.default_rng(1).bytes(nbytes), np.uint8)
    src = from_numpy(host, stream)
    dst = empty(nbytes, "uint8", device, stream)

    def verify(what: str) -> None:
        got = dst.to_numpy(stream)
        if not np.array_equal(got, host):
            raise SystemExit(f"{what}: copy is wrong at {np.flatnonzero(got != host)[:4]}")

    copy = lambda: call("cuMemcpyDtoDAsync", dst.ptr, src.ptr, nbytes, stream.cu)  # noqa: E731
    dst.fill(0xA5, stream)
    copy()
    verify("cuMemcpyDtoDAsync")
    base_ms = event_ms(copy, stream, repeats=repeats)
    gbps = lambda ms: 2 * nbytes / ms / 1e6  # noqa: E731
    rows = [["cuMemcpyDtoDAsync", "-", base_ms, gbps(base_ms), "1.00"]]
    for chunk, stages, per_sm in COPY_SWEEP:
        cfg = copy_kernel.Config(chunk=chunk, stages=stages)
        run = lambda: bulk_copy(dst, src, config=cfg, ctas_per_sm=per_sm, stream=stream)  # noqa: E731
        dst.fill(0xA5, stream)
        run()
        synchronize(stream, what=f"bulk copy {cfg}")
        verify(f"bulk copy {cfg}")
        ms = event_ms(run, stream, repeats=repeats)
        rows.append([f"bulk copy {chunk // 1024} KiB x {stages}, {per_sm} CTA/SM", f"{device.sm_count * per_sm}",
                     ms, gbps(ms), f"{base_ms / ms:.3f}"])
    best = max(rows[1:], key=lambda r: float(r[4]))
    report(f"Bulk copy {nbytes >> 20} MiB: cp.async.bulk vs cuMemcpyDtoDAsync",
           ["kernel", "CTAs", "ms (median)", "GB/s (r+w)", "vs memcpy"], rows,
           f"best: {best[0]} at {best[4]} of cuMemcpyDtoDAsync (goal >= 0.95)", args.record)


def bench_op_calls(args) -> None:
    """Host microseconds per op call after the first, on problems small enough that the GPU keeps up."""
    import ml_dtypes
    import torch

    import pkptx
    from ..launch import SymmetricHeap, World, from_dlpack
    world = World.single()
    heap = SymmetricHeap(world, 16 << 20)
    x, y = heap.alloc((1024,), np.float32), heap.alloc((1024,), np.float32)
    g = heap.alloc((8, 128), ml_dtypes.bfloat16)
    bf = dict(device="cuda", dtype=torch.bfloat16)
    a, b, c = torch.randn(256, 64, **bf), torch.randn(256, 64, **bf), torch.empty(256, 256, **bf)
    da, db, dc = (from_dlpack(t) for t in (a, b, c))
    q, k, v = (torch.randn(1, 128, 2, 64, **bf) for _ in range(3))
    o, t = torch.empty_like(q), torch.empty(1024, device="cuda")
    stream = Stream.wrap(torch.cuda.current_stream().cuda_stream)
    paths = [("all_reduce 4 KiB (pkptx, planned)", lambda: pkptx.all_reduce(x, world, out=y, algorithm="one_shot",
                                                                            stream=stream)),
             ("all_gather 2 KiB (pkptx, planned)", lambda: pkptx.all_gather(g, world, dim=0, stream=stream)),
             ("gemm 256x256x64, torch tensors (pkptx, cached)", lambda: pkptx.gemm(a, b, c, stream=stream)),
             ("gemm 256x256x64, DeviceArrays (pkptx, cached)", lambda: pkptx.gemm(da, db, dc, stream=stream)),
             ("attention 1x128x2x64, torch tensors (pkptx, cached)",
              lambda: pkptx.attention(q, k, v, out=o, stream=stream)),
             ("torch.Tensor.add_ 4 KiB", lambda: t.add_(1.0)),
             ("torch.matmul 256x256x64, out=", lambda: torch.matmul(a, b.T, out=c)),
             ("torch SDPA 1x2x128x64", lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v))]
    calls = 500 if args.quick else 2000
    rows = [[label, us] for (label, _), us in zip(paths, host_us_interleaved([go for _, go in paths], calls))]
    pkptx.synchronize(stream)
    heap.close()
    world.close()
    report("Host us per op call (after the first), pkptx and torch", ["call", "us/call"], rows,
           "Planned (collectives, per heap) or cached (local ops, per operand addresses) calls: a key lookup and "
           "one prepared launch; world of 1; rounds interleaved, median of 9; problems small enough that the GPU "
           "keeps up, so these are host times.", args.record)


def main(argv=None) -> int:
    options = parse_args(__doc__.splitlines()[0], argv)
    bench_overhead(options)
    bench_op_calls(options)
    bench_bulk_copy(options)
    return 0


if __name__ == "__main__":
    sys.exit(main())
