"""The README's promises: its tutorial is examples/hello_ptx.py verbatim and runs (launching only
where a GPU answers), and its test command is the one CI runs."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_tutorial_is_the_example_and_short():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## Tutorial.*?```python\n(.*?)```", readme, re.S).group(1)
    example = (ROOT / "examples" / "hello_ptx.py").read_text()
    assert block == example
    assert len(example.strip().splitlines()) < 30


def test_tutorial_runs():
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "hello_ptx.py")], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ".visible .entry scale(" in proc.stdout and "Resources(registers=" in proc.stdout


def test_first_lines_are_the_two_commands_and_ci_runs_the_second():
    lines = (ROOT / "README.md").read_text().splitlines()
    commands = [line for line in lines[:8] if line.startswith("python3 -m venv")]
    assert len(commands) == 2 and "pkptx build" in commands[0] and "pytest" in commands[1]
    assert "grep -m1 -E '^python3 -m venv .*pytest' README.md" in (ROOT / ".ci" / "run").read_text()
