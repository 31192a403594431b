"""Test kernels as raw PTX, one small function per kernel, until pkptx.isa can build them.

Each ``ptx_*`` function returns ``(ptx, entry, params)``; :func:`compile_ptx` assembles it with
nvJitLink (no GPU needed) and wraps it in the CompiledKernel the launcher consumes.
"""
from __future__ import annotations

from pkptx.isa import types as T
from pkptx.isa.values import Param
from pkptx.toolchain import CompiledKernel, assemble

HEADER = ".version 8.0\n.target sm_90a\n.address_size 64\n"


def compile_ptx(kernel: tuple, *, block=None, block_exact=False, cluster=None, dynamic_smem=0) -> CompiledKernel:
    ptx, entry, params = kernel
    cubin = assemble(ptx, "sm_90a")
    return CompiledKernel(entry=entry, params=tuple(params), ptx=ptx, cubin=cubin, arch="sm_90a",
                          block=block, block_exact=block_exact, cluster=cluster, dynamic_smem=dynamic_smem)


def ptr(name: str) -> Param:
    return Param(name, T.u64, pointer=True)


# Index prologue shared by the element-wise kernels: %rd1 = ctaid.x * ntid.x + tid.x, exit if >= n.
_GLOBAL_INDEX = """
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    cvt.u64.u32 %rd0, %r3;
    mad.wide.u32 %rd1, %r1, %r2, %rd0;
    ld.param.u32 %r4, [n];
    cvt.u64.u32 %rd2, %r4;
"""

# dtype -> (element bytes, load/store type, register type, param type, body computing %v_out)
_AXPY = {
    "float32": (4, "f32", "f32", T.f32, "fma.rn.f32 %vo, %va, %vx, %vy;"),
    "float64": (8, "f64", "f64", T.f64, "fma.rn.f64 %vo, %va, %vx, %vy;"),
    "int32": (4, "s32", "s32", T.s32, "mad.lo.s32 %vo, %va, %vx, %vy;"),
    "float16": (2, "b16", "b16", T.f32, "cvt.f32.f16 %fx, %vx;\n    cvt.f32.f16 %fy, %vy;\n"
                "    fma.rn.f32 %fo, %va, %fx, %fy;\n    cvt.rn.f16.f32 %vo, %fo;"),
    "bfloat16": (2, "b16", "b16", T.f32, "cvt.f32.bf16 %fx, %vx;\n    cvt.f32.bf16 %fy, %vy;\n"
                 "    fma.rn.f32 %fo, %va, %fx, %fy;\n    cvt.rn.bf16.f32 %vo, %fo;"),
}


def ptx_axpy(dtype: str) -> tuple:
    """out[i] = a * x[i] + y[i] for i < n (16-bit floats computed in f32)."""
    size, mem, reg, aty, body = _AXPY[dtype]
    areg = "f32" if aty is T.f32 else reg
    ptx = HEADER + f"""
.visible .entry axpy_{dtype}(.param .u64 out, .param .u64 x, .param .u64 y, .param .{aty.name} a, .param .u32 n)
{{
    .reg .pred %p<2>;
    .reg .b32 %r<5>;
    .reg .b64 %rd<12>;
    .reg .{reg} %vx, %vy, %vo;
    .reg .{areg} %va;
    .reg .f32 %fx, %fy, %fo;
{_GLOBAL_INDEX}
    setp.ge.u64 %p1, %rd1, %rd2;
    @%p1 bra DONE;
    ld.param.u64 %rd3, [out];
    ld.param.u64 %rd4, [x];
    ld.param.u64 %rd5, [y];
    ld.param.{aty.name} %va, [a];
    cvta.to.global.u64 %rd3, %rd3;
    cvta.to.global.u64 %rd4, %rd4;
    cvta.to.global.u64 %rd5, %rd5;
    mul.lo.u64 %rd6, %rd1, {size};
    add.u64 %rd7, %rd4, %rd6;
    add.u64 %rd8, %rd5, %rd6;
    add.u64 %rd9, %rd3, %rd6;
    ld.global.{mem} %vx, [%rd7];
    ld.global.{mem} %vy, [%rd8];
    {body}
    st.global.{mem} [%rd9], %vo;
DONE:
    ret;
}}
"""
    return ptx, f"axpy_{dtype}", [ptr("out"), ptr("x"), ptr("y"), Param("a", aty), Param("n", T.u32)]


def ptx_vec4_add(dtype: str) -> tuple:
    """out = x + y over 4-byte elements: 16-byte ld.global.v4 per thread, scalar tail for n % 4."""
    ty, op = {"float32": ("f32", "add.f32"), "int32": ("s32", "add.s32")}[dtype]
    ptx = HEADER + f"""
.visible .entry vec4_add_{dtype}(.param .u64 out, .param .u64 x, .param .u64 y, .param .u32 n)
{{
    .reg .pred %p<4>;
    .reg .b32 %r<5>;
    .reg .b64 %rd<16>;
    .reg .{ty} %a<5>, %b<5>, %c<5>;
{_GLOBAL_INDEX}
    shl.b64 %rd1, %rd1, 2;                // first element of this thread's vector
    setp.ge.u64 %p1, %rd1, %rd2;
    @%p1 bra DONE;
    ld.param.u64 %rd3, [out];
    ld.param.u64 %rd4, [x];
    ld.param.u64 %rd5, [y];
    cvta.to.global.u64 %rd3, %rd3;
    cvta.to.global.u64 %rd4, %rd4;
    cvta.to.global.u64 %rd5, %rd5;
    add.u64 %rd6, %rd1, 4;
    setp.gt.u64 %p2, %rd6, %rd2;
    @%p2 bra TAIL;
    shl.b64 %rd7, %rd1, 2;
    add.u64 %rd8, %rd4, %rd7;
    add.u64 %rd9, %rd5, %rd7;
    add.u64 %rd10, %rd3, %rd7;
    ld.global.v4.{ty} {{%a1, %a2, %a3, %a4}}, [%rd8];
    ld.global.v4.{ty} {{%b1, %b2, %b3, %b4}}, [%rd9];
    {op} %c1, %a1, %b1;
    {op} %c2, %a2, %b2;
    {op} %c3, %a3, %b3;
    {op} %c4, %a4, %b4;
    st.global.v4.{ty} [%rd10], {{%c1, %c2, %c3, %c4}};
    bra DONE;
TAIL:
    shl.b64 %rd7, %rd1, 2;
    add.u64 %rd8, %rd4, %rd7;
    add.u64 %rd9, %rd5, %rd7;
    add.u64 %rd10, %rd3, %rd7;
    ld.global.{ty} %a1, [%rd8];
    ld.global.{ty} %b1, [%rd9];
    {op} %c1, %a1, %b1;
    st.global.{ty} [%rd10], %c1;
    add.u64 %rd1, %rd1, 1;
    setp.lt.u64 %p3, %rd1, %rd2;
    @%p3 bra TAIL;
DONE:
    ret;
}}
"""
    return ptx, f"vec4_add_{dtype}", [ptr("out"), ptr("x"), ptr("y"), Param("n", T.u32)]


