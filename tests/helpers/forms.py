"""A catalogue of valid instruction forms, emitted through the Builder into scratch kernels.

Each ``FormGroup`` is one function that emits many forms into a :class:`Sandbox`; the spec-table
test assembles every group (for sm_90 and sm_90a where the group allows), checks that together they
cover every row of ``SPECS``, and the invalid-form property test corrupts the recorded ``emit``
calls. Keep one group per PTX-ISA area so an assembler error points at a short function.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

from pkptx.isa import (Kernel, Vec, address, tensor_ref, b8, b16, b32, b64, b128, bf16, bf16x2, f16, f16x2, f32, f64, pred,
                       s8, s16, s32, s64, u8, u16, u32, u64)
from pkptx.isa.builder import Builder

from .assemble import ARCHS, Sandbox

SCOPES = ("cta", "cluster", "gpu", "sys")


@dataclass(frozen=True)
class FormGroup:
    name: str
    emit: Callable[[Sandbox], None]
    archs: tuple = ARCHS                  # ("sm_90a",) for groups that use sm_90a-only rows
    kernel_args: dict = field(default_factory=dict)

    def build(self, arch: str) -> Kernel:
        sb = Sandbox(f"forms_{self.name}", target=arch, **self.kernel_args)
        self.emit(sb)
        return sb.finish()


GROUPS: dict[str, FormGroup] = {}


def group(name: str, *, archs=ARCHS, **kernel_args):
    def register(fn):
        GROUPS[name] = FormGroup(name, fn, tuple(archs), kernel_args)
        return fn
    return register


@functools.lru_cache(maxsize=None)
def built(name: str, arch: str) -> Kernel:
    """The group's kernel for ``arch``, built once per test session (tests only read it)."""
    return GROUPS[name].build(arch)


def emitted_keys(kernel: Kernel) -> set[str]:
    """The spec keys of every instruction in ``kernel`` (what the kernel actually exercises)."""
    return {ins.key for ins in kernel.body if ins.kind == "ins"}


@dataclass(frozen=True)
class EmitCall:
    """One recorded ``Builder.emit`` call: enough to replay (or corrupt) it in the same kernel."""
    key: str
    operands: tuple
    types: tuple
    pred: object
    mods: dict


def record_group(form_group: FormGroup, arch: str = "sm_90a"):
    """Build ``form_group`` and return (sandbox, every emit call the forms made, prologue excluded)."""
    calls: list[EmitCall] = []
    original = Builder.emit

    sb = Sandbox(f"forms_{form_group.name}", target=arch, **form_group.kernel_args)

    def recording(self, key, *operands, types=(), pred=None, **mods):
        ins = original(self, key, *operands, types=types, pred=pred, **mods)
        calls.append(EmitCall(key, operands, tuple(types), pred, dict(mods)))
        return ins

    Builder.emit = recording
    try:
        form_group.emit(sb)
    finally:
        Builder.emit = original
    return sb, calls


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
            b.div(ty, a, a, mode=rnd)
            b.rcp(ty, a, mode=rnd)
            b.sqrt(ty, a, mode=rnd)
        b.rsqrt(ty, a, mode="approx")
        b.abs(ty, a)
        b.neg(ty, a)
        b.min(ty, a, a)
        b.max(ty, a, -2.0)
    x = r(f32)
    b.add(f32, x, x, rnd="rn", ftz=True, sat=True)
    b.mul(f32, x, x, ftz=True)
    b.fma(f32, x, x, x, rnd="rn", ftz=True, sat=True)
    for mode in ("approx", "full"):
        b.div(f32, x, x, mode=mode, ftz=True)
    b.rcp(f32, x, mode="approx", ftz=True)
    b.rcp(f64, r(f64), mode="approx", ftz=True)
    b.sqrt(f32, x, mode="approx")
    b.rsqrt(f32, x, mode="approx", ftz=True)
    for op in ("ex2", "lg2", "sin", "cos"):
        getattr(b, op)(f32, x, mode="approx")
        getattr(b, op)(f32, x, mode="approx", ftz=True)
    b.tanh(f32, x, mode="approx")
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


