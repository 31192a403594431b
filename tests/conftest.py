"""Test-suite configuration: hypothesis profiles and the assembler cache.

Profiles: ``dev`` (the default: random, fast) and ``ci`` (derandomised, so a CI failure reproduces);
``CI=true`` in the environment selects ``ci``, ``HYPOTHESIS_PROFILE`` picks one explicitly. Neither has
a deadline: the first nvJitLink call in a process is slower than the rest.

The assembler cache (``PKPTX_CACHE_DIR``) points into a per-session temporary directory unless the
caller set one, so test runs never read or fill the user's cache.
"""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE")
                      or ("ci" if os.environ.get("CI", "").lower() == "true" else "dev"))


@pytest.fixture(autouse=True, scope="session")
def _private_assembler_cache(tmp_path_factory):
    if "PKPTX_CACHE_DIR" in os.environ:
        yield
        return
    os.environ["PKPTX_CACHE_DIR"] = str(tmp_path_factory.mktemp("pkptx-cache"))
    try:
        yield
    finally:
        os.environ.pop("PKPTX_CACHE_DIR", None)
