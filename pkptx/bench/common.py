"""Shared benchmark plumbing: host and CUDA-event timing, result tables, and bench/RESULTS.md records.

Run benchmarks with ``python -m pkptx bench NAME`` (or ``python -m pkptx.bench.bench_NAME``); nothing is
recorded unless ``--record`` is given. With ``PKPTX_BENCH_OUT`` set (``pkptx bench --out``), every table
is also written there as JSON.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ..launch import Device, time_cuda, time_cuda_alternating
from .results import OUT_ENV, write_record

_CHECKOUT = Path(__file__).resolve().parents[2]
ROOT = _CHECKOUT if (_CHECKOUT / "pyproject.toml").is_file() else Path.cwd()   # installed: records go under cwd

RESULTS = ROOT / "bench" / "RESULTS.md"


def parse_args(description: str, argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--record", action="store_true", help="append the results to bench/RESULTS.md")
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    return parser.parse_args(argv)


def host_us(fn, calls: int = 5000, rounds: int = 7, device: Device | None = None) -> float:
    """Median over ``rounds`` of the host time of one ``fn()`` (Python call to return), in us."""
    return host_us_interleaved([fn], calls, rounds, device)[0]


def host_us_interleaved(fns, calls: int = 5000, rounds: int = 9, device: Device | None = None) -> list[float]:
    """The host time of one call of each ``fn``, their rounds interleaved (A B C A B C ...) so drifts of
    a shared host's speed hit every way alike; one median per ``fn``, in us. Warmed up first; the device
    is synchronised before each round (outside the timed loop) so the launch queue never fills."""
    device = device or Device.current()
    for fn in fns:
        for _ in range(min(calls, 500)):
            fn()
    samples = [[] for _ in fns]
    for _ in range(rounds):
        for fn, mine in zip(fns, samples):
            device.synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            mine.append((time.perf_counter() - t0) / calls * 1e6)
    device.synchronize()
    return [statistics.median(s) for s in samples]


GPU_ONLY_NS = 200_000    # GPU spin before each timed repeat: hides up to 200 us of host time per call


def checked_ms(fn, stream, *, repeats: int, warmup: int = 2) -> float:
    """Median CUDA-event time of ``fn()`` in ms, then ``pkptx.synchronize(stream)``: a device wait that
    timed out during the repeats raises here instead of passing as a fast row (the multi-rank benches)."""
    from .. import synchronize
    t = event_ms(fn, stream, repeats=repeats, warmup=warmup)
    synchronize(stream)
    return t


def event_ms(fn, stream, *, repeats: int = 20, warmup: int = 3, flush_l2: bool = False,
             hold_ns: int = GPU_ONLY_NS) -> float:
    """Median CUDA-event time of ``fn()`` (queued on ``stream``), in ms."""
    return time_cuda(fn, stream=stream, warmup=warmup, repeats=repeats, flush_l2=flush_l2, hold_ns=hold_ns).median_ms


def paired_ms(ours, theirs, stream, *, repeats: int = 20, warmup: int = 3, hold_ns: int = GPU_ONLY_NS):
    """(ours, theirs): median CUDA-event times in ms of two functions timed in turn, repeat by repeat, so
    a ratio of the two is not skewed by clocks that fall as the GPU heats (time_cuda_alternating)."""
    return tuple(t.median_ms for t in time_cuda_alternating((ours, theirs), stream=stream, warmup=warmup,
                                                            repeats=repeats, hold_ns=hold_ns))


def table(headers: list[str], rows: list[list]) -> str:
    """A Markdown table (also readable on a terminal)."""
    cells = [[str(c) for c in headers]] + [[f"{c:.3f}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in cells[1:]])


def git_commit() -> str:
    """The checkout's commit (read-only git calls), with '+dirty' for uncommitted changes; on a machine
    that received the tree without its history, PKPTX_COMMIT names it."""
    if os.environ.get("PKPTX_COMMIT"):
        return os.environ["PKPTX_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "no commit"
    return head + ("+dirty" if dirty else "")


def report(title: str, headers: list[str], rows: list[list], notes: str, record: bool) -> None:
    """Print the table; with ``record``, append it to bench/RESULTS.md with date, device and commit; with
    ``PKPTX_BENCH_OUT`` set, also write it there as JSON."""
    text = table(headers, rows)
    print(f"\n{title}\n{text}\n{notes}")
    if not (record or os.environ.get(OUT_ENV)):
        return
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    device = Device.current().name if Device.available() else f"CPU only ({platform.machine()}, no GPU)"
    where = f"{stamp} · {device} · commit {git_commit()} · Python {sys.version.split()[0]}"
    write_record(title, headers, rows, notes, where)
    if not record:
        return
    with RESULTS.open("a") as f:
        f.write(f"\n## {title}\n{where}\n\n{text}\n\n{notes}\n")
    print(f"(recorded in {RESULTS.relative_to(ROOT)})")


def sharing(world) -> tuple[str, str]:
    """(title suffix, note) saying how the ranks share the GPU(s); collective (every rank calls it).

    Several ranks on one GPU are either time-sliced (no MPS: the figures are context switches) or run
    at once under MPS, each on its SM share: labelled "one GPU, MPS, SM share", since HBM is shared and
    there is no NVLink, so such figures measure the protocol, the overlap and the SM split."""
    from pkptx.launch import mps
    from pkptx.launch.occupancy import context_sm_count
    mine = (os.environ.get(mps.PERCENT_ENV, ""), context_sm_count(), mps.in_client_env())
    every = world.allgather(mine, what="bench sharing")
    if world.size == 1 or Device.available() >= world.size:
        return "", f"SMs used: {every[0][1]}. "
    if not all(up for _, _, up in every):
        return ", one GPU, time-sliced", (f"All {world.size} ranks share one GPU, time-sliced between their processes: "
                                          "the figures measure the protocol plus context switches, not NVLink. ")
    shares = "/".join(p or "100" for p, _, _ in every)
    sms = "/".join(str(s) for _, s, _ in every)
    return (f", one GPU, MPS, SM share {shares} %",
            f"One GPU, MPS, SM share {shares} % ({sms} SMs): the {world.size} ranks run at once, each on its share; "
            "HBM is shared and there is no NVLink, so these are protocol, overlap and SM-split figures, not link "
            "bandwidth. ")
