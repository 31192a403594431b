"""Form groups for arithmetic, conversion, data movement, warp-level ops, wgmma and control flow
(registered into tests.helpers.forms.GROUPS on import)."""
from __future__ import annotations

from pkptx.isa import (Vec, b16, b32, b64, b128, bf16, bf16x2, f16, f16x2, f32, f64, pred, s8, s16, s32, s64, u8,
                       u16, u32, u64)

from .assemble import Sandbox
from .forms import group


# ============================================================================ arithmetic
INTS = (u16, u32, u64, s16, s32, s64)


@group("integer")
def _integer(sb: Sandbox):
    b, r = sb.b, sb.r
    for ty in INTS:
        a = r(ty)
        b.add(ty, a, a)
        b.sub(ty, a, 1)
        b.min(ty, a, a)
        b.max(ty, a, 7)
        b.div(ty, a, a)
        b.rem(ty, a, 3)
        b.mul(ty, a, a, mode="lo")
        b.mul(ty, a, 5, mode="hi")
        b.mad(ty, a, a, a, mode="lo")
        b.mad(ty, a, 3, a, mode="hi")
        b.shr(ty, a, 2)
        if ty.bits < 64:
            wide = b.mul(ty, a, a, mode="wide")
            b.mad(ty, a, a, wide, mode="wide")
    b.add(s32, r(s32), r(s32), sat=True)
    b.sub(s32, r(s32), 1, sat=True)
    for ty in (u32, s32, u64, s64):        # a carry chain: add.cc -> addc.cc -> addc
        lo = b.add(ty, r(ty), r(ty), cc=True)
        mid = b.addc(ty, lo, r(ty), cc=True)
        b.addc(ty, mid, 0)
        lo = b.sub(ty, r(ty), 1, cc=True)
        mid = b.subc(ty, lo, r(ty), cc=True)
        b.subc(ty, mid, 0)
    for ty in (s16, s32, s64):
        b.abs(ty, r(ty))
        b.neg(ty, r(ty))
    for ty in (b32, b64):
        b.popc(ty, r(ty))
        b.clz(ty, r(ty))
        b.brev(ty, r(ty))
        b.bfi(ty, r(ty), r(ty), 4, r(u32))
    for ty in (u32, s32, u64, s64):
        b.bfe(ty, r(ty), r(u32), 8)
    for ty in (pred, b16, b32, b64):
        b.and_(ty, r(ty), r(ty))
        b.or_(ty, r(ty), r(ty))
        b.xor(ty, r(ty), r(ty))
        b.not_(ty, r(ty))
    for ty in (b16, b32, b64):
        b.shl(ty, r(ty), 3)
        b.shr(ty, r(ty), r(u32))
        b.and_(ty, r(ty), 0xFF)
    b.lop3(b32, r(b32), r(b32), r(b32), 0x96)
    for mode in (None, "f4e", "b4e", "rc8", "ecl", "ecr", "rc16"):
        b.prmt(r(b32), r(b32), 0x3210, mode=mode)
    for ty, cmps in ((u32, ("eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs")),
                     (s32, ("eq", "ne", "lt", "le", "gt", "ge")), (b32, ("eq", "ne")),
                     (u16, ("lt", "hs")), (s64, ("gt",)), (b64, ("ne",)), (b16, ("eq",)), (u64, ("lo",))):
        for cmp in cmps:
            b.setp(cmp, ty, r(ty), 4)
    for combine in ("and", "or", "xor"):
        b.setp("lt", s32, r(s32), r(s32), combine=combine, c=r(pred))
        b.setp("lt", s32, r(s32), r(s32), combine=combine, c=r(pred).negated())
    for ty in (b16, b32, b64, u16, u32, u64, s16, s32, s64, f32, f64):
        b.selp(ty, r(ty), 1, r(pred))


