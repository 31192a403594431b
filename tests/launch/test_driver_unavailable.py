"""Without a loadable driver library every entry point raises DriverUnavailableError (a CudaError,
so a PkptxError) with a hint, instead of cuda.pathfinder's own exception."""
from __future__ import annotations

import numpy as np
import pytest
from cuda.pathfinder import DynamicLibNotFoundError

from pkptx.errors import CudaError, DriverUnavailableError, PkptxError
from pkptx.launch import Device, empty, from_numpy
from tests.helpers.gpu import LOADER_TEXT, no_driver_library, probe  # noqa: F401  (a fixture)

ENTRY_POINTS = {"Device(0)": lambda: Device(0), "from_numpy": lambda: from_numpy(np.zeros(3, np.float32)),
                "empty": lambda: empty((2, 2), "float32"), "Device.current()": Device.current}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_entry_points_raise_a_pkptx_error_with_a_hint(no_driver_library, entry):
    with pytest.raises(PkptxError) as err:
        ENTRY_POINTS[entry]()
    assert type(err.value) is DriverUnavailableError and isinstance(err.value, CudaError)
    assert err.value.call == "cuInit" and err.value.name == "CUDA_DRIVER_NOT_LOADABLE"
    assert LOADER_TEXT in str(err.value) and "hint: GPU work needs a machine with the NVIDIA driver" in str(err.value)
    assert isinstance(err.value.__cause__, DynamicLibNotFoundError)


def test_available_reads_zero_without_a_driver_library(no_driver_library):
    assert Device.available() == 0


@pytest.mark.skipif(probe() is None, reason="a CUDA driver answers on this machine")
def test_this_machine_without_a_driver_raises_the_same():
    reason = probe()
    if "CUDA_DRIVER_NOT_LOADABLE" not in reason:
        pytest.skip(f"the driver library loads here; the GPU is missing for another reason: {reason}")
    with pytest.raises(DriverUnavailableError, match="hint: GPU work needs"):
        Device(0)
