"""Forms that used to pass the builder and fail in ptxas (issues 20 and 24), each now a PTXBuildError at
the caller's line, and the neighbouring legal forms, which assemble."""
from __future__ import annotations

import pytest

from pkptx.errors import PTXBuildError, TargetError
from pkptx.isa import Kernel, Reg, Vec, address, b32, b64, f32, f64, s32, u32, u64
from pkptx.isa.values import SPECIALS
from tests.helpers.assemble import Sandbox, assert_assembles
from tests.helpers.errors import build_error, caller_line


@pytest.fixture
def sb():
    return Sandbox()


def test_a_register_of_another_kernel_with_the_same_name(sb):
    other = Kernel("other", [])
    stranger = other.builder().mov(u32, 1)
    mine = sb.b.mov(u32, 2, name="r")
    assert stranger.name == mine.name == "%r0"
    with build_error("register %r0 was not declared by this kernel's builder"):
        sb.b.add(u32, stranger, 1)
    with build_error("register %ptr0 was not declared by this kernel's builder", "made by hand"):
        sb.b.st(u32, address(Reg("%ptr0", u64)), mine, space="global")        # sb.gptr's name, not sb.gptr


def test_negative_offsets_render_the_way_ptxas_parses_them(sb):
    v = sb.b.ld(u32, address(sb.gptr, -8), space="global")
    sb.b.st(u32, sb.s(16) - 20, v, space="shared")
    text = sb.k.render()
    assert "[%ptr0+-8]" in text and "[%smem0+-4]" in text
    assert_assembles(sb.finish())


def test_cluster_wait_with_its_defaults_assembles():
    k = Kernel("cluster_sync", cluster=2)
    b = k.builder()
    b.cluster_arrive(sem="release")
    b.cluster_wait()
    b.ret()
    assert k.ptx_version == (8, 0)
    assert_assembles(k)
    pinned = Kernel("old_cluster", ptx_version=(7, 8))
    with build_error("barrier.cluster.wait.acquire.aligned needs PTX ISA 8.0", cls=TargetError):
        pinned.builder().cluster_wait()
    pinned.builder().cluster_wait(acquire=False)


@pytest.mark.parametrize("barrier_id", [16, -1, 1000])
def test_named_barriers_are_0_to_15(sb, barrier_id):
    with build_error("bar.sync", "'id' must be an integer in 0..15", f"got {barrier_id}"):
        sb.b.bar_sync(barrier_id)


@pytest.mark.parametrize("count", [0, 48, 2048])
def test_barrier_thread_counts_are_whole_warps(sb, count):
    with build_error("'count' must be an integer in 32..1024, a multiple of 32"):
        sb.b.bar_arrive(1, count)


@pytest.mark.parametrize("count", [0, 1 << 20, -1])
def test_mbarrier_init_counts(sb, count):
    with build_error("mbarrier.init", "'count' must be an integer in 1..1048575"):
        sb.b.mbarrier_init(sb.bar, count)


@pytest.mark.parametrize("size", [100, 0, 8, 1 << 20])
def test_bulk_sizes_are_multiples_of_16(sb, size):
    with build_error("'size' must be an integer in 16..1048560, a multiple of 16", f"got {size}"):
        sb.b.bulk_load(sb.s(), sb.gptr, size, sb.bar)
    with build_error("'size' must be an integer in 16..1048560"):
        sb.b.bulk_store(sb.gptr, sb.s(), size)


def test_tensormap_fence_size_pmevent_and_parity(sb):
    with build_error("'size' must be an integer in 128..128, got 64"):
        sb.b.fence_proxy_tensormap_acquire(sb.tmap, "gpu", size=64)
    with build_error("pmevent", "'n' must be an integer in 0..15, got 16"):
        sb.b.emit("pmevent", 16)
    with build_error("'parity' must be an integer in 0..1, got 2"):
        sb.b.mbarrier_try_wait(sb.bar, 2, parity=True)


def test_immediate_addresses_only_in_local(sb):
    with build_error("an absolute address [64] is only legal in .local"):
        sb.b.ld(u32, address(None, 64), space="global")
    with build_error("an absolute address [64] is only legal in .local"):
        sb.b.mbarrier_init(address(None, 64), 1)
    sb.b.ld(u32, address(None, 64), space="local")
    assert_assembles(sb.finish())


def test_symbols_in_their_own_state_space(sb):
    n = sb.k.param("n").symbol
    with build_error("[buf] is a .shared variable", "not .global"):
        sb.b.ld(u32, address(sb.smem_sym), space="global")
    with build_error("'dst': address [n] is a .param variable"):
        sb.b.bulk_store(address(n), sb.s(), 16)
    with build_error("mapa", "symbol [n] is a .param variable"):
        sb.b.mapa(u64, n, 1, shared_cluster=False)
    with build_error("getctarank", "symbol [tmap] is a .param variable"):
        sb.b.getctarank(u64, sb.k.param("tmap").symbol)
    with build_error("cvta.global.u64", "symbol [buf] is a .shared variable"):
        sb.b.cvta(u64, "global", sb.smem_sym)
    with build_error("cvta.to converts a generic address held in a register, not the symbol buf"):
        sb.b.cvta(u64, "shared", sb.smem_sym, to=True)


