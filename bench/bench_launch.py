"""Launch benchmarks: (1) host cost of one launch of an empty kernel, pkptx against CuPy and bare
cuda.bindings in the same run; (2) a cp.async.bulk copy kernel against cuMemcpyDtoDAsync at 1 GiB.

    python bench/bench_launch.py [--record] [--quick]
"""
from __future__ import annotations

import ctypes
import tempfile
from pathlib import Path

import numpy as np
from common import event_ms, host_us, parse_args, report

from pkptx import isa
from pkptx.isa import Param, address
from pkptx.isa import types as T
from pkptx.launch import Device, Kernel, LaunchConfig, Stream, empty, from_numpy, launch
from pkptx.primitives import StageRing, wait_parity
from pkptx.launch.driver import call, check, driver

EMPTY_PARAMS = [Param("a", T.u64, pointer=True), Param("b", T.u64, pointer=True), Param("n", T.u32)]
EMPTY_CUDA = 'extern "C" __global__ void empty(const float* a, const float* b, unsigned n) {}'


def empty_kernel() -> isa.Kernel:
    """``empty(a, b, n)``: ``ret`` only, the launch path with nothing on the GPU side."""
    k = isa.Kernel("empty", EMPTY_PARAMS)
    k.builder().ret()
    return k


def bulk_copy(chunk: int, stages: int) -> isa.Kernel:
    """Persistent 1-D copy: thread 0 of each CTA streams chunks global -> shared -> global.

    Stage s of ``stages`` holds one ``chunk``-byte buffer and one mbarrier. Loads complete on the
    mbarrier (expect_tx); each store is one bulk group. The prologue fills every stage; after storing
    chunk i, the stage of chunk i-1 is refilled with chunk i-1+stages once ``wait_group.read 1`` says
    store i-1 has read it. Params: dst, src (device addresses), nchunks (u64; the copy is
    ``nchunks * chunk`` bytes). Launch with ``chunk * stages`` bytes of dynamic shared memory.
    """
    k = isa.Kernel("bulk_copy", [Param("dst", T.u64, pointer=True), Param("src", T.u64, pointer=True),
                             Param("nchunks", T.u64)],
                   dynamic_smem=chunk * stages)
    b = k.builder()
    data = b.mov(T.u32, k.dynamic_shared("stage", align=128), name="stage0")
    ring = StageRing(b.mov(T.u32, k.shared("bars", 8 * stages, align=8), name="bars"), stages)
    with b.if_then(b.setp("eq", T.u32, b.special("tid.x"), 0, name="leader")):
        dst = b.cvta(T.u64, "global", b.load_param("dst"), to=True, name="dst_g")
        src = b.cvta(T.u64, "global", b.load_param("src"), to=True, name="src_g")
        nchunks = b.load_param("nchunks")
        cta = b.cvt(T.u64, T.u32, b.special("ctaid.x"), name="cta")        # this CTA's first chunk
        step = b.cvt(T.u64, T.u32, b.special("nctaid.x"), name="step")     # chunk step
        with b.if_then(b.setp("lt", T.u64, cta, nchunks, name="has_work")):
            mine = b.div(T.u64, b.sub(T.u64, b.add(T.u64, b.sub(T.u64, nchunks, cta), step), 1), step,
                         name="mine")                                      # chunks of this CTA
            for s in range(stages):
                b.mbarrier_init(ring.bar(b, s), 1)
            b.fence_mbarrier_init()
            b.fence_proxy_async("shared::cta")

            def offset(j):
                """Byte offset of this CTA's j-th chunk: (cta + j * step) * chunk."""
                return b.mul(T.u64, b.mad(T.u64, step, j, cta, mode="lo"), chunk, mode="lo", name="off")

            def smem(stage):
                if isinstance(stage, int):
                    return address(data, stage * chunk)
                return address(b.mad(T.u32, stage, chunk, data, mode="lo", name="smem"))

            def load(j, stage):
                bar = ring.bar(b, stage)
                b.mbarrier_arrive_expect_tx(bar, chunk)
                b.bulk_load(smem(stage), address(b.add(T.u64, src, offset(j), name="from")), chunk, bar)

            for s in range(stages):                      # prologue: one chunk per stage, while there are any
                with b.if_then(b.setp("gt", T.u64, mine, s, name="pro")):
                    load(s, s)
            for i in b.range(0, mine, ty=T.u64, name="i"):
                i32 = b.cvt(T.u32, T.u64, i, name="i32")
                stage = b.rem(T.u32, i32, stages, name="stage")
                parity = b.and_(T.b32, b.div(T.u32, i32, stages), 1, name="parity")   # phase of this use
                wait_parity(b, ring.bar(b, stage), parity)
                b.bulk_store(address(b.add(T.u64, dst, offset(i), name="to")), smem(stage), chunk)
                b.bulk_commit_group()
                ahead = b.add(T.u64, i, stages - 1, name="ahead")   # chunk to load into the stage store i-1 used
                refill = b.setp("lt", T.u64, ahead, mine, name="refill")
                with b.if_then(b.setp("ne", T.u64, i, 0, combine="and", c=refill, name="refill_now")):
                    b.bulk_wait_group(1, read=True)
                    load(ahead, b.rem(T.u32, b.sub(T.u32, i32, 1), stages, name="prev"))
            b.bulk_wait_group(0)
    b.ret()
    return k