# ============================================================================ data movement
LD_SPACES = (None, "global", "shared", "shared::cta", "shared::cluster", "local", "param", "const")
ST_SPACES = (None, "global", "shared", "shared::cta", "shared::cluster", "local")
ORDERED_SPACES = (None, "global", "shared", "shared::cta", "shared::cluster")


def ordering_forms(load: bool):
    """Every legal (sem, scope, space) of ld/st: the expected legal set the table must accept."""
    sems = ("relaxed", "acquire") if load else ("relaxed", "release")
    spaces = LD_SPACES if load else ST_SPACES
    out = [(sem, None, space) for sem in (None, "weak") for space in spaces]
    out += [("volatile", None, space) for space in ORDERED_SPACES]
    out += [(sem, scope, space) for sem in sems for scope in SCOPES for space in ORDERED_SPACES]
    return out


def space_address(sb: Sandbox, space):
    if space and space.startswith("shared"):
        return sb.s(16)
    if space == "param":
        return address(sb.k.param("n"))
    return sb.g(16)


@group("ld_st_ordering")
def _ld_st_ordering(sb: Sandbox):
    b, r = sb.b, sb.r
    for sem, scope, space in ordering_forms(load=True):
        b.ld(u32, space_address(sb, space), sem=sem, scope=scope, space=space)
    for sem, scope, space in ordering_forms(load=False):
        b.st(u32, space_address(sb, space), r(u32), sem=sem, scope=scope, space=space)


LDST_TYPES = (b8, b16, b32, b64, u8, u16, u32, u64, s8, s16, s32, s64, f32, f64)


@group("ld_st_types")
def _ld_st_types(sb: Sandbox):
    b, r = sb.b, sb.r
    for ty in LDST_TYPES:
        for vec in (1, 2, 4):
            if vec * ty.bits > 128:
                continue
            value = b.ld(ty, sb.g(), space="global", vec=vec)
            b.st(ty, sb.g(64), value, space="global")
            b.ld(ty, sb.s(), space="shared", vec=vec, sem="relaxed", scope="cta")
    for ty in (f16, bf16, f16x2, bf16x2):       # half types travel as .b16/.b32 bits
        for vec in (1, 2, 4):
            value = b.ld(ty, sb.g(), space="global", vec=vec)
            b.st(ty, sb.g(64), value, space="global")
    q = b.ld(b128, sb.g(), space="global")
    b.st(b128, sb.g(128), q, space="global")
    b.ld(b128, sb.s(), sem="acquire", scope="gpu", space="shared")
    b.ld(b128, address(sb.smem64), sem="acquire", scope="cta")
    b.st(u32, sb.g(), [r(u32), 1, 2, r(u32)], space="global")
    b.st(f32, sb.g(), 1.0, space="global")
    b.st(u8, sb.g(), 7, space="global")
    b.ld(u32, address(sb.smem_sym, 32), space="shared")
    b.ld(u32, address(sb.smem_sym), space="shared", into=sb.b.reg(b32))


