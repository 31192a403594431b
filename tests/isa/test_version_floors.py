"""Every modifier combination of every spec row the builder accepts, assembled at exactly the PTX
version the builder computes for it (issue 20: per-instruction and per-modifier floors).

Forms are batched into one kernel per (target, version), and every form in a batch computes that
version itself, so a floor that is too low fails its own batch: no other instruction can raise the
kernel's ``.version`` over it. sm_90 rows are assembled for sm_90 (floor 7.8), sm_90a rows for sm_90a.
"""
from __future__ import annotations

import functools
import re
from collections import defaultdict

import pytest

from pkptx.errors import AssemblyError
from pkptx.isa import SPECS
from pkptx.isa.kernel import SM90_FLOOR, SM90A_FLOOR
from tests.helpers.spec_forms import accepted_forms, emit, scratch


@functools.lru_cache(maxsize=None)
def batches() -> dict:
    out = defaultdict(list)
    for key, row in SPECS.items():
        floor = SM90A_FLOOR if row.target == "sm_90a" else SM90_FLOOR
        for form in accepted_forms(key):
            out[row.target, max(form.version, floor)].append(form)
    return dict(out)


BATCHES = sorted(batches())


def test_every_row_has_accepted_forms():
    rows = {form.key for forms in batches().values() for form in forms}
    assert rows == set(SPECS), f"rows with no accepted combination: {sorted(set(SPECS) - rows)}"
    assert sum(map(len, batches().values())) > 10000


@pytest.mark.parametrize("target,version", BATCHES, ids=[f"{t}-{v[0]}.{v[1]}" for t, v in BATCHES])
def test_forms_assemble_at_their_own_version(target, version):
    sb = scratch(target, f"floor_{target}_{version[0]}{version[1]}")
    for form in batches()[target, version]:
        emit(sb, form)
    sb.b.place(sb.end_label)
    kernel = sb.finish()
    assert kernel.ptx_version == version and kernel.target == target
    try:
        kernel.compile(use_cache=False)
    except AssemblyError as exc:
        lines = kernel.render().splitlines()
        bad = sorted({(lines[int(n) - 1].strip(), msg) for n, msg in
                      re.findall(r"line (\d+); error\s*:\s*(.*)", exc.log)})
        pytest.fail(f"{len(bad)} form(s) the builder accepts at PTX {version[0]}.{version[1]} fail to assemble:\n"
                    + "\n".join(f"  {line}   <- {msg}" for line, msg in bad[:40]))


def test_version_rules_reach_the_kernel():
    """The floors this file checks are the ones the issue names: .release/.acquire on barrier.cluster
    (8.0), multimem (8.1), .acc::f32 (8.2), .b128 (8.3), mbarrier .relaxed (8.6)."""
    by_stem = {(f.key, f.mods): f.version for forms in batches().values() for f in forms}
    assert by_stem["barrier.cluster.arrive", (("aligned", "aligned"), ("sem", "release"))] == (8, 0)
    assert by_stem["barrier.cluster.wait", (("sem", "acquire"),)] == (8, 0)
    assert by_stem["barrier.cluster.wait", ()] == (7, 8)
    assert min(f.version for f in accepted_forms("multimem.st")) == (8, 1)
    assert any(f.version == (8, 2) for f in accepted_forms("multimem.ld_reduce"))
    assert any(f.version == (8, 6) for f in accepted_forms("mbarrier.try_wait"))
