"""Attention forward, O = softmax(scale · Q·Kᵀ + mask) · V, on Hopper tensor cores (FlashAttention-style):
one loader warp TMA-loads Q, K and V into 128-byte-swizzled shared memory on mbarrier rings; each
consumer warpgroup owns 64 query rows of a block, computes S = Q·Kᵀ with wgmma from shared memory,
runs the online softmax in registers with exp2 (scale·log2(e) folded in), and accumulates O += P·V with
P from registers as wgmma's A operand. The launched configuration (:func:`default_config`) has three
consumer warpgroups that interleave by themselves, two Q buffers (the loader fetches the next task's Q
while the consumers finish the current one; at D=128 they fit because O leaves through the warpgroup's
Q tile) and, at D=128, setmaxnreg. Other schedules are options: FlashAttention-3's intra-warpgroup
overlap (block j's Q·Kᵀ issued before block j-1's P·V), its ping-pong of warpgroups, a rescale
threshold, and the plain loop with P·V left in flight (``pv_in_flight``: block j's P·V and block j+1's
Q·Kᵀ share one wait, so a warpgroup waits once a block instead of twice, for no extra registers). A
persistent grid walks (batch, head, query block) tasks, head by head, the last (with a causal mask the
longest) query block first, so the blocks running at once share their heads' K/V in L2.
The op's blocks draw the tasks from a counter as they free up (``Config.drawn``): that balances causal
lengths, and under MPS, where a block may start only when another ends, a fixed stride took 1.4-1.7x
the time beside other ranks' kernels. The fixed stride remains an option (``drawn=False``); with a mask
it takes the tasks query block by query block (every block a mix of long and short ones, at the price
of K/V read from HBM once per query block: 8-30 % slower at 1-16k keys on the H100).
Query blocks end at the last row: a partial block is the first one, whose padding rows (whole
warpgroups, before row 0) cost least. Flat tasks (``Config.flat``, :class:`FlatPlan`) have no padding: a
task is the next ``consumers`` 64-row slices of the (batch, head, slice) sequence, and one that ends a
head and begins the next streams both heads' K/V, interleaved. The compute side of the LCSC template;
attention_parts holds the layout and the softmax.

Layout (B, S, H, D), contiguous, bf16 or f16, D 64 or 128. K/V heads divide Q heads (GQA: Q head h
reads K/V head h // group). Any sequence lengths: the tensor maps are 4-D (D, H, S, B), so TMA
zero-fills rows past a batch's end and clips them when storing O; scores of keys past S_k are -inf.
Causal masks are aligned bottom-right: row i sees key j <= i + S_k - S_q (``diag``; for non-causal
``diag = S_k``). Optionally writes the natural-log log-sum-exp of each row, f32, (B, H, S_q); rows that
see no key get O = 0 and LSE = -inf.
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...errors import PTXBuildError
from ...isa import Param, Reg, Vec, address, b8, b32, f32, s32, u32, u64
from ...primitives import Pipeline, store_async
from ...primitives.tma import tensor_map_param
from ...primitives.wgmma import warp_quad
from ..attention_parts import (BOX_BYTES, BOX_COLS, BOX_ROWS, K_STEP, LN2, NEG_INF, ROWS, SUM_COLS, half_regs,
                               k_box_offset, mask_columns, online_softmax, p_operand, pv_block, q_box_offset,
                               quad_reduce, rescale, v_box_offset)
from ..gemm_parts import mma_k_block, stage_accumulators
from ..lcsc import WARPGROUP, Buffer, Ring, Template
from ..progress import TASK_COUNTER_PARAM, release_task_counter, task_counter_param
from ..turns import Turns

SMEM_LIMIT = 227 * 1024
TENSORS = ("q", "k", "v", "o")


@dataclass(frozen=True)
class Config:
    dtype: str = "bf16"          # Q, K, V and O
    head_dim: int = 128
    block_k: int = 128           # keys per K/V stage
    consumers: int = 2           # warpgroups of 64 query rows per block
    stages: int = 2
    q_stages: int = 2            # Q buffers: the next task's Q loads while this one runs
    rebalance: bool = False      # setmaxnreg: the loader warpgroup's registers go to the consumers
    overlap: bool = False        # block j's Q·Kᵀ issued before block j-1's P·V (FlashAttention-3's overlap)
    pingpong: bool = False       # consumer warpgroups issue their products in turn (FlashAttention-3's ping-pong)
    rescale_threshold: int = 0   # log2 units: O is rescaled only when a row's maximum grows by more (0: always)
    o_in_q: bool = False         # O goes out through the warpgroup's Q tile: no staging buffer (room for 2 Q buffers)
    drawn: bool = False          # tasks drawn from a counter as blocks free up (the op's choice), else a fixed stride
    flat: bool = False           # tasks are runs of 64-row slices that may span two heads (:class:`FlatPlan`)
    pv_in_flight: bool = False   # the plain loop: block j's P·V in flight until block j+1's Q·Kᵀ is waited for
    sum_in_pv: bool = False      # D=64: P·V sums P too (V's next 64 columns are a box of ones), no add tree
    half_blocks: bool = False    # a block whose last 64 keys no row of the warpgroup sees runs at 64 keys

    def __post_init__(self):
        if self.dtype not in ("bf16", "f16") or self.head_dim not in (64, 128):
            raise PTXBuildError(f"attention Config: dtype bf16/f16 and head_dim 64/128, got {self}")
        if self.block_k not in (64, 128) or self.consumers not in (1, 2, 3) or self.stages < 1 or \
                self.q_stages not in (1, 2):
            raise PTXBuildError(f"attention Config: block_k 64/128, consumers 1-3, stages >= 1, q_stages 1-2, "
                                f"got {self}")
        if self.pingpong and self.consumers < 2:
            raise PTXBuildError(f"attention Config: pingpong takes turns between 2 or more consumer warpgroups, "
                                f"got {self}")
        if self.half_blocks and (self.block_k != 2 * BOX_ROWS or self.overlap or self.pv_in_flight):
            raise PTXBuildError(f"attention Config: half_blocks runs the plain loop's blocks at 64 of 128 keys: it "
                                f"needs block_k 128 and no overlap or pv_in_flight, got {self}")
        if self.pv_in_flight and (self.overlap or self.pingpong or self.stages < 2):
            raise PTXBuildError(f"attention Config: pv_in_flight is a form of the plain loop (no overlap, no "
                                f"pingpong) that frees a K/V stage only after the next block's Q·Kᵀ: it needs 2 "
                                f"stages or more, got {self}")
        if self.flat and (self.overlap or self.pingpong):
            raise PTXBuildError(f"attention Config: flat tasks take the plain loop (no overlap, no pingpong), "
                                f"got {self}")
        if self.sum_in_pv and self.head_dim != BOX_COLS:
            raise PTXBuildError(f"attention Config: sum_in_pv puts a box of ones where V's second 64 columns would "
                                f"be, so head_dim must be {BOX_COLS}, got {self}")
        if self.rescale_threshold not in range(17):
            raise PTXBuildError(f"attention Config: rescale_threshold in [0, 16] (P stays below 2^threshold), "
                                f"got {self}")
        if self.smem_bytes > SMEM_LIMIT:
            raise PTXBuildError(f"attention Config needs {self.smem_bytes} bytes of shared memory, over 227 KB")

    @property
    def rows(self) -> int:
        """Query rows per block (task)."""
        return ROWS * self.consumers

    @property
    def q_bytes(self) -> int:
        return self.rows * self.head_dim * 2

    @property
    def kv_bytes(self) -> int:
        """Bytes of one K (or V) stage."""
        return self.block_k * self.head_dim * 2

    @property
    def staging_bytes(self) -> int:
        """Per consumer warpgroup: its 64 output rows in 16-bit."""
        return ROWS * self.head_dim * 2

    @property
    def o_cols(self) -> int:
        """O's accumulator columns: the head dimension, and with ``sum_in_pv`` the columns that sum P."""
        return self.head_dim + (SUM_COLS if self.sum_in_pv else 0)

    @property
    def smem_bytes(self) -> int:
        return (self.q_stages * self.q_bytes + 2 * self.stages * self.kv_bytes
                + (0 if self.o_in_q else self.consumers * self.staging_bytes)
                + (BOX_BYTES if self.sum_in_pv else 0) + 1024)

    @property
    def name(self) -> str:
        return (f"attention_{self.dtype}_d{self.head_dim}_k{self.block_k}_w{self.consumers}_s{self.stages}"
                f"_q{self.q_stages}" + ("_r" if self.rebalance else "") + ("_o" if self.overlap else "")
                + ("_p" if self.pingpong else "")
                + (f"_t{self.rescale_threshold}" if self.rescale_threshold else "") + ("_oq" if self.o_in_q else "")
                + ("_f" if self.flat else "") + ("_v" if self.pv_in_flight else "") + ("_l" if self.sum_in_pv else "")
                + ("_h" if self.half_blocks else "") + ("_d" if self.drawn else ""))


