"""The catalog is every module of pkptx/templates/kernels/, found rather than listed, and each module's
first catalogued kernel renders exactly its golden PTX in tests/corpus/kernels/<module>.ptx (one
configuration per module keeps the files reviewable). After an intended change to a kernel's PTX, or for
a new kernel module, regenerate and review the diff:

    PKPTX_UPDATE_CORPUS=1 .venv/bin/python -m pytest -q tests/templates/test_catalog.py

Assembly of every catalogued kernel is test_kernels_assemble's job; a golden match is not sufficient.
"""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from pkptx import catalog
from pkptx.isa import Kernel
from pkptx.templates import kernels as kernel_package
from tests.helpers.golden import CORPUS, check_corpus

FOLDER = Path(kernel_package.__file__).parent
GOLDEN = CORPUS / "kernels"


def short(module: str) -> str:
    return module.rsplit(".", 1)[1]


def test_every_module_of_the_folder_is_catalogued():
    files = sorted(p.stem for p in FOLDER.glob("*.py") if p.stem != "__init__")
    assert [short(m) for m in catalog.KERNEL_MODULES] == files
    names = [k.name for k in catalog.kernels()]
    assert len(names) == len(set(names)), "two catalogued kernels share an entry name"


@pytest.mark.parametrize("module", catalog.KERNEL_MODULES, ids=short)
def test_each_module_yields_kernels(module):
    kernels = list(importlib.import_module(module).catalog())
    assert kernels and all(isinstance(k, Kernel) for k in kernels)


def test_a_new_module_is_found_without_editing_a_list(tmp_path, monkeypatch):
    (tmp_path / "zz_probe.py").write_text("def catalog():\n    return []\n")
    monkeypatch.setattr(kernel_package, "__path__", [*kernel_package.__path__, str(tmp_path)])
    assert catalog._discover()[-1] == f"{kernel_package.__name__}.zz_probe"


def test_a_module_without_a_catalog_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(catalog, "KERNEL_MODULES", ("pkptx.templates.lcsc",))
    with pytest.raises(catalog.PkptxError, match=r"pkptx.templates.lcsc has no catalog\(\)"):
        list(catalog.kernels())


@pytest.mark.parametrize("module", catalog.KERNEL_MODULES, ids=short)
def test_golden_ptx(module):
    check_corpus(next(iter(importlib.import_module(module).catalog())), f"kernels/{short(module)}")


def test_no_golden_file_outlives_its_module():
    stale = sorted({p.stem for p in GOLDEN.glob("*.ptx")} - {short(m) for m in catalog.KERNEL_MODULES})
    assert not stale, f"golden files of modules that are gone: {stale}"