@group("ld_st_cache")
def _ld_st_cache(sb: Sandbox):
    b, r, pol = sb.b, sb.r, sb.policy
    for cache in ("ca", "cg", "cs", "lu", "cv"):
        b.ld(u32, sb.g(), space="global", cache=cache)
        b.ld(u32, sb.g(), space="global", cache=cache, vec=4, policy=pol)
    for cache in ("ca", "cg"):
        b.ld(u32, sb.s(), space="shared", cache=cache)
    for cache in ("ca", "cg", "cs"):
        b.ld(u32, sb.g(), space="global", nc=True, cache=cache)
    evicts = ("L1::evict_normal", "L1::evict_unchanged", "L1::evict_first", "L1::evict_last", "L1::no_allocate")
    for evict in evicts:
        b.ld(u32, sb.g(), space="global", evict=evict)
        b.ld(u32, sb.g(), space="global", nc=True, evict=evict, policy=pol)
        b.ld(u32, sb.g(), sem="relaxed", scope="gpu", space="global", evict=evict)
        b.st(u32, sb.g(), r(u32), space="global", evict=evict)
        b.st(u32, sb.g(), r(u32), sem="release", scope="sys", evict=evict, policy=pol)
    for size in ("L2::64B", "L2::128B", "L2::256B"):
        b.ld(u32, sb.g(), space="global", prefetch=size)
        b.ld(u32, sb.g(), space="global", nc=True, prefetch=size, vec=4)
        b.ld(u32, sb.g(), sem="acquire", scope="gpu", space="global", prefetch=size, policy=pol)
    for cache in ("wb", "cg", "cs", "wt"):
        b.st(u32, sb.g(), r(u32), space="global", cache=cache)
        b.st(u32, sb.g(), r(u32), space="global", cache=cache, policy=pol)
    b.ld(u32, sb.g(), policy=pol)
    b.st(f32, sb.g(), [r(f32)] * 4, space="global", policy=pol)
    b.st(u32, sb.g(), r(u32), sem="release", scope="sys", space="global", policy=pol)
    for primary in ("L2::evict_last", "L2::evict_normal", "L2::evict_first", "L2::evict_unchanged"):
        b.createpolicy(primary)
        b.createpolicy(primary, "L2::evict_first", fraction=0.5)
        b.createpolicy(primary, "L2::evict_unchanged", fraction=1.0)
    for space, level in ((None, "L1"), (None, "L2"), ("global", "L1"), ("global", "L2"), ("local", "L1"),
                         ("global", "L2::evict_last"), ("global", "L2::evict_normal")):
        b.prefetch(sb.g(), space=space, level=level)
    b.prefetch(sb.tmap, level="tensormap")
    b.prefetch(address(sb.k.param("tmap")), space="param", level="tensormap")


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


# ============================================================================ atomics and fences
ATOM_TYPED_OPS = [
    ("add", (u32, u64, s32, f32, f64)), ("min", (u32, u64, s32, s64)), ("max", (u32, u64, s32, s64)),
    ("and", (b32, b64)), ("or", (b32, b64)), ("xor", (b32, b64)), ("inc", (u32,)), ("dec", (u32,)),
    ("add", (f16, bf16, f16x2, bf16x2)),
]


@group("atomics")
def _atomics(sb: Sandbox):
    b, r = sb.b, sb.r
    for op, types in ATOM_TYPED_OPS:
        for ty in types:
            b.atom(op, ty, sb.g(), r(ty), space="global")
            b.red(op, ty, sb.g(), r(ty), space="global")
            b.atom(op, ty, sb.s(), r(ty), space="shared")
            b.red(op, ty, sb.g(), r(ty))
    for ty in (b32, b64):
        b.atom("exch", ty, sb.g(), r(ty), space="global")
        b.atom("cas", ty, sb.g(), r(ty), r(ty), space="global")
        b.atom("cas", ty, sb.s(), 0, 1, space="shared::cta")
    for sem in ("relaxed", "acquire", "release", "acq_rel"):
        for scope in SCOPES:
            b.atom("add", u32, sb.g(), 1, sem=sem, scope=scope, space="global")
            b.atom("cas", b32, sb.g(), 0, 1, sem=sem, scope=scope)
    for sem in ("relaxed", "release"):
        for scope in SCOPES:
            b.red("add", u32, sb.g(), 1, sem=sem, scope=scope, space="global")
            b.red("or", b32, sb.s(), r(b32), sem=sem, scope=scope, space="shared")
    b.red("add", u32, sb.g(), 1, sem="release", scope="sys", space="global")
    b.red("add", u64, sb.g(), r(u64), sem="release", scope="sys")
    b.red("add", f32, sb.g(), r(f32), sem="release", scope="sys", space="global")
    b.atom("add", u32, sb.g(), 1, space="global", policy=sb.policy)
    b.red("add", f32, sb.g(), r(f32), space="global", policy=sb.policy)
    b.atom("exch", b64, sb.g(), r(b64), space="global", policy=sb.policy)
    b.atom("add", u32, sb.s(), 1, space="shared::cluster")
    b.red("add", u32, sb.s(), 1, sem="release", scope="cluster", space="shared::cluster")