PARAMS = tuple(Param(f"tmap_{t}", b8, 128, 64) for t in TENSORS) + (
    Param("lse", u64, pointer=True), Param("tasks", u32), Param("q_blocks", u32), Param("heads", u32),
    Param("group", u32), Param("seq_q", u32), Param("seq_k", u32), Param("diag", s32), Param("scale_log2", f32),
    Param("by_query_block", u32), TASK_COUNTER_PARAM, Param("slices", u32))


def template(cfg: Config) -> Template:
    return Template(
        cfg.name, params=PARAMS,
        dynamic_buffers=(Buffer("smem_q", cfg.q_stages * cfg.q_bytes, 1024), Buffer("smem_k", cfg.stages * cfg.kv_bytes, 1024),
                         Buffer("smem_v", cfg.stages * cfg.kv_bytes, 1024))
        + (() if cfg.o_in_q else (Buffer("staging", cfg.consumers * cfg.staging_bytes, 1024),))
        + ((Buffer("ones", BOX_BYTES, 1024),) if cfg.sum_in_pv else ()),    # last: V's boxes reach it forwards
        rings=(Ring("q_full", cfg.q_stages, 1), Ring("q_empty", cfg.q_stages, 4 * cfg.consumers), Ring("k_full", cfg.stages, 1),
               Ring("v_full", cfg.stages, 1), Ring("kv_empty", cfg.stages, 4 * cfg.consumers)),
        consumers=cfg.consumers, rebalance=cfg.rebalance, producer_regs=32 if cfg.consumers == 3 else 40,
        progress=False)   # no block waits on another


@dataclass(frozen=True)
class Task:
    """What the loader and the consumers need of one task: its (batch, head, query block), how many
    query rows its Q chunk has (rows at or past it are neither stored nor given an LSE), the TMA
    coordinates of Q/O rows and the LSE index of a row."""
    batch: Reg
    head: Reg
    qb: Reg
    rows: Reg
    q_coords: Callable       # (column, row) -> coordinates in tmap_q / tmap_o
    lse_index: Callable      # row -> u32 index into lse
    q_map: Callable = None   # () -> Q's tensor map address (default: tmap_q); loader only
    before_q: Callable = None    # () -> None, emitted by the loader before it loads Q
    o_map: Callable = None   # () -> O's tensor map address (default: tmap_o)
    o_coords: Callable = None    # (column, row) -> coordinates in the O map (default: q_coords)
    lse_ptr: Reg = None      # where LSE goes (default: the lse parameter; 0: nowhere)
    shift: Callable = None   # block rows -> rows (a multiple of 64) the first query block starts before row 0

    def first_row(self, b, cfg: "Config"):
        """The query block's first row, ``qb * rows - shift`` (.u32 bits). Rows before 0 are padding: whole
        warpgroups, whose Q TMA zero-fills and whose O is not stored (a TMA store at a negative coordinate
        is an illegal instruction on the H200), and no LSE is written for them."""
        first = b.mul(u32, self.qb, cfg.rows, mode="lo", name="first_row")
        return first if self.shift is None else b.sub(u32, first, self.shift(cfg.rows), name="first_row")

    def stored(self, b, wg_row):
        """When a warpgroup stores its O (None: always): not for padding rows before row 0."""
        return None if self.shift is None else b.setp("ge", s32, wg_row, 0, name="wg_rows_stored")


@dataclass(frozen=True)
class Keys:
    """One run of K/V blocks a task attends to: key j of the run is visible to row i when ``j < seq_k``
    and ``j <= i + diag``; the loader's tensor maps and coordinates for key ``key``, and what it must
    do before loading block ``kb`` (e.g. wait for the block to arrive from a peer)."""
    seq_k: Reg
    diag: Reg
    tmap: Callable = None            # "k" | "v" -> tensor map address (loader only)
    coords: Callable = None          # (column, key) -> coordinates (loader only)
    before_load: Callable = None     # kb -> None (loader only)


