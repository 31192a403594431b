"""The launch tests' kernels, built with pkptx.isa: one small function per kernel.

Each function returns a built (not yet assembled) :class:`pkptx.isa.Kernel`; ``kernel.compile()``
assembles it with nvJitLink (no GPU needed) into the CompiledKernel the launcher consumes. The
CPU tests assemble every one of them (test_kernels_build.py), so a GPU run never meets a kernel
that does not assemble.
"""
from __future__ import annotations

from pkptx.isa import Kernel, Param, address, b8, b32, bf16, f16, f32, f64, s32, u32, u64
from pkptx.primitives.mbarrier import wait_parity
from pkptx.primitives.tma import tensor_map_param

TILE_SLACK = 1024      # tma_copy_2d aligns its tile up to 1024 bytes: launch with smem_bytes + TILE_SLACK


def ptr(name: str) -> Param:
    return Param(name, u64, pointer=True)


def global_pointer(b, name: str):
    """``ld.param.u64`` + ``cvta.to.global.u64``: a pointer parameter as a global address."""
    return b.cvta(u64, "global", b.load_param(name), to=True, name=f"{name}_g")


def global_index(b):
    """ctaid.x * ntid.x + tid.x, widened to .u64 (``mad.wide.u32``)."""
    tid = b.cvt(u64, u32, b.special("tid.x"))
    return b.mad(u32, b.special("ctaid.x"), b.special("ntid.x"), tid, mode="wide", name="gid")


def element(b, base, index, size: int):
    """The address ``base + index * size`` (64-bit)."""
    return address(b.mad(u64, index, size, base, mode="lo", name="elem"))


# dtype -> (element bytes, storage/register type, type of the parameter a)
_AXPY = {"float32": (4, f32, f32), "float64": (8, f64, f64), "int32": (4, s32, s32),
         "float16": (2, f16, f32), "bfloat16": (2, bf16, f32)}


def axpy(dtype: str) -> Kernel:
    """out[i] = a * x[i] + y[i] for i < n (16-bit floats computed in f32, rounded once to nearest)."""
    size, ty, aty = _AXPY[dtype]
    k = Kernel(f"axpy_{dtype}", [ptr("out"), ptr("x"), ptr("y"), Param("a", aty), Param("n", u32)])
    b = k.builder()
    i = global_index(b)
    n = b.cvt(u64, u32, b.load_param("n"), name="n64")
    with b.if_then(b.setp("lt", u64, i, n, name="in_range")):
        out, x, y = global_pointer(b, "out"), global_pointer(b, "x"), global_pointer(b, "y")
        a = b.load_param("a")
        vx = b.ld(ty, element(b, x, i, size), space="global", name="vx")
        vy = b.ld(ty, element(b, y, i, size), space="global", name="vy")
        if dtype == "int32":
            vo = b.mad(s32, a, vx, vy, mode="lo", name="vo")
        elif size == 2:
            fo = b.fma(f32, a, b.cvt(f32, ty, vx), b.cvt(f32, ty, vy), rnd="rn", name="fo")
            vo = b.cvt(ty, f32, fo, rnd="rn", name="vo")
        else:
            vo = b.fma(ty, a, vx, vy, rnd="rn", name="vo")
        b.st(ty, element(b, out, i, size), vo, space="global")
    b.ret()
    return k


def vec4_add(dtype: str) -> Kernel:
    """out = x + y over 4-byte elements: one 16-byte ``ld.global.v4`` per operand per thread, and a
    scalar loop for the last n % 4 elements (the thread whose vector runs past n)."""
    ty = {"float32": f32, "int32": s32}[dtype]
    k = Kernel(f"vec4_add_{dtype}", [ptr("out"), ptr("x"), ptr("y"), Param("n", u32)])
    b = k.builder()
    first = b.mul(u64, global_index(b), 4, mode="lo", name="first")     # this thread's first element
    n = b.cvt(u64, u32, b.load_param("n"), name="n64")
    with b.if_then(b.setp("lt", u64, first, n, name="in_range")):
        out, x, y = global_pointer(b, "out"), global_pointer(b, "x"), global_pointer(b, "y")
        whole = b.setp("le", u64, b.add(u64, first, 4, name="past"), n, name="whole")
        with b.if_else(whole) as (vector, tail):
            with vector:
                vx = b.ld(ty, element(b, x, first, 4), space="global", vec=4, name="vx")
                vy = b.ld(ty, element(b, y, first, 4), space="global", vec=4, name="vy")
                b.st(ty, element(b, out, first, 4), [b.add(ty, p, q, name="vo") for p, q in zip(vx, vy)],
                     space="global")
            with tail:
                for j in b.range(first, n, ty=u64, name="j"):
                    s = b.add(ty, b.ld(ty, element(b, x, j, 4), space="global", name="sx"),
                              b.ld(ty, element(b, y, j, 4), space="global", name="sy"), name="so")
                    b.st(ty, element(b, out, j, 4), s, space="global")
    b.ret()
    return k


