"""Fixtures for the launch tests: a narrow GPU probe and a fake device for CPU-only validation."""
from __future__ import annotations

import pytest

from pkptx.errors import CudaError
from pkptx.launch.config import DeviceLimits


def _probe() -> str | None:
    """None when a CUDA GPU answers, else why not (driver library missing, cuInit failing, no device)."""
    from pkptx.launch import driver
    try:
        driver.ensure_init()
        count = driver.call("cuDeviceGetCount")
    except CudaError as exc:
        return f"{exc.call} -> {exc.name}"
    except RuntimeError as exc:      # cuda.bindings cannot find libcuda (DynamicLibNotFoundError)
        return f"CUDA driver library not loadable: {exc}".splitlines()[0]
    return None if count else "cuDeviceGetCount() == 0"


@pytest.fixture(scope="session")
def gpu():
    """Device 0, made current; skips the test with the probe's reason when there is no GPU."""
    reason = _probe()
    if reason is not None:
        pytest.skip(f"no CUDA GPU: {reason}")
    from pkptx.launch import Device
    return Device(0).set_current()


@pytest.fixture
def fake_limits() -> DeviceLimits:
    """An H200's limits as plain values: validation tests need no driver."""
    return DeviceLimits()
