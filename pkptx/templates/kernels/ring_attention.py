"""Ring attention in one persistent launch: each rank holds a sequence shard of Q, K and V; every task
attends to the shards in ring order (its own, then rank r-1's, r-2's, ...) while the peers' shards
arrive, and the online softmax simply runs on across shards, so partial results are never merged (no
merge pass, no LSE round trip).

No block is set aside to communicate. Every block, as it starts and before its first task, pushes
pieces of this rank's shard to the peers: its loader lane claims a piece (a 128-key block of K and V
of one (batch, K/V head, chunk)) from a per-rank counter (``atom.add`` on arrive[CLAIMS]), TMA-loads it
into the first stage of the K/V ring (free until the block's first task), TMA-stores its boxes
straight into the receive slot for this rank of every peer that sees it, through that peer's tensor
map (``kr_tmaps``/``vr_tmaps``), and raises the piece's arrival flag there (``cp.async.bulk.wait_group
0; fence.proxy.async.global; red.release.sys.global.add``), until no piece is left. The blocks then
attend, own shard first, so the pushes of the blocks that start later overlap the first tasks. Shards
are pushed by their owners (no relay through intermediate ranks), so a loader waits only on the owner
of the data it needs, and a rank receives only what its queries see.

Forward progress holds however few blocks are resident (:mod:`..progress`): a piece is claimed only by
a started block, which pushes it without waiting on anything, and a block waits on peers only after
its rank's counter is exhausted, that is, after every piece of its rank has been claimed. The last
block of a launch leaves the counter at 0 (``close_barrier``'s ``leave``).

Every rank keeps a receive slot per source rank (``kr``/``vr``: (B, world, S, H_kv, D), the layout of the
gathered K/V): no slot is reused within a call. Across calls, the closing barrier of a launch
(:func:`close_launch`) ends it on every rank only when every block of every rank is done, so the next
launch's pushes never overwrite data a peer still reads. Compute loaders, before TMA-loading a peer's
block, acquire-wait its arrival flag and fence (``ld.acquire.sys``; ``fence.proxy.async.global``); the
flag names in its id the rank whose data is missing (:data:`pkptx.launch.status.PEER_FLAG`). Flags count
launches, so they are never reset: the n-th launch waits for n, read on entry from arrive[LAUNCHES],
the count of launches done on this rank, which the launch's last block advances
(:func:`..progress.read_launch_count`; device state, so the arguments never change and a CUDA graph
replays correctly).

Causal, zigzag: the global sequence is 2·world chunks of ``chunk`` rows; rank r holds chunks r and
2·world-1-r (its shard's two halves), so every rank does the same work. A (query chunk, key chunk)
pair is full (key chunk earlier), diagonal (the same chunk) or skipped (later): a run of keys with
``diag`` = chunk, 0 or -chunk in :mod:`.attention`'s terms. Rank r's early chunk is seen by every rank,
its late chunk only by ranks below r, so only they are sent it. Non-causal: one chunk per shard, all
full.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ...errors import PTXBuildError
from ...isa import Param, Scope, Sem, address, b8, f32, u32, u64
from ...primitives import Pipeline
from ...primitives.layout import ParallelLayout
from ...primitives.p2p import TensorMapTable, store_async
from ...primitives.sync import Deadline, flag_address, publish_async_writes, signal, wait
from ...primitives.tma import tensor_map_param
from ..lcsc import Ring
from ..progress import close_barrier, read_launch_count
from . import attention

ARRIVE = ParallelLayout("arrive")
LAUNCHES = 0              # arrive[0]: launches of this kernel completed on this rank (written only here)
CLAIMS = 1                # arrive[1]: pieces of this rank's shard claimed by its blocks in this launch
PIECES = 2                # arrive[PIECES + i]: the arrival flag of piece i (:func:`arrival_index`)
PEER_FLAG = 0x50000000    # flag ids of waits on a peer: PEER_FLAG | the rank whose data is awaited
KEY_BLOCK = 128           # keys per pushed block (and per arrival flag)
MAPS = tuple(TensorMapTable(n) for n in ("kr", "vr"))
PARAMS = tuple(Param(f"tmap_{t}", b8, 128, 64) for t in ("q", "k", "v", "o", "kr", "vr")) + (
    Param("lse", u64, pointer=True), Param("tasks", u32), Param("q_blocks", u32), Param("heads", u32),
    Param("kv_heads", u32), Param("group", u32), Param("chunk", u32), Param("k_blocks", u32),
    Param("pieces", u32), Param("scale_log2", f32))


@dataclass(frozen=True)
class Config:
    """The attention configuration of the compute blocks, and the mask (also Ulysses' Config)."""
    attention: attention.Config = attention.Config()
    causal: bool = False
    prefix = "ring"           # of the kernel name (a class attribute, not a field)

    @property
    def halves(self) -> int:
        """Chunks per shard: 2 with zigzag (causal), else 1."""
        return 2 if self.causal else 1

    @property
    def smem_bytes(self) -> int:
        return self.attention.smem_bytes

    @property
    def name(self) -> str:
        return f"{self.prefix}_{self.attention.name}{'_causal' if self.causal else ''}"


def arrival_index(b, ctx, batch, kv_head, src, khalf, kb, halves: int):
    """arrive[PIECES + (((batch·world + src)·halves + khalf)·kv_heads + kv_head)·k_blocks + kb]: the flag
    of block kb of (batch, K/V head) of source ``src``'s chunk ``khalf``."""
    slot = b.mad(u32, batch, ctx.world, src, mode="lo", name="src_slot")
    if halves == 2:
        slot = b.mad(u32, slot, 2, khalf, mode="lo", name="src_slot")
    slot = b.mad(u32, slot, ctx.p.kv_heads, kv_head, mode="lo", name="head_slot")
    return b.add(u32, b.mad(u32, slot, ctx.p.k_blocks, kb, mode="lo"), PIECES, name="piece_flag")


def later_deadline(ctx, shift: int = 3) -> Deadline:
    """The compute blocks' later budgets (Ulysses' loaders ``shift`` 3, the consumers 2): a wait on a
    rank that never comes expires and is reported first, not a wait on data an intact rank could not
    pass on, nor a consumer's wait on a loader that is still waiting."""
    b = ctx.b
    margin = b.shr(u64, b.load_param("timeout_ns"), shift, name="compute_margin")
    return replace(ctx.deadline, end=b.add(u64, ctx.deadline.end, margin, name="compute_deadline"))


class PeerPlan(attention.Plan):
    """What the ring and Ulysses plans share: the consumers' later budget."""

    def __init__(self, cfg):
        self.cfg = cfg

    def consumer_deadline(self, ctx):
        return later_deadline(ctx, 2)


@dataclass(frozen=True)
class RingTask(attention.Task):
    qhalf: object = None      # which chunk of the shard the task's rows are in (0 with one chunk)


def run_diag(b, key_chunk, query_chunk, length, skip):
    """Attention's ``diag`` for the keys of one chunk against the queries of another, both ``length``
    rows of a causal sequence: ``length`` (an earlier chunk: every key visible), 0 (the same chunk: the
    diagonal) or ``skip`` = -length (a later chunk: none)."""
    later = b.selp("s32", skip, 0, b.setp("gt", u32, key_chunk, query_chunk), name="run_diag")
    return b.selp("s32", length, later, b.setp("lt", u32, key_chunk, query_chunk), name="run_diag")


class RingPlan(PeerPlan):
    """Tasks (batch, head, query chunk, query block), the later chunk and the last block first; runs of
    keys shard by shard in ring order (own shard first), chunk by chunk."""

    def task(self, ctx, task) -> attention.Task:
        b, halves = ctx.b, self.cfg.halves
        if self.cfg.causal:
            task = attention.zigzag(ctx, task)
        q_blocks, heads, chunk = ctx.p.q_blocks, ctx.p.heads, ctx.p.chunk
        qb = b.sub(u32, b.sub(u32, q_blocks, 1), b.rem(u32, task, q_blocks), name="qb")
        rest = b.div(u32, task, q_blocks, name="task_rest")
        qhalf = b.sub(u32, 1, b.and_("b32", rest, 1), name="qhalf") if halves == 2 else b.mov(u32, 0, name="qhalf")
        bh = b.shr(u32, rest, 1, name="bh") if halves == 2 else rest
        batch, head = b.div(u32, bh, heads, name="batch"), b.rem(u32, bh, heads, name="head")
        rows0 = b.mul(u32, b.mad(u32, bh, halves, qhalf, mode="lo"), chunk, mode="lo", name="lse_rows")
        return RingTask(batch, head, qb, chunk, lambda col, row: (col, head, row, qhalf, batch),
                        lambda row: b.add(u32, rows0, row, name="lse_index"), qhalf=qhalf)

    def keys(self, ctx, t, body, *, loader: bool) -> None:
        b, cfg, halves = ctx.b, self.cfg, self.cfg.halves
        world, rank, chunk = ctx.world, ctx.rank, ctx.p.chunk
        if cfg.causal:
            last = b.sub(u32, b.mul(u32, world, 2, mode="lo"), 1, name="last_chunk")
            own_late = b.sub(u32, last, rank, name="late_chunk")
            gq = b.selp(u32, own_late, rank, b.setp("ne", u32, t.qhalf, 0), name="q_chunk")
        if loader:
            kv_head = b.div(u32, t.head, ctx.p.group, name="kv_head")
            maps = {x: (tensor_map_param(b, f"tmap_{x}"), tensor_map_param(b, f"tmap_{x}r")) for x in "kv"}
            deadline = later_deadline(ctx)
        neg_chunk = b.neg("s32", chunk, name="skip_run")
        for u in b.range(0, b.mul(u32, world, halves, mode="lo"), name="run"):
            step = b.shr(u32, u, 1, name="step") if halves == 2 else u
            khalf = b.and_("b32", u, 1, name="khalf") if halves == 2 else b.mov(u32, 0, name="khalf")
            src = b.rem(u32, b.sub(u32, b.add(u32, rank, world), step), world, name="src")
            if cfg.causal:
                gk = b.selp(u32, b.sub(u32, last, src), src, b.setp("ne", u32, khalf, 0), name="k_chunk")
                diag = run_diag(b, gk, gq, chunk, neg_chunk)
            else:
                diag = chunk
            if not loader:
                body(attention.Keys(chunk, diag))
                continue
            own = b.setp("eq", u32, step, 0, name="own_shard")
            slot = b.selp(u32, khalf, b.mad(u32, src, halves, khalf, mode="lo"), own, name="slot")
            tmaps = {x: b.selp(u64, maps[x][0], maps[x][1], own, name=f"tmap_{x}_run") for x in "kv"}

            def before_load(kb, src=src, khalf=khalf, own=own):
                with b.if_then(b.not_("pred", own, name="from_peer")):
                    await_piece(ctx, arrival_index(b, ctx, t.batch, kv_head, src, khalf, kb, halves), src,
                                deadline=deadline)

            body(attention.Keys(chunk, diag, tmaps.__getitem__,
                                lambda col, key, slot=slot: (col, kv_head, key, slot, t.batch), before_load))


def await_piece(ctx, index, src, *, deadline: Deadline) -> None:
    """Acquire the block's arrival (its owner signals once per launch), then order it before the async
    proxy's (TMA) reads of the data."""
    b = ctx.b
    wait(b, flag_address(b, ctx.layouts["arrive"], ctx.rank, index), ctx.launch, sem=Sem.ACQUIRE,
         scope=Scope.SYS, deadline=deadline, flag_id=b.or_("b32", src, PEER_FLAG, name="awaited_rank"))
    b.fence_proxy_async("global")


@dataclass(frozen=True)
class Piece:
    """One piece of this rank's shard: block ``kb`` of K and V of (batch, K/V head, chunk ``khalf``)."""
    ctx: object
    cfg: Config
    batch: object
    kv_head: object
    khalf: object
    kb: object

    @classmethod
    def of(cls, ctx, cfg: Config, piece) -> "Piece":
        """Piece number ``piece`` (kb fastest, then K/V head, chunk, batch)."""
        b = ctx.b
        kb, rest = b.rem(u32, piece, ctx.p.k_blocks, name="piece_kb"), b.div(u32, piece, ctx.p.k_blocks)
        kv_head, rest = b.rem(u32, rest, ctx.p.kv_heads, name="piece_head"), b.div(u32, rest, ctx.p.kv_heads)
        if cfg.halves == 1:
            return cls(ctx, cfg, rest, kv_head, b.mov(u32, 0, name="piece_half"), kb)
        return cls(ctx, cfg, b.shr(u32, rest, 1, name="piece_batch"), kv_head, b.and_("b32", rest, 1, name="piece_half"),
                   kb)

    def peers(self, emit) -> None:
        """``emit(dst)`` for every peer that sees this chunk: all of them, or (the late chunk of a
        zigzag shard) those below this rank."""
        b, ctx = self.ctx.b, self.ctx
        for d in b.range(1, ctx.world, name="peer_step"):
            dst = b.rem(u32, b.add(u32, ctx.rank, d), ctx.world, name="dst")
            if self.cfg.halves == 1:
                emit(dst)
                continue
            sees = b.setp("lt", u32, dst, ctx.rank, combine="or", c=b.setp("eq", u32, self.khalf, 0), name="sees")
            with b.if_then(sees):
                emit(dst)

    def push(self, tiles: dict, pushed) -> None:
        """Load the piece into ``tiles`` ("k", "v": shared addresses) on the push barrier (``pushed``: the
        block's pieces so far, its position), store its boxes into each peer's slot for this rank, and
        raise its flag there once the stores are done."""
        b, ctx, a = self.ctx.b, self.ctx, self.cfg.attention
        key0 = b.mul(u32, self.kb, KEY_BLOCK, mode="lo", name="piece_key0")
        pipe = Pipeline.bounce(ctx.rings["push"].bar(b, 0), uses=pushed)
        bar = pipe.commit(b, 2 * a.kv_bytes)
        for x in "kv":
            for box, col, key in attention.kv_boxes(b, a, x, tiles[x], key0):
                b.tensor_load(box, tensor_map_param(b, f"tmap_{x}"), (col, self.kv_head, key, self.khalf, self.batch),
                              bar)
        pipe.wait(b, deadline=ctx.deadline, name="piece_in")
        pipe.advance(b)
        slot = b.mad(u32, ctx.rank, self.cfg.halves, self.khalf, mode="lo", name="dst_slot")

        def store(dst):
            for x in "kv":
                table = ctx.tmaps[f"{x}r"].of(b, dst)
                for box, col, key in attention.kv_boxes(b, a, x, tiles[x], key0):
                    store_async(b, table, (col, self.kv_head, key, slot, self.batch), box, commit=False)

        self.peers(store)
        b.bulk_commit_group()
        publish_async_writes(b)            # also: the stores have read the tiles before the next loads
        index = arrival_index(b, ctx, self.batch, self.kv_head, ctx.rank, self.khalf, self.kb, self.cfg.halves)
        self.peers(lambda dst: signal(b, flag_address(b, ctx.layouts["arrive"], dst, index), 1, sem=Sem.RELEASE,
                                      scope=Scope.SYS))


def push_shard(ctx, cfg: Config) -> None:
    """The loader lane of a block that has just started: claim pieces of this rank's shard and push them
    until none is left (:class:`Piece`), through the first stage of the K/V ring."""
    b = ctx.b
    with b.if_then(b.setp("eq", u32, ctx.tid, 0, name="push_lane")):
        claims = address(flag_address(b, ctx.layouts["arrive"], ctx.rank, CLAIMS))
        tiles = {x: ctx.smem[f"smem_{x}"] for x in "kv"}
        pushed = b.mov(u32, 0, name="pushed")
        with b.loop("push") as lp:
            piece = b.atom("add", u32, claims, 1, sem=Sem.RELAXED, scope=Scope.GPU, space="global", name="claimed")
            lp.break_if(b.setp("ge", u32, piece, ctx.p.pieces, name="shard_pushed"))
            Piece.of(ctx, cfg, piece).push(tiles, pushed)


def launches_word(ctx):
    """arrive[LAUNCHES] on this rank: how many launches of the kernel have completed here."""
    return flag_address(ctx.b, ctx.layouts["arrive"], ctx.rank, LAUNCHES)


def close_launch(ctx, *more) -> None:
    """The rank barrier that ends the launch (:mod:`..progress`), leaving this launch's number as the
    count of launches done on this rank (and each (address, value) of ``more``)."""
    close_barrier(ctx, 1, multicast=False, leave=((launches_word(ctx), ctx.launch),) + more)


def communicating(cfg, plan, *, announce=None, **template):
    """Attention's template and roles for a kernel whose blocks wait on peers: blocks take launch
    tickets, communicators (if any) the first ones (compute blocks wait on them; they never wait on
    compute blocks); the prologue also reads this launch's number (``ctx.launch``, from
    :func:`launches_word`; the epilogue must end with :func:`close_launch`) and lets ticket 0's thread 0
    ``announce(ctx)`` that this launch has started."""
    base = attention.template(cfg.attention)
    t = replace(base, name=cfg.name, comm_first=True, progress=True,
                **{k: v(base) if callable(v) else v for k, v in template.items()})
    parts = attention.roles(cfg.attention, plan)
    start = parts.pop("prologue")

    def prologue(ctx):
        start(ctx)
        b = ctx.b
        ctx.launch = read_launch_count(b, launches_word(ctx))
        if announce is not None:
            with b.if_then(b.setp("eq", u32, b.or_("b32", ctx.ticket, ctx.tid), 0, name="ready_signaller")):
                announce(ctx)

    return t, dict(parts, prologue=prologue)


def build(cfg: Config = Config()):
    a = cfg.attention
    if a.block_k != KEY_BLOCK:
        raise PTXBuildError(f"ring_attention: block_k must be the pushed piece's {KEY_BLOCK} keys, got {a.name}")
    t, parts = communicating(cfg, RingPlan(cfg), params=PARAMS, layouts=(ARRIVE,), tensor_maps=MAPS,
                             rings=lambda base: base.rings + (Ring("push", 1, 1),))
    start = parts.pop("prologue")

    def prologue(ctx):
        start(ctx)
        push_shard(ctx, cfg)

    def epilogue(ctx):
        """O's stores done, then the rank barrier that leaves the launch counters (:mod:`..progress`) and
        the claim counter at 0."""
        b = ctx.b
        b.bulk_wait_group(0)
        close_launch(ctx, (flag_address(b, ctx.layouts["arrive"], ctx.rank, CLAIMS), b.mov(u32, 0, name="no_claims")))

    return t.build(**parts, prologue=prologue, epilogue=epilogue)


# ------------------------------------------------------------------ host-side models (no GPU)
def zigzag_chunks(rank: int, world: int) -> tuple[int, int]:
    """The global chunks rank ``rank`` holds under zigzag sharding (2·world chunks)."""
    return rank, 2 * world - 1 - rank


def shard(x: np.ndarray, rank: int, world: int, *, causal: bool, axis: int = 1) -> np.ndarray:
    """Rank ``rank``'s shard of a full sequence along ``axis``: contiguous, or (causal) its zigzag chunks."""
    if not causal:
        return np.split(x, world, axis=axis)[rank]
    parts = np.split(x, 2 * world, axis=axis)
    return np.concatenate([parts[c] for c in zigzag_chunks(rank, world)], axis=axis)


def unshard(shards: list[np.ndarray], *, causal: bool, axis: int = 1) -> np.ndarray:
    """The full sequence back from every rank's shard (the inverse of :func:`shard`)."""
    world = len(shards)
    if not causal:
        return np.concatenate(shards, axis=axis)
    parts = [None] * (2 * world)
    for r, s in enumerate(shards):
        for c, part in zip(zigzag_chunks(r, world), np.split(s, 2, axis=axis)):
            parts[c] = part
    return np.concatenate(parts, axis=axis)


def schedule(rank: int, world: int, *, causal: bool) -> list[tuple[int, int, str]]:
    """(source rank, key chunk, kind) per run of keys, in the order a query chunk of ``rank`` visits them
    (kind per query chunk: "full", "diag" or "skip"), as ``RingPlan.keys`` emits it."""
    halves = 2 if causal else 1
    out = []
    for q_half in range(halves):
        gq = zigzag_chunks(rank, world)[q_half] if causal else rank
        for u in range(world * halves):
            src, khalf = (rank - u // halves) % world, u % halves
            gk = zigzag_chunks(src, world)[khalf] if causal else src
            out.append((src, gk, "full" if not causal or gk < gq else "diag" if gk == gq else "skip"))
    return out


def reference(q_shards, k_shards, v_shards, *, causal: bool, scale: float | None = None):
    """float64 (O, LSE) of every rank's shard: attention over the full sequence, sharded back."""
    full = [unshard(x, causal=causal) for x in (q_shards, k_shards, v_shards)]
    out, lse = attention.reference(*full, causal=causal, scale=scale)
    world = len(q_shards)
    return ([shard(out, r, world, causal=causal) for r in range(world)],
            [shard(lse, r, world, causal=causal, axis=2) for r in range(world)])


def default_config(dtype: str, head_dim: int, causal: bool, kind=Config) -> Config:
    """The configuration the op launches: attention's, but 2 consumer warpgroups at D=64 too (with 3,
    the per-run bookkeeping spills at 128 registers a thread), one Q buffer, and the warpgroups' turns
    (``pingpong``) without a mask at D=128, as attention's."""
    return kind(attention.Config(dtype=dtype, head_dim=head_dim, consumers=2, q_stages=1,
                                 pingpong=head_dim == 128 and not causal), causal)


LAUNCHED = [(dtype, head_dim, causal) for dtype in ("bf16", "f16") for head_dim in (64, 128) for causal in (False, True)]


def catalog():
    for launched in LAUNCHED:
        yield build(default_config(*launched))


__all__ = ["Config", "build", "default_config", "reference", "shard", "unshard", "schedule", "PEER_FLAG"]
