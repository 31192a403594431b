"""Fixtures for the launch tests: a narrow GPU probe and a fake device for CPU-only validation."""
from __future__ import annotations

import pytest

from pkptx.launch.config import DeviceLimits
from tests.helpers.gpu import gpu  # noqa: F401  (the shared GPU fixture)


@pytest.fixture
def fake_limits() -> DeviceLimits:
    """An H200's limits as plain values: validation tests need no driver."""
    return DeviceLimits()
