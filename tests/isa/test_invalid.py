"""Invalid forms raise PTXBuildError before the assembler, naming the bad part, the legal options and
the user's file:line (style rule 6). ``build_error`` checks all three; see tests/helpers/errors.py."""
from __future__ import annotations

import pytest

from pkptx.errors import PTXBuildError, TargetError
from pkptx.isa import (MAX_PTX, Kernel, Param, Vec, address, b16, b32, b64, bf16, f16, f16x2, f32, f64, pred,
                       ptx_type, s32, s64, u8, u16, u32, u64)
from tests.helpers.assemble import Sandbox, assert_assembles
from tests.helpers.errors import assembler_forbidden, build_error, caller_line


@pytest.fixture
def sb():
    return Sandbox()


# ------------------------------------------------------------------ modifiers
def test_unknown_modifier_value_lists_the_legal_ones(sb):
    with build_error("'.seq_cst' is not a legal sem", ".relaxed", ".acquire"):
        sb.b.ld(u32, sb.g(), sem="seq_cst", scope="gpu", space="global")


def test_unknown_modifier_group(sb):
    with build_error("no modifier group 'bogus'", "legal groups"):
        sb.b.emit("add", sb.b.reg(u32), sb.r(u32), 1, types=(u32,), bogus="x")


def test_relaxed_without_scope(sb):
    with build_error("'.relaxed' needs a scope", ".cta", ".cluster", ".gpu", ".sys"):
        sb.b.ld(u32, sb.g(), sem="relaxed", space="global")


def test_scope_with_weak(sb):
    with build_error("scope '.gpu'", "only legal with .relaxed/.acquire/.release/.acq_rel"):
        sb.b.st(u32, sb.g(), sb.r(u32), sem="weak", scope="gpu", space="global")


def test_acquire_store_is_not_a_form(sb):
    with build_error("'.acquire' is not a legal sem", ".release"):
        sb.b.st(u32, sb.g(), sb.r(u32), sem="acquire", scope="gpu")


def test_missing_required_modifier(sb):
    with build_error("missing required modifier", "cmp", ".eq", ".lt"):
        sb.b.emit("setp", sb.b.reg(pred), sb.r(u32), 1, types=(u32,))


def test_cache_hint_without_policy(sb):
    with build_error("'.L2::cache_hint' and a 64-bit cache-policy operand go together"):
        sb.b.emit("ld", sb.b.reg(u32), sb.g(), types=(u32,), space="global", hint=True)


def test_eviction_priority_on_shared(sb):
    with build_error("'.L1::evict_last' is only legal on .global or generic", ".shared"):
        sb.b.ld(u32, sb.s(), space="shared", evict="L1::evict_last")


def test_cache_operator_and_eviction_priority_conflict(sb):
    with build_error("cache operator (.cg) and an L1 eviction priority cannot be combined"):
        sb.b.ld(u32, sb.g(), space="global", cache="cg", evict="L1::evict_first")


def test_vector_wider_than_128_bits(sb):
    with build_error("'.v4.b64' is 256 bits", "at most 128 bits"):
        sb.b.ld(b64, sb.g(), space="global", vec=4)


def test_generic_address_from_a_32_bit_register(sb):
    with build_error("a generic address needs a 64-bit register", "%smem", ".shared::cta"):
        sb.b.ld(u32, sb.s())


def test_param_symbol_with_the_wrong_space(sb):
    with build_error("[n] is a .param variable", ".param", ".global"):
        sb.b.ld(u32, address(sb.k.param("n")), space="global")


def test_fp_rounding_on_an_integer(sb):
    with build_error("'.rn' is only legal on floating-point types, not .u32"):
        sb.b.add(u32, sb.r(u32), 1, rnd="rn")


def test_ftz_on_f64(sb):
    with build_error("'.ftz' is not legal on add.f64", "legal flags: none"):
        sb.b.add(f64, sb.r(f64), 1.0, ftz=True)


def test_integer_mul_needs_a_mode(sb):
    with build_error("integer mul .u32 needs one of .hi .lo .wide"):
        sb.b.mul(u32, sb.r(u32), 3)


def test_fma_needs_rounding(sb):
    with build_error("missing required modifier(s) rnd", ".rn .rz .rm .rp"):
        sb.b.fma(f32, sb.r(f32), sb.r(f32), sb.r(f32))


def test_atom_add_s64_does_not_exist(sb):
    with build_error("'.add' is not defined on .s64", "legal types", ".u64"):
        sb.b.atom("add", s64, sb.g(), sb.r(s64), space="global")