@group("float")
def _float(sb: Sandbox):
    b, r = sb.b, sb.r
    for ty in (f32, f64):
        a = r(ty)
        for rnd in (None, "rn", "rz", "rm", "rp"):
            b.add(ty, a, a, rnd=rnd)
            b.sub(ty, a, 1.0, rnd=rnd)
            b.mul(ty, a, 0.5, rnd=rnd)
        for rnd in ("rn", "rz", "rm", "rp"):
            b.fma(ty, a, a, a, rnd=rnd)
            b.mad(ty, a, a, a, rnd=rnd)
            b.div(ty, a, a, rnd=rnd)
            b.rcp(ty, a, rnd=rnd)
            b.sqrt(ty, a, rnd=rnd)
        b.rsqrt(ty, a)
        b.abs(ty, a)
        b.neg(ty, a)
        b.min(ty, a, a)
        b.max(ty, a, -2.0)
    x = r(f32)
    b.add(f32, x, x, rnd="rn", ftz=True, sat=True)
    b.mul(f32, x, x, ftz=True)
    b.fma(f32, x, x, x, rnd="rn", ftz=True, sat=True)
    for mode in ("approx", "full"):
        b.div(f32, x, x, ftz=True, **{mode: True})
    b.rcp(f32, x, approx=True, ftz=True)
    b.rcp(f64, r(f64), approx=True, ftz=True)
    b.sqrt(f32, x, approx=True)
    b.rsqrt(f32, x, ftz=True)
    for op in ("ex2", "lg2", "sin", "cos"):
        getattr(b, op)(f32, x)
        getattr(b, op)(f32, x, ftz=True)
    b.tanh(f32, x)
    b.min(f32, x, x, nan=True)
    b.max(f32, x, x, ftz=True)
    b.abs(f32, x, ftz=True)
    for ty in (f16, f16x2, bf16, bf16x2):
        h = r(ty)
        b.add(ty, h, h)
        b.add(ty, h, h, rnd="rn")
        b.sub(ty, h, h, rnd="rn")
        b.mul(ty, h, h, rnd="rn")
        b.fma(ty, h, h, h, rnd="rn")
        b.neg(ty, h)
        b.abs(ty, h)
        b.min(ty, h, h)
        b.max(ty, h, h, nan=True)
    for ty in (f16, f16x2):
        b.add(ty, r(ty), r(ty), ftz=True, sat=True)
        b.fma(ty, r(ty), r(ty), r(ty), rnd="rn", sat=True)
    for cmp in ("eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"):
        b.setp(cmp, f32, x, 0.0)
        b.setp(cmp, f64, r(f64), r(f64))
    b.setp("lt", f32, x, x, ftz=True)
    b.setp("lt", f16, r(f16), r(f16))
    b.setp("ge", bf16, r(bf16), r(bf16), combine="and", c=r(pred))


# (dst, src, rounding, flags): conversions across every kind
CVT_FORMS = [
    (u32, u16, None, {}), (u16, u32, None, {}), (s32, s16, None, {}), (s64, s32, None, {}), (u64, u32, None, {}),
    (u32, s64, None, {}), (u8, u32, None, {}), (s8, s32, None, {}), (u32, u8, None, {}), (s32, s8, None, {}),
    (u32, s32, None, {"sat": True}), (s16, s32, None, {"sat": True}),
    (f32, u32, "rn", {}), (f32, s32, "rz", {}), (f64, s64, "rm", {}), (f32, u64, "rp", {}), (f16, s32, "rn", {}),
    (bf16, u32, "rn", {}),
    (u32, f32, "rni", {}), (s32, f32, "rzi", {}), (s64, f64, "rmi", {}), (u64, f32, "rpi", {}),
    (s32, f32, "rzi", {"ftz": True, "sat": True}), (u16, f16, "rni", {}), (s32, bf16, "rzi", {}),
    (f16, f32, "rn", {}), (f16, f32, "rz", {"sat": True}), (bf16, f32, "rn", {}), (bf16, f32, "rz", {"relu": True}),
    (f32, f64, "rn", {}), (f32, f64, "rz", {"ftz": True}), (f16, f64, "rn", {}),
    (f32, f16, None, {}), (f32, bf16, None, {}), (f64, f32, None, {}), (f64, f16, None, {}),
    (f32, f32, "rni", {}), (f64, f64, "rzi", {}), (f32, f32, "rmi", {"ftz": True}),
    (bf16, f16, "rn", {}), (f16, bf16, "rn", {}),
]


@group("convert")
def _convert(sb: Sandbox):
    b, r = sb.b, sb.r
    for dst, src, rnd, flags in CVT_FORMS:
        src_reg = r(src) if src.bits >= 16 else r(u16 if src.kind == "u" else s16)
        b.cvt(dst, src, src_reg, rnd=rnd, **flags)
    b.cvt("tf32", f32, r(f32), rnd="rna")
    for dst in (f16x2, bf16x2):
        for rnd in ("rn", "rz"):
            b.cvt(dst, f32, r(f32), r(f32), rnd=rnd)
        b.cvt(dst, f32, r(f32), r(f32), rnd="rn", relu=True)
    b.cvt(bf16x2, f32, r(f32), r(f32), rnd="rn", satfinite=True)
    b.cvt(u64, u32, b.special("tid.x"))
    for space in ("global", "shared", "shared::cta", "shared::cluster", "local", "const", "param"):
        generic = b.cvta(u64, space, sb.gptr)
        b.cvta(u64, space, generic, to=True)
    b.cvta(u64, "shared", sb.smem_sym)
    b.cvta(u64, "shared", sb.smem64, to=True)