@group("fences")
def _fences(sb: Sandbox):
    b = sb.b
    for level in ("cta", "gl", "sys"):
        b.membar(level)
    for sem in ("sc", "acq_rel", None):
        for scope in SCOPES:
            b.fence(sem, scope)
    for space in (None, "shared::cta", "shared::cluster", "global"):
        b.fence_proxy_async(space)
    b.fence_proxy_alias()
    for scope in SCOPES:
        b.fence_proxy_tensormap_release(scope)
        b.fence_proxy_tensormap_acquire(sb.tmap, scope)
    b.fence_mbarrier_init()


@group("barriers")
def _barriers(sb: Sandbox):
    b, r = sb.b, sb.r
    b.bar_sync()
    b.bar_sync(1, 64)
    b.bar_sync(r(u32), r(u32))
    b.bar_arrive(2, 64)
    b.bar_sync(3, pred=r(pred))
    b.barrier_sync()
    b.barrier_sync(4, 128, aligned=False)
    b.barrier_arrive(5, 96)
    b.barrier_arrive(5, 96, aligned=False)
    for sem in (None, "release", "relaxed"):
        b.cluster_arrive(sem=sem)
        b.cluster_arrive(sem=sem, aligned=False)
    b.cluster_wait()
    b.cluster_wait(acquire=False, aligned=False)
    b.griddepcontrol("wait")
    b.griddepcontrol("launch_dependents")


# ============================================================================ mbarrier
@group("mbarrier")
def _mbarrier(sb: Sandbox):
    b, r, bar = sb.b, sb.r, sb.bar
    for space in ("shared", "shared::cta"):
        b.mbarrier_init(address(bar), 1, space=space)
        b.mbarrier_init(address(bar, 8), r(u32), space=space)
    b.mbarrier_init(address(sb.bar_sym, 16), 2, space=None)
    state = b.mbarrier_arrive(address(bar))
    b.mbarrier_arrive(address(bar), 1, space="shared")
    b.mbarrier_arrive(address(bar), r(u32), sem="release", scope="cta")
    for scope in ("cta", "cluster"):
        b.mbarrier_arrive(address(bar), sem="release", scope=scope)
        b.mbarrier_arrive(address(bar), 1, sem="release", scope=scope, drop=True)
        b.mbarrier_arrive_expect_tx(address(bar), 1024, sem="release", scope=scope)
        b.mbarrier_expect_tx(address(bar), 1024, sem="relaxed", scope=scope)
        b.mbarrier_complete_tx(address(bar), 1024, sem="relaxed", scope=scope)
        b.mbarrier_try_wait(address(bar), state, parity=False, sem="acquire", scope=scope)
        b.mbarrier_try_wait(address(bar), 0, parity=True, sem="acquire", scope=scope, suspend_hint=1000)
        b.mbarrier_test_wait(address(bar), state, parity=False, sem="acquire", scope=scope)
        b.mbarrier_test_wait(address(bar), r(u32), parity=True, sem="acquire", scope=scope)
    remote = b.mapa(u32, bar, 1)
    b.mbarrier_arrive(address(remote), space="shared::cluster", sem="release", scope="cluster")
    b.mbarrier_arrive(address(remote), 1, space="shared::cluster", sem="release", scope="cluster", drop=True)
    b.mbarrier_arrive_expect_tx(address(remote), 64, space="shared::cluster", sem="release", scope="cluster")
    b.mbarrier_expect_tx(address(remote), 64, space="shared::cluster", sem="relaxed", scope="cluster")
    b.mbarrier_complete_tx(address(remote), 64, space="shared::cluster", sem="relaxed", scope="cluster")
    b.mbarrier_arrive(address(bar), drop=True)
    b.mbarrier_arrive_expect_tx(address(bar), r(u32))
    b.mbarrier_expect_tx(address(bar), 16)
    b.mbarrier_complete_tx(address(bar), 16)
    b.mbarrier_test_wait(address(bar), state, parity=False)
    b.mbarrier_test_wait(address(bar), 1, parity=True, space="shared")
    b.mbarrier_try_wait(address(bar), state, parity=False)
    b.mbarrier_try_wait(address(bar), state, parity=False, suspend_hint=r(u32))
    b.mbarrier_try_wait(address(bar), 1, parity=True)
    b.mbarrier_pending_count(state)
    for space in ("shared", "shared::cta"):
        b.mbarrier_inval(address(bar), space=space)


