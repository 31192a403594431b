"""The Builder and Kernel: control flow, guards, register naming and declarations, determinism, the
.version/.target derivation, parameters, shared memory, special registers, raw PTX and immediates."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, strategies as st

from pkptx.isa import (MAX_PTX, SPECS, Imm, Kernel, Param, address, b8, b32, b64, bf16x2, f16, f32, f64, pred,
                       s32, u16, u32, u64)
from tests.helpers.assemble import Sandbox, assert_assembles
from tests.helpers.golden import body_lines


def kernel(name="k", **kw):
    k = Kernel(name, [Param("x", u64, pointer=True), ("n", u32)], **kw)
    return k, k.builder()


# ------------------------------------------------------------------ control flow
def test_if_then_branches_around_the_body():
    k, b = kernel()
    n = b.load_param("n")
    with b.if_then(b.setp("lt", u32, n, 4)):
        b.add(u32, n, 1)
    b.ret()
    assert body_lines(k) == [
        "ld.param.u32 %n0, [n];",
        "setp.lt.u32 %p0, %n0, 4;",
        "@!%p0 bra $L_endif0;",
        "add.u32 %r0, %n0, 1;",
        "$L_endif0:",
        "ret;",
    ]
    assert_assembles(k)


def test_if_then_on_a_negated_condition_branches_on_the_positive():
    k, b = kernel()
    p = b.setp("lt", u32, b.load_param("n"), 4)
    with b.if_then(p.negated()):
        b.ret()
    assert "@%p0 bra $L_endif0;" in body_lines(k)


def test_if_else_with_uniform_branches():
    k, b = kernel()
    n = b.load_param("n")
    with b.if_else(b.setp("lt", u32, n, 4), uniform=True) as (then, otherwise):
        with then:
            b.add(u32, n, 2)
        with otherwise:
            b.add(u32, n, 3)
    b.ret()
    assert body_lines(k)[2:] == [
        "@!%p0 bra.uni $L_else0;",
        "add.u32 %r0, %n0, 2;",
        "bra.uni $L_endif0;",
        "$L_else0:",
        "add.u32 %r1, %n0, 3;",
        "$L_endif0:",
        "ret;",
    ]
    assert_assembles(k)


def test_if_else_without_the_otherwise_arm():
    k, b = kernel()
    n = b.load_param("n")
    with b.if_else(b.setp("lt", u32, n, 4)) as (then, _):
        with then:
            b.add(u32, n, 2)
    b.ret()
    assert "$L_else0:" in body_lines(k) and "$L_endif0:" in body_lines(k)
    assert_assembles(k)


def test_loop_with_break_and_continue():
    k, b = kernel()
    n = b.load_param("n")
    with b.loop("spin") as lp:
        lp.continue_if(b.setp("eq", u32, n, 1))
        lp.break_if(b.setp("eq", u32, n, 0))
    b.ret()
    assert body_lines(k)[1:] == [
        "$L_spin0:",
        "setp.eq.u32 %p0, %n0, 1;",
        "@%p0 bra $L_spin0;",
        "setp.eq.u32 %p1, %n0, 0;",
        "@%p1 bra $L_spin_end0;",
        "bra $L_spin0;",
        "$L_spin_end0:",
        "ret;",
    ]
    assert_assembles(k)


def test_while_evaluates_the_condition_at_the_head():
    k, b = kernel()
    c = b.mov(u32, 0, name="c")
    with b.while_(lambda bb: bb.setp("lt", u32, c, 5)):
        b.add(u32, c, 1, into=c)
    b.ret()
    assert body_lines(k) == [
        "mov.u32 %c0, 0;",
        "$L_while0:",
        "setp.lt.u32 %p0, %c0, 5;",
        "@!%p0 bra $L_while_end0;",
        "add.u32 %c0, %c0, 1;",
        "bra $L_while0;",
        "$L_while_end0:",
        "ret;",
    ]
    assert_assembles(k)


def test_range_fully_unrolled_yields_python_ints():
    k, b = kernel()
    n = b.load_param("n")
    seen = []
    for i in b.range(1, 7, 2, unroll=True):
        seen.append(i)
        b.add(u32, n, i)
    assert seen == [1, 3, 5]
    assert body_lines(k)[1:] == ["add.u32 %r0, %n0, 1;", "add.u32 %r1, %n0, 3;", "add.u32 %r2, %n0, 5;"]


@pytest.mark.parametrize("unroll", [False, 1, 2, 4])
def test_range_with_register_bound_and_partial_unroll(unroll):
    k, b = kernel()
    n = b.load_param("n")
    copies = 0
    for i in b.range(0, n, unroll=unroll):
        copies += 1
        b.add(u32, i, 1)
    b.ret()
    lines = body_lines(k)
    assert copies == (unroll or 1)
    assert lines.count("setp.lt.u32 %p{}, %i0, %n0;".format(0)) == 1
    assert sum(1 for line in lines if line.startswith("@!%p") and "bra $L_for_end0;" in line) == copies
    assert lines.count("add.u32 %i0, %i0, 1;") == copies       # one increment per copy
    assert lines[-3:] == ["bra $L_for0;", "$L_for_end0:", "ret;"]
    assert_assembles(k)


def test_range_counting_down_with_a_signed_counter():
    k, b = kernel()
    for i in b.range(8, 0, -2, ty=s32):
        b.add(s32, i, 1)
    b.ret()
    lines = body_lines(k)
    assert "setp.gt.s32 %p0, %i0, 0;" in lines and "add.s32 %i0, %i0, -2;" in lines
    assert_assembles(k)


def test_nested_control_flow_gets_distinct_labels():
    k, b = kernel()
    n = b.load_param("n")
    for _ in b.range(0, 2, unroll=True):
        with b.if_then(b.setp("lt", u32, n, 4)):
            with b.loop() as lp:
                lp.break_if(b.setp("ne", u32, n, 0))
    b.ret()
    labels = [line for line in body_lines(k) if line.endswith(":")]
    assert labels == ["$L_loop0:", "$L_loop_end0:", "$L_endif0:", "$L_loop1:", "$L_loop_end1:", "$L_endif1:"]
    assert_assembles(k)


# ------------------------------------------------------------------ guards and uniform branches
def test_predicated_instructions():
    k, b = kernel()
    n = b.load_param("n")
    p = b.setp("ne", u32, n, 0)
    b.add(u32, n, 1, pred=p)
    b.st(u32, address(b.load_param("x")), n, space="global", pred=p.negated())
    b.bar_sync(0, pred=p)
    b.ret(pred=p)
    lines = body_lines(k)
    assert "@%p0 add.u32 %r0, %n0, 1;" in lines
    assert "@!%p0 st.global.u32 [%x0], %n0;" in lines
    assert "@%p0 bar.sync 0;" in lines and "@%p0 ret;" in lines
    assert_assembles(k)


def test_uniform_branch():
    k, b = kernel()
    end = b.new_label("out")
    b.bra(end, uniform=True)
    b.place(end)
    b.ret()
    assert body_lines(k) == ["bra.uni $L_out0;", "$L_out0:", "ret;"]
    assert_assembles(k)


# ------------------------------------------------------------------ registers
def test_registers_are_named_by_role_and_declared_per_type():
    k, b = kernel()
    b.mov(u32, 1, name="count")
    b.mov(u32, 2, name="count")
    b.mov(f32, 1.0)
    b.mov(f16, 0x3C00)
    b.mov(bf16x2, 0)
    b.mov(b64, 0, name="desc")
    b.mov(pred, 1)
    text = k.render()
    assert "\t.reg .b32 %hhb0;" in text           # packed pairs live in .b32 registers
    assert "\t.reg .b64 %desc0;" in text
    assert "\t.reg .u32 %count0, %count1;" in text
    assert "\t.reg .f16 %h0;" in text
    assert "\t.reg .f32 %f0;" in text
    assert "\t.reg .pred %p0;" in text
    b.ret()
    assert_assembles(k)


def test_register_names_are_made_ptx_safe():
    k, b = kernel()
    assert b.reg(u32, "tile.x").name == "%tile_x0"
    assert b.reg(u32, "stage1").name == "%stage1_0"
    assert b.reg(u32, "1st").name == "%_1st0"


def test_long_declaration_lists_are_wrapped():
    k, b = kernel()
    regs = b.regs(f32, 40, "acc")
    assert len(regs) == 40
    decls = [line for line in k.render().splitlines() if line.startswith("\t.reg .f32")]
    assert len(decls) == 3 and all(line.count("%acc") <= 16 for line in decls)


# ------------------------------------------------------------------ determinism
def _program(b):
    n = b.load_param("n")
    acc = b.mov(f32, 0.0, name="acc")
    for i in b.range(0, n, unroll=2):
        v = b.cvt(f32, u32, i, rnd="rn")
        b.fma(f32, v, 0.5, acc, rnd="rn", into=acc)
    b.st(f32, address(b.load_param("x")), acc, space="global")
    b.ret()


def test_same_program_gives_byte_identical_ptx():
    texts = []
    for _ in range(3):
        k, b = kernel("det")
        _program(b)
        texts.append(k.render())
    assert texts[0] == texts[1] == texts[2]
    assert "/work" not in texts[0] and "test_builder" not in texts[0]     # no paths leak into the PTX


# ------------------------------------------------------------------ .version / .target
def test_plain_kernel_is_sm90_at_the_floor_version():
    k, b = kernel()
    b.ret()
    assert (k.target, k.ptx_version) == ("sm_90", (7, 8))
    assert ".version 7.8\n.target sm_90\n" in k.render()


def test_sm90a_only_with_wgmma_or_setmaxnreg():
    k, b = kernel(max_threads=128)
    b.fence_proxy_async()
    b.elect()
    assert k.target == "sm_90"
    b.setmaxnreg("dec", 40)
    assert (k.target, k.ptx_version) == ("sm_90a", (8, 0))
    k2, b2 = kernel()
    b2.wgmma_fence()
    assert k2.target == "sm_90a"


def test_version_is_the_highest_min_ptx_used():
    k, b = kernel()
    b.fence_proxy_async()                                   # 8.0
    assert k.ptx_version == (8, 0)
    b.ld("b128", address(b.load_param("x")), space="global")   # b128: 8.3
    assert k.ptx_version == (8, 3)
    b.fence_proxy_async()
    assert k.ptx_version == (8, 3)                          # never lowered


def test_pinned_target_and_version():
    k, b = kernel(target="sm_90a", ptx_version=(8, 5))
    b.ret()
    assert ".version 8.5\n.target sm_90a\n" in k.render()
    k, b = kernel(target="sm_90a")
    b.ret()
    assert k.ptx_version == (8, 0)                           # sm_90a needs PTX 8.0


@pytest.mark.parametrize("key", sorted(SPECS))
def test_no_row_can_raise_the_version_above_the_limit(key):
    row = SPECS[key]
    assert max([row.min_ptx] + [need for _, need in row.version_rules]) <= MAX_PTX


# ------------------------------------------------------------------ parameters and shared memory
def test_parameter_declarations():
    k = Kernel("params", [Param("tmap", b8, count=128, align=64), Param("out", u64, pointer=True),
                          ("n", u32), ("alpha", f32), Param("flags", b32, count=4, align=16)])
    b = k.builder()
    b.param_address("tmap")
    b.load_param("alpha")
    b.ret()
    text = k.render()
    assert (".visible .entry params(\n"
            "\t.param .align 64 .b8 tmap[128],\n"
            "\t.param .u64 out,\n"
            "\t.param .u32 n,\n"
            "\t.param .f32 alpha,\n"
            "\t.param .align 16 .b32 flags[4]\n"
            ")\n") in text
    assert "\tmov.u64 %tmap_addr0, tmap;" in text
    assert (k.param("tmap").size, k.param("tmap").alignment, k.param("out").pointer) == (128, 64, True)
    assert_assembles(k)


def test_kernel_without_parameters_and_with_directives():
    k = Kernel("bare", req_threads=(128, 2), min_blocks=1, max_regs=128, cluster=2)
    k.builder().ret()
    text = k.render()
    assert ".visible .entry bare(\n)\n.reqntid 128, 2, 1\n.minnctapersm 1\n.maxnreg 128\n" \
           ".reqnctapercluster 2, 1, 1\n{" in text
    assert_assembles(k)


def test_static_and_dynamic_shared_memory():
    k = Kernel("smem", max_threads=128)
    b = k.builder()
    tile = k.shared("tile", 4096, align=128)
    bars = k.shared("bars", 16, align=8)
    window = k.dynamic_shared()
    base = b.mov(u32, window)
    b.st(u32, address(tile, 64), base, space="shared")
    b.mbarrier_init(address(bars), 1)
    b.ld(u32, address(base, 16), space="shared::cta")
    b.ret()
    text = k.render()
    assert ".shared .align 128 .b8 tile[4096];\n.shared .align 8 .b8 bars[16];\n" \
           ".extern .shared .align 1024 .b8 dsmem[];\n" in text
    assert "\tst.shared.u32 [tile+64], %r0;" in text
    compiled = assert_assembles(k)
    assert compiled.resources.shared_bytes >= 4096 + 16


def test_special_registers():
    k, b = kernel()
    tid = b.special("tid.x")
    clock = b.special("%clock64")
    explicit = b.special("is_explicit_cluster")
    rank = b.special("cluster_ctarank")
    assert (tid.type, clock.type, explicit.type, rank.type) == (u32, u64, pred, u32)
    b.ret()
    lines = body_lines(k)
    assert lines[:3] == ["mov.u32 %tid_x0, %tid.x;", "mov.u64 %clock64_0, %clock64;",
                         "mov.pred %is_explicit_cluster0, %is_explicit_cluster;"]
    assert_assembles(k)


def test_raw_ptx_escape_hatch():
    k, b = kernel()
    n = b.load_param("n")
    out = b.reg(u32, "raw")
    b.raw_ptx(f"  mul.lo.u32 {out.name}, {n.name}, 7;  ", defines=[out], uses=[n])
    b.comment("two lines\nof comment")
    b.add(u32, out, 1)
    b.ret()
    lines = body_lines(k)
    assert lines[1:4] == ["mul.lo.u32 %raw0, %n0, 7;", "// two lines", "// of comment"]
    assert k.instruction_count == 4
    assert_assembles(k)


# ------------------------------------------------------------------ immediates
@pytest.mark.parametrize("value,ty,text", [
    (1.0, f32, "0f3F800000"), (-2.5, f32, "0fC0200000"), (0.1, f32, "0f3DCCCCCD"), (0.0, f32, "0f00000000"),
    (1.0, f64, "0d3FF0000000000000"), (-0.5, f64, "0dBFE0000000000000"), (3, f32, "0f40400000"),
    (7, u32, "7"), (-1, s32, "-1"), (4.0, u16, "4"),
])
def test_immediate_encoding(value, ty, text):
    assert Imm(value).render(ty) == text


@given(st.floats(allow_nan=False, allow_infinity=False, width=32))
def test_f32_hex_immediates_round_trip(x):
    text = Imm(x).render(f32)
    assert text.startswith("0f") and struct.unpack(">f", bytes.fromhex(text[2:]))[0] == x


@given(st.floats(allow_nan=False))
def test_f64_hex_immediates_round_trip(x):
    text = Imm(x).render(f64)
    assert text.startswith("0d") and struct.unpack(">d", bytes.fromhex(text[2:]))[0] == x


def test_float_immediates_in_a_kernel_are_hex():
    sb = Sandbox()
    sb.b.fma(f32, sb.r(f32), 0.1, -3.0, rnd="rn")
    sb.b.add(f64, sb.r(f64), 1e300)
    assert "fma.rn.f32 %f0, %f32_seed0, 0f3DCCCCCD, 0fC0400000;" in body_lines(sb.k)
    assert "add.f64 %fd0, %f64_seed0, 0d7E37E43C8800759C;" in body_lines(sb.k)
    assert_assembles(sb.finish())


def test_addresses_compose_offsets():
    sb = Sandbox()
    a = address(sb.gptr, 16) + 8
    assert a.render() == "[%ptr0+24]" and (a - 32).render() == "[%ptr0+-8]"     # the form ptxas parses
    assert address(sb.smem_sym).render() == "[buf]" and address(None, 64).render() == "[64]"
