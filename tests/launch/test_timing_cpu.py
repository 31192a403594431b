"""time_cuda's GPU hold: the spin kernel assembles and reads only the clock; bad options fail early."""
from __future__ import annotations

import pytest

from pkptx.errors import LaunchError
from pkptx.launch.timing import spin_kernel, time_cuda


def test_spin_kernel_waits_on_the_clock_alone():
    ptx = spin_kernel().render()
    assert ptx.count("%globaltimer;") == 2 and "ld.global" not in ptx
    assert spin_kernel().compile(use_cache=False).cubin.resources.spill_stores == 0


@pytest.mark.parametrize("bad", [dict(repeats=0), dict(warmup=-1), dict(hold_ns=-5)])
def test_time_cuda_rejects_bad_options_before_any_gpu_work(bad):
    with pytest.raises(LaunchError, match="time_cuda"):
        time_cuda(lambda: None, **bad)