# ============================================================================ bulk and tensor copies
TENSOR_OPS = ("add", "min", "max", "inc", "dec", "and", "or", "xor")
BULK_REDUCE_TYPES = [
    ("add", (u32, s32, u64, f32, f64, f16, bf16)), ("min", (u32, s32, u64, s64, f16, bf16)),
    ("max", (u32, s32, u64, s64, f16, bf16)), ("inc", (u32,)), ("dec", (u32,)),
    ("and", (b32, b64)), ("or", (b32, b64)), ("xor", (b32, b64)),
]


def coords(sb: Sandbox, n: int):
    return tuple([sb.r(s32)] + list(range(1, n)))


@group("bulk_copy", cluster=(2,))
def _bulk_copy(sb: Sandbox):
    b, bar, pol = sb.b, address(sb.bar), sb.policy
    mask = b.mov(u16, 3)
    b.bulk_load(sb.s(), sb.g(), 256, bar)
    b.bulk_load(sb.s(), sb.g(), sb.r(u32), bar, policy=pol)
    b.bulk_load(sb.s(), sb.g(), 256, bar, multicast_mask=mask)
    b.bulk_load(sb.s(), sb.g(), 256, bar, multicast_mask=mask, policy=pol)
    remote = b.mapa(u32, sb.smem, 1)
    b.bulk_copy_cluster(address(remote), sb.s(), 128, address(b.mapa(u32, sb.bar, 1)))
    b.bulk_store(sb.g(), sb.s(), 256)
    b.bulk_store(sb.g(), sb.s(), 256, policy=pol)
    for op, types in BULK_REDUCE_TYPES:
        for ty in types:
            b.bulk_reduce(op, ty, sb.g(), sb.s(), 256)
    b.bulk_reduce("add", f32, sb.g(), sb.s(), 256, policy=pol)
    for op, ty in (("add", u32), ("add", s32), ("add", u64), ("min", u32), ("min", s32), ("max", u32),
                   ("max", s32), ("inc", u32), ("dec", u32), ("and", b32), ("or", b32), ("xor", b32)):
        b.bulk_reduce_cluster(op, ty, address(remote), sb.s(), 128, bar)
    b.bulk_prefetch(sb.g(), 256)
    b.bulk_prefetch(sb.g(), 256, policy=pol)
    b.bulk_commit_group()
    b.bulk_wait_group(0)
    b.bulk_wait_group(2, read=True)


