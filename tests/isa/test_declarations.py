"""Kernel and parameter declarations that no launch could use are refused where they are written
(issue 24): a clear PTXBuildError naming the argument, what was expected and the caller's file:line,
before nvJitLink ever sees them. Hypothesis throws arbitrary declarations at Kernel/Param: each one
either raises PTXBuildError or assembles; nothing crashes or raises a Python error."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from pkptx.errors import PTXBuildError
from pkptx.isa import Kernel, Param, b64, u32, u64
from pkptx.isa.declare import MAX_CLUSTER, MAX_DYNAMIC_SMEM, MAX_NAME
from tests.helpers.assemble import assert_assembles
from tests.helpers.errors import assembler_forbidden, build_error


def test_pointer_parameters_are_64_bit():
    with build_error("Param('p')", "pointer=True needs type .u64 or .b64", ".u32"):
        Param("p", u32, pointer=True)
    with build_error("count=1"):
        Param("p", u64, count=2, pointer=True)
    assert Param("p", b64, pointer=True).size == 8


def test_pred_parameters_are_refused():
    with build_error("a kernel parameter cannot be .pred", "pass a .u32"):
        Kernel("k", [("flag", "pred")])


@pytest.mark.parametrize("ty", ["tf32", "b128", "e4m3", "e5m2"])
def test_types_ptxas_refuses_as_parameters(ty):
    with build_error(f"a kernel parameter cannot be .{ty}", ".u64"):
        Param("x", ty)


def test_half_float_parameters_are_declared_as_bits():
    """ptxas has no .param .bf16/.f16x2/.bf16x2: they are declared .b16/.b32 and loaded as such."""
    k = Kernel("halves", [Param("h", "bf16"), Param("hh", "f16x2"), Param("hb", "bf16x2")])
    b = k.builder()
    for name in ("h", "hh", "hb"):
        b.load_param(name)
    b.ret()
    text = k.render()
    assert ".param .b16 h," in text and ".param .b32 hh," in text and ".param .b32 hb\n" in text
    assert_assembles(k)


def test_parameter_count_and_alignment():
    with build_error("Param('t'): count=-4: expected an int in >= 1"):
        Param("t", "b8", count=-4)
    with build_error("align=48; expected None or a power of two"):
        Param("t", "b8", count=128, align=48)


def test_a_huge_kernel_name_is_refused_before_nvjitlink():
    """99,870 characters aborted the interpreter inside nvJitLink."""
    with build_error("kernel name is 99870 characters long", f"at most {MAX_NAME}"):
        Kernel("k" * 99870, [])
    k = Kernel("k" * MAX_NAME, [])
    k.builder().ret()
    assert k.compile(use_cache=False).entry == "k" * MAX_NAME


@pytest.mark.parametrize("name", ["kérnel", "k-1", "1k", "_", "", "a b", "$k", "%r"])
def test_names_follow_ascii_ptx_identifier_rules(name):
    with build_error("is not a PTX identifier"):
        Kernel(name, [])
    with build_error("is not a PTX identifier"):
        Kernel("k", [(name, u32)])


@pytest.mark.parametrize("name", [None, 7, b"k"])
def test_a_kernel_name_must_be_a_string(name):
    with build_error("kernel name must be a str"):
        Kernel(name)


def test_repeated_and_malformed_parameters():
    with build_error("parameter name 'n' is repeated"):
        Kernel("k", [("n", u32), ("n", u64)])
    with build_error("a kernel parameter is a Param or a (name, type) pair, got 'n'"):
        Kernel("k", ["n"])
    with build_error("params must be a list"):
        Kernel("k", None)


@pytest.mark.parametrize("version", ["8.0", 8.0, (8,), ("8", "0"), (8, 0, 1)])
def test_ptx_version_is_a_pair_of_ints(version):
    with build_error("ptx_version=", "expected a (major, minor) pair of ints such as (8, 0)"):
        Kernel("k", ptx_version=version)


@pytest.mark.parametrize("kwargs,needle", [
    (dict(max_threads=2048), "max_threads=2048 (2048 in all): expected at most 1024"),
    (dict(max_threads=(32, 32, 2)), "(2048 in all): expected at most 1024"),
    (dict(req_threads=(1, 1, 128)), "(1024, 1024, 64) per dimension"),
    (dict(max_threads=0), "max_threads must be 1 to 3 positive ints"),
    (dict(max_threads="256"), "max_threads must be 1 to 3 positive ints"),
    (dict(cluster=32), f"cluster=32 (32 in all): expected at most {MAX_CLUSTER}"),
    (dict(cluster=(4, 4, 2)), f"expected at most {MAX_CLUSTER} in all"),
    (dict(dynamic_smem="48K"), "dynamic_smem='48K': expected an int in 0..232448"),
    (dict(dynamic_smem=-1), "dynamic_smem=-1"),
    (dict(dynamic_smem=MAX_DYNAMIC_SMEM + 1), "expected an int in 0..232448"),
    (dict(min_blocks=0), "min_blocks=0"),
    (dict(max_regs=300), "max_regs=300: expected an int in 1..255"),
    (dict(max_threads=256, req_threads=128), "req_threads=128 and max_threads=256 disagree"),
])
def test_launch_bounds_no_launch_can_use(kwargs, needle):
    with build_error(needle):
        Kernel("k", **kwargs)


def test_the_largest_legal_bounds_assemble():
    k = Kernel("k", max_threads=(1024,), cluster=(4, 2, 2), dynamic_smem=MAX_DYNAMIC_SMEM)
    k.builder().ret()
    compiled = k.compile(use_cache=False)
    assert compiled.cluster == (4, 2, 2) and compiled.dynamic_smem == MAX_DYNAMIC_SMEM


def test_the_required_block_is_exposed_for_the_launcher():
    exact = Kernel("exact", req_threads=(128, 2))
    exact.builder().ret()
    compiled = exact.compile(use_cache=False)
    assert compiled.required_block == (128, 2, 1)
    assert compiled.manifest()["required_block"] == [128, 2, 1]
    assert ".reqntid 128, 2, 1" in compiled.ptx
    bounded = Kernel("bounded", max_threads=256)
    bounded.builder().ret()
    compiled = bounded.compile(use_cache=False)
    assert compiled.required_block is None and compiled.block == (256, 1, 1)
    assert compiled.manifest()["required_block"] is None


_NAMES = st.one_of(st.text(max_size=12), st.text("ab_1$%-", max_size=6), st.integers(0, 300).map(lambda n: "k" * n),
                   st.none(), st.integers())
_DIMS = st.one_of(st.none(), st.integers(-2, 2048), st.lists(st.integers(-1, 1100), max_size=4))


@settings(max_examples=150, deadline=None)
@given(name=_NAMES, params=st.lists(st.tuples(_NAMES, st.sampled_from(["u32", "u64", "pred", "bf16", "tf32", "f32", 3])),
                                    max_size=3),
       max_threads=_DIMS, cluster=_DIMS, smem=st.one_of(st.integers(-5, 300000), st.text(max_size=3)),
       version=st.one_of(st.none(), st.tuples(st.integers(6, 9), st.integers(0, 9)), st.text(max_size=4)))
def test_any_declaration_is_refused_cleanly_or_assembles(name, params, max_threads, cluster, smem, version):
    with assembler_forbidden():
        try:
            k = Kernel(name, params, max_threads=max_threads, cluster=cluster, dynamic_smem=smem,
                       ptx_version=version)
        except PTXBuildError as exc:
            assert exc.origin and __file__.rstrip("c") in exc.origin
            return
    k.builder().ret()
    assert k.compile(use_cache=False).entry == name