def ptx_block_sum() -> tuple:
    """out[block] = sum of x over the block's elements (0 past n): a shared-memory tree in dynamic
    shared memory of ntid.x * 4 bytes; ntid.x must be a power of two."""
    ptx = HEADER + f"""
.extern .shared .align 16 .b8 sdata[];

.visible .entry block_sum(.param .u64 out, .param .u64 x, .param .u32 n)
{{
    .reg .pred %p<4>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<8>;
    .reg .f32 %f<4>;
{_GLOBAL_INDEX}
    mov.f32 %f1, 0f00000000;
    setp.ge.u64 %p1, %rd1, %rd2;
    @%p1 bra STORE;
    ld.param.u64 %rd3, [x];
    cvta.to.global.u64 %rd3, %rd3;
    shl.b64 %rd4, %rd1, 2;
    add.u64 %rd5, %rd3, %rd4;
    ld.global.f32 %f1, [%rd5];
STORE:
    mov.u32 %r5, sdata;
    shl.b32 %r6, %r3, 2;
    add.u32 %r7, %r5, %r6;                // &sdata[tid]
    st.shared.f32 [%r7], %f1;
    bar.sync 0;
    shr.u32 %r8, %r2, 1;                  // s = ntid / 2
LOOP:
    setp.eq.u32 %p2, %r8, 0;
    @%p2 bra WRITE;
    setp.ge.u32 %p3, %r3, %r8;
    @%p3 bra NEXT;
    shl.b32 %r9, %r8, 2;
    add.u32 %r10, %r7, %r9;
    ld.shared.f32 %f2, [%r7];
    ld.shared.f32 %f3, [%r10];
    add.f32 %f2, %f2, %f3;
    st.shared.f32 [%r7], %f2;
NEXT:
    bar.sync 0;
    shr.u32 %r8, %r8, 1;
    bra LOOP;
WRITE:
    setp.ne.u32 %p2, %r3, 0;
    @%p2 bra DONE;
    ld.shared.f32 %f2, [%r5];
    ld.param.u64 %rd6, [out];
    cvta.to.global.u64 %rd6, %rd6;
    mul.wide.u32 %rd7, %r1, 4;
    add.u64 %rd6, %rd6, %rd7;
    st.global.f32 [%rd6], %f2;
DONE:
    ret;
}}
"""
    return ptx, "block_sum", [ptr("out"), ptr("x"), Param("n", T.u32)]


def ptx_cluster_ids() -> tuple:
    """Thread 0 of block b writes (%cluster_ctarank, %cluster_nctarank, %clusterid.x) to out[3b..3b+2]
    (1-D grids). Declares .reqntid 128, so the launcher must insist on that block."""
    ptx = HEADER + """
.visible .entry cluster_ids(.param .u64 out)
.reqntid 128, 1, 1
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %cluster_ctarank;
    mov.u32 %r4, %cluster_nctarank;
    mov.u32 %r5, %clusterid.x;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd1, %rd1;
    mul.wide.u32 %rd2, %r2, 12;
    add.u64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r3;
    st.global.u32 [%rd3+4], %r4;
    st.global.u32 [%rd3+8], %r5;
DONE:
    ret;
}
"""
    return ptx, "cluster_ids", [ptr("out")]


def ptx_tma_copy_2d() -> tuple:
    """Block (bx, by) moves box (bx*box_w, by*box_h) of src to dst through shared memory:
    a TMA tensor load completing on an mbarrier (expect_tx + try_wait.parity loop), then
    fence.proxy.async and a TMA tensor store in a bulk group, waited to completion.
    Needs box_bytes + 1024 bytes of dynamic shared memory (the tile is aligned up to 1024)."""
    ptx = HEADER + """
.extern .shared .align 1024 .b8 tile[];
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
    mul.lo.u32 %r7, %r5, %r2;             // innermost coordinate (column)
    mul.lo.u32 %r8, %r6, %r3;             // row
    mov.u32 %r9, tile;
    add.u32 %r9, %r9, 1023;
    and.b32 %r9, %r9, -1024;              // 1024-byte aligned tile (the launch adds 1 KB of slack)
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
    tmap = dict(type=T.b8, count=128, align=64)
    return ptx, "tma_copy_2d", [Param("src_map", **tmap), Param("dst_map", **tmap), Param("box_w", T.u32),
                                Param("box_h", T.u32), Param("box_bytes", T.u32)]
