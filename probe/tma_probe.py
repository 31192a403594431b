"""Diagnose the TMA round-trip failure (temporary probe, not a test)."""
import os, subprocess, sys
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import numpy as np

RAW = """.version 8.0
.target sm_90a
.address_size 64
.extern .shared .align ALIGN .b8 tile[];
.shared .align 8 .b64 bar;
.visible .entry tma_copy_2d(.param .align 64 .b8 src_map[128], .param .align 64 .b8 dst_map[128],
                            .param .u32 box_w, .param .u32 box_h, .param .u32 box_bytes)
{
    .reg .pred %p<3>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<6>;
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
    ld.param.u32 %r2, [box_w];
    ld.param.u32 %r3, [box_h];
    ld.param.u32 %r4, [box_bytes];
    mov.u32 %r5, %ctaid.x;
    mov.u32 %r6, %ctaid.y;
    mul.lo.u32 %r7, %r5, %r2;
    mul.lo.u32 %r8, %r6, %r3;
    mov.u32 %r9, tile;
    add.u32 %r9, %r9, 1023;
    and.b32 %r9, %r9, -1024;
    mov.u32 %r10, bar;
    mov.u64 %rd1, src_map;
    cvta.param.u64 %rd2, %rd1;
    mov.u64 %rd3, dst_map;
    cvta.param.u64 %rd4, %rd3;
    mbarrier.init.shared::cta.b64 [%r10], 1;
    fence.mbarrier_init.release.cluster;
    fence.proxy.async.shared::cta;
    mbarrier.arrive.expect_tx.shared::cta.b64 %rd5, [%r10], %r4;
    cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r9], [%rd2, {%r7, %r8}], [%r10];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r10], 0;
    @!%p2 bra WAIT;
    fence.proxy.async.shared::cta;
    cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd4, {%r7, %r8}], [%r9];
    cp.async.bulk.commit_group;
    cp.async.bulk.wait_group 0;
DONE:
    ret;
}
"""

CASES = [("uint8", 1, 16, 1, 16, None), ("float32", 64, 64, 8, 16, None), ("bfloat16", 200, 128, 64, 64, 128),
         ("uint8", 5, 48, 3, 16, 128), ("float16", 100, 96, 37, 8, 32), ("float64", 300, 64, 256, 16, None),
         ("float32", 400, 256, 256, 96, None), ("uint8", 7, 256, 5, 32, 64)]


def raw_kernel(align):
    from pkptx.isa import Param, b8, u32
    from pkptx.toolchain import CompiledKernel, assemble
    ptx = RAW.replace("ALIGN", str(align))
    t = dict(type=b8, count=128, align=64)
    params = (Param("src_map", **t), Param("dst_map", **t), Param("box_w", u32), Param("box_h", u32),
              Param("box_bytes", u32))
    return CompiledKernel(entry="tma_copy_2d", params=params, ptx=ptx, cubin=assemble(ptx, "sm_90a"), arch="sm_90a")


def builder_kernel():
    sys.path.insert(0, os.path.join(ROOT, "tests", "launch"))
    from tests.launch import kernels as K
    return K.tma_copy_2d().compile()


def layout():
    from pkptx.isa import Kernel, Param, address, u32, u64
    from pkptx.launch import Device, Kernel as Loaded, empty
    from pkptx.launch.driver import call, driver
    dev = Device(0).set_current()
    cu = driver()
    print("reserved smem per block:", call("cuDeviceGetAttribute",
          cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, 0))
    for align in (16, 128, 1024):
        for static in (8, 24):
            k = Kernel(f"lay_{align}_{static}", [Param("out", u64, pointer=True)])
            b = k.builder()
            bar = b.mov(u32, k.shared("bar", static, align=8), name="bar")
            win = b.mov(u32, k.dynamic_shared("win", align=align), name="win")
            o = b.cvta(u64, "global", b.load_param("out"), to=True)
            vals = [win, bar, b.special("dynamic_smem_size"), b.special("total_smem_size")]
            for j, v in enumerate(vals):
                b.st(u32, address(o, 4 * j), v, space="global")
            b.ret()
            c = k.compile()
            lk = Loaded.load(c, dev)
            out = empty(4, "uint32")
            lk[1, 32, 1040](out)
            w, bb, dyn, tot = out.to_numpy()
            print(f"extern align {align:5d} static {static:3d}: ptxas shared_bytes={c.cubin.resources.shared_bytes} "
                  f"attr SHARED_SIZE={lk.function.static_smem} window=0x{w:x} bar=0x{bb:x} "
                  f"%dynamic_smem_size={dyn} %total_smem_size={tot}", flush=True)


