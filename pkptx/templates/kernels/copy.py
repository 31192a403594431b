"""Bulk copy through shared memory with TMA (``cp.async.bulk``), one issuing thread per CTA.

A persistent grid walks ``chunk``-byte pieces of the buffer: chunk ``cta + j * nctas`` for j = 0, 1, ...
Each CTA keeps ``stages - 1`` loads in flight ahead of the store it issues (:func:`stream_copy`), so one thread per CTA
moves data at close to the copy engine's rate without occupying the SM's warps; several small CTAs per
SM (``CTAS_PER_SM``) keep more independent streams in flight than one large one.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import PTXBuildError
from ...isa import Kernel, Param, u32, u64
from ...primitives import Pipeline, StageRing
from ...primitives.stream import stream_copy
from ...primitives.sync import Deadline


CTAS_PER_SM = 12


@dataclass(frozen=True)
class Config:
    chunk: int = 2 * 1024      # bytes per stage (multiple of 16)
    stages: int = 8
    # 1 GiB on the H200 copied fastest as 2 KiB x 8 stages at 12 CTAs per SM (bench/RESULTS.md)

    def __post_init__(self):
        if self.chunk % 16 or not 16 <= self.chunk <= 1 << 20:
            raise PTXBuildError(f"Config.chunk must be a multiple of 16 in 16..1 MiB, got {self.chunk}")
        if not 2 <= self.stages <= 32:
            raise PTXBuildError(f"Config.stages must be in 2..32, got {self.stages}")

    @property
    def smem_bytes(self) -> int:
        return self.chunk * self.stages


def build(cfg: Config = Config()) -> Kernel:
    """Params: dst, src (device addresses), nbytes (u64, multiple of 16), then the status words and
    timeout (``Deadline.params``) that bound its waits. Launch ``CTAS_PER_SM`` blocks of 32 threads per
    SM, each with ``cfg.smem_bytes`` of dynamic shared memory."""
    k = Kernel(f"bulk_copy_c{cfg.chunk}_s{cfg.stages}",
               [Param("dst", u64, pointer=True), Param("src", u64, pointer=True), Param("nbytes", u64),
                *Deadline.params()],
               req_threads=32, dynamic_smem=cfg.smem_bytes)
    b = k.builder()
    data = b.mov(u32, k.dynamic_shared(align=128), name="stage0")
    ring = StageRing(b.mov(u32, k.shared("full", 8 * cfg.stages, align=8), name="full"), cfg.stages)
    leader = b.elect()
    ring.init(b, 1, leader=leader)
    with b.if_then(leader):
        deadline = Deadline.start(b, rank=b.mov(u32, 0, name="rank"))
        pipe = Pipeline((ring,), uses=b.mov(u32, 0, name="uses"))   # a stage is freed by the store that read it
        stream_copy(b, pipe, b.load_param("dst"), b.load_param("src"), b.load_param("nbytes"), chunk=cfg.chunk,
                    buffer=data, deadline=deadline, first=b.cvt(u64, u32, b.special("ctaid.x")),
                    stride=b.cvt(u64, u32, b.special("nctaid.x")))
        b.bulk_wait_group(0)
    b.ret()
    return k


def reference(src: np.ndarray) -> np.ndarray:
    return src.copy()


def catalog():
    yield build(Config())
    yield build(Config(chunk=64 * 1024, stages=3))