def test_atom_release_without_scope_is_spelled_out(sb):
    with build_error("without a scope means .gpu", ".sys"):
        sb.b.red("add", u32, sb.g(), 1, sem="release", space="global")


def test_multimem_min_on_f32(sb):
    with build_error("multimem '.min' is not defined on .f32", "legal types"):
        sb.b.multimem_ld_reduce("min", f32, address(sb.mc), sem="relaxed", scope="sys")


def test_multimem_scalar_half(sb):
    with build_error("multimem on .bf16 needs a vector width", ".v2 .v4 .v8"):
        sb.b.multimem_st(bf16, address(sb.mc), sb.r(bf16), sem="relaxed", scope="sys")


def test_acc_f32_on_f32(sb):
    with build_error("'.acc::f32' is only legal with .add on 16-bit float types"):
        sb.b.multimem_ld_reduce("add", f32, address(sb.mc), sem="relaxed", scope="sys", vec=4, acc_f32=True)


def test_mbarrier_release_without_scope(sb):
    with build_error("mbarrier '.release' needs a scope", ".cta or .cluster"):
        sb.b.mbarrier_arrive(address(sb.bar), sem="release")


def test_remote_mbarrier_arrive_needs_the_sink(sb):
    with build_error("returns no state", "sink _"):
        sb.b.emit("mbarrier.arrive", sb.b.reg(b64), address(sb.bar), space="shared::cluster")


def test_mbarrier_wait_on_a_remote_barrier(sb):
    with build_error("'.shared::cluster' is not a legal space", ".shared::cta"):
        sb.b.mbarrier_try_wait(address(sb.bar), 0, parity=True, space="shared::cluster")


def test_cvt_narrowing_needs_rounding(sb):
    with build_error("narrowing float conversion .f32 -> .f16 needs a rounding mode", ".rn"):
        sb.b.cvt(f16, f32, sb.r(f32))


def test_cvt_relu_on_an_integer_conversion(sb):
    with build_error("'.relu' is only legal converting .f32"):
        sb.b.cvt(s32, f32, sb.r(f32), rnd="rzi", relu=True)


def test_setp_unsigned_comparison_on_signed(sb):
    with build_error("'.hi' compares unsigned integers", ".lt .le .gt .ge"):
        sb.b.setp("hi", s32, sb.r(s32), 0)


def test_im2col_needs_offsets(sb):
    with build_error("takes 1 16-bit im2col offset", "got 0"):
        sb.b.emit("cp.async.bulk.tensor.shared::cluster.global", sb.s(), sb.tensor(3), address(sb.bar),
                  dim="3d", load_mode="im2col")


def test_tensor_coordinates_match_the_dimension(sb):
    with build_error("a .2d tensor copy takes 2 coordinate(s), got 3"):
        sb.b.emit("cp.async.bulk.tensor.global.shared::cta", sb.tensor(3), sb.s(), dim="2d")


def test_bulk_reduce_type(sb):
    with build_error("cp.reduce.async.bulk '.add' is not defined on .s64", "legal types"):
        sb.b.bulk_reduce("add", s64, sb.g(), sb.s(), 256)


# ------------------------------------------------------------------ operands
def test_wrong_operand_count(sb):
    with build_error("takes operands (d, a, b)", "got 2"):
        sb.b.emit("add", sb.b.reg(u32), sb.r(u32), types=(u32,))


def test_wrong_source_count_through_the_method(sb):
    with build_error("add: takes 2 source operand(s)", "got 3"):
        sb.b.add(u32, sb.r(u32), sb.r(u32), sb.r(u32))


def test_f32_register_in_add_u32(sb):
    with build_error("register %f32_seed0 is .f32 but the operand needs .u32"):
        sb.b.add(u32, sb.r(u32), sb.r(f32))


def test_destination_type_mismatch(sb):
    with build_error("operand 'd'", ".f64", ".f32"):
        sb.b.add(f32, sb.r(f32), sb.r(f32), into=sb.b.reg(f64))


def test_float_immediate_for_an_integer(sb):
    with build_error("float immediate 1.5 where .u32 is expected"):
        sb.b.add(u32, sb.r(u32), 1.5)


def test_label_where_a_register_belongs(sb):
    with build_error("operand 'b' must be a register or immediate", "Label"):
        sb.b.add(u32, sb.r(u32), sb.b.new_label("x"))


