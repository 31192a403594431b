"""Device-side copies on one GPU, 128 B to 1 MiB: TMA bulk copy against a register copy and the copy engine.

- TMA: ``pkptx.templates.kernels.copy`` (one thread per CTA streams ``cp.async.bulk`` global -> shared ->
  global through an mbarrier ring; the chunk is chosen per size so about one CTA per SM has work);
- registers: a grid-stride ``ld.global.v4.b32`` / ``st.global.v4.b32`` kernel built here with the builder;
- copy engine: ``cuMemcpyDtoDAsync`` (no SMs), for reference.

Every copy is checked (destination poisoned, one run, bytes compared) before it is timed. Each figure is
the median of CUDA-event timings of a CUDA graph of ``BATCH`` back-to-back copies, divided by ``BATCH``,
so the host's launch cost (several microseconds from Python) does not hide the device time of small
copies. GB/s counts the bytes copied (not read + written).

    python -m pkptx bench copy [--record] [--quick]
"""
from __future__ import annotations

import sys

import numpy as np

from ..isa import Kernel, Param, address, b32, u32, u64
from ..launch import Device, LoadedKernel, Stream, capture, empty, from_numpy
from ..launch.driver import call
from ..ops.copy import bulk_copy as pkptx_bulk_copy
from ..templates.kernels import copy as bulk_copy
from .common import event_ms, parse_args, report
from .progress import progress

SIZES = [1 << k for k in range(7, 21)]          # 128 B .. 1 MiB
BATCH = 64
REG_THREADS = 256


def register_copy() -> Kernel:
    """``dst[v] = src[v]`` for 16-byte vectors v < n_vec, grid-stride: ``ld.global.v4.b32`` then
    ``st.global.v4.b32``."""
    k = Kernel("register_copy_v4", [Param("dst", u64, pointer=True), Param("src", u64, pointer=True),
                                    Param("n_vec", u32)], max_threads=REG_THREADS)
    b = k.builder()
    dst, src, n = b.load_param("dst"), b.load_param("src"), b.load_param("n_vec")
    v = b.mad(u32, b.special("ctaid.x"), b.special("ntid.x"), b.special("tid.x"), mode="lo", name="v")
    stride = b.mul(u32, b.special("nctaid.x"), b.special("ntid.x"), mode="lo", name="stride")
    with b.loop("copy") as lp:
        lp.break_if(b.setp("ge", u32, v, n, name="done"))
        off = b.mul(u32, v, 16, mode="wide", name="off")
        words = b.ld(b32, address(b.add(u64, src, off)), space="global", vec=4, name="w")
        b.st(b32, address(b.add(u64, dst, off)), words, space="global")
        b.add(u32, v, stride, into=v)
    b.ret()
    return k


def tma_config(nbytes: int, sms: int) -> bulk_copy.Config:
    """A chunk (power of two, 512 B to 16 KiB) that spreads the message over about one CTA per SM."""
    per_sm = -(-nbytes // sms)
    chunk = 512
    while chunk < per_sm and chunk < 16 * 1024:
        chunk *= 2
    return bulk_copy.Config(chunk=chunk, stages=4)


class Copies:
    """The three ways to copy ``nbytes`` from ``src`` to ``dst`` on ``stream``."""

    def __init__(self, device: Device, stream: Stream):
        self.device, self.stream, self.sms = device, stream, device.sm_count
        self.reg = LoadedKernel.load(register_copy().compile(), device)

    def tma(self, dst, src, nbytes: int) -> None:
        pkptx_bulk_copy(dst, src, nbytes, config=tma_config(nbytes, self.sms), ctas_per_sm=1, stream=self.stream)

    def register(self, dst, src, nbytes: int) -> None:
        n_vec = nbytes // 16
        grid = max(1, min(4 * self.sms, -(-n_vec // REG_THREADS)))
        self.reg[grid, REG_THREADS](dst, src, n_vec, stream=self.stream)

    def engine(self, dst, src, nbytes: int) -> None:
        call("cuMemcpyDtoDAsync", dst.ptr, src.ptr, nbytes, self.stream.cu)


def verify(name: str, fn, dst, src_host: np.ndarray, stream: Stream) -> None:
    """Poison ``dst``, copy once, and stop the benchmark unless the bytes arrived and nothing past them."""
    dst.fill(0xA5, stream)
    fn()
    stream.synchronize()
    got = dst.to_numpy(stream)
    n = src_host.size
    wrong = np.flatnonzero(got[:n] != src_host)
    if wrong.size or np.any(got[n:] != 0xA5):
        where = f"first wrong byte {int(wrong[0])}" if wrong.size else "it wrote past the end"
        raise SystemExit(f"{name}: the copy of {n} bytes is wrong ({where}); not timing it")


def timed(fn, stream: Stream, repeats: int) -> float:
    """Microseconds per copy: median event time of a graph of BATCH copies, divided by BATCH."""
    with capture(stream) as cap:
        for _ in range(BATCH):
            fn()
    return event_ms(lambda: cap.graph.launch(stream), stream, repeats=repeats, warmup=2) * 1e3 / BATCH


def main(argv=None) -> int:
    args = parse_args(__doc__.splitlines()[0], argv)
    device = Device(0).set_current()
    stream = Stream(device)
    copies = Copies(device, stream)
    sizes = SIZES[::3] + [SIZES[-1]] if args.quick else SIZES
    repeats = 5 if args.quick else 25
    rng = np.random.default_rng(0)
    rows = []
    for n in progress(sizes, "copy sizes"):
        host = rng.integers(0, 256, n, dtype=np.uint8)
        src = from_numpy(host, stream)
        dst = empty((n + 256,), np.uint8, stream=stream)      # 256 bytes past the end must stay poisoned
        stream.synchronize()
        row = [n]
        for name, method in (("TMA", copies.tma), ("registers", copies.register), ("copy engine", copies.engine)):
            fn = lambda m=method: m(dst, src, n)  # noqa: E731
            verify(f"{name} {n} B", fn, dst, host, stream)
            us = timed(fn, stream, repeats)
            row += [us, n / us / 1e3]
        cfg = tma_config(n, copies.sms)
        row.insert(1, f"{cfg.chunk}x{min(copies.sms, -(-n // cfg.chunk))}")
        rows.append(row)
    report("Copies on one GPU: TMA (cp.async.bulk) vs registers (ld/st.global.v4) vs copy engine",
           ["bytes", "TMA chunk x CTAs", "TMA us", "TMA GB/s", "reg us", "reg GB/s", "CE us", "CE GB/s"], rows,
           f"Median of CUDA events over {repeats} repeats of graphs of {BATCH} copies (per copy); "
           "GB/s = bytes copied / time. "
           "Each copy verified before timing.", args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
