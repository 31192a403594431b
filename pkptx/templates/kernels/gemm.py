"""C = A · Bᵀ on Hopper tensor cores: TMA loads with 128-byte swizzle into a ring of stages, one
loader warp, two consumer warpgroups issuing m64n<BN>k16 wgmma from shared-memory descriptors, and a
persistent, L2-grouped tile order. The compute side of the LCSC template; GEMM+RS and AG+GEMM reuse it.

A is M×K row-major, B is N×K row-major (both K-major), C is M×N row-major (bf16 or f32), fp32 accumulate.
M, N, K must be multiples of 16; partial tiles are handled (TMA zero-fills, stores are masked).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import PTXBuildError
from ...isa import Param, b8, b32, f32, u32, u64, address
from ...primitives import wait_parity
from ...primitives.tma import tensor_map_param
from ...primitives.wgmma import advance, fragment_coords, smem_desc, warp_quad
from ..lcsc import Buffer, Ctx, Ring, Template

TILE_K = 64                      # one 128-byte swizzle row of bf16/f16
K_STEP = 16                      # wgmma K for 16-bit inputs


@dataclass(frozen=True)
class Config:
    dtype: str = "bf16"          # A and B
    out_dtype: str = "bf16"      # C: bf16 or f32
    tile_m: int = 128            # 64 rows per consumer warpgroup
    tile_n: int = 256
    stages: int = 4
    group_m: int = 8             # tile rows walked together for L2 reuse

    def __post_init__(self):
        if self.dtype not in ("bf16", "f16") or self.out_dtype not in ("bf16", "f32", "f16"):
            raise PTXBuildError(f"gemm Config: dtype bf16/f16 and out_dtype bf16/f16/f32, got {self}")
        if self.tile_m not in (64, 128) or self.tile_n % 16 or not 16 <= self.tile_n <= 256:
            raise PTXBuildError(f"gemm Config: tile_m 64 or 128, tile_n a multiple of 16 up to 256, got {self}")
        if self.smem_bytes > 227 * 1024:
            raise PTXBuildError(f"gemm Config needs {self.smem_bytes} bytes of shared memory, over 227 KB")

    @property
    def a_bytes(self) -> int:
        return self.tile_m * TILE_K * 2

    @property
    def b_bytes(self) -> int:
        return self.tile_n * TILE_K * 2

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory to launch with (stages plus the window's alignment slack)."""
        return self.stages * (self.a_bytes + self.b_bytes) + 1024

    @property
    def consumers(self) -> int:
        return self.tile_m // 64


def _tile(ctx: Ctx, cfg: Config, task):
    """Grouped tile order: ``group_m`` tile rows at a time, column by column within a group."""
    b = ctx.b
    tiles_m, tiles_n = ctx.param("tiles_m"), ctx.param("tiles_n")
    per_group = b.mul(u32, tiles_n, cfg.group_m, mode="lo", name="per_group")
    group = b.div(u32, task, per_group, name="group")
    first_m = b.mul(u32, group, cfg.group_m, mode="lo", name="first_m")
    rows = b.min(u32, b.sub(u32, tiles_m, first_m), cfg.group_m, name="group_rows")
    inner = b.rem(u32, task, per_group, name="in_group")
    tm = b.add(u32, first_m, b.rem(u32, inner, rows), name="tile_m")
    tn = b.div(u32, inner, rows, name="tile_n")
    return tm, tn


def _stage(ctx: Ctx, cfg: Config, it):
    """(stage, phase parity) of the it-th k-block a role handles (masks and shifts for 2^n stages:
    this sits on the consumers' critical path, and ptxas leaves a general division there)."""
    b = ctx.b
    if cfg.stages & (cfg.stages - 1) == 0:
        shift = cfg.stages.bit_length() - 1
        return (b.and_(b32, it, cfg.stages - 1, name="stage"),
                b.and_(b32, b.shr(u32, it, shift), 1, name="phase"))
    return b.rem(u32, it, cfg.stages, name="stage"), b.and_(b32, b.div(u32, it, cfg.stages), 1, name="phase")