def test_register_read_before_written(sb):
    fresh = sb.b.reg(u32, "unset")
    with build_error("%unset0 (.u32) is read before any instruction writes it"):
        sb.b.add(u32, fresh, 1)


def test_register_from_another_kernel(sb):
    other = Sandbox("other").b.reg(u32, "alien")
    with build_error("%alien0 was not declared by this kernel's builder"):
        sb.b.mov(u32, 1, into=other)


def test_predicate_guard_must_be_a_predicate(sb):
    with build_error("pred= must be a .pred register", "%n0"):
        sb.b.add(u32, sb.r(u32), 1, pred=sb.r(u32))


def test_wgmma_with_the_wrong_register_count(sb):
    k = Sandbox(target="sm_90a")
    acc = k.vec(f32, 30)
    with build_error("m64n64k16 with .f32 accumulators needs 32 destination registers, got 30"):
        k.b.wgmma(acc, k.r(b64), k.r(b64), n=64, dtype=f32, atype="bf16")


def test_wgmma_f16_accumulators_are_packed_pairs(sb):
    k = Sandbox(target="sm_90a")
    with build_error("wgmma .f16 accumulators are 32-bit registers", ".f16x2"):
        k.b.wgmma(k.vec(f32, 2), k.r(b64), k.r(b64), n=8, dtype=f16, atype="f16")


def test_wgmma_bad_n(sb):
    k = Sandbox(target="sm_90a")
    with build_error("'.m64n12k16' is not a legal shape", ".m64n8k16", ".m64n16k16"):
        k.b.wgmma(k.vec(f32, 6), k.r(b64), k.r(b64), n=12, dtype=f32, atype="bf16")


def test_setmaxnreg_range(sb):
    k = Sandbox(target="sm_90a")
    with build_error("setmaxnreg", "'n' must be an integer in 24..256, a multiple of 8, got 20"):
        k.b.setmaxnreg("dec", 20)


def test_ldmatrix_count(sb):
    with build_error(".x4 moves 4 register(s), got 2"):
        sb.b.emit("ldmatrix", sb.b.regs(b32, 2), sb.s(), types=(b16,), shape="m8n8", num="x4", space="shared")


def test_unknown_instruction_suggests_close_keys(sb):
    with build_error("unknown instruction 'mbarrier.try_wiat'", "mbarrier.try_wait"):
        sb.b.emit("mbarrier.try_wiat")


def test_unknown_type(sb):
    with build_error("unknown PTX type 'u33'", "u32"):
        sb.b.add("u33", sb.r(u32), 1)


def test_unknown_special_register(sb):
    with build_error("unknown special register 'tid.w'", "%tid.x"):
        sb.b.special("tid.w")


# ------------------------------------------------------------------ control flow and kernels
def test_undefined_label_names_the_branch():
    sb = Sandbox()
    nowhere = sb.b.new_label("nowhere")
    sb.b.bra(nowhere); line = caller_line()  # noqa: E702 - the branch is the line the error names
    sb.finish()
    with assembler_forbidden(), pytest.raises(PTXBuildError) as info:
        sb.k.compile()
    assert "branch to label $L_nowhere0, which is never placed" in str(info.value)
    assert info.value.origin.startswith(f"{__file__}:{line}")


def test_label_placed_twice(sb):
    label = sb.b.new_label("twice")
    sb.b.place(label)
    with build_error("label $L_twice0 placed twice"):
        sb.b.place(label)


def test_range_step_must_be_an_int(sb):
    with build_error("range: step must be a non-zero Python int, got 0"):
        list(sb.b.range(0, 4, 0))


def test_full_unroll_needs_int_bounds(sb):
    with build_error("range(unroll=True) needs Python-int bounds"):
        list(sb.b.range(0, sb.r(u32), unroll=True))


def test_if_else_arms_in_order(sb):
    with build_error("the 'otherwise' arm comes after the 'then' arm"):
        with sb.b.if_else(sb.r(pred)) as (then, otherwise):
            with otherwise:
                pass


def test_sm90a_instruction_in_a_kernel_pinned_to_sm90():
    sb = Sandbox(target="sm_90")
    with build_error("setmaxnreg.dec.sync.aligned.u32 needs target sm_90a", "pinned to sm_90", cls=TargetError):
        sb.b.setmaxnreg("dec", 40)


def test_ptx_version_above_the_driver_limit():
    with build_error("ptx_version (9, 1) is above (9, 0)", cls=TargetError):
        Kernel("too_new", ptx_version=(9, 1))


