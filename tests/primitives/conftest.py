"""Fixtures for the primitive tests: the shared GPU fixture (tests/helpers/gpu.py) and MPI program runs.

CPU tests need neither. GPU tests take ``gpu`` (or ``mpi_run``, which takes it), so they skip with the
probe's reason (driver library missing, cuInit failing, no device) when no CUDA GPU answers.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import mpi
from tests.helpers.gpu import gpu, rank_env  # noqa: F401  (gpu: the shared fixture, skips with the probe's reason)

PROGRAMS = Path(__file__).resolve().parent / "programs"

# Every program runs the unicast forms, on GPU 0 unless PKPTX_TEST_DEVICES spreads the ranks.
PROGRAM_ENV = rank_env(PYTHONUNBUFFERED="1")


@pytest.fixture(scope="session")
def mpi_run(gpu):
    """``mpi_run(ranks, program, *args, env=..., timeout=...)`` -> (CompletedProcess, results by rank),
    a program of tests/primitives/programs under the MPI launcher at hand (skips without one)."""
    mpi.launcher_or_skip()

    def run(ranks: int, program: str, *args: str, env: dict | None = None, timeout: float = 300):
        return mpi.run(ranks, PROGRAMS / program, *args, env={**PROGRAM_ENV, **(env or {})}, timeout=timeout,
                       survive_dead_ranks=True)
    return run
