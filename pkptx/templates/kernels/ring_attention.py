"""Ring attention in one persistent launch: each rank holds a sequence shard of Q, K and V; every task
attends to the shards in ring order (its own, then rank r-1's, r-2's, ...) while the peers' shards
arrive, and the online softmax simply runs on across shards, so partial results are never merged (no
merge pass, no LSE round trip).

No block is set aside to communicate. A shard travels out of the shared memory it is loaded into
anyway: for each (batch, K/V head), the first task of the walk that attends to it (the last query
block of the later zigzag chunk, of the group's first Q head: its *pusher* task) loads its own shard's
every K/V block, and its loader, once a block has landed, TMA-stores the block's boxes straight into
each peer's receive slot for this rank, through that peer's tensor map (``kr_tmaps``/``vr_tmaps``). A
block's arrival flag on the peer is raised once the stores that follow it are issued
(``cp.async.bulk.wait_group 1``; the run's last after ``wait_group 0``; then ``fence.proxy.async.global;
red.release.sys.global.add``), so a store stays in flight while the loader goes on. The stores are one
bulk group per block, and a stage is loaded again only two blocks later, after its group is complete.
The shards are pushed by their owners (no relay through intermediate ranks), so a loader waits only on
the owner of the data it needs, and a rank receives only what its queries see.

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

Forward progress: a task waits only on pusher tasks of peers with a task index at most its own, and a
pusher waits on no peer before its pushes, while every block walks its tasks in increasing index (zigzag
rounds only reorder within a round), so by induction on the index every wait is met with every block
resident (the persistent grid), whatever the ranks' grid sizes.

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
from ...isa import Param, Scope, Sem, b8, f32, u32, u64
from ...primitives.layout import ParallelLayout
from ...primitives.p2p import TensorMapTable, store_async
from ...primitives.sync import Deadline, flag_address, signal, wait
from ...primitives.tma import tensor_map_param
from ..progress import close_barrier, read_launch_count
from . import attention

ARRIVE = ParallelLayout("arrive")
LAUNCHES = 0              # arrive[0]: launches of this kernel completed on this rank (written only here)
PIECES = 1                # arrive[PIECES + i]: the arrival flag of piece i (:func:`arrival_index`)
PEER_FLAG = 0x50000000    # flag ids of waits on a peer: PEER_FLAG | the rank whose data is awaited
KEY_BLOCK = 128           # keys per pushed block (and per arrival flag)
MAPS = tuple(TensorMapTable(n) for n in ("kr", "vr"))
PARAMS = tuple(Param(f"tmap_{t}", b8, 128, 64) for t in ("q", "k", "v", "o", "kr", "vr")) + (
    Param("lse", u64, pointer=True), Param("tasks", u32), Param("q_blocks", u32), Param("heads", u32),
    Param("kv_heads", u32), Param("group", u32), Param("chunk", u32), Param("k_blocks", u32),
    Param("scale_log2", f32))


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
    keys shard by shard in ring order (own shard first), chunk by chunk; the pusher tasks send their own
    shard's blocks on as they load them."""

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

    def pusher(self, ctx, t):
        """Whether task ``t`` pushes its (batch, K/V head)'s own blocks: the first task of the walk that
        loads them all (the last query block, of the later chunk, of the K/V head's first Q head)."""
        b = ctx.b
        first = b.setp("eq", u32, b.add(u32, t.qb, 1), ctx.p.q_blocks, name="last_query_block")
        first = b.setp("eq", u32, b.rem(u32, t.head, ctx.p.group), 0, combine="and", c=first, name="pusher")
        if self.cfg.halves == 2:
            first = b.setp("ne", u32, t.qhalf, 0, combine="and", c=first, name="pusher")
        return first

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
            pusher = self.pusher(ctx, t)
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
            pushing = b.and_("pred", own, pusher, name="pushing")
            piece = Piece(ctx, self.cfg, t.batch, kv_head, khalf, pushing)

            def before_load(kb, src=src, khalf=khalf, own=own):
                with b.if_then(b.not_("pred", own, name="from_peer")):
                    await_piece(ctx, arrival_index(b, ctx, t.batch, kv_head, src, khalf, kb, halves), src,
                                deadline=deadline)

            body(attention.Keys(chunk, diag, tmaps.__getitem__,
                                lambda col, key, slot=slot: (col, kv_head, key, slot, t.batch), before_load,
                                piece.push, piece.finish))


