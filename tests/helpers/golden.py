"""Golden-text comparison of emitted PTX (llvmlite ``check_block`` style), and the corpus on disk.

``check_ptx(kernel, expected)`` compares the kernel's whole PTX with a dedented expected text and
fails with a unified diff. ``check_corpus(kernel, name)`` compares with ``tests/corpus/<name>.ptx``;
set ``PKPTX_UPDATE_CORPUS=1`` to rewrite the file instead (then review the diff in git).
A golden match is necessary, never sufficient: also assemble the kernel (style rule 7).
"""
from __future__ import annotations

import difflib
import os
import textwrap
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "corpus"


def _diff(expected: str, actual: str, names=("expected", "actual")) -> str:
    return "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True), *names))


def check_ptx(kernel, expected: str) -> None:
    """The kernel renders exactly ``expected`` (dedented; leading blank lines dropped)."""
    want = textwrap.dedent(expected).lstrip("\n")
    got = kernel.render()
    if got != want:
        raise AssertionError(f"PTX of {kernel.name} differs from the golden text:\n{_diff(want, got)}")


def check_corpus(kernel, name: str) -> None:
    path = CORPUS / f"{name}.ptx"
    got = kernel.render()
    if os.environ.get("PKPTX_UPDATE_CORPUS") == "1":
        path.write_text(got)
        return
    if not path.exists():
        raise AssertionError(f"no golden file {path}; run with PKPTX_UPDATE_CORPUS=1 to create it")
    want = path.read_text()
    if got != want:
        raise AssertionError(f"PTX of {kernel.name} differs from {path.name} (PKPTX_UPDATE_CORPUS=1 "
                             f"rewrites it):\n{_diff(want, got, (path.name, 'built'))}")


def body_lines(kernel) -> list[str]:
    """The kernel body's lines (between the register declarations and the closing brace), stripped."""
    lines = kernel.render().splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("\t.reg ") or line == "{") + 1
    return [line.strip() for line in lines[start:-1] if line.strip()]