def zigzag(ctx, task):
    """The task a compute block runs for its ``task``: in every other full round of the compute workers'
    tasks the blocks take the round in reverse. Tasks come longest first, so a block that took a round's
    longest takes the next round's shortest (in plain round-robin the first blocks get ~3 % more causal
    work than the average, and the launch waits for them)."""
    b = ctx.b
    workers = b.sub(u32, b.special("nctaid.x"), ctx.p.num_comm_sms, name="compute_blocks")
    rnd = b.div(u32, task, workers, name="round")
    end = b.mad(u32, rnd, workers, workers, mode="lo", name="round_end")
    flip = b.setp("le", u32, end, ctx.p.tasks, combine="and",
                  c=b.setp("ne", u32, b.and_("b32", rnd, 1), 0, name="odd_round"), name="reversed_round")
    mirror = b.sub(u32, b.add(u32, b.sub(u32, end, 1), b.mul(u32, rnd, workers, mode="lo")), task, name="mirrored")
    return b.selp(u32, mirror, task, flip, name="balanced_task")


class LocalTasks:
    """What the single-GPU plans share: the launch's ``tasks`` parameter counts the tasks, and the
    consumers wait for the loader within the launch's deadline."""

    def tasks(self, ctx):
        return ctx.p.tasks

    def consumer_deadline(self, ctx):
        """The budget of the consumers' waits for the loader."""
        return ctx.deadline


@dataclass(frozen=True)
class Slice:
    """One warpgroup's share of a flat task: 64 query rows of one (batch, head). ``bh`` = batch·heads + head
    tells a task's two runs apart; ``pos`` is the slice's place in its head (its first row / 64); ``rows``
    is S_q, or 0 for a warpgroup past the last slice (its Q loads zero-fill; it stores no O and no LSE)."""
    index: Reg
    batch: Reg
    head: Reg
    bh: Reg
    pos: Reg
    rows: Reg

    def row(self, b):
        return b.mul(u32, self.pos, ROWS, mode="lo", name="slice_row")

    @staticmethod
    def of(ctx, index) -> "Slice":
        """The slice at ``index`` of the whole sequence (``q_blocks`` a head, ``slices`` in all): two divisions."""
        b = ctx.b
        bh = b.div(u32, index, ctx.p.q_blocks, name="slice_bh")
        batch = b.div(u32, bh, ctx.p.heads, name="batch")
        return Slice(index, batch, b.sub(u32, bh, b.mul(u32, batch, ctx.p.heads, mode="lo"), name="head"), bh,
                     b.sub(u32, index, b.mul(u32, bh, ctx.p.q_blocks, mode="lo"), name="slice_pos"),
                     Slice.exists(ctx, index))

    @staticmethod
    def exists(ctx, index):
        b = ctx.b
        return b.selp(u32, ctx.p.seq_q, 0, b.setp("lt", u32, index, ctx.p.slices, name="slice_exists"),
                      name="slice_rows")

    def after(self, ctx, k) -> "Slice":
        """The slice ``k`` (at most ``q_blocks``) after this one: no division, one head boundary at most."""
        b, p = ctx.b, ctx.p
        pos = b.add(u32, self.pos, k, name="slice_pos")
        wrap = b.setp("ge", u32, pos, p.q_blocks, name="next_head")
        pos = b.selp(u32, b.sub(u32, pos, p.q_blocks), pos, wrap, name="slice_pos")
        step = b.selp(u32, 1, 0, wrap, name="head_step")
        head = b.add(u32, self.head, step, name="head")
        wrap = b.setp("eq", u32, head, p.heads, name="next_batch")
        index = b.add(u32, self.index, k, name="slice")
        return Slice(index, b.add(u32, self.batch, b.selp(u32, 1, 0, wrap), name="batch"),
                     b.selp(u32, 0, head, wrap, name="head"), b.add(u32, self.bh, step, name="slice_bh"), pos,
                     Slice.exists(ctx, index))


class FlatTask(Task):
    """One warpgroup's :class:`Task` in a flat task: it stores its O only when its slice exists."""

    def stored(self, b, wg_row):
        return b.setp("ne", u32, self.rows, 0, name="wg_rows_stored")


@dataclass(frozen=True)
class Runs:
    """A flat task's K/V: run 0 is the (batch, head) of its first slice, run 1 that of its last when it
    differs; the blocks each run's rows see (run 1: 0 when there is none)."""
    first: Slice
    last: Slice
    two: Reg
    blocks: tuple

    def late(self, b, s: Slice):
        """Whether slice ``s`` is in run 1."""
        return b.setp("ne", u32, s.bh, self.first.bh, name="late_run")


class FlatPlan(LocalTasks):
    """Single GPU: the sequence of (batch, head, 64-row slice), a head's slices in order, cut into tasks
    of ``consumers`` slices, in this order (drawn or by a fixed stride alike). A task that ends one head
    and begins the next has two runs of K/V, which the loader interleaves block by block; a warpgroup
    computes its run's blocks and passes over the other's. So no warpgroup pads a partial query block
    (192-row blocks leave 2 of every 18 warpgroups idle at 1024 rows); only the last task may have
    warpgroups past the end. Two runs at most: ceil(S_q / 64) >= consumers - 1 (the op's rule). Without a
    mask every task is equally long; with one, a run of a head's first rows sits beside a run of the
    previous head's last rows."""

    @staticmethod
    def slices(ctx, cfg: Config, task, wg=None) -> tuple:
        """The task's first and last slices, and warpgroup ``wg``'s (a register; None: every warpgroup's)."""
        first = Slice.of(ctx, ctx.b.mul(u32, task, cfg.consumers, mode="lo", name="slice"))
        if wg is None:
            every = [first] + [first.after(ctx, k) for k in range(1, cfg.consumers)]
            return first, every[-1], every
        return first, first.after(ctx, cfg.consumers - 1), first.after(ctx, wg)

    @staticmethod
    def runs(ctx, cfg: Config, first: Slice, last: Slice) -> Runs:
        """The runs of the task whose first and last slices these are."""
        b = ctx.b
        keys = Keys(ctx.p.seq_k, ctx.p.diag)
        two = b.setp("ne", u32, last.bh, first.bh, name="two_runs")
        last_end = b.min(u32, b.add(u32, last.row(b), ROWS), ctx.p.seq_q, name="rows_end")
        first_end = b.selp(u32, ctx.p.seq_q, last_end, two, name="rows_end")
        late_blocks = b.selp(u32, blocks_before(b, cfg, last_end, keys), 0, two, name="run1_blocks")
        return Runs(first, last, two, (blocks_before(b, cfg, first_end, keys), late_blocks))

    @staticmethod
    def run_keys(ctx, s: Slice) -> Keys:
        """The loader's keys of the run of slice ``s``."""
        b = ctx.b
        kv_head = b.div(u32, s.head, ctx.p.group, name="kv_head")
        maps = {x: tensor_map_param(b, f"tmap_{x}") for x in "kv"}
        return Keys(ctx.p.seq_k, ctx.p.diag, maps.__getitem__, lambda col, key: (col, kv_head, key, s.batch))

    @staticmethod
    def slice_task(ctx, s: Slice) -> FlatTask:
        """The consumer's Task of its warpgroup's slice (for :func:`finish`)."""
        b, seq_q = ctx.b, ctx.p.seq_q
        return FlatTask(s.batch, s.head, None, s.rows, lambda col, row: (col, s.head, row, s.batch),
                        lambda row: b.mad(u32, s.bh, seq_q, row, mode="lo", name="lse_index"))


