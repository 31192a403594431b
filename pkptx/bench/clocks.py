"""The SM clock while a benchmark times something. A 700 W board caps the clock of the kernels that draw
most: the attention at 32k keys, D=64, ran at 1710-1935 MHz where torch's flash backend, drawing 450 W,
ran at 1980 (bench/RESULTS.md 2026-12-07), so a ratio between them moves with the board's power state.
nvidia-smi samples the clock and the clock-event reasons in the background; each timed region is a window,
and a row can say at what clock it ran and whether a power or thermal cap was active."""
from __future__ import annotations

import datetime
import shutil
import statistics
import subprocess
import tempfile
import time

FIELDS = "timestamp,pci.bus_id,clocks.sm,power.draw,clocks_event_reasons.active"
OLD_FIELDS = FIELDS.replace("clocks_event_reasons", "clocks_throttle_reasons")     # drivers before 535
CAPS = 0x04 | 0x08 | 0x20 | 0x40 | 0x80     # SW power cap, HW slowdown, SW/HW thermal, HW power brake
PERIOD_MS = 50


def parse(lines, bus_id: str) -> list[tuple[float, int, int, float | None]]:
    """(host time, SM MHz, reasons bitmask, board watts or None) of each sample line of ``bus_id``'s GPU
    (CUDA's form of the bus id, e.g. ``0000:18:00.0``; nvidia-smi prints the domain with 8 digits). Other
    lines are skipped."""
    samples = []
    for line in lines:
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 5 or not fields[1].lower().endswith(bus_id.lower().split(":", 1)[-1]):
            continue
        try:
            when = datetime.datetime.strptime(fields[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            sample = (when, int(fields[2]), int(fields[4], 16))
        except ValueError:
            continue
        try:
            watts = float(fields[3])
        except ValueError:                  # "[N/A]" on boards that do not report it
            watts = None
        samples.append(sample + (watts,))
    return samples


def within(samples, start: float, end: float) -> list:
    """The samples taken in [start, end], with one sampling period of slack either side."""
    slack = PERIOD_MS / 1000
    return [s for s in samples if start - slack <= s[0] <= end + slack]


def summarize(samples, start: float, end: float) -> str:
    """The median SM clock of the samples in [start, end] (one period of slack either side), with ``*``
    when a power or thermal cap was active in any of them; ``n/a`` without samples."""
    inside = within(samples, start, end)
    if not inside:
        return "n/a"
    mhz = statistics.median_low(s[1] for s in inside)
    return f"{mhz}" + ("*" if any(s[2] & CAPS for s in inside) else "")


class ClockSampler:
    """``with ClockSampler(device.pci_bus_id) as clocks: result, w = clocks.window(fn)`` runs ``fn()``
    inside a window; after the ``with`` block, ``clocks.summary(w)`` is that window's clock (``n/a`` where
    nvidia-smi is missing or printed nothing for this GPU)."""

    def __init__(self, bus_id: str):
        self.bus_id, self.windows, self.samples = bus_id, [], []
        self.proc, self.log = None, tempfile.TemporaryFile(mode="w+")
        smi = shutil.which("nvidia-smi")
        if smi is None:
            return
        fields = FIELDS
        if subprocess.run([smi, f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True).returncode:
            fields = OLD_FIELDS
        self.proc = subprocess.Popen([smi, f"--query-gpu={fields}", "--format=csv,noheader,nounits",
                                      "-lms", str(PERIOD_MS)], stdout=self.log, stderr=subprocess.DEVNULL)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc is not None:
            time.sleep(PERIOD_MS / 1000)        # the last window's closing sample
            self.proc.terminate()
            self.proc.wait()
        self.log.seek(0)
        self.samples = parse(self.log, self.bus_id)
        self.log.close()

    def window(self, fn):
        """Run ``fn()``, remember when; returns (its result, the window's index)."""
        start = time.time()
        result = fn()
        self.windows.append((start, time.time()))
        return result, len(self.windows) - 1

    def summary(self, index: int) -> str:
        return summarize(self.samples, *self.windows[index])

    def samples_of(self, index: int) -> list:
        """The raw samples of window ``index`` (time, MHz, reasons, watts)."""
        return within(self.samples, *self.windows[index])
