"""A peer that never signals: the bounded wait gives up, the host raises DeviceTimeoutError naming the
rank, flag and value within the budget, and the GPU stays usable (programs/timeout_program.py, 2 ranks).
"""
from __future__ import annotations

import pytest

BUDGET_S = 0.5            # the programs' timeout_ns
BOUND_S = 4.0             # launch to exception, host overheads included

pytestmark = [pytest.mark.gpu, pytest.mark.mpi]


@pytest.fixture(scope="module")
def outcome(mpi_run):
    proc, results = mpi_run(2, "timeout_program.py", timeout=240)
    return proc, results


def _section(outcome, name):
    proc, results = outcome
    output = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert 0 in results and name in results[0], f"rank 0 never reported '{name}':\n{output}"
    got = results[0][name]
    assert "error" not in got, got["error"]
    return got


def test_wait_primitive_times_out_and_names_the_flag(outcome):
    got = _section(outcome, "primitive")
    assert got["raised"] == "DeviceTimeoutError", got
    message = got["message"]
    for needle in ("rank 0", "flag 3", ">= 5", "saw 0"):
        assert needle in message, (needle, message)
    assert BUDGET_S * 0.8 <= got["elapsed_s"] < BOUND_S, got["elapsed_s"]
    assert got["out_untouched"], "the timed-out thread went on past its wait"
    assert got["cleared"] is True, got["cleared"]


def test_gpu_usable_after_the_timeout(outcome):
    got = _section(outcome, "primitive")
    assert got["wait_value"] == 7 and got["copy_ok"], got


def test_collective_times_out_when_a_rank_skips_it(outcome):
    got = _section(outcome, "collective")
    assert got["first_ok"], got
    assert got["raised"] == "DeviceTimeoutError", got
    assert "rank 0" in got["message"] and "no signal from rank 1" in got["message"], got["message"]
    assert got["elapsed_s"] < BOUND_S, got["elapsed_s"]
    assert got["wait_value"] == 7 and got["copy_ok"], got


def test_silent_rank_finished(outcome):
    proc, results = outcome
    assert 1 in results and results[1]["primitive"]["role"] == "silent", proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
