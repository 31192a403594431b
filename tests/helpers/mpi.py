"""The one MPI test harness: start a test program as N ranks and collect what each rank reported (the
test's side), and what every program shares (the ranks' side).

Programs are scripts under tests/ that run with the repository on PYTHONPATH, so they import this
module and their neighbours as ``tests.…`` modules, never through sys.path edits. The launcher is the
one ``pkptx bench --ranks`` uses (:mod:`pkptx.bench.mpirun`): MPICH's hydra from the test extra on the
CPU machines, Open MPI's mpirun on the GPU machine. Each rank reports with :func:`report`: one JSON
line per section into a file per rank (lines of several ranks on one stdout can interleave).
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from pkptx.bench import mpirun
from pkptx.errors import BenchError

REPO = Path(__file__).resolve().parents[2]
RESULTS_ENV = "PKPTX_TEST_RESULTS"
EXAMPLES_ENV = "PKPTX_EXAMPLES"


# ------------------------------------------------------------------------------ the ranks' side
def report(rank: int, section: str, **data) -> None:
    """One JSON line for ``section`` into ``$PKPTX_TEST_RESULTS/rank<rank>.jsonl``, or onto stdout when
    the program runs on its own (no test collects it)."""
    line = json.dumps({"section": section, **data})
    folder = os.environ.get(RESULTS_ENV)
    if folder:
        with open(Path(folder) / f"rank{rank}.jsonl", "a") as out:
            out.write(line + "\n")
    else:
        print(line, flush=True)


def hyp(default: int = 20):
    """Derandomized hypothesis settings for a program: every rank draws the same cases
    (``$PKPTX_EXAMPLES`` of them, else ``default``), nothing is stored, and nothing shrinks (failures
    are recorded, never raised, so the ranks never diverge)."""
    from hypothesis import HealthCheck, Phase, settings
    return settings(max_examples=int(os.environ.get(EXAMPLES_ENV, str(default))), derandomize=True, database=None,
                    deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])


def unlink_mpi_shared_memory() -> None:
    """A rank that leaves without MPI_Finalize (a lost world) leaves its MPI shared-memory segments
    behind: unlink those this process maps (unlinking twice is harmless), leaving /dev/shm clean."""
    with open("/proc/self/maps") as maps:
        paths = {line.split(None, 5)[-1].strip() for line in maps if " /dev/shm/" in line}
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path.removesuffix(" (deleted)"))


# ------------------------------------------------------------------------------- the test's side
def find_launcher() -> mpirun.Launcher | None:
    """The MPI launcher at hand (next to this Python first, then on PATH), or None."""
    try:
        return mpirun.find()
    except BenchError:
        return None


def launcher_or_skip() -> mpirun.Launcher:
    found = find_launcher()
    if found is None:
        pytest.skip(f"no mpiexec/mpirun next to {sys.executable} or on PATH (pip install mpich)")
    return found


def run(ranks: int, program: Path | str, *args: str, env: dict[str, str] | None = None, timeout: float = 120,
        survive_dead_ranks: bool = False):
    """(CompletedProcess, {rank: {section: data}}) of ``program`` (a path, or relative to the repository)
    on ``ranks`` ranks; skips the test when no launcher is at hand.

    ``survive_dead_ranks`` keeps the launcher from killing every rank when one exits early, so the
    survivors can report what they saw.
    """
    launcher = launcher_or_skip()
    with tempfile.TemporaryDirectory(prefix="pkptx-mpi-") as folder:
        pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
        extra = {"PYTHONPATH": pythonpath, RESULTS_ENV: folder, **(env or {})}
        cmd = mpirun.command(launcher, ranks, [sys.executable, str(REPO / program), *args], tuple(extra))
        if launcher.flavor == "openmpi":
            extra["OMPI_MCA_btl_vader_single_copy_mechanism"] = "none"  # CMA is often barred in containers
            if survive_dead_ranks:  # read by mpirun itself
                extra.update(OMPI_MCA_orte_allowed_exit_without_sync="1", OMPI_MCA_orte_abort_on_non_zero_status="0")
        elif survive_dead_ranks:
            cmd.insert(1, "-disable-auto-cleanup")
        proc = subprocess.run(cmd, env={**os.environ, **extra}, capture_output=True, text=True, timeout=timeout)
        results: dict[int, dict[str, dict]] = {}
        for file in Path(folder).glob("rank*.jsonl"):
            rank = int(file.stem[len("rank"):])
            for line in file.read_text().splitlines():
                data = json.loads(line)
                results.setdefault(rank, {})[data.pop("section")] = data
    return proc, results


def run_program_cases(ranks: int, program: str, section: str, *, env: dict, timeout: float) -> None:
    """Run ``tests/templates/programs/<program>`` on ``ranks`` ranks and fail with the first failures
    any rank recorded in its ``section`` report (a rank that ran no case fails too)."""
    proc, results = run(ranks, Path("tests/templates/programs") / program, env=env, timeout=timeout)
    output = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(results) == list(range(ranks)), output
    for rank in range(ranks):
        outcome = results[rank][section]
        assert outcome["cases"] > 0, output
        if outcome["failures"]:
            pytest.fail(f"rank {rank}: " + json.dumps(outcome["failures"][:3], indent=1)[:4000])
    assert proc.returncode == 0, output