def bench_overhead(args) -> None:
    """Host microseconds per launch of the same empty kernel, several ways, in one run."""
    cu = driver()
    device = Device(0).set_current()
    compiled = empty_kernel().compile()
    k = Kernel.load(compiled, device)
    x, y = empty(1024, "float32"), empty(1024, "float32")
    calls = 1000 if args.quick else 5000
    cfg = LaunchConfig(1, 32)
    bound = k[1, 32]
    bound(x, y, 1024)
    device.synchronize()                             # the launch works before it is timed
    rows = [["pkptx k[grid, block](...)", host_us(lambda: bound(x, y, 1024), calls)],
            ["pkptx k.launch(cfg, ...)", host_us(lambda: k.launch(cfg, x, y, 1024), calls)],
            ["pkptx launch(None, cfg, k, ...)", host_us(lambda: launch(None, cfg, k, x, y, 1024), calls)]]

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
    rows += [["cuda.bindings cuLaunchKernelEx, (values, types)", host_us(raw(native, fn, (values, types), 0), calls)],
             ["cuda.bindings cuLaunchKernelEx, prebuilt void**", host_us(raw(native, fn, prebuilt, 0), calls)],
             ["cuda.bindings cuLaunchKernel, (values, types)",
              host_us(raw(fn, 1, 1, 1, 32, 1, 1, 0, 0, (values, types), 0, fn_name="cuLaunchKernel"), calls)]]
    rows += cupy_rows(compiled, calls)
    pk, cupy_us = rows[0][1], next((r[1] for r in rows if r[0].startswith("CuPy RawKernel")), None)
    for r in rows:
        r.append(f"{r[1] / cupy_us:.2f}" if cupy_us else "-")
    note = (f"pkptx k[grid, block]: {pk:.2f} us per launch" +
            (f"; CuPy RawKernel {cupy_us:.2f} us; ratio {pk / cupy_us:.2f} (goal <= 1.00)" if cupy_us else
             "; CuPy not available"))
    report("Launch overhead: empty kernel, host us per launch", ["launch path", "us/launch", "vs CuPy"], rows,
           note, args.record)


def cupy_rows(compiled, calls: int) -> list[list]:
    """CuPy on the same cubin (RawModule) and on the same kernel from CUDA C (RawKernel)."""
    try:
        import cupy
    except ImportError:
        return []
    rows = []
    cx = cupy.empty(1024, cupy.float32)
    n = np.uint32(1024)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "empty.cubin"
        path.write_bytes(compiled.cubin.data)
        mod_fn = cupy.RawModule(path=str(path)).get_function("empty")
        mod_fn((1,), (32,), (cx, cx, n))
        rows.append(["CuPy RawModule function (same cubin)", host_us(lambda: mod_fn((1,), (32,), (cx, cx, n)), calls)])
    try:
        rk = cupy.RawKernel(EMPTY_CUDA, "empty")
        rk((1,), (32,), (cx, cx, n))
    except Exception as exc:       # NVRTC missing or failing: report it, keep the other rows
        print(f"CuPy RawKernel unavailable: {type(exc).__name__}: {exc}")
        return rows
    rows.insert(0, ["CuPy RawKernel", host_us(lambda: rk((1,), (32,), (cx, cx, n)), calls)])
    return rows


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
    for chunk, stages, per_sm in ((16384, 8, 1), (32768, 6, 1), (16384, 6, 2), (8192, 12, 2), (32768, 3, 2)):
        k = Kernel.load(bulk_copy(chunk, stages).compile(), device)
        run = k[device.sm_count * per_sm, 32, chunk * stages]
        dst.fill(0xA5, stream)
        run(dst, src, nbytes // chunk, stream=stream)
        verify(f"bulk_copy chunk={chunk} stages={stages}")
        ms = event_ms(lambda: run(dst, src, nbytes // chunk, stream=stream), stream, repeats=repeats)
        rows.append([f"bulk_copy {chunk // 1024} KiB x {stages} stages, {per_sm} CTA/SM",
                     f"{device.sm_count * per_sm}", ms, gbps(ms), f"{base_ms / ms:.3f}"])
    best = max(rows[1:], key=lambda r: float(r[4]))
    report(f"Bulk copy {nbytes >> 20} MiB: cp.async.bulk vs cuMemcpyDtoDAsync",
           ["kernel", "CTAs", "ms (median)", "GB/s (r+w)", "vs memcpy"], rows,
           f"best: {best[0]} at {best[4]} of cuMemcpyDtoDAsync (goal >= 0.95)", args.record)


if __name__ == "__main__":
    options = parse_args(__doc__.splitlines()[0])
    bench_overhead(options)
    bench_bulk_copy(options)
