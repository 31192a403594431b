"""The README's promises: its tutorial is examples/hello_ptx.py verbatim and runs (launching only
where a GPU answers), and its test command is the one CI runs."""
from __future__ import annotations

import re
import shlex
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


def test_first_five_minutes_plot_is_what_its_command_makes(tmp_path, capsys):
    from pkptx.bench import cli
    readme = (ROOT / "README.md").read_text()
    section = re.search(r"## First five minutes\n(.*?)\n## ", readme, re.S).group(1)
    line = next(line for line in section.splitlines() if " --from " in line)
    argv = shlex.split(line)[3:]                             # after `.venv/bin/python -m pkptx`
    out = argv[argv.index("--out") + 1]
    image = re.search(r"!\[[^]]*\]\(([^)]+)\)", section).group(1)
    assert argv[0] == "bench" and (ROOT / image).parent == ROOT / out and (ROOT / image).is_file()
    argv[argv.index("--out") + 1] = str(tmp_path)
    assert cli.main([a if a != "bench/RESULTS.md" else str(ROOT / a) for a in argv[1:]]) == 0
    assert capsys.readouterr().err == ""
    csv_name = Path(image).with_suffix(".csv").name
    assert (tmp_path / csv_name).read_text() == (ROOT / out / csv_name).read_text()
    assert (tmp_path / Path(image).name).read_bytes()[:8] == (ROOT / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