def test_instruction_needing_a_newer_pinned_version():
    sb = Sandbox(ptx_version=(8, 0))
    with build_error("needs PTX ISA 8.3", "pinned to 8.0", cls=TargetError):
        sb.b.ld("b128", sb.g(), space="global")


def test_mbarrier_relaxed_raises_the_version_but_never_above_the_limit():
    sb = Sandbox()
    sb.b.mbarrier_arrive(address(sb.bar), sem="relaxed", scope="cta")
    assert sb.k.ptx_version == (8, 6) <= MAX_PTX


def test_bad_kernel_target():
    with build_error("target must be 'sm_90' or 'sm_90a'", cls=TargetError):
        Kernel("k", target="sm_80")


def test_repeated_parameter_name():
    with build_error("parameter name 'x' is repeated"):
        Kernel("k", [Param("x", u32), Param("x", u64)])


def test_unknown_parameter(sb):
    with build_error("has no parameter 'nope'", "ptr, mc, n, tmap"):
        sb.b.load_param("nope")


def test_byte_array_parameter_is_not_loaded(sb):
    with build_error("parameter tmap is a byte array", "param_address"):
        sb.b.load_param("tmap")


def test_tensor_map_must_be_a_register(sb):
    with build_error("a tensor map must be a 64-bit register"):
        sb.b.tensor_store(sb.k.param("tmap"), (0, 0), sb.s())


def test_vector_store_width(sb):
    with build_error("st: a vector store takes 2 or 4 values, got 3"):
        sb.b.st(u32, sb.g(), [sb.r(u32)] * 3, space="global")


def test_u8_load_into_a_16_bit_register_is_fine_but_into_u64_is_not(sb):
    sb.b.ld(u8, sb.g(), space="global", into=sb.b.reg(u16))
    with build_error("operand 'd'"):
        sb.b.ld(u32, sb.g(), space="global", into=sb.b.reg(u16))


def test_packed_pair_register_into_an_f32_slot(sb):
    with build_error("register %f16x2_seed0 is .f16x2 but the operand needs .f32"):
        sb.b.add(f32, sb.r(f32), sb.r(f16x2))


def test_wide_vector_of_mixed_registers(sb):
    with build_error("operand 'a'", "must together be 32 bits"):
        sb.b.mov(b32, Vec((sb.r(b16), sb.r(b32))))


def test_error_through_a_primitive_names_the_user_line_first():
    from pkptx.primitives.sync import signal
    sb = Sandbox()
    with build_error("'.everywhere' is not a legal scope", ".sys") as info:
        signal(sb.b, sb.gptr, 1, sem="release", scope="everywhere")
    assert "via" in info.value.origin and "pkptx/primitives/sync.py" in info.value.origin


# ------------------------------------------------------------------ rules found by assembling every form
def test_half_float_operands_take_no_immediates(sb):
    with build_error("a .f16 operand cannot be an immediate", "b.mov(f16, 0x3C00)"):
        sb.b.add(f16, sb.r(f16), 1.0)


def test_store_to_a_parameter_space_is_not_a_form(sb):
    with build_error("'.param' is not a legal space"):
        sb.b.st(u32, address(sb.k.param("n")), sb.r(u32), space="param")


def test_atom_scope_without_semantics_is_spelled_out(sb):
    with build_error("without semantics means .relaxed", ".acq_rel"):
        sb.b.atom("add", u32, sb.g(), 1, scope="gpu", space="global")


def test_multimem_red_min_of_a_packed_pair_needs_a_vector(sb):
    with build_error("multimem.red '.min' on .f16x2 needs a vector width"):
        sb.b.multimem_red("min", f16x2, address(sb.mc), sb.r(f16x2), sem="relaxed", scope="sys")


def test_cvt_to_tf32_only_from_f32(sb):
    with build_error("cvt to .tf32 converts .f32 with .rna, .rn or .rz"):
        sb.b.cvt("tf32", f64, sb.r(f64), rnd="rna")


def test_cvt_bf16_from_a_byte(sb):
    with build_error("cvt between .bf16 and 8-bit integers is not defined"):
        sb.b.cvt(bf16, u8, sb.r(u16), rnd="rn")