class Plan(LocalTasks):
    """Single-GPU attention: tasks (batch, head, query block) in the order of the module docstring; one
    run of keys, the whole K/V of the (batch, head)."""

    def __init__(self, drawn: bool = False):
        self.drawn = drawn      # tasks drawn from a counter: no zigzag rounds (the drawing balances)

    def task(self, ctx, task) -> Task:
        """The last query block first: with ``by_query_block`` the tasks of one query block (over every
        batch and head) are adjacent, else those of one (batch, head); with a fixed stride, rounds
        :func:`zigzag`; drawn, in this order (longest first) by whichever block frees up. The blocks
        end at the last row, so a partial block is the first one: with a causal mask the one that sees the
        fewest keys (at the end, the rows it pads would run the longest task for nothing)."""
        b = ctx.b
        if not self.drawn:
            task = zigzag(ctx, task)
        q_blocks, heads = ctx.p.q_blocks, ctx.p.heads
        by_block = b.setp("ne", u32, ctx.p.by_query_block, 0, name="by_query_block")
        heads_total = b.div(u32, ctx.p.tasks, q_blocks, name="heads_total")
        inner_count = b.selp(u32, heads_total, q_blocks, by_block, name="inner_count")
        outer, inner = b.div(u32, task, inner_count, name="outer"), b.rem(u32, task, inner_count, name="inner")
        bh = b.selp(u32, inner, outer, by_block, name="bh")
        qb = b.sub(u32, b.sub(u32, q_blocks, 1), b.selp(u32, outer, inner, by_block), name="qb")
        batch, head = b.div(u32, bh, heads, name="batch"), b.rem(u32, bh, heads, name="head")
        seq_q = ctx.p.seq_q
        return Task(batch, head, qb, seq_q, lambda col, row: (col, head, row, batch),
                    lambda row: b.mad(u32, b.mad(u32, batch, heads, head, mode="lo"), seq_q, row, mode="lo",
                                      name="lse_index"),
                    shift=lambda rows: b.and_(b32, b.sub(u32, b.mul(u32, q_blocks, rows, mode="lo"), seq_q),
                                              -ROWS & 0xFFFFFFFF, name="row_shift"))

    def keys(self, ctx, t: Task, body: Callable[[Keys], None], *, loader: bool) -> None:
        b = ctx.b
        if not loader:
            body(Keys(ctx.p.seq_k, ctx.p.diag))
            return
        kv_head = b.div(u32, t.head, ctx.p.group, name="kv_head")
        maps = {x: tensor_map_param(b, f"tmap_{x}") for x in "kv"}
        body(Keys(ctx.p.seq_k, ctx.p.diag, maps.__getitem__,
                  lambda col, key: (col, kv_head, key, t.batch)))


def kv_blocks(ctx, cfg: Config, first_row, t: Task, keys: Keys):
    """K/V blocks of a run a query block needs (:func:`attention_parts.kv_end`, rounded up to blocks)."""
    b = ctx.b
    return blocks_before(b, cfg, b.min(u32, b.add(u32, first_row, cfg.rows), t.rows, name="rows_end"), keys)


def blocks_before(b, cfg: Config, end, keys: Keys):
    """K/V blocks of a run that query rows before ``end`` (at most S_q) see."""
    last = b.max(s32, b.add(s32, end, keys.diag), 0, name="keys_end")
    last = b.min(s32, last, keys.seq_k, name="keys_end")
    return b.div(u32, b.add(u32, last, cfg.block_k - 1), cfg.block_k, name="kv_blocks")


