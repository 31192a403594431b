"""MoE combine (beyond the paper): every token's expert outputs come back to its rank and are summed
with its top-k weights, ``out[t] = sum_k w[t, k] · y_owner(t,k)[slot[t, k]]``, in one launch.

Pulled, not pushed: the token's rank knows from dispatch where each of its pairs landed (owner and
slot), so each thread reads its 16 bytes of every pair's row straight from the owner's ``y``
(``ld.global.v4.b32`` on the peer address), converts to f32, accumulates ``w · y`` with ``fma``, and
stores one 16-byte vector of ``out``: no scatter, no atomics, no staging buffer, and the sum runs
in a fixed order (k = 0, 1, ...), so results are deterministic. Dropped pairs (slot -1) add nothing.

Between the ranks' two barriers of :mod:`..collective`: the opening one means every owner's second
GEMM has written its ``y``; the closing one, that no owner overwrites ``y`` while a peer still reads
it. Not fused into the second GEMM's epilogue: a pushed store-add from the epilogue (GEMM+RS style)
would need f32 atomics per element into every token's row, where this pull moves each row once.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import PTXBuildError
from ...isa import Param, Vec, address, b32, f32, ptx_type, s32, u32, u64
from ...primitives.layout import ParallelLayout
from ...primitives.tile import _from_f32, _to_f32
from ..collective import build_collective, collective_template

Y = ParallelLayout("y")
PARAMS = (Param("ids", u64, pointer=True), Param("slots", u64, pointer=True), Param("weights", u64, pointer=True),
          Param("units", u32), Param("row_units", u32), Param("topk", u32), Param("local", u32),
          Param("out", u64, pointer=True))


@dataclass(frozen=True)
class Config:
    dtype: str = "bf16"            # y
    out_dtype: str = "bf16"        # out: bf16, f16 or f32
    threads: int = 512

    def __post_init__(self):
        if self.dtype not in ("bf16", "f16") or self.out_dtype not in ("bf16", "f16", "f32"):
            raise PTXBuildError(f"moe_combine Config: dtype bf16/f16, out_dtype bf16/f16/f32, got {self}")


def build(cfg: Config = Config()):
    t = collective_template(f"moe_combine_{cfg.dtype}_{cfg.out_dtype}", PARAMS, [Y], threads=cfg.threads)
    out_bytes = 4 if cfg.out_dtype == "f32" else 2

    def comm_tasks(ctx):
        b = ctx.b
        return b.div(u32, b.add(u32, ctx.p.units, cfg.threads - 1), cfg.threads, name="ntasks")

    def communicator(ctx, task):
        """Unit u: token u / row_units, 8 columns from (u % row_units) · 8."""
        b = ctx.b
        unit = b.mad(u32, task, cfg.threads, ctx.role_tid, mode="lo", name="unit")
        with b.if_then(b.setp("lt", u32, unit, ctx.p.units)):
            token = b.div(u32, unit, ctx.p.row_units, name="token")
            col = b.sub(u32, unit, b.mul(u32, token, ctx.p.row_units, mode="lo"), name="col_unit")
            acc = [b.mov(f32, 0.0, name="acc") for _ in range(8)]
            row_bytes = b.mul(u32, ctx.p.row_units, 16, mode="lo", name="y_row_bytes")
            for kk in b.range(0, ctx.p.topk, name="kk"):
                pair = b.mad(u32, token, ctx.p.topk, kk, mode="lo", name="pair")
                at = b.mul(u32, pair, 4, mode="wide", name="pair_offset")
                slot = b.ld(s32, address(b.add(u64, ctx.p.slots, at)), space="global", nc=True, name="slot")
                with b.if_then(b.setp("ge", s32, slot, 0, name="routed")):
                    expert = b.ld(u32, address(b.add(u64, ctx.p.ids, at)), space="global", nc=True,
                                  name="expert")
                    weight = b.ld(f32, address(b.add(u64, ctx.p.weights, at)), space="global", nc=True,
                                  name="weight")
                    owner = ctx.layouts["y"].peer(b, b.div(u32, expert, ctx.p.local, name="owner"))
                    src = b.mad(u64, b.cvt(u64, s32, slot), b.cvt(u64, u32, row_bytes),
                                b.add(u64, owner, b.mul(u32, col, 16, mode="wide")), mode="lo", name="y_src")
                    words = b.ld(b32, address(src), space="global", vec=4, name="y_word")
                    for a, v in zip(acc, _to_f32(b, list(words), ptx_type(cfg.dtype))):
                        b.fma(f32, v, weight, a, rnd="rn", into=a)
            out_row = b.mul(u32, b.mul(u32, ctx.p.row_units, 8, mode="lo"), out_bytes, mode="lo")
            dst = b.mad(u64, b.cvt(u64, u32, token), b.cvt(u64, u32, out_row),
                        b.add(u64, ctx.p.out, b.mul(u32, col, 8 * out_bytes, mode="wide")), mode="lo",
                        name="out_dst")
            words = _from_f32(b, acc, ptx_type(cfg.out_dtype))
            for i in range(0, len(words), 4):
                b.st(b32, address(dst, 4 * i), Vec(tuple(words[i:i + 4])), space="global")

    return build_collective(t, comm_tasks=comm_tasks, communicator=communicator, multicast=False)


def reference(ys: list[np.ndarray], ids: np.ndarray, slots: np.ndarray, weights: np.ndarray, local: int) -> np.ndarray:
    """float64 ``out[t] = sum_k w[t, k] · ys[owner][slot[t, k]]`` (pairs with slot -1 add nothing)."""
    out = np.zeros((ids.shape[0], ys[0].shape[1]))
    for (t, kk), slot in np.ndenumerate(slots):
        if slot >= 0:
            out[t] += float(weights[t, kk]) * ys[ids[t, kk] // local][slot].astype(np.float64)
    return out


def catalog():
    yield build(Config())
    yield build(Config(out_dtype="f32"))