def test_cvt_bf16_with_an_integer_wider_than_its_type(sb):
    """ptxas takes a wider integer register beside .f16 and .f32, not beside .bf16 (found by
    test_spec_programs, seed 92842174: cvt.rpi.u16.bf16 into a .u32 register)."""
    with build_error("cvt between .bf16 and .u16 needs a register of exactly 16 bits", ".u32"):
        sb.b.cvt(u16, bf16, sb.r(bf16), rnd="rpi", into=sb.b.reg(u32))
    with build_error("cvt between .bf16 and .u16 needs a register of exactly 16 bits", ".u32"):
        sb.b.cvt(bf16, u16, sb.r(u32), rnd="rn")
    sb.b.cvt(u16, bf16, sb.r(bf16), rnd="rpi", into=sb.b.reg(u16))
    sb.b.cvt(u16, f16, sb.r(f16), rnd="rpi", into=sb.b.reg(u32))      # beside .f16 the wider one is legal
    assert_assembles(sb.finish())


def test_cvt_sat_that_cannot_overflow(sb):
    with build_error("'.sat' is meaningless for .u16 -> .u32"):
        sb.b.cvt(u32, u16, sb.r(u16), sat=True)


def test_integer_wgmma_shapes_and_scales():
    k = Sandbox(target="sm_90a")
    with build_error("N with .s8 inputs is one of 8, 16, 24, 32, then multiples of 16"):
        k.b.wgmma(k.vec("s32", 20), k.r(b64), k.r(b64), n=40, dtype="s32", atype="s8")
    with build_error("integer wgmma (.s8/.u8) takes no scale-a/scale-b immediates"):
        k.b.emit("wgmma.mma_async.ss", k.vec("s32", 4), k.r(b64), k.r(b64), 1, 1, 1,
                 types=("s32", "s8", "s8"), shape="m64n8k32")
    with build_error(".s32 accumulation goes with .s8/.u8 inputs"):
        k.b.wgmma(k.vec("s32", 4), k.r(b64), k.r(b64), n=8, dtype="s32", atype="bf16")


def test_register_a_wgmma_has_no_transpose_a():
    k = Sandbox(target="sm_90a")
    with build_error("no transpose-A operand"):
        k.b.wgmma(k.vec(f32, 4), k.vec(b32, 4), k.r(b64), n=8, dtype=f32, atype="bf16", trans_a=1)


def test_version_pinned_below_the_target_floor():
    with build_error("cannot target sm_90a", "8.0 or later", cls=TargetError):
        Kernel("old", target="sm_90a", ptx_version=(7, 8))
    sb = Sandbox(ptx_version=(7, 8))
    with build_error("needs target sm_90a, which needs PTX 8.0", cls=TargetError):
        sb.b.wgmma_fence()
    assert sb.k.target == "sm_90"              # a rejected instruction records nothing


def test_shared_names_are_unique_identifiers(sb):
    with build_error("shared variable 'buf' must be an identifier not already used"):
        sb.k.shared("buf", 64)
    with build_error("shared variable 'n' must be an identifier"):
        sb.k.shared("n", 64)
    with build_error("shared variable 'a-b' is not a PTX identifier"):
        sb.k.shared("a-b", 64)


def test_createpolicy_fraction_range(sb):
    with build_error("the createpolicy fraction is in (0, 1], got 1.5"):
        sb.b.createpolicy("L2::evict_last", fraction=1.5)


@pytest.mark.parametrize("ty, value", [("u32", 1 << 32), ("u16", 70000), ("s32", -(1 << 31) - 1), ("u64", 1 << 64)])
def test_immediates_that_do_not_fit_their_type(ty, value):
    from pkptx.isa import Kernel
    k = Kernel("imm_range", [])
    b = k.builder()
    x = b.mov(ty, 1)
    with pytest.raises(PTXBuildError, match="does not fit"):
        b.add(ty, x, value)


@pytest.mark.parametrize("ty, value", [("u32", 0xFFFFFFFF), ("u32", -1), ("s32", -(1 << 31)), ("u64", (1 << 64) - 1),
                                       ("s64", -(1 << 63)), ("u16", 65535)])
def test_immediates_at_the_edges_of_their_type(ty, value):
    """The largest and smallest values each type takes are accepted, written in decimal as given, and
    the assembler takes them too."""
    k = Kernel("imm_edge", [])
    b = k.builder()
    b.add(ty, b.mov(ty, 1), value)
    b.ret()
    assert f"\tadd.{ty} %{ptx_type(ty).reg_prefix}1, %{ptx_type(ty).reg_prefix}0, {value};" in k.render()
    assert_assembles(k)
