"""Code lines of pkptx/templates (docstrings, comments and blank lines left out) per file, at git revisions:
the device-code size a refactor must not grow. ``python3 tools/device_lines.py REV [REV ...]`` prints a
Markdown table, one column per revision (``WORK``: the working tree)."""
from __future__ import annotations

import io
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING,
        tokenize.ENDMARKER)


def code_lines(source: str) -> int:
    """Lines holding a token other than a comment or a bare string statement (a docstring)."""
    lines, prev = set(), None
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in SKIP:
            continue
        statement_start = prev is None or prev.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                                                        tokenize.NL)
        prev = tok
        if tok.type == tokenize.STRING and statement_start:
            continue
        lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines)


def sources(rev: str) -> dict[str, str]:
    if rev == "WORK":
        return {str(p.relative_to(ROOT)): p.read_text() for p in (ROOT / "pkptx" / "templates").rglob("*.py")}
    names = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "-r", "--name-only", rev, "pkptx/templates"],
                           capture_output=True, text=True, check=True).stdout.split()
    return {n: subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{n}"], capture_output=True, text=True,
                              check=True).stdout for n in names if n.endswith(".py")}


def main(revs: list[str]) -> None:
    counts = {rev: {n: code_lines(s) for n, s in sources(rev).items() if not n.endswith("__init__.py")}
              for rev in revs}
    files = sorted(set().union(*counts.values()))
    print("| file | " + " | ".join(revs) + " |\n|---|" + "---|" * len(revs))
    for f in files:
        print(f"| {f.removeprefix('pkptx/templates/')} | " + " | ".join(str(counts[r].get(f, "-")) for r in revs) + " |")
    print("| total | " + " | ".join(str(sum(counts[r].values())) for r in revs) + " |")


if __name__ == "__main__":
    main(sys.argv[1:] or ["HEAD", "WORK"])
