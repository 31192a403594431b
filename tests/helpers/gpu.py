"""The narrow GPU probe shared by every GPU test: skip with the reason when no CUDA GPU answers."""
from __future__ import annotations

import pytest

from pkptx.errors import CudaError


def probe() -> str | None:
    """None when a CUDA GPU answers, else why not (driver library missing, cuInit failing, no device)."""
    from pkptx.launch import driver
    try:
        driver.ensure_init()
        count = driver.call("cuDeviceGetCount")
    except CudaError as exc:        # DriverUnavailableError too: cuda.bindings cannot load libcuda
        return f"{exc.call} -> {exc.name}: {exc.description}"
    return None if count else "cuDeviceGetCount() == 0"


@pytest.fixture(scope="session")
def gpu():
    """Device 0, made current; skips the test with the probe's reason when there is no GPU."""
    reason = probe()
    if reason is not None:
        pytest.skip(f"no CUDA GPU: {reason}")
    from pkptx.launch import Device
    return Device(0).set_current()


def rank_env(**extra) -> dict:
    """The environment of MPI test ranks: multicast off, and every rank on GPU 0 (several processes on
    one GPU are real ranks) unless ``PKPTX_TEST_DEVICES`` lists the GPUs to spread them over, as the
    multi-GPU run does (``bench/multigpu.py``)."""
    import os
    mps = {name: os.environ[name] for name in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")
           if name in os.environ}
    return {"PKPTX_DISABLE_MULTICAST": "1", "CUDA_VISIBLE_DEVICES": os.environ.get("PKPTX_TEST_DEVICES", "0"),
            **mps, **extra}


def world_sizes(default: list[int]) -> list[int]:
    """The world sizes MPI GPU tests run at: ``default``, plus ``PKPTX_TEST_WORLD`` when it is set."""
    import os
    extra = int(os.environ.get("PKPTX_TEST_WORLD", "0"))
    return sorted(set(default) | ({extra} if extra else set()))


HOG_MS, HOG_TIMEOUT_S = 1500, 0.5


def sharing_cases(default: list[int]) -> list:
    """How the multi-rank GPU tests share the one GPU: pytest params of (ranks, MPS shares, hog).

    Under MPS (``PKPTX_TEST_MPS=1`` with the daemon's pipe folder in the environment, as
    ``tools/gpu_check.py --mps`` sets up) every rank count runs concurrently on equal SM shares, and 2 ranks
    on 30/70; otherwise the ranks are time-sliced. Always: 1 rank while other work holds half of the SMs
    for longer than the device timeout (``hog``), which only persistent kernels that need no co-resident
    blocks survive.
    """
    import os
    mps = os.environ.get("PKPTX_TEST_MPS") == "1"
    cases = [pytest.param(r, [100 // r] * r if mps and r > 1 else None, False,
                          id=f"{r}rank" + (f"-mps{100 // r}" if mps and r > 1 else "")) for r in world_sizes(default)]
    if mps:
        cases.append(pytest.param(2, [30, 70], False, id="2rank-mps30-70"))
    cases.append(pytest.param(1, None, True, id="1rank-hog"))
    return cases


def sharing_env(shares, hog: bool) -> dict:
    """The ranks' environment for a :func:`sharing_cases` case."""
    env = {"PKPTX_MPS_SHARES": ",".join(map(str, shares))} if shares else {}
    if hog:
        env.update(PKPTX_TEST_HOG_MS=str(HOG_MS), PKPTX_TIMEOUT_S=str(HOG_TIMEOUT_S))
    return env


def run_program_cases(ranks: int, program: str, section: str, *, env: dict, timeout: float) -> None:
    """Run ``tests/templates/programs/<program>`` on ``ranks`` ranks (skipping without an MPI launcher) and
    fail with the first failures any rank recorded in its ``section`` report."""
    import json
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "launch"))
    from mpi_programs import launcher
    if launcher.find_launcher() is None:
        pytest.skip("no mpiexec/mpirun to start the ranks")
    proc, results = launcher.run(ranks, f"../../templates/programs/{program}", env=env, timeout=timeout)
    output = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(results) == list(range(ranks)), output
    for rank in range(ranks):
        outcome = results[rank][section]
        assert outcome["cases"] > 0, output
        if outcome["failures"]:
            pytest.fail(f"rank {rank}: " + json.dumps(outcome["failures"][:3], indent=1)[:4000])
    assert proc.returncode == 0, output