def tma(variant, case):
    from pkptx.launch import DeviceArray, Device, Kernel as Loaded, TensorMap, empty, from_numpy
    dev = Device(0).set_current()
    compiled = builder_kernel() if variant == "builder" else raw_kernel(int(variant[3:]))
    k = Loaded.load(compiled, dev)
    dtype, rows, cols, box_h, box_w, swizzle = CASES[case]
    item = np.dtype(dtype).itemsize
    host = np.random.default_rng(case).integers(0, 256, rows * cols * item, dtype=np.uint8)
    src = from_numpy(host.view(dtype).reshape(rows, cols))
    dst = empty((rows, cols), dtype)
    DeviceArray.from_pointer(dst.ptr, (dst.nbytes,), "uint8", owner=dst).fill(0xA5)
    load = TensorMap.tiled(src, box=(box_h, box_w), swizzle=swizzle)
    store = TensorMap.tiled(dst, box=(box_h, box_w), swizzle=swizzle)
    grid = (-(-cols // box_w), -(-rows // box_h))
    k[grid, 32, load.box_bytes + 1024](load, store, box_w, box_h, load.box_bytes)
    got = dst.to_numpy().view(np.uint8).reshape(-1)
    bad = np.flatnonzero(got != host)
    print(f"{variant} case {case} {CASES[case]} box_bytes={load.box_bytes} static={k.function.static_smem}: "
          + ("OK" if bad.size == 0 else f"MISMATCH {bad.size} bytes, first {bad[:4]}"), flush=True)


def encode():
    """The driver's verdict on descriptors, bypassing pkptx's validation, next to pkptx's verdict."""
    from pkptx.launch import Device, empty
    from pkptx.launch.tensormap import TiledSpec, _encode, _tma_type, describe_tiled
    from pkptx.errors import PkptxError
    Device(0).set_current()
    buf = empty(1 << 22, "uint8")
    p = buf.ptr
    # (label, dtype, numpy shape, numpy strides (bytes), box (numpy order), estr, swizzle, interleave, oob, ptr)
    rows = [
        ("baseline f32 64x64 box 8x16", "float32", (64, 64), (256, 4), (8, 16), None, None, None, "none", p),
        ("u8 box inner 16B, swizzle 128", "uint8", (8, 256), (256, 1), (4, 16), None, 128, None, "none", p),
        ("u8 box inner 16B, swizzle 32", "uint8", (8, 256), (256, 1), (4, 16), None, 32, None, "none", p),
        ("u8 1x16 box 1x16", "uint8", (1, 16), (16, 1), (1, 16), None, None, None, "none", p),
        ("box inner 8B (f16 x4)", "float16", (8, 64), (128, 2), (4, 4), None, None, None, "none", p),
        ("row stride 16 < row bytes 256 (overlap)", "float32", (4, 64), (16, 4), (4, 16), None, None, None, "none", p),
        ("rank 3 outer strides not nested", "float32", (4, 8, 16), (64, 256, 4), (2, 2, 16), None, None, None, "none", p),
        ("rank 1 tiled", "float32", (1000,), (4,), (16,), None, None, None, "none", p),
        ("f64 box inner 2048B no swizzle", "float64", (4, 256), (2048, 8), (2, 256), None, None, None, "none", p),
        ("box 256x256 f32 (256 KB)", "float32", (256, 256), (1024, 4), (256, 256), None, None, None, "none", p),
        ("estride 8 > box 4", "float32", (64, 64), (256, 4), (4, 16), (8, 1), None, None, "none", p),
        ("interleave 16 rank 3", "float32", (4, 8, 16), (512, 64, 4), (2, 4, 4), None, None, 16, "none", p),
        ("interleave 32 swizzle 64", "float32", (4, 8, 16), (512, 64, 4), (2, 4, 8), None, 64, 32, "none", p),
        ("interleave 16 swizzle 128", "float32", (4, 8, 16), (512, 64, 4), (2, 4, 4), None, 128, 16, "none", p),
        ("interleave 32 swizzle 32", "float32", (4, 8, 16), (512, 64, 4), (2, 4, 8), None, 32, 32, "none", p),
        ("interleave 16 rank 3 box inner 4B", "float32", (4, 8, 16), (512, 64, 4), (2, 4, 1), None, None, 16, "none", p),
        ("oob nan on int32", "int32", (64, 64), (256, 4), (8, 16), None, None, None, "nan", p),
        ("ptr 16-aligned not 32, interleave 32", "float32", (4, 8, 16), (512, 64, 4), (2, 4, 8), None, 32, 32, "none", p + 16),
        ("dim 2**32", "uint8", (1, 2**32), (2**32, 1), (1, 16), None, None, None, "none", p),
        ("stride 2**40 - 16", "uint8", (2, 16), (2**40 - 16, 1), (1, 16), None, None, None, "none", p),
        ("swizzle 64, inner 64B, box rows 256", "float16", (512, 32), (64, 2), (256, 32), None, 64, None, "none", p),
        ("swizzle 128, inner 128B f32 box 32", "float32", (64, 32), (128, 4), (8, 32), None, 128, None, "none", p),
    ]
    for label, dtype, shape, strides, box, estr, swz, ilv, oob, ptr in rows:
        try:
            describe_tiled(ptr, dtype, shape, strides, box, estr, swizzle=swz, interleave=ilv, oob_fill=oob)
            ours = "accepts"
        except PkptxError as exc:
            ours = f"rejects ({str(exc)[:70]})"
        dt = np.dtype(dtype)
        rank = len(shape)
        spec = TiledSpec(ptr, dt, _tma_type(dt) if dtype != "int32" else "INT32", tuple(shape[::-1]),
                         tuple(strides[-2::-1]), tuple(box[::-1]), tuple((estr or (1,) * rank)[::-1]), swz, ilv,
                         None, oob)
        try:
            _encode(spec)
            drv = "accepts"
        except Exception as exc:
            drv = f"rejects ({type(exc).__name__}: {str(exc)[:60]})"
        flag = "" if (ours == "accepts") == (drv == "accepts") else "   <== DIFFERS"
        print(f"{label:42s} driver {drv:48s} pkptx {ours}{flag}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "layout":
        layout()
    elif sys.argv[1] == "tma":
        tma(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "all":
        for spec in sys.argv[2:]:
            variant, cases = spec.split(":")
            for case in map(int, cases.split(",")):
                p = subprocess.run([sys.executable, __file__, "tma", variant, str(case)], capture_output=True,
                                   text=True, timeout=60)
                out = (p.stdout + p.stderr).strip().splitlines()
                print(f"[rc={p.returncode}]", out[-1] if out else "", flush=True)
    elif sys.argv[1] == "encode":
        encode()



def footprint():
    """Which shared bytes a TMA box load writes (window poisoned with 0xA5 first), and whether the
    mbarrier completes with expect_tx(box_bytes); then round trips with a large slack."""
    from pkptx.isa import Kernel, Param, address, b8, b32, u32, u64
    from pkptx.launch import DeviceArray, Device, Kernel as Loaded, TensorMap, empty, from_numpy
    sys.path.insert(0, os.path.join(ROOT, "tests", "launch"))
    from tests.launch import kernels as K
    dev = Device(0).set_current()
    k = Kernel("footprint", [Param("src_map", b8, 128, 64), Param("box_bytes", u32), Param("span", u32),
                             Param("out", u64, pointer=True)], req_threads=128)
    b = k.builder()
    tid = b.special("tid.x")
    bar = b.mov(u32, k.shared("bar", 8, align=8), name="bar")
    window = b.mov(u32, k.dynamic_shared("window", align=16), name="window")
    tile = b.and_(b32, b.add(u32, window, 1023), -1024 & 0xFFFFFFFF, name="tile")
    span = b.load_param("span")
    for i in b.range(tid, b.shr(u32, span, 2), 128, name="fill"):
        b.st(u32, address(b.mad(u32, i, 4, tile, mode="lo")), 0xA5A5A5A5, space="shared")
    b.fence_proxy_async("shared::cta")
    b.bar_sync(0)
    out = b.cvta(u64, "global", b.load_param("out"), to=True, name="outg")
    with b.if_then(b.setp("eq", u32, tid, 0)):
        b.mbarrier_init(address(bar), 1)
        b.fence_mbarrier_init()
        b.mbarrier_arrive_expect_tx(address(bar), b.load_param("box_bytes"))
        from pkptx.primitives.tma import tensor_map_param
        b.tensor_load(address(tile), tensor_map_param(b, "src_map"), (0, 0), address(bar))
        cnt = b.mov(u32, 0, name="cnt")
        with b.loop("spin") as lp:
            lp.break_if(b.mbarrier_try_wait(address(bar), 0, parity=True, name="d"))
            b.add(u32, cnt, 1, into=cnt)
            lp.break_if(b.setp("ge", u32, cnt, 20000))
        flag = b.selp(u32, 1, 0, b.mbarrier_test_wait(address(bar), 0, parity=True))
        b.st(u32, address(out), flag, space="global")
    b.bar_sync(0)
    for i in b.range(tid, b.shr(u32, span, 2), 128, name="copy"):
        v = b.ld(u32, address(b.mad(u32, i, 4, tile, mode="lo")), space="shared")
        b.st(u32, address(b.mad(u64, b.cvt(u64, u32, i), 4, out, mode="lo"), 4), v, space="global")
    b.ret()
    lk = Loaded.load(k.compile(), dev)
    rt = Loaded.load(K.tma_copy_2d().compile(), dev)
    for dtype, rows, cols, box_h, box_w, swz in [("float32", 64, 64, 8, 16, None), ("bfloat16", 64, 64, 8, 64, 128),
            ("uint8", 5, 48, 3, 16, 128), ("float16", 100, 96, 37, 8, 32), ("uint8", 7, 256, 5, 32, 64),
            ("uint8", 16, 256, 4, 64, 128), ("float32", 64, 64, 3, 8, 64), ("uint8", 64, 64, 9, 16, 32)]:
        item = np.dtype(dtype).itemsize
        host = (np.arange(rows * cols * item) % 113 + 1).astype(np.uint8)
        src = from_numpy(host.view(dtype).reshape(rows, cols))
        tm = TensorMap.tiled(src, box=(box_h, box_w), swizzle=swz)
        span = 32768
        o = empty(span // 4 + 1, "uint32")
        lk[1, 128, span + 1024](tm, tm.box_bytes, span, o)
        got = o.to_numpy()
        data = got[1:].view(np.uint8)
        touched = np.flatnonzero(data != 0xA5)
        last = int(touched[-1]) + 1 if touched.size else 0
        dst = empty((rows, cols), dtype)
        DeviceArray.from_pointer(dst.ptr, (dst.nbytes,), "uint8", owner=dst).fill(0xA5)
        st = TensorMap.tiled(dst, box=(box_h, box_w), swizzle=swz)
        grid = (-(-cols // box_w), -(-rows // box_h))
        rt[grid, 32, tm.box_bytes + 1024 + 65536](tm, st, box_w, box_h, tm.box_bytes)
        ok = np.array_equal(dst.to_numpy().view(np.uint8).reshape(-1), host)
        print(f"{dtype} box {box_h}x{box_w} ({box_w * item} B rows) swizzle {swz}: box_bytes={tm.box_bytes} "
              f"bytes written={touched.size} last byte written={last} mbarrier complete={bool(got[0])} "
              f"round trip with 64 KB slack {'OK' if ok else 'WRONG'}", flush=True)


if __name__ == "__main__" and sys.argv[1] == "footprint":
    footprint()


def scan():
    """Driver verdicts at the edges: rank-1 maps, the largest box, interleaved inner boxes."""
    from pkptx.launch import Device, empty
    from pkptx.launch.tensormap import TiledSpec, _encode, _tma_type
    Device(0).set_current()
    buf = empty(1 << 24, "uint8")

    def drv(dtype, dims, strides, box, ilv=None, swz=None):
        dt = np.dtype(dtype)
        try:
            _encode(TiledSpec(buf.ptr, dt, _tma_type(dt), dims, strides, box, (1,) * len(dims), swz, ilv, None, "none"))
            return True
        except Exception:
            return False
    print("rank 1 f32 dims 1000 box 16:", drv("float32", (1000,), (), (16,)), flush=True)
    print("rank 1 u8 dims 4096 box 256:", drv("uint8", (4096,), (), (256,)), flush=True)
    for dtype, rows in (("float32", 256), ("float64", 256), ("float64", 128), ("uint8", 256), ("float16", 256)):
        item = np.dtype(dtype).itemsize
        ok = [w for w in range(16 // item, 257, 16 // item)
              if drv(dtype, (256, 256), (256 * item,), (w, rows))]
        bad = [w for w in range(16 // item, 257, 16 // item) if w not in ok]
        print(f"{dtype} rows {rows}: widths accepted up to {max(ok) if ok else None} "
              f"({max(ok) * rows * item if ok else 0} B), first rejected {bad[:1]} "
              f"({bad[0] * rows * item if bad else '-'} B)", flush=True)
    for ilv in (16, 32):
        for swz in ((None, 32) if ilv == 16 else (32,)):
            verdict = {w: drv("float32", (64, 8, 4), (256, 2048), (w, 4, 2), ilv=ilv, swz=swz) for w in (1, 2, 3, 4, 6, 8, 12, 16, 32, 64)}
            print(f"interleave {ilv} swizzle {swz}: f32 inner widths accepted {[w for w, v in verdict.items() if v]}", flush=True)
            verdict = {w: drv("uint8", (256, 8, 4), (256, 2048), (w, 4, 2), ilv=ilv, swz=swz) for w in (8, 16, 24, 32, 48, 64, 128, 256)}
            print(f"interleave {ilv} swizzle {swz}: u8 inner widths accepted {[w for w, v in verdict.items() if v]}", flush=True)


if __name__ == "__main__" and sys.argv[1] == "scan":
    scan()

