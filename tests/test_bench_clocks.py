"""The benchmarks' SM-clock column (pkptx.bench.clocks): nvidia-smi's lines parsed per GPU, the windows'
medians and cap marks, and n/a where there is no nvidia-smi. No GPU needed."""
import datetime

from hypothesis import given
from hypothesis import strategies as st

from pkptx.bench import clocks


def line(when: float, bus: str, mhz: int, reasons: int, watts: str = "512.34") -> str:
    stamp = datetime.datetime.fromtimestamp(when).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
    return f"{stamp}, {bus}, {mhz}, {watts}, 0x{reasons:016x}"


def test_lines_of_other_gpus_and_noise_are_skipped():
    lines = [line(100.0, "00000000:18:00.0", 1980, 0), line(100.0, "00000000:2A:00.0", 1500, 4),
             "Failed to initialize NVML", "", line(100.05, "00000000:18:00.0", 1860, 4, "[N/A]")]
    assert [s[1:] for s in clocks.parse(lines, "0000:18:00.0")] == [(1980, 0, 512.34), (1860, 4, None)]
    assert clocks.parse(lines, "0000:2a:00.0")[0][1] == 1500


@given(st.lists(st.tuples(st.integers(1000, 1980), st.sampled_from([0, 0x1, 0x4, 0x20, 0x80])), min_size=1,
                max_size=20))
def test_a_window_is_the_median_low_clock_and_marks_a_cap(readings):
    start = 1_000_000.0
    samples = [(start + 0.05 * i, mhz, reasons, 600.0) for i, (mhz, reasons) in enumerate(readings)]
    end = samples[-1][0]
    text = clocks.summarize(samples + [(end + 1.0, 1, 4, 700.0)], start, end)     # a later sample is outside
    assert clocks.within(samples + [(end + 1.0, 1, 4, 700.0)], start, end) == samples
    mhz = sorted(m for m, _ in readings)[(len(readings) - 1) // 2]
    assert text == f"{mhz}" + ("*" if any(r & clocks.CAPS for _, r in readings) else "")


def test_no_samples_and_no_nvidia_smi_give_na(monkeypatch):
    assert clocks.summarize([(0.0, 1980, 0, None)], 10.0, 11.0) == "n/a"
    monkeypatch.setattr(clocks.shutil, "which", lambda name: None)
    with clocks.ClockSampler("0000:18:00.0") as sampler:
        assert sampler.window(lambda: 7) == (7, 0)
    assert sampler.summary(0) == "n/a" and sampler.samples_of(0) == []
