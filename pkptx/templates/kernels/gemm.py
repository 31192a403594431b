"""C = A · B on Hopper tensor cores: TMA loads with 128-byte swizzle into a ring of stages, one loader
warp, two consumer warpgroups issuing m64n<BN>k16 wgmma from shared-memory descriptors, a persistent,
L2-grouped tile order, and an epilogue through shared memory and TMA stores. The compute side of the
LCSC template; the fused kernels (GEMM+RS, AG+GEMM, GEMM+AR) reuse its roles through gemm_parts.

A is M x K row-major; B is N x K row-major (``b_layout="nk"``, C = A·Bᵀ) or K x N row-major
(``"kn"``, C = A·B); C is M x N row-major, bf16, f16 or f32; fp32 accumulation. M, N, K must be multiples
of 16, M any, N a multiple of 8 (16-byte rows for TMA); partial tiles are handled by TMA (zero fill on
loads, clipping on stores).

Tiles are 64, 128 or 256 rows (a 256-row tile: each consumer warpgroup two 64-row accumulator chains) by
a multiple of 8 columns up to 256. With B given N x K the width need not be whole 64-column boxes, so
the planner can fit the waves (3000x5000x2000: 396 tiles of 256 x 152 in three waves of 132): the TMA
epilogue stores the whole C boxes and the last columns from registers (``c``, ``m``, ``n`` parameters).

fp8 inputs (``dtype`` e4m3 or e5m2, B given N x K: wgmma reads 8-bit operands K-major only) run the same
kernel on 128-element k-blocks (the same 128-byte rows) with m64nNk32 wgmma; C = scale_a · scale_b · A·Bᵀ,
the two per-tensor scales read from f32 words in global memory (``scale_a``, ``scale_b`` parameters) and
applied to the accumulators before the store.

``pingpong=True`` builds the ping-pong form: the two consumer warpgroups take whole tiles in turn (a
128-row tile as two 64-row accumulator chains whose wgmma interleave), so one's epilogue runs while the
other's K loop has the tensor cores.

``k_split=2`` or ``4`` runs a k-block's four 16-deep wgmma steps over that many accumulators in turn
(summed once the K loop is done): a narrow tile's m64nNk16 products are short, and one chain of them
waits on each one's latency.

``split_k=True`` builds the deterministic split-K form (:mod:`..split_k`): work units are (tile, K slice)
pairs, ``splits`` (a parameter) slices per tile, partials in an f32 workspace, and the last slice to
arrive sums them in slice order and stores C.

``stream_k=True`` builds the stream-K form (:mod:`..stream_k`): the whole waves of tiles first, then the
tiles of the partly filled last wave cut into equal runs of k-blocks, one per block (``dp_tiles`` and
``sk_workers`` parameters), with the same deterministic f32 fixup through a workspace.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import PTXBuildError
from ...isa import Param, Reg, address, b8, f32, u32, u64
from ...isa.signature import Kind
from ...primitives import Pipeline, store_async
from ...primitives.tma import tensor_map_param
from ..gemm_parts import (BOX_COLS, FP8_TYPES, N_STEP, STAGING_BYTES, TILE_K, k_block_elements,
                          mma_k_block_chains, stage_accumulators, store_fragments, store_fragments_transposed,
                          tile_of)
from ..lcsc import Buffer, Ring, Template
from ..progress import TASK_COUNTER_PARAM, release_task_counter, task_counter_param
from ..split_k import k_range, reduce_slab, slice_of
from ..stream_k import SEGMENTS_PER_WORKER, segment_of, settle
from ..turns import Turns

SMEM_LIMIT = 227 * 1024


@dataclass(frozen=True)
class Config:
    dtype: str = "bf16"          # A and B: bf16, f16, or fp8 (e4m3, e5m2; scaled, B N x K)
    out_dtype: str = "bf16"      # C: bf16, f16 or f32
    b_layout: str = "nk"         # "nk": B is N x K; "kn": B is K x N
    tile_m: int = 128            # 64 rows per consumer warpgroup (256: two 64-row chains each)
    tile_n: int = 256
    stages: int = 4
    group_m: int = 8             # tile rows walked together for L2 reuse
    split_k: bool = False        # work units are (tile, K slice); see split_k
    stream_k: bool = False       # whole tiles, then the last wave's tiles cut into equal k-runs; see stream_k
    epilogue: str = "tma"        # "tma": through shared memory and TMA stores; "direct": from registers
    pingpong: bool = False       # whole tiles, alternately to two warpgroups that take turns at the tensor
                                 # cores: one's epilogue runs while the other's K loop has them (a 128-row
                                 # tile: two 64-row accumulator chains in one warpgroup)
    transpose_c: bool = False    # the direct epilogue stores the tile transposed: the kernel computes Cᵀ =
                                 # B·Aᵀ of a problem with a small M (pkptx.ops.gemm_plan's swap), M as N
    k_split: int = 1             # accumulators a chain's 16-deep k-steps alternate over (1, 2 or 4): a narrow
                                 # tile's wgmma then do not each wait for the one before; summed after the K loop
    drawn: bool = False          # tasks drawn from a counter (the task_counter parameter), not a fixed stride:
                                 # where not every block of the grid is resident at once (an MPS share)

    def __post_init__(self):
        if self.dtype not in ("bf16", "f16", *FP8_TYPES) or self.out_dtype not in ("bf16", "f32", "f16"):
            raise PTXBuildError(f"gemm Config: dtype bf16/f16/e4m3/e5m2 and out_dtype bf16/f16/f32, got {self}")
        if self.b_layout not in ("nk", "kn"):
            raise PTXBuildError(f"gemm Config.b_layout must be 'nk' or 'kn', got {self.b_layout!r}")
        if self.scaled and self.b_layout != "nk":
            raise PTXBuildError(f"gemm Config: fp8 wgmma reads B K-major only: it needs b_layout 'nk', got {self}")
        if self.tile_m not in (64, 128, 256) or self.tile_n % N_STEP or not N_STEP <= self.tile_n <= 256:
            raise PTXBuildError(f"gemm Config: tile_m 64, 128 or 256, tile_n a multiple of {N_STEP} up to 256, "
                                f"got {self}")
        if self.tile_m == 256 and (self.pingpong or self.split_k or self.stream_k):
            raise PTXBuildError(f"gemm Config: a 256-row tile runs whole, cooperatively (no pingpong, split-K or "
                                f"stream-K), got {self}")
        if self.tile_n % BOX_COLS and self.b_layout != "nk":
            raise PTXBuildError(f"gemm Config: a tile_n that is not a multiple of 64 needs b_layout 'nk' (B K x N "
                                f"loads whole 64-column boxes), got {self}")
        if self.epilogue == "tma" and self.tile_n < self.c_box[1]:
            raise PTXBuildError(f"gemm Config: the TMA epilogue stores whole {self.c_box[1]}-column boxes; a tile_n of "
                                f"{self.tile_n} needs the direct epilogue, got {self}")
        if self.transpose_c and self.epilogue != "direct":
            raise PTXBuildError(f"gemm Config: transpose_c stores from registers: it needs epilogue 'direct', "
                                f"got {self}")
        if self.k_split not in (1, 2, 4):
            raise PTXBuildError(f"gemm Config.k_split must be 1, 2 or 4, got {self.k_split}")
        if self.pingpong and (self.split_k or self.stream_k):
            raise PTXBuildError(f"gemm Config: pingpong takes no split-K or stream-K, got {self}")
        if self.split_k and self.stream_k:
            raise PTXBuildError(f"gemm Config: split_k and stream_k are two ways to cut K; pick one, got {self}")
        if self.acc_regs > 192:
            raise PTXBuildError(f"gemm Config: {self.acc_regs} accumulator registers a thread, over 192 (a ping-pong "
                                f"warpgroup holds the whole tile, k_split multiplies them), got {self}")
        if self.epilogue not in ("tma", "direct"):
            raise PTXBuildError(f"gemm Config.epilogue must be 'tma' or 'direct', got {self.epilogue!r}")
        if self.smem_bytes > SMEM_LIMIT:
            raise PTXBuildError(f"gemm Config needs {self.smem_bytes} bytes of shared memory, over 227 KB")

    @property
    def a_bytes(self) -> int:
        return self.tile_m * 128            # a k-block: 128-byte rows

    @property
    def b_bytes(self) -> int:
        return self.tile_n * 128

    @property
    def k_elements(self) -> int:
        """K elements of a k-block (:func:`..gemm_parts.k_block_elements`)."""
        return k_block_elements(self.dtype)

    @property
    def scaled(self) -> bool:
        """fp8 inputs: C carries the product of two per-tensor scales."""
        return self.dtype in FP8_TYPES

    @property
    def consumers(self) -> int:
        return 2 if self.pingpong else min(self.tile_m // 64, 2)

    @property
    def chains(self) -> int:
        """64-row accumulators a consumer warpgroup holds: a ping-pong warpgroup owns the whole tile, a
        cooperative one its share of the rows (two chains of a 256-row tile)."""
        return self.tile_m // 64 if self.pingpong else self.tile_m // (64 * self.consumers)

    @property
    def acc_regs(self) -> int:
        return self.chains * self.tile_n // 2 * self.k_split

    @property
    def rebalance(self) -> bool:
        """setmaxnreg: a consumer holding more than 128 accumulators takes the loader's registers."""
        return self.acc_regs > 128

    @property
    def stage_readers(self) -> int:
        """Warps that read a stage (its empty barrier's count): the one warpgroup of a ping-pong tile."""
        return 4 if self.pingpong else 4 * self.consumers

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory to launch with: stages, epilogue staging and alignment slack."""
        return self.stages * (self.a_bytes + self.b_bytes) + self.staging_bytes + 1024

    @property
    def staging_bytes(self) -> int:
        """The TMA epilogue's staging buffers (none for the direct epilogue)."""
        return self.consumers * STAGING_BYTES if self.epilogue == "tma" else 0

    @property
    def b_box(self) -> tuple[int, int]:
        """The B tensor map's box (rows, columns) in B's own row-major layout."""
        return (self.tile_n, self.k_elements) if self.b_layout == "nk" else (TILE_K, BOX_COLS)

    @property
    def c_box(self) -> tuple[int, int]:
        return (64, 128 // (4 if self.out_dtype == "f32" else 2))

    @property
    def c_tail(self) -> int:
        """Columns of a tile past its last whole C box (TMA epilogue): stored from registers."""
        return self.tile_n % self.c_box[1] if self.epilogue == "tma" else 0


GEMM_PARAMS = (Param("tmap_a", b8, 128, 64), Param("tmap_b", b8, 128, 64), Param("k", u32),
               Param("tiles_m", u32), Param("tiles_n", u32))


SPLIT_PARAMS = (Param("splits", u32), Param("split_ws", u64, pointer=True), Param("split_tickets", u64, pointer=True))
STREAM_PARAMS = (Param("dp_tiles", u32), Param("sk_workers", u32), Param("sk_ws", u64, pointer=True),
                 Param("sk_tickets", u64, pointer=True))
SCALE_PARAMS = (Param("scale_a", u64, pointer=True), Param("scale_b", u64, pointer=True))


def template(cfg: Config, name: str, *, params=(), layouts=(), tensor_maps=(), progress: bool = True,
             comm_first: bool = False) -> Template:
    """The LCSC template of a GEMM-shaped kernel: GEMM parameters, stage ring, staging buffers (and for
    split-K or stream-K its parameters and one shared word per consumer warpgroup for the drawn ticket)."""
    split = cfg.split_k or cfg.stream_k
    if cfg.drawn and TASK_COUNTER_PARAM not in params:
        raise PTXBuildError(f"{name}: drawn is the plain GEMM's (gemm.build); a composing kernel draws its tasks "
                            "through its own counters")
    every = (GEMM_PARAMS + (SPLIT_PARAMS if cfg.split_k else ()) + (STREAM_PARAMS if cfg.stream_k else ())
             + (SCALE_PARAMS if cfg.scaled else ()) + tuple(params))
    return Template(
        name, params=every, layouts=tuple(layouts),
        tensor_maps=tuple(tensor_maps), buffers=(Buffer("split_ticket", 4 * cfg.consumers, 4),) if split else (),
        dynamic_buffers=(Buffer("smem_a", cfg.stages * cfg.a_bytes, 1024),
                         Buffer("smem_b", cfg.stages * cfg.b_bytes, 1024))
        + ((Buffer("staging", cfg.staging_bytes, 1024),) if cfg.staging_bytes else ()),
        rings=(Ring("full", cfg.stages, 1), Ring("empty", cfg.stages, cfg.stage_readers)),
        consumers=cfg.consumers, progress=progress, comm_first=comm_first, rebalance=cfg.rebalance,
        prefetched=tuple(p.name for p in every if p.kind is Kind.TENSOR_MAP))


@dataclass
class KLoop:
    """What the GEMM's prologue makes for its roles (and a kernel that composes them): ``pipe``, the
    k-block ring (full: the loader's A and B bytes; empty: one arrival per consumer warp), stepped (stage
    and phase registers: a compare and two selects per k-block, where a count of uses needs a division
    by a stage count that is not a power of two, between one wgmma batch and the next); ``k_blocks`` =
    ceil(K / k-block elements); ``tiles_m``, the tile rows (the parameter, or what the composing kernel's
    prologue counts); ``scale``, fp8's scale_a · scale_b."""
    pipe: Pipeline | None = None
    k_blocks: Reg | None = None
    tiles_m: Reg | None = None
    turn: Reg | None = None          # ping-pong: the tiles the warpgroup has seen (whose turn: the parity)
    scale: Reg | None = None


def load_k_block(ctx, cfg: Config, loop: KLoop, kb, tmap_a, tmap_b, row, col, *b_extra) -> None:
    """The loader lane's work for k-block ``kb``: wait for a free stage, announce its bytes, TMA-load A's
    rows from ``row`` and B's from ``col`` (``b_extra``: B's further coordinates, e.g. the expert of a
    grouped GEMM), then advance the ring."""
    b, pipe = ctx.b, loop.pipe
    stage = pipe.acquire(b, deadline=ctx.deadline).stage
    full = pipe.commit(b, cfg.a_bytes + cfg.b_bytes, stage=stage)
    k0 = b.mul(u32, kb, cfg.k_elements, mode="lo", name="k0")
    a_dst = b.mad(u32, stage, cfg.a_bytes, ctx.smem["smem_a"], mode="lo", name="a_dst")
    b_dst = b.mad(u32, stage, cfg.b_bytes, ctx.smem["smem_b"], mode="lo", name="b_dst")
    b.tensor_load(address(a_dst), tmap_a, (k0, row), full)
    if cfg.b_layout == "nk":
        b.tensor_load(address(b_dst), tmap_b, (k0, col, *b_extra), full)
    else:       # 64-column boxes of 64 K-rows, side by side
        for box in range(cfg.tile_n // BOX_COLS):
            b.tensor_load(address(b_dst, box * TILE_K * 128), tmap_b,
                          (b.add(u32, col, box * BOX_COLS), k0, *b_extra), full)
    pipe.advance(b)


def roles(cfg: Config, *, store, tile=None, before_a=None, loop: KLoop | None = None) -> dict:
    """The GEMM's roles for ``Template.build``. Hooks for the fused kernels: ``tile(ctx, task)`` gives
    (tile_m, tile_n) (default: the grouped order), ``before_a(ctx, tile_m)`` runs on the loader lane
    before a tile's A rows are loaded (e.g. wait for them to arrive), ``store(ctx, acc, tm, tn, wg,
    staging)`` disposes of a warpgroup's finished 64 rows. With ``cfg.split_k`` a task is a (tile, K
    slice) unit, with ``cfg.stream_k`` a whole tile or a stream-K segment, and ``store`` runs only on the
    warpgroup that finishes the slab. ``loop``: where the prologue puts its registers, for a kernel that
    reads them too."""
    loop = loop or KLoop()
    tile = tile or (lambda ctx, task: tile_of(ctx, task, cfg.group_m))
    if cfg.scaled:
        store = scaled(store, loop)

    def unit(ctx, task):
        """(tile row, tile column, first k-block, end k-block, part) of a task; part: None for a whole
        tile, (tile index, K slice) for split-K, the :class:`..stream_k.Segment` for stream-K."""
        b = ctx.b
        if cfg.stream_k:
            seg = segment_of(b, task, dp_tiles=ctx.p.dp_tiles, workers=ctx.p.sk_workers,
                             tiles=b.mul(u32, loop.tiles_m, ctx.p.tiles_n, mode="lo", name="tiles"),
                             k_blocks=loop.k_blocks)
            return (*tile(ctx, seg.tile), seg.kb_first, seg.kb_end, seg)
        if not cfg.split_k:
            return (*tile(ctx, task), 0, loop.k_blocks, None)
        tile_index, k_slice = slice_of(b, task, ctx.p.splits)
        return (*tile(ctx, tile_index), *k_range(b, k_slice, ctx.p.splits, loop.k_blocks), (tile_index, k_slice))

    def prologue(ctx):
        b = ctx.b
        loop.pipe = Pipeline((ctx.rings["full"],), ctx.rings["empty"]).stepped(b)
        loop.k_blocks = b.div(u32, b.add(u32, ctx.p.k, cfg.k_elements - 1), cfg.k_elements, name="k_blocks")
        if cfg.scaled:
            loop.scale = b.mul(f32, b.ld(f32, address(ctx.p.scale_a), space="global", name="scale_a"),
                               b.ld(f32, address(ctx.p.scale_b), space="global", name="scale_b"), name="scale")
        loop.tiles_m = ctx.p.tiles_m
        if cfg.pingpong:
            loop.turn = b.mov(u32, 0, name="tiles_seen")
            Turns.start(b, cfg.consumers, ctx.tid)

    def loader(ctx, task):
        """One lane walks the unit's k-blocks: wait for a free stage, announce its bytes, issue the loads."""
        b = ctx.b
        tm, tn, kb_first, kb_end, _ = unit(ctx, task)
        with b.if_then(b.setp("eq", u32, ctx.role_tid, 0, name="loader_lane")):
            if before_a is not None:
                before_a(ctx, tm)
            tmap_a, tmap_b = tensor_map_param(b, "tmap_a"), tensor_map_param(b, "tmap_b")
            row, col = b.mul(u32, tm, cfg.tile_m, mode="lo"), b.mul(u32, tn, cfg.tile_n, mode="lo")
            for kb in b.range(kb_first, kb_end, name="kb"):
                load_k_block(ctx, cfg, loop, kb, tmap_a, tmap_b, row, col)

    def multiply(ctx, wg, kb_first, kb_end, issued=None):
        """The warpgroup's rows of the tile (its 64, or in ping-pong the whole tile, 64 rows a chain) over
        k-blocks [kb_first, kb_end): wait for each stage, issue its wgmma, free the stage before (its wgmma
        are done once one batch is left in flight). ``issued()`` runs once the last batch is issued.
        Returns the accumulators, one 64-row chain each."""
        b = ctx.b
        accs = [b.regs(f32, cfg.tile_n // 2, name=f"acc{c}" if c else "acc") for c in range(cfg.chains)]
        parts = [(acc, *(b.regs(f32, cfg.tile_n // 2, name=f"acc_k{s}") for s in range(1, cfg.k_split)))
                 for acc in accs]
        lane0 = b.setp("eq", u32, b.and_("b32", ctx.role_tid, 31), 0, name="warp_leader")
        pipe = loop.pipe
        a_rows = (ctx.smem["smem_a"] if cfg.pingpong
                  else b.mad(u32, wg, 64 * cfg.chains * 128, ctx.smem["smem_a"], mode="lo"))
        for kb in b.range(kb_first, kb_end, name="kb"):
            stage = pipe.wait(b, deadline=ctx.deadline, abandon=True, name="wait_full").stage
            a_tile = b.mad(u32, stage, cfg.a_bytes, a_rows, mode="lo", name="a_tile")
            b_tile = b.mad(u32, stage, cfg.b_bytes, ctx.smem["smem_b"], mode="lo", name="b_tile")
            mma_k_block_chains(b, [(chain, b.add(u32, a_tile, c * 64 * 128, name="a_chain") if c else a_tile)
                                   for c, chain in enumerate(parts)], b_tile, n=cfg.tile_n, dtype=cfg.dtype,
                               b_layout=cfg.b_layout, first=b.setp("eq", u32, kb, kb_first, name="first_k"))
            with b.if_then(b.setp("ne", u32, kb, kb_first, name="not_first"), uniform=True):
                b.wgmma_wait_group(1)          # the previous k-block's wgmma are done with their stage
                pipe.release(b, pipe.behind(b), pred=lane0)
            pipe.advance(b)
        if issued is not None:
            issued()
        b.wgmma_wait_group(0)
        pipe.release(b, pipe.behind(b), pred=lane0)
        for acc, *rest in parts:
            for part in rest:
                for total, value in zip(acc, part):
                    b.add(f32, total, value, into=total)
        return accs

    def staging_of(ctx, wg):
        b = ctx.b
        return (b.mad(u32, wg, STAGING_BYTES, ctx.smem["staging"], mode="lo", name="wg_staging")
                if cfg.staging_bytes else None)

    def consumer(ctx, task):
        """Each warpgroup multiplies its 64 rows of the tile over the unit's k-blocks, then stores them
        (split-K, stream-K: publishes its partial, and stores the sum if it completes the slab)."""
        b = ctx.b
        tm, tn, kb_first, kb_end, part = unit(ctx, task)
        wg = b.shr(u32, ctx.role_tid, 7, name="wg")
        if cfg.pingpong:
            alternate(ctx, wg, tm, tn, kb_first, kb_end)
            return
        if cfg.stream_k:                       # a worker's run may end before its second tile
            with b.if_then(b.setp("lt", u32, kb_first, kb_end, name="live_segment"), uniform=True):
                finish(ctx, wg, tm, tn, multiply(ctx, wg, kb_first, kb_end), part)
        else:
            finish(ctx, wg, tm, tn, multiply(ctx, wg, kb_first, kb_end), part)

    def finish(ctx, wg, tm, tn, accs, part):
        """Store the warpgroup's slabs (one a chain), or publish its partial and store the sum if it
        completes the slab (split-K and stream-K tiles: one chain)."""
        b = ctx.b
        staging = staging_of(ctx, wg)
        if part is None and cfg.chains > 1:
            for chain, acc in enumerate(accs):
                slab = b.mad(u32, wg, cfg.chains, chain, mode="lo", name="chain_slab")
                store(ctx, acc, tm, tn, wg, staging, slab=slab)
            return
        acc, = accs
        if part is None:
            store(ctx, acc, tm, tn, wg, staging)
            return
        fixup = dict(tile_n=cfg.tile_n, wg_tid=b.and_("b32", ctx.role_tid, 127, name="split_tid"),
                     barrier_id=b.add(u32, wg, 1, name="split_barrier"),
                     ticket_smem=b.mad(u32, wg, 4, ctx.smem["split_ticket"], mode="lo", name="ticket_word"))
        if cfg.stream_k:
            finished = settle(b, acc, part, consumers=cfg.consumers, wg=wg, workspace=ctx.p.sk_ws,
                              tickets=ctx.p.sk_tickets, **fixup)
        else:
            tile_index, k_slice = part
            finished = reduce_slab(b, acc, slab=b.mad(u32, tile_index, cfg.consumers, wg, mode="lo", name="slab"),
                                   k_slice=k_slice, splits=ctx.p.splits, workspace=ctx.p.split_ws,
                                   tickets=ctx.p.split_tickets, **fixup)
        with b.if_then(finished, uniform=True):
            store(ctx, acc, tm, tn, wg, staging)

    def alternate(ctx, wg, tm, tn, kb_first, kb_end):
        """Ping-pong: the block's tiles go to its two warpgroups in turn (``loop.turn``: the tiles seen).
        The owner waits for its turn, issues the K loop, hands the turn on and stores the tile while the
        other warpgroup's K loop has the tensor cores; the other skips the tile's stages. The turn also
        keeps the owner's first wait within one phase of the ring: the loader has filled every stage the
        other warpgroup waited for, so no stage is two fills behind the position waited for."""
        b = ctx.b
        turns = Turns.of(b, cfg.consumers, wg)
        mine = b.setp("eq", u32, b.and_("b32", loop.turn, 1), wg, name="my_tile")
        with b.if_else(mine, uniform=True) as (own, other):
            with own:
                turns.take(b)
                accs = multiply(ctx, wg, kb_first, kb_end, issued=lambda: turns.give(b))
                staging = staging_of(ctx, wg)
                for chain, acc in enumerate(accs):
                    store(ctx, acc, tm, tn, wg, staging, slab=chain)
            with other:
                loop.pipe.skip(b, b.sub(u32, kb_end, kb_first, name="skipped"))
        b.add(u32, loop.turn, 1, into=loop.turn)

    def num_tasks(ctx):
        b = ctx.b
        if cfg.stream_k:
            return b.mad(u32, ctx.p.sk_workers, SEGMENTS_PER_WORKER, ctx.p.dp_tiles, mode="lo", name="units")
        tiles = b.mul(u32, loop.tiles_m, ctx.p.tiles_n, mode="lo", name="tiles")
        return b.mul(u32, tiles, ctx.p.splits, mode="lo", name="units") if cfg.split_k else tiles

    return dict(num_tasks=num_tasks, prologue=prologue, loader=loader, consumer=consumer)


def scaled(store, loop: KLoop):
    """The store hook ``store`` after multiplying the finished accumulators by fp8's scale_a · scale_b
    (once per output: after the split-K sum, on the warpgroup that stores)."""
    def store_scaled(ctx, acc, *where, **options):
        for value in acc:
            ctx.b.mul(f32, value, loop.scale, into=value)
        store(ctx, acc, *where, **options)
    return store_scaled


def slab_origin(ctx, cfg: Config, tm, tn, slab):
    """(first row, first column) of 64-row slab ``slab`` of tile (tm, tn) (a warpgroup's, or in ping-pong
    one of its chains)."""
    b = ctx.b
    rows_before = 64 * slab if isinstance(slab, int) else b.mul(u32, slab, 64, mode="lo")
    return (b.mad(u32, tm, cfg.tile_m, rows_before, mode="lo", name="slab_row"),
            b.mul(u32, tn, cfg.tile_n, mode="lo", name="slab_col"))


def store_c(cfg: Config):
    """The store hook that TMA-stores a warpgroup's slab into the ``tmap_c`` parameter's tensor; a tile
    whose width is not whole C boxes (``cfg.c_tail``) stores its last columns from registers into the
    ``c`` parameter's array (a box past the tile would write into the next tile's columns)."""
    boxed = cfg.tile_n - cfg.c_tail

    def store(ctx, acc, tm, tn, wg, staging, slab=None):
        b = ctx.b
        row, col = slab_origin(ctx, cfg, tm, tn, wg if slab is None else slab)
        store_slab(ctx, cfg, list(acc)[:boxed // 2], wg, staging, tensor_map_param(b, "tmap_c"), row, col, n=boxed)
        if cfg.c_tail:
            store_fragments(b, list(acc)[boxed // 2:], b.and_("b32", ctx.role_tid, 127, name="wg_tid"), n=cfg.c_tail,
                            out_type=cfg.out_dtype, c_ptr=ctx.p.c, row0=row,
                            col0=b.add(u32, col, boxed, name="tail_col"), rows=ctx.p.m, cols=ctx.p.n)
    return store


def store_slab(ctx, cfg: Config, acc, wg, staging, tmap, row, col, *, n: int | None = None) -> None:
    """TMA-store a warpgroup's slab (its first ``n`` columns, default the tile's) at (row, col) of
    ``tmap``'s tensor, through its staging buffer."""
    b = ctx.b
    stage_accumulators(ctx, acc, wg, staging, n=n or cfg.tile_n, out_type=cfg.out_dtype,
                       issue=lambda sub, off: store_async(b, tmap, (b.add(u32, col, off), row), sub, commit=False))


def store_direct(cfg: Config):
    """The store hook that writes a warpgroup's slab from registers into the ``c`` parameter's array
    (``transpose_c``: into Cᵀ's place, C being ``n`` x ``m`` row-major)."""
    put = store_fragments_transposed if cfg.transpose_c else store_fragments

    def store(ctx, acc, tm, tn, wg, staging, slab=None):
        b = ctx.b
        row, col = slab_origin(ctx, cfg, tm, tn, wg if slab is None else slab)
        put(b, acc, b.and_("b32", ctx.role_tid, 127, name="wg_tid"), n=cfg.tile_n, out_type=cfg.out_dtype,
            c_ptr=ctx.p.c, row0=row, col0=col, rows=ctx.p.m, cols=ctx.p.n)
    return store


C_PARAM = Param("tmap_c", b8, 128, 64)
DIRECT_PARAMS = (Param("c", u64, pointer=True), Param("m", u32), Param("n", u32))


def name_of(cfg: Config) -> str:
    """The kernel's name: dtypes, B layout, tile, stages, and a suffix per option."""
    return (f"gemm_{cfg.dtype}_{cfg.out_dtype}_{cfg.b_layout}_{cfg.tile_m}x{cfg.tile_n}_s{cfg.stages}"
            f"{'_sk' if cfg.split_k else ''}{'_stk' if cfg.stream_k else ''}{'_d' if cfg.epilogue == 'direct' else ''}"
            f"{'_pp' if cfg.pingpong else ''}{'_t' if cfg.transpose_c else ''}"
            f"{f'_ks{cfg.k_split}' if cfg.k_split > 1 else ''}{'_dr' if cfg.drawn else ''}")


def output_of(cfg: Config) -> tuple:
    """(C's parameters, the store hook) of the config's epilogue."""
    if cfg.epilogue == "direct":
        return DIRECT_PARAMS, store_direct(cfg)
    return (C_PARAM,) + (DIRECT_PARAMS if cfg.c_tail else ()), store_c(cfg)


def build(cfg: Config = Config()):
    """The kernel. A block leaves once its TMA stores have read their staging (``wait_group.read``): no
    block signals after its stores, and the grid's completion makes the writes visible to what follows it
    on the stream, so waiting for the writes themselves would only lengthen every block's exit. With
    ``cfg.drawn`` the blocks draw their tasks from ``task_counter`` (two u32 words, zero before the first
    launch on a stream; each launch leaves them so): a block that starts late, behind other kernels, takes
    no fixed share of the tiles with it."""
    params, store = output_of(cfg)
    t = template(cfg, name_of(cfg), params=params + ((TASK_COUNTER_PARAM,) if cfg.drawn else ()),
                 progress=False)   # no block waits on another

    def epilogue(ctx):
        if cfg.epilogue == "tma":
            ctx.b.bulk_wait_group(0, read=True)
        if cfg.drawn:
            release_task_counter(ctx, task_counter_param(ctx))

    drawn = dict(task_counter=task_counter_param) if cfg.drawn else {}
    return t.build(**roles(cfg, store=store), epilogue=epilogue, **drawn)


def reference(a: np.ndarray, b: np.ndarray, b_layout: str = "nk") -> np.ndarray:
    """float64 A · Bᵀ ("nk") or A · B ("kn")."""
    b64 = b.astype(np.float64)
    return a.astype(np.float64) @ (b64.T if b_layout == "nk" else b64)


def catalog():
    yield build(Config())
    yield build(Config(out_dtype="f32"))
    yield build(Config(b_layout="kn"))
    yield build(Config(dtype="f16", tile_n=128, stages=6))
    yield build(Config(split_k=True))
    yield build(Config(stream_k=True))
    yield build(Config(tile_n=240, stages=4))
    yield build(Config(tile_m=64, stages=5, split_k=True, out_dtype="f32"))
    yield build(Config(epilogue="direct"))
    yield build(Config(tile_n=16, stages=8, split_k=True, epilogue="direct", transpose_c=True))
    yield build(Config(tile_m=64, tile_n=16, stages=12, epilogue="direct", transpose_c=True, k_split=4))
    yield build(Config(tile_m=64, tile_n=128, stages=8, k_split=2))
    yield build(Config(tile_n=192, stages=4, pingpong=True))
    yield build(Config(dtype="e4m3"))
    yield build(Config(dtype="e5m2", tile_m=64, tile_n=128, stages=8, split_k=True, out_dtype="f32", k_split=2))
    yield build(Config(dtype="e4m3", tile_m=64, tile_n=16, stages=12, epilogue="direct", transpose_c=True, k_split=4))
