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
    except CudaError as exc:
        return f"{exc.call} -> {exc.name}"
    except RuntimeError as exc:      # cuda.bindings cannot find libcuda (DynamicLibNotFoundError)
        return f"CUDA driver library not loadable: {exc}".splitlines()[0]
    return None if count else "cuDeviceGetCount() == 0"


@pytest.fixture(scope="session")
def gpu():
    """Device 0, made current; skips the test with the probe's reason when there is no GPU."""
    reason = probe()
    if reason is not None:
        pytest.skip(f"no CUDA GPU: {reason}")
    from pkptx.launch import Device
    return Device(0).set_current()