def await_piece(ctx, index, src, *, deadline: Deadline) -> None:
    """Acquire the block's arrival (its pusher signals once per launch), then order it before the async
    proxy's (TMA) reads of the data."""
    b = ctx.b
    wait(b, flag_address(b, ctx.layouts["arrive"], ctx.rank, index), ctx.launch, sem=Sem.ACQUIRE,
         scope=Scope.SYS, deadline=deadline, flag_id=b.or_("b32", src, PEER_FLAG, name="awaited_rank"))
    b.fence_proxy_async("global")


@dataclass(frozen=True)
class Piece:
    """A pusher's own-shard run of (batch, K/V head, chunk ``khalf``): each loaded block goes to every
    peer that sees it (:meth:`push`), and its flag there follows (:meth:`finish` for the last)."""
    ctx: object
    cfg: Config
    batch: object
    kv_head: object
    khalf: object
    pushing: object

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

    def signal(self, kb) -> None:
        """Raise block ``kb``'s flag on the peers (its stores complete and ordered before)."""
        b, ctx = self.ctx.b, self.ctx
        b.fence_proxy_async("global")
        index = arrival_index(b, ctx, self.batch, self.kv_head, ctx.rank, self.khalf, kb, self.cfg.halves)
        self.peers(lambda dst: signal(b, flag_address(b, ctx.layouts["arrive"], dst, index), 1, sem=Sem.RELEASE,
                                      scope=Scope.SYS))

    def push(self, block: attention.Loaded) -> None:
        """Once ``block`` has landed, store its K and V boxes into each peer's slot for this rank (one
        bulk group), then signal the block before it, whose group is then complete."""
        b, ctx = self.ctx.b, self.ctx
        with b.if_then(self.pushing):
            block.landed()
            slot = b.mad(u32, ctx.rank, self.cfg.halves, self.khalf, mode="lo", name="dst_slot")

            def store(dst):
                for x in "kv":
                    table = ctx.tmaps[f"{x}r"].of(b, dst)
                    for box, col, key in attention.kv_boxes(b, self.cfg.attention, x, block.tiles[x], block.key0):
                        store_async(b, table, (col, self.kv_head, key, slot, self.batch), box, commit=False)

            self.peers(store)
            b.bulk_commit_group()
            with b.if_then(b.setp("ne", u32, block.kb, 0, name="block_behind")):
                b.bulk_wait_group(1)
                self.signal(b.sub(u32, block.kb, 1, name="kb_behind"))

    def finish(self, blocks) -> None:
        """After the run: every store done, the last block signalled."""
        b = self.ctx.b
        with b.if_then(b.setp("ne", u32, blocks, 0, combine="and", c=self.pushing, name="pushed_any")):
            b.bulk_wait_group(0)
            self.signal(b.sub(u32, blocks, 1, name="kb_last"))


def launches_word(ctx):
    """arrive[LAUNCHES] on this rank: how many launches of the kernel have completed here."""
    return flag_address(ctx.b, ctx.layouts["arrive"], ctx.rank, LAUNCHES)


def close_launch(ctx) -> None:
    """The rank barrier that ends the launch (:mod:`..progress`), leaving this launch's number as the
    count of launches done on this rank."""
    close_barrier(ctx, 1, multicast=False, leave=((launches_word(ctx), ctx.launch),))


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
    if a.block_k != KEY_BLOCK or a.stages < 2:
        raise PTXBuildError(f"ring_attention: block_k must be the pushed block size {KEY_BLOCK} and stages at "
                            f"least 2 (a stage is reloaded only after its pushes are done), got {a.name}")
    t, parts = communicating(cfg, RingPlan(cfg), params=PARAMS, layouts=(ARRIVE,), tensor_maps=MAPS)

    def epilogue(ctx):
        """O's stores done, then the rank barrier that leaves the launch counters (:mod:`..progress`)."""
        ctx.b.bulk_wait_group(0)
        close_launch(ctx)

    return t.build(**parts, epilogue=epilogue)


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
