"""Launch benchmarks: (1) host cost of one launch of an empty kernel, pkptx against CuPy and bare
cuda.bindings in the same run; (2) a cp.async.bulk copy kernel against cuMemcpyDtoDAsync at 1 GiB.

    python bench/bench_launch.py [--record] [--quick]
"""
from __future__ import annotations

import ctypes
import tempfile
from pathlib import Path

import numpy as np
from common import PTX_HEADER, compile_ptx, event_ms, host_us, parse_args, report

from pkptx.isa import types as T
from pkptx.isa.values import Param
from pkptx.launch import Device, Kernel, LaunchConfig, Stream, empty, from_numpy, launch
from pkptx.launch.driver import call, check, driver

EMPTY_PARAMS = [Param("a", T.u64, pointer=True), Param("b", T.u64, pointer=True), Param("n", T.u32)]
EMPTY_PTX = PTX_HEADER + ".visible .entry empty(.param .u64 a, .param .u64 b, .param .u32 n)\n{\n    ret;\n}\n"
EMPTY_CUDA = 'extern "C" __global__ void empty(const float* a, const float* b, unsigned n) {}'


def bulk_copy_ptx(chunk: int, stages: int) -> str:
    """Persistent 1-D copy: thread 0 of each CTA streams chunks global -> shared -> global.

    Stage s of ``stages`` holds one ``chunk``-byte buffer and one mbarrier. Loads complete on the
    mbarrier (expect_tx); each store is one bulk group. After storing chunk i, the stage of chunk
    i-1 is refilled with chunk i-1+stages once ``wait_group.read 1`` says store i-1 has read it.
    """
    init = "\n".join(f"    mbarrier.init.shared::cta.b64 [%r5+{8 * s}], 1;" for s in range(stages))
    prologue = "\n".join(f"""    setp.le.u64 %p3, %rd6, {s};
    @%p3 bra PRO_END;
    mad.lo.u64 %rd7, %rd5, {s}, %rd4;
    mul.lo.u64 %rd8, %rd7, {chunk};
    add.u64 %rd9, %rd2, %rd8;
    mbarrier.arrive.expect_tx.shared::cta.b64 %rd10, [%r5+{8 * s}], {chunk};
    cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r4+{s * chunk}], [%rd9], {chunk}, [%r5+{8 * s}];"""
                         for s in range(stages))
    return PTX_HEADER + f"""
.extern .shared .align 128 .b8 stage[];
.shared .align 8 .b64 bars[{stages}];

.visible .entry bulk_copy(.param .u64 dst, .param .u64 src, .param .u64 nchunks)
{{
    .reg .pred %p<6>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<20>;
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
    ld.param.u64 %rd1, [dst];
    ld.param.u64 %rd2, [src];
    ld.param.u64 %rd3, [nchunks];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    mov.u32 %r2, %ctaid.x;
    cvt.u64.u32 %rd4, %r2;                // this CTA's first chunk
    mov.u32 %r3, %nctaid.x;
    cvt.u64.u32 %rd5, %r3;                // chunk step
    setp.ge.u64 %p2, %rd4, %rd3;
    @%p2 bra DONE;
    sub.u64 %rd6, %rd3, %rd4;
    add.u64 %rd6, %rd6, %rd5;
    sub.u64 %rd6, %rd6, 1;
    div.u64 %rd6, %rd6, %rd5;             // chunks of this CTA
    mov.u32 %r4, stage;
    mov.u32 %r5, bars;
{init}
    fence.mbarrier_init.release.cluster;
    fence.proxy.async.shared::cta;
{prologue}
PRO_END:
    mov.u64 %rd11, 0;
LOOP:
    cvt.u32.u64 %r6, %rd11;
    rem.u32 %r7, %r6, {stages};
    div.u32 %r8, %r6, {stages};
    and.b32 %r8, %r8, 1;                  // phase parity of this use of the stage
    mad.lo.u32 %r9, %r7, 8, %r5;
    mad.lo.u32 %r10, %r7, {chunk}, %r4;
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p4, [%r9], %r8;
    @!%p4 bra WAIT;
    mad.lo.u64 %rd12, %rd11, %rd5, %rd4;
    mul.lo.u64 %rd13, %rd12, {chunk};
    add.u64 %rd14, %rd1, %rd13;
    cp.async.bulk.global.shared::cta.bulk_group [%rd14], [%r10], {chunk};
    cp.async.bulk.commit_group;
    setp.eq.u64 %p5, %rd11, 0;
    @%p5 bra NEXT;
    add.u64 %rd15, %rd11, {stages - 1};   // chunk to load into the stage store i-1 used
    setp.ge.u64 %p5, %rd15, %rd6;
    @%p5 bra NEXT;
    cp.async.bulk.wait_group.read 1;
    sub.u32 %r11, %r6, 1;
    rem.u32 %r12, %r11, {stages};
    mad.lo.u32 %r13, %r12, 8, %r5;
    mad.lo.u32 %r14, %r12, {chunk}, %r4;
    mad.lo.u64 %rd16, %rd15, %rd5, %rd4;
    mul.lo.u64 %rd17, %rd16, {chunk};
    add.u64 %rd18, %rd2, %rd17;
    mbarrier.arrive.expect_tx.shared::cta.b64 %rd19, [%r13], {chunk};
    cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r14], [%rd18], {chunk}, [%r13];
NEXT:
    add.u64 %rd11, %rd11, 1;
    setp.lt.u64 %p5, %rd11, %rd6;
    @%p5 bra LOOP;
    cp.async.bulk.wait_group 0;
DONE:
    ret;
}}
"""


def bench_overhead(args) -> None:
    """Host microseconds per launch of the same empty kernel, several ways, in one run."""
    cu = driver()
    device = Device(0).set_current()
    compiled = compile_ptx(EMPTY_PTX, "empty", EMPTY_PARAMS)
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
        params = [Param("dst", T.u64, pointer=True), Param("src", T.u64, pointer=True), Param("nchunks", T.u64)]
        k = Kernel.load(compile_ptx(bulk_copy_ptx(chunk, stages), "bulk_copy", params), device)
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