def build(cfg: Config = Config()):
    t = Template(
        f"gemm_{cfg.dtype}_{cfg.out_dtype}_{cfg.tile_m}x{cfg.tile_n}_s{cfg.stages}",
        params=(Param("tmap_a", b8, 128, 64), Param("tmap_b", b8, 128, 64), Param("c", u64, pointer=True),
                Param("m", u32), Param("n", u32), Param("k", u32), Param("tiles_m", u32),
                Param("tiles_n", u32)),
        dynamic_buffers=(Buffer("smem_a", cfg.stages * cfg.a_bytes, 1024),
                         Buffer("smem_b", cfg.stages * cfg.b_bytes, 1024)),
        rings=(Ring("full", cfg.stages, 1), Ring("empty", cfg.stages, 4 * cfg.consumers)),
        consumers=cfg.consumers)
    out_bytes = 4 if cfg.out_dtype == "f32" else 2

    def prologue(ctx):
        b = ctx.b
        ctx.let(it=b.mov(u32, 0, name="it"),
                k_blocks=b.div(u32, b.add(u32, ctx.param("k"), TILE_K - 1), TILE_K, name="k_blocks"))

    def loader(ctx, task):
        """One lane walks the tile's k-blocks: wait for a free stage, announce its bytes, issue two TMA loads."""
        b = ctx.b
        tm, tn = _tile(ctx, cfg, task)
        with b.if_then(b.setp("eq", u32, ctx.role_tid, 0, name="loader_lane")):
            tmap_a, tmap_b = tensor_map_param(b, "tmap_a"), tensor_map_param(b, "tmap_b")
            for kb in b.range(0, ctx.param("k_blocks"), name="kb"):
                stage, phase = _stage(ctx, cfg, ctx.param("it"))
                wait_parity(b, ctx.rings["empty"].bar(b, stage), b.xor(b32, phase, 1), name="wait_free")
                full = ctx.rings["full"].bar(b, stage)
                b.mbarrier_arrive_expect_tx(full, cfg.a_bytes + cfg.b_bytes)
                k0 = b.mul(u32, kb, TILE_K, mode="lo", name="k0")
                a_dst = b.mad(u32, stage, cfg.a_bytes, ctx.smem["smem_a"], mode="lo", name="a_dst")
                b_dst = b.mad(u32, stage, cfg.b_bytes, ctx.smem["smem_b"], mode="lo", name="b_dst")
                b.tensor_load(address(a_dst), tmap_a, (k0, b.mul(u32, tm, cfg.tile_m, mode="lo")), full)
                b.tensor_load(address(b_dst), tmap_b, (k0, b.mul(u32, tn, cfg.tile_n, mode="lo")), full)
                b.add(u32, ctx.param("it"), 1, into=ctx.param("it"))

    def consumer(ctx, task):
        """Each warpgroup multiplies its 64 rows of the tile over every k-block, then stores its C slab."""
        b = ctx.b
        tm, tn = _tile(ctx, cfg, task)
        wg = b.shr(u32, ctx.role_tid, 7, name="wg")
        acc = b.regs(f32, cfg.tile_n // 2, name="acc")
        accumulate = b.setp("ne", u32, ctx.param("k_blocks"), 0, name="always")   # a true predicate
        lane0 = b.setp("eq", u32, b.and_(b32, ctx.role_tid, 31), 0, name="warp_leader")

        def release(it_done):
            stage, _ = _stage(ctx, cfg, it_done)
            b.mbarrier_arrive(ctx.rings["empty"].bar(b, stage), pred=lane0)

        for kb in b.range(0, ctx.param("k_blocks"), name="kb"):
            stage, phase = _stage(ctx, cfg, ctx.param("it"))
            wait_parity(b, ctx.rings["full"].bar(b, stage), phase, name="wait_full")
            a_tile = b.mad(u32, stage, cfg.a_bytes, ctx.smem["smem_a"], mode="lo")
            a_desc = smem_desc(b, b.mad(u32, wg, 64 * 128, a_tile, mode="lo"), name="a_desc")
            b_desc = smem_desc(b, b.mad(u32, stage, cfg.b_bytes, ctx.smem["smem_b"], mode="lo"), name="b_desc")
            b.wgmma_fence()
            for step in range(TILE_K // K_STEP):
                scale_d = b.setp("ne", u32, kb, 0, name="keep") if step == 0 else accumulate
                b.wgmma(acc, advance(b, a_desc, 2 * K_STEP * step), advance(b, b_desc, 2 * K_STEP * step),
                        n=cfg.tile_n, dtype=f32, atype=cfg.dtype, scale_d=scale_d)
            b.wgmma_commit_group()
            with b.if_then(b.setp("ne", u32, kb, 0, name="not_first"), uniform=True):
                b.wgmma_wait_group(1)                  # the previous k-block's wgmma are done with their stage
                release(b.sub(u32, ctx.param("it"), 1))
            b.add(u32, ctx.param("it"), 1, into=ctx.param("it"))
        b.wgmma_wait_group(0)
        release(b.sub(u32, ctx.param("it"), 1))
        _store(ctx, cfg, acc, tm, tn, wg, out_bytes)

    return t.build(num_tasks=lambda ctx: ctx.b.mul(u32, ctx.param("tiles_m"), ctx.param("tiles_n"), mode="lo"),
                   loader=loader, consumer=consumer, prologue=prologue)


def _store(ctx: Ctx, cfg: Config, acc, tm, tn, wg, out_bytes: int) -> None:
    """Masked stores of the warpgroup's 64 x tile_n slab from the wgmma fragment layout."""
    b = ctx.b
    frag_row, frag_col = warp_quad(b, ctx.role_tid)
    row0 = b.add(u32, b.mad(u32, tm, cfg.tile_m, b.mul(u32, wg, 64, mode="lo"), mode="lo"), frag_row, name="row0")
    col0 = b.mad(u32, tn, cfg.tile_n, frag_col, mode="lo", name="col0")
    n, m = ctx.param("n"), ctx.param("m")
    for half in (0, 8):
        row = b.add(u32, row0, half, name="row")
        with b.if_then(b.setp("lt", u32, row, m, name="row_ok")):
            line = b.mad(u64, b.cvt(u64, u32, row), b.cvt(u64, u32, n), b.cvt(u64, u32, col0), mode="lo")
            ptr = b.mad(u64, line, out_bytes, ctx.param("c"), mode="lo", name="c_ptr")
            cols_left = b.sub(u32, n, col0, name="cols_left")
            for chunk in range(cfg.tile_n // 8):
                lo, hi = acc[4 * chunk + (2 if half else 0)], acc[4 * chunk + (3 if half else 1)]
                ok = b.setp("gt", u32, cols_left, 8 * chunk, name="col_ok")
                dst = address(ptr, 8 * chunk * out_bytes)
                if out_bytes == 4:
                    b.st(f32, dst, (lo, hi), space="global", pred=ok)
                else:
                    pair = "bf16x2" if cfg.out_dtype == "bf16" else "f16x2"
                    b.st(b32, dst, b.cvt(pair, f32, hi, lo, rnd="rn"), space="global", pred=ok)


def reference(a: np.ndarray, b_nk: np.ndarray) -> np.ndarray:
    """float64 A · Bᵀ."""
    return a.astype(np.float64) @ b_nk.astype(np.float64).T


def catalog():
    yield build(Config())
    yield build(Config(out_dtype="f32"))
    yield build(Config(dtype="f16", tile_n=128, stages=6))
