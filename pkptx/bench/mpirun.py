"""Starting N ranks of a command: Open MPI's ``mpirun`` or MPICH's ``mpiexec``, found next to this Python
first (where the ``mpich`` wheel of the test extra puts its launcher), then on PATH.

Open MPI forwards only the environment variables named with ``-x``, refuses to run as root without
``--allow-run-as-root`` and more ranks than cores without ``--oversubscribe``; MPICH's Hydra passes
the whole environment and needs neither.
"""
from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import BenchError

NAMES = ("mpiexec", "mpirun")
_MARKS = (("openmpi", ("Open MPI", "OpenRTE", "PRRTE", "Open RTE")), ("mpich", ("HYDRA", "MPICH", "Intel(R) MPI")))


@dataclass(frozen=True)
class Launcher:
    """An MPI launcher: its path and flavour ("openmpi", "mpich" or "unknown")."""
    path: str
    flavor: str


def flavor_of(version_text: str) -> str:
    """The flavour a launcher's ``--version`` output (or an MPI library version string) names."""
    for flavor, marks in _MARKS:
        if any(mark in version_text for mark in marks):
            return flavor
    return "unknown"


def candidates(executable: str = sys.executable) -> list[str]:
    """Launcher paths in the order they are tried: next to ``executable``, then on PATH."""
    found = []
    for name in NAMES:
        beside = Path(executable).parent / name
        if beside.is_file() and os.access(beside, os.X_OK):
            found.append(str(beside))
    for name in NAMES:
        on_path = shutil.which(name)
        if on_path and on_path not in found:
            found.append(on_path)
    return found


def find(executable: str = sys.executable) -> Launcher:
    """The first launcher that answers ``--version``; BenchError naming what was tried when none does."""
    tried = candidates(executable)
    for path in tried:
        try:
            proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            continue
        return Launcher(path, flavor_of(proc.stdout + proc.stderr))
    raise BenchError(f"--ranks needs an MPI launcher ({' or '.join(NAMES)}); none answers "
                     f"(tried {', '.join(tried) or 'nothing: none next to ' + executable + ' or on PATH'}); "
                     "pip install mpich, or install Open MPI")


def command(launcher: Launcher, ranks: int, argv: list[str], env_names: tuple[str, ...] = (),
            rank_env: list[dict[str, str]] | None = None, as_root: bool | None = None) -> list[str]:
    """The command line that starts ``argv`` as ``ranks`` ranks, passing the variables ``env_names``
    from this environment, and to rank r the variables ``rank_env[r]`` (consecutive ranks with the same
    ones share one application context; different ones become contexts joined by ``:``)."""
    if type(ranks) is not int or ranks < 1:
        raise BenchError(f"mpirun.command(ranks={ranks!r}): expected a whole number >= 1")
    rank_env = rank_env or [{}] * ranks
    if len(rank_env) != ranks:
        raise BenchError(f"{len(rank_env)} per-rank environments for {ranks} ranks")
    contexts: list[tuple[int, dict[str, str]]] = []
    for env in rank_env:
        if contexts and contexts[-1][1] == env:
            contexts[-1] = (contexts[-1][0] + 1, env)
        else:
            contexts.append((1, env))
    openmpi = launcher.flavor == "openmpi"
    root = os.geteuid() == 0 if as_root is None else as_root
    cmd = [launcher.path]
    if openmpi:
        cmd += [*(["--allow-run-as-root"] if root else []), "--oversubscribe",
                *[arg for name in env_names for arg in ("-x", name)]]
    for i, (count, env) in enumerate(contexts):
        pairs = [["-x", f"{k}={v}"] if openmpi else ["-env", k, v] for k, v in env.items()]
        cmd += [*([":"] if i else []), "-n", str(count), *[arg for pair in pairs for arg in pair], *argv]
    return cmd


def mps_module():
    """:mod:`pkptx.launch.mps` (the MPS daemon helper), or None in a version without it."""
    try:
        return importlib.import_module("pkptx.launch.mps")
    except ModuleNotFoundError as exc:
        if exc.name != "pkptx.launch.mps":
            raise
        return None
