"""A kernel's signature (pkptx.isa.signature): each parameter's kind, declared once where the parameter is
made (or implied by its attributes), binding by name with errors that name the kernel, the argument and
the kind, and the signature and barrier rounds a compiled kernel carries into its manifest, through the
build cache too."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from pkptx.catalog import kernels
from pkptx.errors import ArgumentError, PTXBuildError
from pkptx.isa import Kind, Param, Signature, b8, f32, u32, u64
from pkptx.primitives.layout import ParallelLayout
from pkptx.templates.kernels import all_reduce, copy
from pkptx.templates.progress import FLAGS
from pkptx.toolchain import build_cached

SIG = Signature("k", [Param("x", u64, pointer=True), Param("n", u32), Param("tmap", b8, 128, 64),
                      Param("alpha", f32), *ParallelLayout("y").params(), *FLAGS.params()])


def test_kinds_follow_the_attributes_unless_declared():
    assert [(p.name, p.kind) for p in SIG.params] == [
        ("x", Kind.POINTER), ("n", Kind.SCALAR), ("tmap", Kind.TENSOR_MAP), ("alpha", Kind.SCALAR),
        ("y_peers", Kind.PEER_TABLE), ("y_mc", Kind.MULTICAST), ("flags_peers", Kind.FLAGS), ("flags_mc", Kind.MULTICAST)]
    assert Param("blob", b8, 64).kind is Kind.BYTES and Param("s", u64, pointer=True, kind="status").kind is Kind.STATUS


@pytest.mark.parametrize("make, needle", [
    (lambda: Param("n", u32, kind=Kind.PEER_TABLE), "kind='peer_table' does not fit its attributes, which imply "
                                                   "'scalar'; they can carry scalar"),
    (lambda: Param("n", u32, kind=Kind.MULTICAST), "which imply 'scalar'"),
    (lambda: Param("t", b8, 128, kind=Kind.POINTER), "which imply 'tensor_map'"),
    (lambda: Param("p", u64, pointer=True, kind=Kind.SCALAR), "they can carry flags, peer_table, pointer, status, "
                                                             "tensor_map_table"),
    (lambda: Param("p", u64, kind="table"), "kind='table'; expected one of scalar, pointer"),
])
def test_a_kind_the_attributes_cannot_carry_is_refused_at_build(make, needle):
    with pytest.raises(PTXBuildError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        make()


@given(st.permutations(SIG.names))
def test_bind_puts_values_by_name_into_parameter_order(order):
    assert SIG.bind({n: i for i, n in enumerate(order)}) == tuple(order.index(n) for n in SIG.names)


def test_bind_names_the_kernel_what_is_missing_with_its_kind_and_what_is_extra():
    values = {n: 0 for n in SIG.names if n not in ("y_peers", "n")}
    with pytest.raises(ArgumentError) as info:
        SIG.bind({**values, "y_peer": 0, "nn": 1, "zzz": 2})
    assert str(info.value) == (
        "kernel 'k': missing 'n' (scalar: a number); missing 'y_peers' (peer_table: the device address of a "
        "layout's per-rank pointer table (SymmetricBuffer.peer_table_ptr)); unexpected 'y_peer' (did you mean "
        "'y_peers'?); unexpected 'nn' (did you mean 'n'?); unexpected 'zzz'")
    with pytest.raises(ArgumentError, match=r"kernel 'k' has no parameter 'tmaps' \(did you mean 'tmap'\?\)"):
        SIG.index("tmaps")


def test_templates_declare_the_kinds_and_the_barrier_rounds_of_what_they_add():
    """Every kernel with the heap's progress flags closes a barrier, so it says how many rounds a launch
    advances; every status parameter is the status words."""
    for k in kernels():
        kinds = {p.name: p.kind for p in k.params}
        assert kinds.get("status", Kind.STATUS) is Kind.STATUS, k.name
        assert (kinds.get("flags_peers") is Kind.FLAGS) == (k.barrier_rounds in (1, 2)), k.name
        assert all(kinds[n] is Kind.PEER_TABLE for n in kinds if n.endswith("_peers") and n != "flags_peers"), k.name


def test_a_compiled_kernel_carries_its_signature_and_rounds_into_the_manifest_and_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PKPTX_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PKPTX_CACHE", raising=False)
    cfg = all_reduce.Config(dtype="bf16", op="sum", algorithm="two_shot")
    first, hit = build_cached(all_reduce.build, cfg), build_cached(all_reduce.build, cfg)
    assert hit.cubin.from_cache and hit.signature.params == first.signature.params and hit.barrier_rounds == 2
    manifest = hit.manifest()
    assert manifest["barrier_rounds"] == 2 and manifest["required_block"] == [hit.block[0], 1, 1]
    rows = {row["name"]: row for row in manifest["params"]}
    assert rows["flags_peers"]["kind"] == "flags" and rows["status"]["kind"] == "status"
    assert rows["src_mc"] == {"name": "src_mc", "kind": "multicast", "type": "u64", "count": 1, "size": 8,
                              "align": 8, "pointer": False}
    assert build_cached(copy.build, copy.Config()).manifest()["barrier_rounds"] is None
