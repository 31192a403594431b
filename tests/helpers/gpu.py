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
    return {"PKPTX_DISABLE_MULTICAST": "1", "CUDA_VISIBLE_DEVICES": os.environ.get("PKPTX_TEST_DEVICES", "0"),
            **extra}


def world_sizes(default: list[int]) -> list[int]:
    """The world sizes MPI GPU tests run at: ``default``, plus ``PKPTX_TEST_WORLD`` when it is set."""
    import os
    extra = int(os.environ.get("PKPTX_TEST_WORLD", "0"))
    return sorted(set(default) | ({extra} if extra else set()))