@group("tensor_copy", cluster=(2,))
def _tensor_copy(sb: Sandbox):
    b, bar, pol, tmap = sb.b, address(sb.bar), sb.policy, sb.tmap
    mask = b.mov(u16, 3)
    for dims in range(1, 6):
        c = coords(sb, dims)
        b.tensor_load(sb.s(), tmap, c, bar)
        b.tensor_load(sb.s(), tmap, c, bar, policy=pol)
        b.tensor_load(sb.s(), tmap, c, bar, multicast_mask=mask)
        b.tensor_load(sb.s(), tmap, c, bar, multicast_mask=mask, policy=pol)
        b.tensor_store(tmap, c, sb.s())
        b.tensor_store(tmap, c, sb.s(), policy=pol)
        for op in TENSOR_OPS:
            b.tensor_reduce(op, tmap, c, sb.s())
        b.tensor_reduce("add", tmap, c, sb.s(), policy=pol)
        b.tensor_prefetch(tmap, c)
        b.tensor_prefetch(tmap, c, policy=pol)
        if dims >= 3:
            offsets = [b.mov(u16, 1)] + list(range(dims - 3))
            b.tensor_load(sb.s(), tmap, c, bar, im2col_offsets=offsets)
            b.tensor_load(sb.s(), tmap, c, bar, im2col_offsets=offsets, multicast_mask=mask, policy=pol)
            b.tensor_prefetch(tmap, c, im2col_offsets=offsets, policy=pol)
            ref = tensor_ref(tmap, c)
            b.emit("cp.async.bulk.tensor.global.shared::cta", ref, sb.s(), dim=f"{dims}d", load_mode="im2col_no_offs")
            b.emit("cp.reduce.async.bulk.tensor", ref, sb.s(), dim=f"{dims}d", op="max", load_mode="im2col_no_offs")
    b.bulk_commit_group()
    b.bulk_wait_group(0, read=True)


# ============================================================================ multimem
MULTIMEM_SCALAR = [("add", (u32, u64, s32, f32, f64, f16x2, bf16x2)), ("min", (u32, s32, u64, s64)),
                   ("max", (u32, s32, u64, s64)), ("and", (b32, b64)), ("or", (b32, b64)), ("xor", (b32, b64))]
MULTIMEM_VECTOR = [(f32, (2, 4)), (f16x2, (1, 2, 4)), (bf16x2, (1, 2, 4)), (f16, (2, 4, 8)), (bf16, (2, 4, 8))]


@group("multimem")
def _multimem(sb: Sandbox):
    b, mc = sb.b, address(sb.mc)
    for op, types in MULTIMEM_SCALAR:
        for ty in types:
            b.multimem_ld_reduce(op, ty, mc, sem="relaxed", scope="sys")
    for ty, widths in MULTIMEM_VECTOR:
        for vec in widths:
            ops = ("add",) if ty is f32 else ("add", "min", "max")
            for op in ops:
                b.multimem_ld_reduce(op, ty, mc, sem="relaxed", scope="gpu", vec=vec)
            if ty is not f32:
                b.multimem_ld_reduce("add", ty, mc, sem="acquire", scope="sys", vec=vec, acc_f32=True)
            value = b.multimem_ld_reduce("add", ty, mc, sem="weak", scope=None, vec=vec)
            b.multimem_st(ty, mc, value, sem="relaxed", scope="sys")
            for op in ops:
                if vec > 1 or ty is f32 or op == "add":
                    b.multimem_red(op, ty, mc, value, sem="release", scope="sys")
    for sem, scope in (("weak", None), ("relaxed", "cta"), ("acquire", "cluster"), ("relaxed", "gpu")):
        b.multimem_ld_reduce("add", u32, mc, sem=sem, scope=scope)
    for sem, scope in (("weak", None), ("relaxed", "cluster"), ("release", "gpu"), ("release", "sys")):
        b.multimem_st(u32, mc, sb.r(u32), sem=sem, scope=scope)
    for op, types in MULTIMEM_SCALAR:
        for ty in types:
            b.multimem_red(op, ty, mc, sb.r(ty), sem="relaxed", scope="sys")
    b.multimem_red("add", u32, mc, 1, sem="release", scope="sys")


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