def test_matrix_and_vector_operands_need_their_braces(sb):
    with build_error(".x1 moves a brace vector of 1 .b32 register(s)"):
        sb.b.emit("stmatrix", sb.s(), sb.r(b32), types=("b16",), shape="m8n8", num="x1", space="shared")
    with build_error("a brace vector in operand 1 needs a vector width"):
        sb.b.st(u32, sb.g(), Vec((sb.r(u32),)), space="global")
    with build_error("pack/unpack mov takes 2 or 4 registers in braces, got 1"):
        sb.b.mov(b64, [sb.r(b64)])
    with build_error("mov of the address of buf needs a 32/64-bit integer type, not .f32"):
        sb.b.mov(f32, sb.smem_sym)


def test_float_registers_where_ptxas_wants_integer_ones(sb):
    with build_error("register %f64_seed0 is .f64; this operand takes an integer or bit register (.b64)"):
        sb.b.ld(u32, sb.g(), space="global", policy=sb.r(f64))
    with build_error("redux.sync", "is .f32; this operand takes an integer or bit register"):
        sb.b.emit("redux.sync", sb.b.reg(f32), sb.r(b32), 0xFFFFFFFF, types=("b32",), op="and")


def test_python_values_become_project_errors(sb):
    r = sb.r(u32)
    with build_error("a PTX type is a name such as 'u32' or a PtxType", "got int 32"):
        sb.b.add(32, r, 1)
    with build_error("immediate 1e+300 does not fit .f32"):
        sb.b.mul(f32, sb.r(f32), 1e300)
    with build_error("does not fit .f64"):
        sb.b.mul(f64, sb.r(f64), 10 ** 400)
    sb.b.mul(f32, sb.r(f32), float("inf"))


def test_messages_name_the_instruction_and_rounding_is_rnd(sb):
    with build_error("sub.sat.f64", "'.sat' is not legal on sub.f64"):
        sb.b.sub(f64, sb.r(f64), sb.r(f64), sat=True)
    with build_error("neg.ftz.f64", "not legal on neg.f64"):
        sb.b.neg(f64, sb.r(f64), ftz=True)
    with build_error("no modifier group 'mode'"):
        sb.b.div(f32, sb.r(f32), sb.r(f32), mode="rn")
    with build_error("'.approx' and '.rn' cannot be combined"):
        sb.b.div(f32, sb.r(f32), sb.r(f32), approx=True, rnd="rn")
    with build_error("rcp.f32 needs approx=True or rnd="):
        sb.b.rcp(f32, sb.r(f32))
    sb.b.div(f32, sb.r(f32), sb.r(f32), rnd="rn")
    sb.b.div(f32, sb.r(f32), sb.r(f32), full=True)
    sb.b.rcp(f64, sb.r(f64), rnd="rz")
    sb.b.ex2(f32, sb.r(f32))
    text = sb.k.render()
    assert "div.rn.f32" in text and "div.full.f32" in text and "rcp.rz.f64" in text and "ex2.approx.f32" in text
    assert_assembles(sb.finish())


def test_an_error_raised_after_a_refusal_leaves_the_kernel_unchanged(sb):
    before = sb.k.render()
    with pytest.raises(PTXBuildError):
        sb.b.bar_sync(16)
    assert sb.k.render() == before


def test_forms_that_crashed_or_misled_ptxas(sb):
    """Found by the spec-driven generator: ptxas dies with internal error C7907 on the first three."""
    with build_error("prefetch of the .shared variable buf", "C7907"):
        sb.b.prefetch(address(sb.smem_sym, 8), level="L2")
    with build_error("prefetch takes a register or symbol address"):
        sb.b.prefetch(address(None, 64), space="local", level="L1")
    with build_error("'.L2::cache_hint' on the .shared variable bars"):
        sb.b.red("add", u32, address(sb.bar_sym), 16, policy=sb.policy)
    with build_error("cvt to .f32 cannot read the special register %tid.x"):
        sb.b.cvt(f32, u32, SPECIALS["%tid.x"], rnd="rn")
    with build_error("a .wide result needs a 64-bit integer register, got .f64"):
        sb.b.mul(s32, sb.r(s32), 96, mode="wide", into=sb.b.reg(f64))
    with build_error("'mask' must be an integer in 0..65535, got -8"):
        sb.b.bulk_load(sb.s(), sb.gptr, 16, sb.bar, multicast_mask=-8)
    sb.b.cvt(u64, u32, SPECIALS["%tid.x"])
    sb.b.prefetch(sb.g(), level="L2")
    assert_assembles(sb.finish())


def test_setmaxnreg_dec_above_every_inc_is_refused_when_the_kernel_renders():
    k = Kernel("rebalance", max_threads=128, target="sm_90a")
    b = k.builder()
    b.setmaxnreg("inc", 32)
    line = caller_line(); b.setmaxnreg("dec", 96)  # noqa: E702
    b.ret()
    with pytest.raises(PTXBuildError, match=r"setmaxnreg.dec.sync.aligned.u32 96: a decrease to more registers "
                                            r"than the kernel's largest setmaxnreg.inc \(32\)") as info:
        k.render()
    assert f"{__file__}:{line}" in info.value.origin