@group("data")
def _data(sb: Sandbox):
    b, r = sb.b, sb.r
    for ty in (pred, b16, b32, b64, u16, u32, u64, s16, s32, s64, f32, f64):
        b.mov(ty, r(ty))
    b.mov(f32, 1.0)
    b.mov(f64, -0.5)
    b.mov(u32, sb.smem_sym)
    b.mov(u64, sb.smem_sym)
    b.mov(b32, [r(b16), r(b16)])                 # pack
    b.mov(b64, [r(b32), r(b32)])
    b.mov(b128, [r(b64), r(b64)])
    b.unpack(b16, r(b32), 2)
    b.unpack(b32, r(b64), 2)
    b.unpack(b16, r(b64), 4)
    b.mov(f16, r(f16))
    b.mov(bf16, r(bf16))
    for special in ("tid.x", "ntid.y", "ctaid.z", "nctaid.x", "laneid", "warpid", "nwarpid", "smid", "nsmid",
                    "gridid", "clusterid.x", "nclusterid.y", "cluster_ctaid.x", "cluster_nctaid.z",
                    "cluster_ctarank", "cluster_nctarank", "is_explicit_cluster", "dynamic_smem_size",
                    "total_smem_size", "lanemask_eq", "lanemask_lt", "lanemask_le", "lanemask_gt",
                    "lanemask_ge", "clock", "clock64", "globaltimer"):
        b.special(special)
    for ty in (u32, u64):
        a = sb.smem if ty is u32 else sb.smem64
        remote = b.mapa(ty, a, 1)
        b.mapa(ty, sb.smem_sym, r(u32), shared_cluster=ty is u32)
        b.getctarank(ty, remote)
    for num in (1, 2, 4):
        frags = b.ldmatrix(sb.s(), num)
        b.ldmatrix(sb.s(), num, trans=True)
        b.stmatrix(sb.s(), frags)
        b.stmatrix(sb.s(), frags, trans=True)
    for mode in ("up", "down", "bfly", "idx"):
        b.shfl(mode, r(b32), 1, 0x1F)
    b.shfl("idx", r(b32), r(u32), r(u32), r(u32))
    for mode in ("all", "any", "uni", "ballot"):
        b.vote(mode, r(pred))
    b.vote("any", r(pred).negated(), r(u32))
    for op, ty in (("add", u32), ("add", s32), ("min", u32), ("max", s32), ("and", b32), ("or", b32),
                   ("xor", b32)):
        b.redux(op, ty, r(ty))
    b.elect()
    b.elect(r(u32))
    b.activemask()


# ============================================================================ wgmma and setmaxnreg
WGMMA_SS = [(f32, "bf16"), (f32, "f16"), (f16, "f16"), (f32, "tf32"), (f32, "e4m3"), (f16, "e4m3"),
            (f32, "e5m2"), (f16, "e5m2")]


@group("wgmma", archs=("sm_90a",))
def _wgmma(sb: Sandbox):
    b, r = sb.b, sb.r
    pool = {f32: b.regs(f32, 128, "acc"), f16: b.regs(f16x2, 64, "acch")}
    desc = r(b64)
    a_regs = sb.vec(b32, 4)
    b.wgmma_fence()
    for n in range(8, 257, 8):
        for atype in ("bf16", "f16"):
            acc = Vec(pool[f32][: n // 2])
            b.wgmma(acc, desc, desc, n=n, dtype=f32, atype=atype, scale_d=0 if n == 8 else 1)
            b.wgmma(acc, a_regs, desc, n=n, dtype=f32, atype=atype, trans_b=1)
    for dtype, atype in WGMMA_SS:
        for n in (8, 64, 256):
            acc = Vec(pool[dtype][: n // 2 if dtype is f32 else n // 4])
            b.wgmma(acc, desc, desc, n=n, dtype=dtype, atype=atype, scale_d=r(pred), scale_a=-1)
            b.wgmma(acc, a_regs, desc, n=n, dtype=dtype, atype=atype, scale_b=-1)
    b.wgmma(Vec(pool[f32][:64]), desc, desc, n=128, dtype=f32, atype="e4m3", btype="e5m2")
    pool[s32] = b.regs(s32, 128, "acci")
    for atype, btype in (("s8", "s8"), ("u8", "s8"), ("s8", "u8"), ("u8", "u8")):
        for n in (8, 24, 32, 48, 256):
            b.wgmma(Vec(pool[s32][: n // 2]), desc, desc, n=n, dtype=s32, atype=atype, btype=btype)
            b.wgmma(Vec(pool[s32][: n // 2]), a_regs, desc, n=n, dtype=s32, atype=atype, btype=btype,
                    scale_d=r(pred))
    b.wgmma(Vec(pool[f32][:32]), desc, desc, n=64, dtype=f32, atype="bf16", trans_a=1, trans_b=1)
    b.wgmma_commit_group()
    b.wgmma_wait_group(0)
    b.wgmma_wait_group(1)


@group("setmaxnreg", archs=("sm_90a",))
def _setmaxnreg(sb: Sandbox):
    b = sb.b
    b.setmaxnreg("dec", 40)
    b.setmaxnreg("inc", 232)
    b.setmaxnreg("dec", 24)
    b.setmaxnreg("inc", 256)


# ============================================================================ control flow and misc
@group("control")
def _control(sb: Sandbox):
    b, r = sb.b, sb.r
    with b.if_then(r(pred)):
        b.nanosleep(100)
        b.nanosleep(r(u32))
    with b.if_then(r(pred), uniform=True):
        b.trap()
    b.emit("brkpt")
    b.emit("pmevent", 1)
    b.exit(pred=r(pred))
    b.ret(pred=r(pred).negated())
    b.emit("ret", uni=True, pred=r(pred))
