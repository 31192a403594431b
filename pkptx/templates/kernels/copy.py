"""Bulk copy through shared memory with TMA (``cp.async.bulk``), one issuing thread per CTA.

A persistent grid walks ``chunk``-byte pieces of the buffer: chunk ``cta + j * nctas`` for j = 0, 1, ...
Each CTA keeps ``stages - 1`` loads in flight ahead of the store it issues, so one thread per SM
moves data at close to the copy engine's rate without occupying the SM's warps.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import PTXBuildError
from ...isa import Kernel, Param, address, b64, u32, u64
from ...primitives import StageRing, wait_parity


@dataclass(frozen=True)
class Config:
    chunk: int = 32 * 1024     # bytes per stage (multiple of 16)
    stages: int = 4

    def __post_init__(self):
        if self.chunk % 16 or not 16 <= self.chunk <= 1 << 20:
            raise PTXBuildError(f"Config.chunk must be a multiple of 16 in 16..1 MiB, got {self.chunk}")
        if not 2 <= self.stages <= 32:
            raise PTXBuildError(f"Config.stages must be in 2..32, got {self.stages}")

    @property
    def smem_bytes(self) -> int:
        return self.chunk * self.stages


def build(cfg: Config = Config()) -> Kernel:
    """Params: dst, src (device addresses), nbytes (u64, multiple of 16). Launch one block of 32 threads
    per SM with ``cfg.smem_bytes`` of dynamic shared memory."""
    k = Kernel(f"bulk_copy_c{cfg.chunk}_s{cfg.stages}",
               [Param("dst", u64, pointer=True), Param("src", u64, pointer=True), Param("nbytes", u64)],
               req_threads=32, dynamic_smem=cfg.smem_bytes)
    b = k.builder()
    data = b.mov(u32, k.dynamic_shared(align=128), name="stage0")
    ring = StageRing(b.mov(u32, k.shared("full", 8 * cfg.stages, align=8), name="full"), cfg.stages)
    leader = b.elect()
    ring.init(b, 1, leader=leader)
    with b.if_then(leader):
        dst, src, nbytes = b.load_param("dst"), b.load_param("src"), b.load_param("nbytes")
        cta, nctas = b.cvt(u64, u32, b.special("ctaid.x")), b.cvt(u64, u32, b.special("nctaid.x"))
        chunks = b.div(u64, b.add(u64, nbytes, cfg.chunk - 1), cfg.chunk)
        mine = b.div(u64, b.add(u64, b.sub(u64, chunks, cta, name="left"), b.sub(u64, nctas, 1)), nctas,
                     name="mine")   # chunks this CTA copies: ceil((chunks - cta) / nctas), cta < chunks

        def chunk_io(j, stage):
            """(global byte offset, byte count, shared address) of this CTA's j-th chunk."""
            off = b.mul(u64, b.mad(u64, j, nctas, cta, mode="lo"), cfg.chunk, mode="lo", name="off")
            size = b.cvt(u32, u64, b.min(u64, b.sub(u64, nbytes, off), cfg.chunk), name="size")
            smem = b.mad(u32, stage, cfg.chunk, data, mode="lo", name="smem")
            return off, size, smem

        def issue_load(j):
            stage = b.cvt(u32, u64, b.rem(u64, j, cfg.stages), name="stage")
            off, size, smem = chunk_io(j, stage)
            bar = ring.bar(b, stage)
            b.mbarrier_arrive_expect_tx(bar, size)
            b.bulk_load(address(smem), address(b.add(u64, src, off)), size, bar)

        with b.if_then(b.setp("lt", u64, cta, chunks)):
            for j in b.range(0, b.min(u64, mine, cfg.stages - 1), ty=u64, name="pro"):
                issue_load(j)
            for j in b.range(0, mine, ty=u64, name="j"):
                stage = b.cvt(u32, u64, b.rem(u64, j, cfg.stages), name="stage")
                parity = b.cvt(u32, u64, b.and_(b64, b.div(u64, j, cfg.stages), 1), name="parity")
                wait_parity(b, ring.bar(b, stage), parity)
                off, size, smem = chunk_io(j, stage)
                b.bulk_store(address(b.add(u64, dst, off)), address(smem), size)
                b.bulk_commit_group()
                ahead = b.add(u64, j, cfg.stages - 1, name="ahead")
                with b.if_then(b.setp("lt", u64, ahead, mine)):
                    b.bulk_wait_group(1, read=True)     # the store that last used this stage has read it
                    issue_load(ahead)
            b.bulk_wait_group(0)
    b.ret()
    return k


def reference(src: np.ndarray) -> np.ndarray:
    return src.copy()


def catalog():
    yield build(Config())
    yield build(Config(chunk=16 * 1024, stages=8))
