"""Every row of the spec table, emitted through the Builder and judged by the assembler (style rule 7).

The forms live in ``tests/helpers/forms.py``, one group per PTX-ISA area; each group is one kernel, so
an AssemblyError names the form's line there. Groups that use no sm_90a-only row are assembled for
both sm_90 and sm_90a. A group's ``.version`` is the highest its forms need, so a group can hide a
form whose own floor is too low: tests/isa/test_version_floors.py assembles every form at exactly its
own version. Here the other side is checked: one PTX version below a group's, ptxas refuses it, so no
version the builder computes is higher than some form needs.
"""
from __future__ import annotations

import itertools

import pytest

from pkptx.errors import AssemblyError, PTXBuildError
from pkptx.isa import MAX_PTX, SPECS, u32
from pkptx.isa.kernel import SM90_FLOOR, SM90A_FLOOR
from pkptx.toolchain import assemble
from tests.helpers.assemble import Sandbox, assert_assembles
from tests.helpers.forms import GROUPS, built, emitted_keys
from tests.helpers.forms_memory import ordering_forms, space_address

GROUP_ARCHS = [(name, arch) for name, group in GROUPS.items() for arch in group.archs]


PTX_VERSIONS = [(7, 8), (8, 0), (8, 1), (8, 2), (8, 3), (8, 4), (8, 5), (8, 6), (8, 7), (8, 8), (9, 0)]


@pytest.mark.parametrize("name,arch", GROUP_ARCHS, ids=[f"{n}-{a}" for n, a in GROUP_ARCHS])
def test_forms_assemble(name, arch):
    kernel = built(name, arch)
    assert kernel.target == arch
    compiled = assert_assembles(kernel)
    assert compiled.cubin.data and compiled.arch == arch
    version = kernel.ptx_version
    if version > (SM90A_FLOOR if arch == "sm_90a" else SM90_FLOOR):
        lower = PTX_VERSIONS[PTX_VERSIONS.index(version) - 1]
        ptx = kernel.render().replace(f".version {version[0]}.{version[1]}", f".version {lower[0]}.{lower[1]}", 1)
        with pytest.raises(AssemblyError, match=r"requires PTX ISA \.version"):
            assemble(ptx, arch, use_cache=False)


def test_every_spec_row_is_covered():
    """A new row without a form here fails: add one to tests/helpers/forms.py."""
    covered = set().union(*(emitted_keys(built(name, arch)) for name, arch in GROUP_ARCHS))
    missing = sorted(set(SPECS) - covered)
    assert not missing, f"spec rows with no assembled form: {missing}"


def test_sm90_rows_are_assembled_for_sm90():
    covered = set().union(*(emitted_keys(built(name, "sm_90")) for name, arch in GROUP_ARCHS if arch == "sm_90"))
    missing = sorted(key for key, row in SPECS.items() if row.target == "sm_90" and key not in covered)
    assert not missing, f"sm_90 rows never assembled for sm_90: {missing}"


@pytest.mark.parametrize("key", sorted(SPECS))
def test_row_metadata(key):
    row = SPECS[key]
    assert row.section and row.section[0].isdigit()
    assert row.target in ("sm_90", "sm_90a")
    assert row.min_ptx <= MAX_PTX
    assert all(need <= MAX_PTX for _, need in row.version_rules)
    assert row.key.split(".")[0] == row.render_stem({}, ("x",) * len(row.types)).split(".")[0]


@pytest.mark.parametrize("load", [True, False], ids=["ld", "st"])
def test_ordering_qualifiers_accepted_exactly_when_legal(load):
    """Every sem x scope x space of ld/st: the table accepts the legal set (all of which assemble in the
    ld_st_ordering group) and rejects the rest before the assembler."""
    row = SPECS["ld" if load else "st"]
    legal = set(ordering_forms(load))
    for sem, scope, space in itertools.product((None,) + row.groups["sem"], (None,) + row.groups["scope"],
                                               (None,) + row.groups["space"]):
        sb = Sandbox()
        addr = space_address(sb, space)
        emit = (lambda: sb.b.ld(u32, addr, sem=sem, scope=scope, space=space)) if load else \
            (lambda: sb.b.st(u32, addr, sb.r(u32), sem=sem, scope=scope, space=space))
        if (sem, scope, space) in legal:
            emit()
        else:
            with pytest.raises(PTXBuildError):
                emit()


def test_groups_exercise_the_important_combinations():
    """Spot checks that the catalogue keeps the combinations issue 2 names (a regression guard for
    anyone trimming forms.py)."""
    text = "\n".join(built(name, arch).render() for name, arch in GROUP_ARCHS if arch == "sm_90a")
    for needle in ("red.release.sys.global.add.u32", "ld.acquire.sys.global.u32", "st.release.sys.u32",
                   "ld.global.cs.L2::cache_hint.v4.u32", "createpolicy.fractional.L2::evict_last.b64",
                   "fence.proxy.async.shared::cta", "fence.mbarrier_init.release.cluster",
                   "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64",
                   "mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _,",
                   "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                   ".multicast::cluster.L2::cache_hint",
                   "cp.async.bulk.tensor.3d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes",
                   "cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group.L2::cache_hint",
                   "cp.async.bulk.prefetch.tensor.2d.L2.global.tile",
                   "multimem.ld_reduce.acquire.sys.global.add.acc::f32.v4.bf16x2",
                   "multimem.ld_reduce.relaxed.gpu.global.add.v4.f32", "multimem.st.relaxed.sys.global.v4.f16x2",
                   "multimem.red.release.sys.global.add.v8.bf16",
                   "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16",
                   "wgmma.mma_async.sync.aligned.m64n8k16.f16.f16.f16",
                   "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32", "wgmma.mma_async.sync.aligned.m64n48k32.s32.u8.s8",
                   "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3",
                   "setmaxnreg.dec.sync.aligned.u32 40", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
                   "stmatrix.sync.aligned.m8n8.x2.shared.b16", "cvt.rn.satfinite.bf16x2.f32",
                   "cvt.rna.tf32.f32"):
        assert needle in text, needle
