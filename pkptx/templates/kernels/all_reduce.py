"""All-reduce over every rank of a symmetric buffer, in one launch.

one_shot: every rank reduces the whole buffer from all peers into its own output (out of place).
two_shot: rank r reduces slice r from all peers and writes it to every rank (in place allowed).
multicast: the multimem forms (switch reduction) instead of peer loads and stores.
Sizes are in 16-byte vectors; symmetric buffers are padded to 16 bytes, so any element count works.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import PTXBuildError
from ...isa import Param, u32
from ...primitives.layout import ParallelLayout
from ...primitives import all_reduce, reduce
from ..collective import build_collective, collective_template

SRC, DST = ParallelLayout("src"), ParallelLayout("dst")
DTYPES = ("bf16", "f16", "f32")
OPS = ("sum", "max", "min")


@dataclass(frozen=True)
class Config:
    dtype: str = "bf16"
    op: str = "sum"
    algorithm: str = "one_shot"
    multicast: bool = False
    threads: int = 512

    def __post_init__(self):
        for name, value, legal in (("dtype", self.dtype, DTYPES), ("op", self.op, OPS),
                                   ("algorithm", self.algorithm, ("one_shot", "two_shot"))):
            if value not in legal:
                raise PTXBuildError(f"all_reduce Config.{name} must be one of {legal}, got {value!r}")


def build(cfg: Config):
    t = collective_template(f"all_reduce_{cfg.algorithm}_{cfg.dtype}_{cfg.op}{'_mc' if cfg.multicast else ''}",
                            [Param("n_vec", u32)], [SRC, DST], threads=cfg.threads)
    two_shot = cfg.algorithm == "two_shot"

    def span(ctx):
        """[first, end) vectors this rank reduces."""
        b, n = ctx.b, ctx.p.n_vec
        if not two_shot:
            return b.mov(u32, 0), n
        per = b.div(u32, b.add(u32, n, b.sub(u32, ctx.world, 1)), ctx.world, name="per_rank")
        first = b.mul(u32, per, ctx.rank, mode="lo", name="first")
        return first, b.min(u32, b.add(u32, first, per), n, name="end")

    first = end = None          # the span, made before the task loop

    def comm_tasks(ctx):
        nonlocal first, end
        b = ctx.b
        first, end = span(ctx)
        return b.div(u32, b.add(u32, b.sub(u32, end, first), cfg.threads - 1), cfg.threads, name="ntasks")

    def communicator(ctx, task):
        b = ctx.b
        v = b.add(u32, first, b.mad(u32, task, cfg.threads, ctx.role_tid, mode="lo"), name="vec")
        with b.if_then(b.setp("lt", u32, v, end)):
            (all_reduce if two_shot else reduce)(b, ctx.layouts["src"], b.mul(u32, v, 16, mode="wide"), ty=cfg.dtype,
                                                 op=cfg.op, world=ctx.world, rank=ctx.rank, multicast=cfg.multicast,
                                                 dst=ctx.layouts["dst"])

    return build_collective(t, comm_tasks=comm_tasks, communicator=communicator, multicast=cfg.multicast)


def reference(inputs: list[np.ndarray], op: str = "sum") -> np.ndarray:
    """float64 reduction over the ranks' inputs."""
    stack = np.stack([x.astype(np.float64) for x in inputs])
    return {"sum": stack.sum, "max": stack.max, "min": stack.min}[op](axis=0)


def catalog():
    for algorithm in ("one_shot", "two_shot"):
        for dtype in DTYPES:
            yield build(Config(dtype=dtype, algorithm=algorithm))
    yield build(Config(dtype="bf16", algorithm="two_shot", multicast=True))
    yield build(Config(dtype="f32", op="max", algorithm="one_shot"))
