"""Merge two partial attention results over disjoint key sets (ring attention's combine step):
L = m + ln(e^(La - m) + e^(Lb - m)) with m = max(La, Lb), O = e^(La - L)·Oa + e^(Lb - L)·Ob.

O tensors are (B, S, H, D) in bf16 or f16, LSE tensors (B, H, S) in f32 (natural log), as
:mod:`.attention` writes them. A grid-stride loop over 16-byte vectors (8 values of one row): two
``ld.global.v4.b32`` of O, two ``ld.global.f32`` of LSE, one ``st.global.v4.b32``; the thread holding a
row's first vector also stores its merged LSE when ``lse_out`` is not null. Rows both halves miss
(La = Lb = -inf) merge to O = 0, L = -inf.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import PTXBuildError
from ...isa import Kernel, Param, address, b32, f32, u32, u64

VALUES = 8            # 16-bit values per 16-byte vector
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


@dataclass(frozen=True)
class Config:
    dtype: str = "bf16"
    threads: int = 256

    def __post_init__(self):
        if self.dtype not in ("bf16", "f16") or self.threads not in (128, 256, 512):
            raise PTXBuildError(f"attention_merge Config: dtype bf16/f16, threads 128/256/512, got {self}")


def build(cfg: Config = Config()) -> Kernel:
    """Params: out, out_a, out_b, lse_out (0: not written), lse_a, lse_b (device addresses), vectors
    (B·S·H·D / 8), row_vectors (D / 8), heads, seq."""
    ptrs = ("out", "out_a", "out_b", "lse_out", "lse_a", "lse_b")
    k = Kernel(f"attention_merge_{cfg.dtype}", [Param(p, u64, pointer=True) for p in ptrs]
               + [Param(n, u32) for n in ("vectors", "row_vectors", "heads", "seq")], max_threads=cfg.threads)
    b = k.builder()
    out, out_a, out_b, lse_out, lse_a, lse_b = (b.load_param(p) for p in ptrs)
    vectors, row_vectors, heads, seq = (b.load_param(n) for n in ("vectors", "row_vectors", "heads", "seq"))
    stride = b.mul(u32, b.special("nctaid.x"), b.special("ntid.x"), mode="lo", name="stride")
    want_lse = b.setp("ne", u64, lse_out, 0, name="want_lse")
    pair = f"{cfg.dtype}x2"
    i = b.mad(u32, b.special("ctaid.x"), b.special("ntid.x"), b.special("tid.x"), mode="lo", name="vec")
    with b.loop("vectors") as lp:
        lp.break_if(b.setp("ge", u32, i, vectors, name="done"))
        row = b.div(u32, i, row_vectors, name="row")               # (batch, position, head) row of O
        head = b.rem(u32, row, heads, name="head")
        bs = b.div(u32, row, heads, name="bs")
        lse_index = b.mad(u32, b.mad(u32, b.div(u32, bs, seq), heads, head, mode="lo"), seq, b.rem(u32, bs, seq),
                          mode="lo", name="lse_index")
        lse_off = b.mul(u32, lse_index, 4, mode="wide", name="lse_off")
        la = b.ld(f32, address(b.add(u64, lse_a, lse_off)), space="global", name="la")
        lb = b.ld(f32, address(b.add(u64, lse_b, lse_off)), space="global", name="lb")
        top = b.max(f32, la, lb, name="top")
        top = b.selp(f32, 0.0, top, b.setp("eq", f32, top, float("-inf"), name="none"), name="top_used")
        wa = b.ex2(f32, b.mul(f32, b.sub(f32, la, top), LOG2E), ftz=True, name="wa")
        wb = b.ex2(f32, b.mul(f32, b.sub(f32, lb, top), LOG2E), ftz=True, name="wb")
        total = b.add(f32, wa, wb, name="total")
        inv = b.selp(f32, 0.0, b.rcp(f32, total, approx=True, ftz=True), b.setp("eq", f32, total, 0.0),
                     name="inv")
        sa, sb = b.mul(f32, wa, inv, name="sa"), b.mul(f32, wb, inv, name="sb")
        off = b.mul(u32, i, 16, mode="wide", name="off")
        va = b.ld(b32, address(b.add(u64, out_a, off)), space="global", vec=4, name="va")
        vb = b.ld(b32, address(b.add(u64, out_b, off)), space="global", vec=4, name="vb")
        merged = []
        for x, y in zip(va, vb):
            xs, ys = b.unpack(cfg.dtype, x, 2, name="xa"), b.unpack(cfg.dtype, y, 2, name="xb")
            lo, hi = (b.fma(f32, b.cvt(f32, cfg.dtype, xs[n]), sa, b.mul(f32, b.cvt(f32, cfg.dtype, ys[n]), sb),
                            rnd="rn", name="m") for n in (0, 1))
            merged.append(b.cvt(pair, f32, hi, lo, rnd="rn", name="packed"))
        b.st(b32, address(b.add(u64, out, off)), merged, space="global")
        first = b.setp("eq", u32, b.rem(u32, i, row_vectors), 0, combine="and", c=want_lse, name="row_first")
        lse = b.add(f32, top, b.mul(f32, b.lg2(f32, total, ftz=True), LN2), name="lse")
        b.st(f32, address(b.add(u64, lse_out, lse_off)), lse, space="global", pred=first)
        b.add(u32, i, stride, into=i)
    b.ret()
    return k


def reference(out_a, lse_a, out_b, lse_b):
    """float64 (O, LSE) of the merge; O (B, S, H, D), LSE (B, H, S)."""
    la, lb = (np.asarray(x, dtype=np.float64) for x in (lse_a, lse_b))
    top = np.maximum(la, lb)
    safe = np.where(np.isfinite(top), top, 0.0)
    wa, wb = np.exp(la - safe), np.exp(lb - safe)
    total = wa + wb
    with np.errstate(divide="ignore", invalid="ignore"):
        sa, sb = (np.where(total > 0, w / total, 0.0).transpose(0, 2, 1)[..., None] for w in (wa, wb))
        lse = safe + np.log(total)
    return sa * np.asarray(out_a, dtype=np.float64) + sb * np.asarray(out_b, dtype=np.float64), lse


def catalog():
    yield build(Config())
    yield build(Config(dtype="f16"))
