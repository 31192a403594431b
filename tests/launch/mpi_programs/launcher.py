"""Run a program of this folder under the MPI launcher at hand and collect what each rank reported.

MPICH's hydra (``pip install mpich``) on the CPU machines, Open MPI's mpirun on the GPU machine:
the flavour is read from ``--version``. Programs report with :func:`report`: one JSON line per
section into a file per rank (lines of several ranks on one stdout can interleave).
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PROGRAMS = Path(__file__).resolve().parent
REPO = PROGRAMS.parents[2]
RESULTS_ENV = "PKPTX_TEST_RESULTS"


def report(rank: int, section: str, **data) -> None:
    with open(Path(os.environ[RESULTS_ENV]) / f"rank{rank}.jsonl", "a") as out:
        out.write(json.dumps({"section": section, **data}) + "\n")


def unlink_mpi_shared_memory() -> None:
    """A rank that leaves without MPI_Finalize (a lost world) leaves its MPI shared-memory segments
    behind: unlink those this process maps (unlinking twice is harmless), leaving /dev/shm clean."""
    with open("/proc/self/maps") as maps:
        paths = {line.split(None, 5)[-1].strip() for line in maps if " /dev/shm/" in line}
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path.removesuffix(" (deleted)"))


def find_launcher() -> tuple[str, str] | None:
    """(path, 'mpich' | 'openmpi') for the mpiexec next to sys.executable, else on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    for candidate in (str(beside) if beside.exists() else None, shutil.which("mpiexec"),
                      shutil.which("mpirun")):
        if candidate is None:
            continue
        try:
            out = subprocess.run([candidate, "--version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        text = out.stdout + out.stderr
        if "Open MPI" in text or "OpenRTE" in text:
            return candidate, "openmpi"
        if "HYDRA" in text or "MPICH" in text:
            return candidate, "mpich"
    return None


def run(ranks: int, program: str, *args: str, env: dict[str, str] | None = None,
        timeout: float = 120, survive_dead_ranks: bool = False):
    """(CompletedProcess, {rank: {section: data}}) of ``program`` on ``ranks`` ranks.

    ``survive_dead_ranks`` keeps the launcher from killing every rank when one exits early,
    so the survivors can report what they saw.
    """
    found = find_launcher()
    if found is None:
        raise RuntimeError("no mpiexec/mpirun found")
    launcher, flavour = found
    with tempfile.TemporaryDirectory(prefix="pkptx-mpi-") as folder:
        pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
        extra = {"PYTHONPATH": pythonpath, RESULTS_ENV: folder, **(env or {})}
        cmd = [launcher]
        if flavour == "openmpi":
            cmd += ["--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
            for name in extra:
                cmd += ["-x", name]
            extra["OMPI_MCA_btl_vader_single_copy_mechanism"] = "none"  # CMA is often barred in containers
            if survive_dead_ranks:  # read by mpirun itself
                extra.update(OMPI_MCA_orte_allowed_exit_without_sync="1",
                             OMPI_MCA_orte_abort_on_non_zero_status="0")
        elif survive_dead_ranks:
            cmd.append("-disable-auto-cleanup")
        cmd += ["-n", str(ranks), sys.executable, str(PROGRAMS / program), *args]
        proc = subprocess.run(cmd, env={**os.environ, **extra}, capture_output=True, text=True,
                              timeout=timeout)
        results: dict[int, dict[str, dict]] = {}
        for file in Path(folder).glob("rank*.jsonl"):
            rank = int(file.stem[len("rank"):])
            for line in file.read_text().splitlines():
                data = json.loads(line)
                results.setdefault(rank, {})[data.pop("section")] = data
    return proc, results
