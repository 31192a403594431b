"""Form groups for loads/stores, atomics, fences, barriers, mbarriers, bulk and tensor copies and
multimem (registered into tests.helpers.forms.GROUPS on import)."""
from __future__ import annotations

from pkptx.isa import (address, b8, b16, b32, b64, b128, bf16, bf16x2, f16, f16x2, f32, f64, pred, s8, s16,
                       s32, s64, tensor_ref, u8, u16, u32, u64)

from .assemble import Sandbox
from .forms import SCOPES, group


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
    for scope in ("cta", "cluster"):                      # .relaxed arrive/wait forms: PTX 8.6
        b.mbarrier_arrive(address(bar), 1, sem="relaxed", scope=scope)
        b.mbarrier_arrive_expect_tx(address(bar), 64, sem="relaxed", scope=scope)
        b.mbarrier_try_wait(address(bar), 0, parity=True, sem="relaxed", scope=scope)
        b.mbarrier_test_wait(address(bar), state, parity=False, sem="relaxed", scope=scope)
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