def block_sum() -> Kernel:
    """out[block] = sum of x over the block's elements (0 past n): a tree in dynamic shared memory
    of ntid.x * 4 bytes; ntid.x must be a power of two. Every thread reaches every bar.sync."""
    k = Kernel("block_sum", [ptr("out"), ptr("x"), Param("n", u32)])
    b = k.builder()
    tid, ntid = b.special("tid.x"), b.special("ntid.x")
    i = global_index(b)
    n = b.cvt(u64, u32, b.load_param("n"), name="n64")
    v = b.mov(f32, 0.0, name="v")
    with b.if_then(b.setp("lt", u64, i, n, name="in_range")):
        b.ld(f32, element(b, global_pointer(b, "x"), i, 4), space="global", into=v)
    sdata = b.mov(u32, k.dynamic_shared("sdata", align=16), name="sdata")
    mine = b.mad(u32, tid, 4, sdata, mode="lo", name="mine")          # &sdata[tid]
    b.st(f32, address(mine), v, space="shared")
    b.bar_sync(0)
    s = b.shr(u32, ntid, 1, name="s")
    with b.while_(lambda b: b.setp("ne", u32, s, 0, name="more")):
        with b.if_then(b.setp("lt", u32, tid, s, name="adds")):
            other = b.ld(f32, address(b.mad(u32, s, 4, mine, mode="lo", name="other_addr")), space="shared",
                         name="other")
            acc = b.ld(f32, address(mine), space="shared", name="acc")
            b.st(f32, address(mine), b.add(f32, acc, other, name="sum"), space="shared")
        b.bar_sync(0)
        b.shr(u32, s, 1, into=s)
    with b.if_then(b.setp("eq", u32, tid, 0, name="writer")):
        total = b.ld(f32, address(sdata), space="shared", name="total")
        out = global_pointer(b, "out")
        b.st(f32, element(b, out, b.cvt(u64, u32, b.special("ctaid.x")), 4), total, space="global")
    b.ret()
    return k


def cluster_ids() -> Kernel:
    """Thread 0 of block b writes (%cluster_ctarank, %cluster_nctarank, %clusterid.x) to out[3b..3b+2]
    (1-D grids). Declares .reqntid 128, so the launcher must insist on that block."""
    k = Kernel("cluster_ids", [ptr("out")], req_threads=128)
    b = k.builder()
    with b.if_then(b.setp("eq", u32, b.special("tid.x"), 0, name="writer")):
        ids = [b.special(name) for name in ("cluster_ctarank", "cluster_nctarank", "clusterid.x")]
        row = b.mad(u32, b.special("ctaid.x"), 12, b.cvta(u64, "global", b.load_param("out"), to=True),
                    mode="wide", name="row")
        for j, value in enumerate(ids):
            b.st(u32, address(row, 4 * j), value, space="global")
    b.ret()
    return k


def tma_copy_2d() -> Kernel:
    """Block (bx, by) moves box (bx*box_w, by*box_h) of src to dst through shared memory: a TMA tensor
    load completing on an mbarrier (expect_tx, then a try_wait.parity loop), then fence.proxy.async and
    a TMA tensor store in a bulk group, waited to completion.

    The GEMM's working pattern: the dynamic window is declared ``.extern .shared .align 16`` (the driver
    starts it right after the static variables, 16-byte aligned, whatever the declared alignment) and the
    tile is aligned up to 1024 at run time (128-byte swizzle needs it), so launch with
    ``TensorMap.smem_bytes + TILE_SLACK`` bytes of dynamic shared memory; ``box_bytes`` (the param) is the
    mbarrier's transaction count, ``smem_bytes`` the tile's footprint, larger when rows are narrower than
    the swizzle span. The mbarrier is a static ``.shared .align 8`` array; the tensor maps are by-value
    params whose generic address comes from ``cvta.param``.
    """
    tmap = dict(type=b8, count=128, align=64)
    k = Kernel("tma_copy_2d", [Param("src_map", **tmap), Param("dst_map", **tmap), Param("box_w", u32),
                               Param("box_h", u32), Param("box_bytes", u32)], dynamic_smem=TILE_SLACK)
    b = k.builder()
    bar = b.mov(u32, k.shared("bar", 8, align=8), name="bar")
    window = b.mov(u32, k.dynamic_shared("window", align=16), name="window")
    tile = b.and_(b32, b.add(u32, window, TILE_SLACK - 1), -TILE_SLACK & 0xFFFFFFFF, name="tile")
    with b.if_then(b.setp("eq", u32, b.special("tid.x"), 0, name="leader")):
        src, dst = tensor_map_param(b, "src_map"), tensor_map_param(b, "dst_map")
        col = b.mul(u32, b.special("ctaid.x"), b.load_param("box_w"), mode="lo", name="col")   # innermost
        row = b.mul(u32, b.special("ctaid.y"), b.load_param("box_h"), mode="lo", name="row")
        b.mbarrier_init(address(bar), 1)
        b.fence_mbarrier_init()
        b.mbarrier_arrive_expect_tx(address(bar), b.load_param("box_bytes"))
        b.tensor_load(address(tile), src, (col, row), address(bar))
        wait_parity(b, bar, 0, deadline=None, name="loaded")   # acquire: the tile's bytes are visible here
        b.fence_proxy_async("shared::cta")             # ... and to the async proxy that stores them
        b.tensor_store(dst, (col, row), address(tile))
        b.bulk_commit_group()
        b.bulk_wait_group(0)                           # the writes are done before the block exits
    b.ret()
    return k