def roles(cfg: Config, plan: Plan = Plan()) -> dict:
    d_boxes, k_boxes = cfg.head_dim // BOX_COLS, cfg.block_k // BOX_ROWS

    q_uses = kv_uses = None        # the rings' counters (every role thread its own), made by the prologue

    def pipelines(ctx):
        """The Q ring (counted by ``tq``) and the K/V ring (full rings K and V, one empty; counted by ``it``)."""
        return (Pipeline((ctx.rings["q_full"],), ctx.rings["q_empty"], uses=q_uses),
                Pipeline((ctx.rings["k_full"], ctx.rings["v_full"]), ctx.rings["kv_empty"], uses=kv_uses))

    def prologue(ctx):
        nonlocal q_uses, kv_uses
        kv_uses, q_uses = ctx.b.mov(u32, 0, name="it"), ctx.b.mov(u32, 0, name="tq")
        if cfg.pingpong:
            Turns.start(ctx.b, cfg.consumers, ctx.tid)
        if cfg.sum_in_pv:
            fill_ones(ctx, cfg)

    def load_q(ctx, q_pipe, coords, tmap_q, before_q=None):
        """Q of the task's warpgroups (``coords(wg, column)``) into the next Q buffer once it is free."""
        b = ctx.b
        q_stage = q_pipe.acquire(b, deadline=ctx.deadline, name="wait_q_free").stage
        if before_q:
            before_q()
        q_full = q_pipe.full_bar(b, q_stage)
        q_buffer = b.mad(u32, q_stage, cfg.q_bytes, ctx.smem["smem_q"], mode="lo", name="q_buffer")
        q_pipe.commit(b, cfg.q_bytes, bar=q_full)
        for wg in range(cfg.consumers):
            for db in range(d_boxes):
                b.tensor_load(address(q_buffer, q_box_offset(wg, db, cfg.head_dim)), tmap_q, coords(wg, db * BOX_COLS),
                              q_full)

    def load_kv(ctx, kv_pipe, keys: Keys, j):
        """K and V block ``j`` of a run into the next stage once it is free."""
        b = ctx.b
        if keys.before_load is not None:    # e.g. a peer's flag: probed while the stage is still read
            keys.before_load(j)
        stage = kv_pipe.acquire(b, deadline=ctx.deadline, name="wait_kv_free").stage
        key0 = b.mul(u32, j, cfg.block_k, mode="lo", name="key0")
        for ring, x in enumerate("kv"):
            full = kv_pipe.commit(b, cfg.kv_bytes, stage=stage, ring=ring)
            tile = b.mad(u32, stage, cfg.kv_bytes, ctx.smem[f"smem_{x}"], mode="lo", name=f"{x}_dst")
            for kk in range(k_boxes):
                key = b.add(u32, key0, kk * BOX_ROWS, name="key")
                for db in range(d_boxes):
                    offset = k_box_offset(db, kk, cfg.block_k) if x == "k" else v_box_offset(db, kk, cfg.head_dim)
                    b.tensor_load(address(tile, offset), keys.tmap(x), keys.coords(db * BOX_COLS, key), full)
        kv_pipe.advance(b)

    def loader(ctx, task):
        """One lane: Q of the block once its buffer is free, then K and V block by block (flat: the
        blocks of the task's two runs in turn)."""
        b = ctx.b
        with b.if_then(b.setp("eq", u32, ctx.role_tid, 0, name="loader_lane")):
            q_pipe, kv_pipe = pipelines(ctx)
            if cfg.flat:
                first, last, slices = plan.slices(ctx, cfg, task)
                rows = [s.row(b) for s in slices]
                load_q(ctx, q_pipe, lambda wg, col: (col, slices[wg].head, rows[wg], slices[wg].batch),
                       tensor_map_param(b, "tmap_q"))
                runs = plan.runs(ctx, cfg, first, last)
                run_keys = [plan.run_keys(ctx, s) for s in (runs.first, runs.last)]
                with b.if_else(runs.two) as (two, one):
                    with two:
                        for j in b.range(0, b.max(u32, *runs.blocks, name="blocks"), name="kv"):
                            for blocks, keys in zip(runs.blocks, run_keys):
                                with b.if_then(b.setp("lt", u32, j, blocks, name="run_has_block")):
                                    load_kv(ctx, kv_pipe, keys, j)
                    with one:
                        for j in b.range(0, runs.blocks[0], name="kv"):
                            load_kv(ctx, kv_pipe, run_keys[0], j)
            else:
                t = plan.task(ctx, task)
                first_row = t.first_row(b, cfg)
                load_q(ctx, q_pipe, lambda wg, col: t.q_coords(col, b.add(u32, first_row, wg * ROWS, name="q_row")),
                       t.q_map() if t.q_map else tensor_map_param(b, "tmap_q"), t.before_q)

                def run(keys: Keys):
                    for j in b.range(0, kv_blocks(ctx, cfg, first_row, t, keys), name="kv"):
                        load_kv(ctx, kv_pipe, keys, j)

                plan.keys(ctx, t, run, loader=True)
            q_pipe.advance(b)

    def consumer(ctx, task):
        """Each warpgroup: its 64 rows against every K/V block of the task, then O (and LSE) out."""
        b = ctx.b
        wg = b.shr(u32, ctx.role_tid, 7, name="wg")
        wg_tid = b.and_("b32", ctx.role_tid, 127, name="wg_tid")
        frag_row, frag_col = warp_quad(b, wg_tid)
        if cfg.flat:
            first, last, mine = plan.slices(ctx, cfg, task, wg)
            runs = plan.runs(ctx, cfg, first, last)
            late = runs.late(b, mine)
            t, wg_row = plan.slice_task(ctx, mine), mine.row(b)
        else:
            t = plan.task(ctx, task)
            first_row = t.first_row(b, cfg)
            wg_row = b.mad(u32, wg, ROWS, first_row, mode="lo", name="wg_row")
        rows = [b.add(u32, b.add(u32, wg_row, frag_row), 8 * h, name="row") for h in (0, 1)]
        lane0 = b.setp("eq", u32, b.and_("b32", ctx.role_tid, 31), 0, name="warp_leader")
        yes, no = b.setp("eq", u32, 0, 0, name="yes"), b.setp("ne", u32, 0, 0, name="no")
        deadline = plan.consumer_deadline(ctx)
        q_pipe, kv_pipe = pipelines(ctx)
        q_slot = q_pipe.wait(b, deadline=deadline, abandon=True, name="wait_q")
        q_buffer = b.mad(u32, q_slot.stage, cfg.q_bytes, ctx.smem["smem_q"], mode="lo", name="q_buffer")
        q_tile = b.mad(u32, wg, q_box_offset(1, 0, cfg.head_dim), q_buffer, mode="lo", name="q_tile")
        row_max = [b.mov(f32, NEG_INF, name="row_max") for _ in (0, 1)]
        row_sum = None if cfg.sum_in_pv else [b.mov(f32, 0.0, name="row_sum") for _ in (0, 1)]
        o_acc = b.regs(f32, cfg.o_cols // 2, name="o")
        for o in o_acc:
            b.mov(f32, 0.0, into=o)
        scale_log2 = ctx.p.scale_log2
        turns = Turns.of(b, cfg.consumers, wg) if cfg.pingpong else None

        @contextmanager
        def in_turn():
            """The matrix products issued in the body, in this warpgroup's turn when there are turns."""
            if turns is not None:
                turns.take(b)
            yield
            if turns is not None:
                turns.give(b)

        def ring_slot(name, it):
            slot = kv_pipe.at(b, it)
            return slot, b.mad(u32, slot.stage, cfg.kv_bytes, ctx.smem[name], mode="lo", name=f"{name}_tile")

        def k_ready(it):
            """Wait for the K block in ring slot ``it``; its tile."""
            slot, k_tile = ring_slot("smem_k", it)
            kv_pipe.wait(b, slot, deadline=deadline, abandon=True, name="wait_k")
            return k_tile

        def v_ready():
            """Wait for the V block of the current ring slot; (slot, tile)."""
            slot, v_tile = ring_slot("smem_v", kv_uses)
            kv_pipe.wait(b, slot, deadline=deadline, abandon=True, ring=1, name="wait_v")
            return slot, v_tile

        def scores(s_acc, k_tile, keys=cfg.block_k):
            """Issue S = Q·Kᵀ over the stage's first ``keys`` keys (committed, not waited)."""
            for db in range(d_boxes):
                mma_k_block(b, s_acc, b.add(u32, q_tile, q_box_offset(0, db, cfg.head_dim)),
                            b.add(u32, k_tile, k_box_offset(db, 0, cfg.block_k)),
                            n=keys, dtype=cfg.dtype, b_layout="nk", first=yes if db == 0 else no)

        def values(p_regs, v_tile, keys=cfg.block_k):
            """Issue O += P·V over the stage's first ``keys`` keys (committed, not waited)."""
            pv_block(b, o_acc, p_regs, v_tile, n=keys, d=cfg.head_dim, dtype=cfg.dtype,
                     ones=ctx.smem["ones"] if cfg.sum_in_pv else None)

        def release(slot):
            kv_pipe.release(b, slot, pred=lane0)
            kv_pipe.advance(b)

        def run(keys: Keys):
            """The run's K/V blocks, one after the other, or (``overlap``) software-pipelined: block j's
            Q·Kᵀ is issued before block j-1's P·V (in one turn with ``pingpong``) and its softmax runs
            while that product is in flight; O is rescaled only once the product is done (wgmma groups
            complete in order)."""
            def key_limit(row):
                return b.min(s32, b.add(s32, b.add(s32, row, keys.diag), 1), keys.seq_k, name="key_limit")

            wg_limit = key_limit(wg_row)
            wg_last_limit = key_limit(b.add(u32, wg_row, ROWS - 1, name="wg_last_row")) if cfg.half_blocks else None
            row_limits = [b.sub(s32, key_limit(r), frag_col, name="lane_limit") for r in rows]

            def softmax(j, s_acc, keys=cfg.block_k):
                """Mask block j's scores (its first ``keys``) where it crosses a row's last key, then the
                online softmax (O left alone: returns the rows' correction)."""
                key0 = b.mul(u32, j, cfg.block_k, mode="lo", name="key0")
                partial = b.setp("gt", s32, b.add(s32, key0, keys), wg_limit, name="partial_block")
                with b.if_then(partial, uniform=True):
                    mask_columns(b, s_acc, keys, [b.sub(s32, lim, key0) for lim in row_limits])
                return online_softmax(b, s_acc, n=keys, scale_log2=scale_log2, row_max=row_max,
                                      row_sum=row_sum, threshold=cfg.rescale_threshold)

            def pass_over(pred=None):
                """The other run's next block (flat): wait until it is full (the arrival then counts
                in the stage's current phase), then release it."""
                with b.if_then(pred, uniform=True) if pred is not None else nullcontext():
                    slot = kv_pipe.at(b, kv_uses)
                    for ring in (0, 1):
                        kv_pipe.wait(b, slot, deadline=deadline, abandon=True, ring=ring, name="wait_other_run")
                    release(slot)

            def plain(blocks, before=None, after=None):
                """Blocks [0, blocks) one after the other; ``before(j)`` and ``after(j)`` emit what comes
                around block j (flat, two runs: passing over the other run's). With ``pv_in_flight`` (and
                nothing around the blocks) block j's P·V is not waited for on its own: block j+1's Q·Kᵀ
                follows it into the tensor pipe and one wait covers both (wgmma groups complete in order),
                so O is whole before its rescale; block j's stage is released after that wait. With
                ``half_blocks``, a block whose last 64 keys no row of the warpgroup sees (on the causal
                diagonal, at the keys' end) runs at its first 64: half the products and softmax."""
                in_flight = cfg.pv_in_flight and before is None and after is None

                def release_behind(pred):
                    """Free the stage one position back (its P·V was waited for) where ``pred`` holds."""
                    with b.if_then(pred, uniform=True):
                        kv_pipe.release(b, kv_pipe.behind(b), pred=lane0)

                def block(j, keys):
                    s_acc = b.regs(f32, keys // 2, name="s")
                    k_tile = k_ready(kv_uses)
                    with in_turn():
                        scores(s_acc, k_tile, keys)
                    b.wgmma_wait_group(0)
                    if in_flight:            # block j-1's P·V is done too: its stage is free
                        release_behind(b.setp("ne", u32, j, 0, name="pv_before"))
                    rescale(b, o_acc, cfg.o_cols, softmax(j, s_acc, keys))
                    p_regs = p_operand(b, s_acc, keys, cfg.dtype)
                    slot, v_tile = v_ready()
                    with in_turn():
                        values(p_regs, v_tile, keys)
                    if in_flight:
                        kv_pipe.advance(b)
                    else:
                        b.wgmma_wait_group(0)
                        release(slot)

                for j in b.range(0, blocks, name="kv"):
                    if before is not None:
                        before(j)
                    if cfg.half_blocks:
                        half = cfg.block_k // 2
                        narrow = b.setp("le", s32, wg_last_limit, b.mad(u32, j, cfg.block_k, half, mode="lo"),
                                        name="half_block")
                        with b.if_else(narrow, uniform=True) as (short, whole):
                            with short:
                                block(j, half)
                            with whole:
                                block(j, cfg.block_k)
                    else:
                        block(j, cfg.block_k)
                    if after is not None:
                        after(j)
                if in_flight:                # the last block's P·V
                    b.wgmma_wait_group(0)
                    release_behind(b.setp("ne", u32, blocks, 0, name="any_block"))

            if cfg.flat:      # the one-run tasks (most) in a loop with no passing in it
                with b.if_else(runs.two, uniform=True) as (two, one):
                    with two:     # run 0's block j comes before run 1's
                        blocks = b.selp(u32, runs.blocks[1], runs.blocks[0], late, name="kv_blocks")
                        others = b.selp(u32, runs.blocks[0], runs.blocks[1], late, name="other_blocks")
                        early = b.not_("pred", late, name="early_run")
                        plain(blocks, lambda j: pass_over(b.setp("lt", u32, j, others, combine="and", c=late,
                                                                 name="other_first")),
                              lambda j: pass_over(b.setp("lt", u32, j, others, combine="and", c=early,
                                                         name="other_next")))
                        for _ in b.range(blocks, others, name="kv_other"):
                            pass_over()
                    with one:
                        plain(runs.blocks[0])
                return
            blocks = kv_blocks(ctx, cfg, first_row, t, keys)
            if not cfg.overlap:
                plain(blocks)
                return
            with b.if_then(b.setp("gt", u32, blocks, 0, name="any_keys")):
                p_regs = [Vec(tuple(b.regs(b32, 4, name="p"))) for _ in range(cfg.block_k // K_STEP)]
                s_acc = b.regs(f32, cfg.block_k // 2, name="s")
                k_tile = k_ready(kv_uses)
                with in_turn():
                    scores(s_acc, k_tile)
                b.wgmma_wait_group(0)
                rescale(b, o_acc, cfg.o_cols, softmax(0, s_acc))    # O holds the earlier runs' sums
                p_operand(b, s_acc, cfg.block_k, cfg.dtype, into=p_regs)
                for j in b.range(1, blocks, name="kv"):
                    s_next = b.regs(f32, cfg.block_k // 2, name="s")
                    k_tile = k_ready(b.add(u32, kv_uses, 1, name="it_next"))
                    slot, v_tile = v_ready()
                    with in_turn():
                        scores(s_next, k_tile)
                        values(p_regs, v_tile)
                    b.wgmma_wait_group(1)                    # S_j is in; P·V of block j-1 may still run
                    correction = softmax(j, s_next)
                    b.wgmma_wait_group(0)
                    release(slot)
                    rescale(b, o_acc, cfg.o_cols, correction)
                    p_operand(b, s_next, cfg.block_k, cfg.dtype, into=p_regs)
                slot, v_tile = v_ready()
                with in_turn():
                    values(p_regs, v_tile)
                b.wgmma_wait_group(0)
                release(slot)

        if cfg.flat:
            run(Keys(ctx.p.seq_k, ctx.p.diag))
        else:
            plan.keys(ctx, t, run, loader=False)
        if not cfg.o_in_q:
            q_pipe.release(b, q_slot, pred=lane0)
            finish(ctx, cfg, o_acc, row_max, row_sum, rows, frag_col, wg, wg_row, t)
        else:          # the Q tile is free (every Q·Kᵀ is done): O goes out through it, then the slot is free
            finish(ctx, cfg, o_acc, row_max, row_sum, rows, frag_col, wg, wg_row, t, staging=q_tile)
            q_pipe.release(b, q_slot, pred=lane0)
        q_pipe.advance(b)

    return dict(num_tasks=plan.tasks, prologue=prologue, loader=loader, consumer=consumer)


def fill_ones(ctx, cfg: Config) -> None:
    """The ``ones`` box that P·V reads as V's next 64 columns (``sum_in_pv``): every thread stores its
    16-byte pieces of 16-bit ones (the same in every column, so the swizzle does not matter); then the
    generic stores are ordered before wgmma's async-proxy reads and the block meets.

    PTX: ``st.shared.v4.b32 [ones + 16*piece], {one2, one2, one2, one2};`` per piece,
    ``fence.proxy.async.shared::cta; bar.sync 0;``
    """
    b = ctx.b
    one2 = b.mov(b32, 0x3F803F80 if cfg.dtype == "bf16" else 0x3C003C00, name="one_pair")
    pieces, threads = BOX_BYTES // 16, WARPGROUP * (1 + cfg.consumers)
    for first in range(0, pieces, threads):
        piece = b.add(u32, ctx.tid, first, name="ones_piece")
        inside = b.setp("lt", u32, piece, pieces, name="ones_inside") if first + threads > pieces else None
        b.st(b32, address(b.mad(u32, piece, 16, ctx.smem["ones"], mode="lo", name="ones_at")), Vec((one2,) * 4),
             space="shared", pred=inside)
    b.fence_proxy_async("shared::cta")
    b.bar_sync(0)


def finish(ctx, cfg: Config, o_acc, row_max, row_sum, rows, frag_col, wg, wg_row, t: Task, staging=None) -> None:
    """O / l through the warpgroup's staging buffer to a TMA store (rows past the tensor are clipped), and
    LSE = (m + log2 l)·ln 2 from the quad's first lane for rows below ``t.rows`` when ``lse`` is not null.
    ``row_sum`` None (``sum_in_pv``): l is O's first column past the head dimension, whole in every lane.
    ``staging``: the warpgroup's Q tile instead (``o_in_q``); then the store has read it when this returns
    (``cp.async.bulk.wait_group.read 0`` by the storing thread, then the warpgroup's named barrier), so the
    caller may hand the tile to the loader."""
    b = ctx.b
    lse = ctx.p.lse if t.lse_ptr is None else t.lse_ptr
    want_lse = b.setp("ne", u64, lse, 0, name="want_lse")
    lane_first = b.setp("eq", u32, frag_col, 0, name="quad_first")
    out = list(o_acc)[:cfg.head_dim // 2]       # (fragment registers of the first head_dim columns)
    for half in (0, 1):
        total = (o_acc[cfg.head_dim // 2 + 2 * half] if row_sum is None        # a column of P·V's sums
                 else quad_reduce(b, "add", row_sum[half], name="row_total"))
        empty = b.setp("eq", f32, total, 0.0, name="row_empty")
        inv = b.selp(f32, 0.0, b.rcp(f32, total, approx=True, ftz=True), empty, name="inv_sum")
        for o in half_regs(out, cfg.head_dim, half):
            b.mul(f32, o, inv, into=o)
        value = b.mul(f32, b.add(f32, row_max[half], b.lg2(f32, total, ftz=True)), LN2, name="lse")
        store = b.setp("lt", u32, rows[half], t.rows, combine="and", c=want_lse, name="store_lse")
        store = b.and_("pred", store, lane_first, name="store_lse")
        index = t.lse_index(rows[half])
        with b.if_then(store):
            b.st(f32, address(b.add(u64, lse, b.mul(u32, index, 4, mode="wide"), name="lse_addr")), value,
                 space="global")
    tmap_o = t.o_map() if t.o_map else tensor_map_param(b, "tmap_o")
    o_coords = t.o_coords or t.q_coords
    borrowed = staging is not None
    if not borrowed:
        staging = b.mad(u32, wg, cfg.staging_bytes, ctx.smem["staging"], mode="lo", name="wg_staging")

    def store():
        stage_accumulators(ctx, out, wg, staging, n=cfg.head_dim, out_type=cfg.dtype,
                           issue=lambda sub, col: store_async(b, tmap_o, o_coords(col, wg_row), sub, commit=False))

    stored = t.stored(b, wg_row)
    with b.if_then(stored, uniform=True) if stored is not None else nullcontext():
        store()
    if borrowed:
        b.bulk_wait_group(0, read=True, pred=b.setp("eq", u32, b.and_("b32", ctx.role_tid, 127), 0, name="storer"))
        b.bar_sync(b.add(u32, wg, 1, name="wg_barrier"), 128)


def build(cfg: Config = Config()):
    """With ``cfg.drawn``, tasks are drawn from ``task_counter`` (two u32 words, zero before the first
    launch on a stream; each launch leaves them so), so blocks that start late, behind other kernels,
    take no fixed share with them."""
    plan = FlatPlan() if cfg.flat else Plan(drawn=cfg.drawn)
    if not cfg.drawn:
        return template(cfg).build(**roles(cfg, plan), epilogue=lambda ctx: ctx.b.bulk_wait_group(0))

    def epilogue(ctx):
        ctx.b.bulk_wait_group(0)
        release_task_counter(ctx, task_counter_param(ctx))

    return template(cfg).build(**roles(cfg, plan), epilogue=epilogue,
                               task_counter=task_counter_param)


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, causal: bool = False, scale: float | None = None):
    """float64 (O, LSE) of (B, S, H, D) inputs: O (B, S_q, H, D), LSE (B, H, S_q) in natural log; a row
    that sees no key has O = 0 and LSE = -inf."""
    q64, k64, v64 = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    seq_q, heads, dim = q64.shape[1:]
    seq_k, group = k64.shape[1], heads // k64.shape[2]
    k64, v64 = np.repeat(k64, group, axis=2), np.repeat(v64, group, axis=2)
    scores = (q64.transpose(0, 2, 1, 3) @ k64.transpose(0, 2, 3, 1)) * (dim ** -0.5 if scale is None else scale)
    if causal:
        visible = np.arange(seq_k)[None, :] <= np.arange(seq_q)[:, None] + (seq_k - seq_q)
        scores = np.where(visible, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    safe = np.where(np.isfinite(top), top, 0.0)
    weights = np.exp(scores - safe)
    total = weights.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (np.where(total > 0, weights / total, 0.0) @ v64.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
        lse = (np.log(total) + safe)[..., 0]
    return out, lse


def default_config(dtype: str, head_dim: int, drawn: bool = False, flat: bool = False,
                   half_blocks: bool = False) -> Config:
    """The configuration the op launches (``drawn=True``; measured on the H200, bench/RESULTS.md
    2026-12-04): the plain loop with 3 consumer warpgroups (192 query rows a block) and two Q buffers,
    so the next task's Q loads while this one runs. At D=128 their registers come from the loader
    warpgroup with setmaxnreg (``rebalance``: 32 for the loader, 160 a consumer thread, no spills; loaded
    through the driver's JIT), and the second Q buffer fits because O goes out through the Q tile
    (``o_in_q``): 610-680 TFLOP/s without a mask, +5-15 % over 2 warpgroups (which leave the tensor cores
    idle while both run their softmax). At D=64 3 warpgroups fit in 128 registers with a fixed stride;
    the second Q buffer adds 5-14 % at 1-4k keys. Drawn, the consumers wait for each drawn task, so at
    D=64 they take registers from the loader too (153), where 128 spill; at D=128 the driver's JIT
    leaves 8 bytes of local memory (H100, 2026-12-05). The warpgroups' turns (``pingpong``), the
    ``overlap`` loop (also with turns, and at D=64 causal on 3 K/V stages), a third K/V stage, the
    rescale threshold, skipping the K/V blocks a warpgroup's rows do not see and padding warpgroups
    that issue no products (2026-12-06) measured slower or within noise. ``flat`` (D=64; the op asks
    where :func:`flat_tasks` says): the same warpgroups on :class:`FlatPlan` tasks and 4 K/V stages, 2 a
    run (a fourth stage alone costs nothing, a third 6-10 %; H100, 2026-12-06). The D=64 drawn kernels
    take P's row sums from P·V (``sum_in_pv``): +0.3-5 % over the add trees at 1-16k keys, e.g. 1k keys
    without a mask 425 -> 439 TFLOP/s (H100, 2026-12-07); at a fixed stride (128 registers) it spills.
    ``half_blocks`` where the op asks (:func:`half_blocks_pay`)."""
    if head_dim == 128:
        return Config(dtype=dtype, head_dim=head_dim, consumers=3, rebalance=True, o_in_q=True, drawn=drawn,
                      half_blocks=half_blocks)
    if flat:
        return Config(dtype=dtype, head_dim=head_dim, consumers=3, rebalance=True, stages=4, drawn=drawn, flat=True,
                      sum_in_pv=True, half_blocks=half_blocks)
    return Config(dtype=dtype, head_dim=head_dim, consumers=3, rebalance=drawn, drawn=drawn, sum_in_pv=drawn,
                  half_blocks=half_blocks)


def flat_tasks(causal: bool, head_dim: int, seq_q: int) -> bool:
    """Whether the op runs :class:`FlatPlan` tasks: without a mask (with one, a task's two runs differ in
    length), at D=64 (4 K/V stages fit, 2 a run), where a task has at most two runs, and where query
    blocks would leave at least a tenth of the warpgroups padding (flat tasks: +2.4-3.9 % at 1k keys, 2 of
    18 warpgroups padding; 2-6 % slower at 2-16k, 1 of 33-258; H100, bench/RESULTS.md 2026-12-06)."""
    consumers = default_config("bf16", 64, flat=True).consumers
    slices = -(-seq_q // ROWS)
    return not causal and head_dim == 64 and slices >= consumers - 1 and 10 * (-slices % consumers) >= slices


# What half_blocks costs a block (the branch and the loop body twice): without a mask, where it saves
# nothing, the drawn kernels ran 3.4-3.8 % slower at 1-4k keys at D=64 and 3.0 % at 1k at D=128 (12-14 %
# at 16k keys at D=64 and 4k at D=128); H100, probe/attention_configs.py PROBE_SET=half, bench/RESULTS.md
# 2026-12-07.
HALF_BLOCK_COST = 0.035


def half_blocks_pay(causal: bool, seq_q: int, seq_k: int) -> bool:
    """Whether the op runs half blocks (causal only): of every two 64-row warpgroups one ends its keys
    64 into a block, so half blocks save 32 keys a row that sees any, against the keys the rows see in
    all; they pay where that share beats HALF_BLOCK_COST, i.e. below about 1.8k keys at S_q = S_k
    (measured: +3.2-3.4 % at 1k keys, -0.8 % at 2k, -2.2-3.0 % at 4k; H100, 2026-12-07)."""
    if not causal:
        return False
    seeing = min(seq_q, seq_k)                     # rows that see a key (bottom-right aligned)
    keys_seen = seeing * seq_k - seeing * (seeing - 1) // 2
    return 32 * seeing > HALF_BLOCK_COST * keys_seen


LAUNCHED = [default_config(dtype, head_dim, drawn=True, flat=flat) for dtype in ("bf16", "f16")
            for head_dim in (128, 64) for flat in ((False, True) if head_dim == 64 else (False,))] + [
    default_config(dtype, head_dim, drawn=True, half_blocks=True)
    for dtype in ("bf16", "f16") for head_dim in (128, 64)]


def catalog():
    for cfg in LAUNCHED:
        yield build(cfg)
