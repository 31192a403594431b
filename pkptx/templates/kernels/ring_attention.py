"""Ring attention in one persistent launch: each rank holds a sequence shard of Q, K and V; every rank's
K/V shard is pushed to its peers while the compute blocks attend to the shards in hand in ring order, and the online
softmax simply runs on across shards, so partial results are never merged (no merge pass, no LSE
round trip).

Communicators (the first ``num_comm_sms`` launch tickets; they wait only on the peers' ticket 0, never
on compute blocks) push this rank's shard straight to every peer that sees it (no relay through other
ranks): a communicator task is one piece (the K and V rows of one 128-key block of one batch and chunk)
for one peer, pieces in the order the compute tasks need them, each piece to every peer before the next.
It moves the rows through shared memory with 1-D bulk copies (``cp.async.bulk``) into the peer's slot
for this rank, then raises that piece's arrival flag on the peer (``cp.async.bulk.wait_group 0;
fence.proxy.async.global; red.release.sys.global.add``). ``Config.lanes`` threads of the communicator
each move a share of the piece (:func:`stream_copy`, 16 KiB chunks, loads running ``relay_stages - 1``
chunks ahead of stores) and signal, so a flag reaches ``lanes · n`` in the n-th launch. A communicator
never waits on another, so any number of them, and any split of the pieces, finishes; ranks may pass
different ``num_comm_sms``.

Every rank keeps a receive slot per source rank (``kr``/``vr``: (B, world, S, H_kv, D), the layout of
the gathered K/V): no slot is ever reused within a call, so no push waits for a reader. Before the
first push, a communicator waits until every rank's ticket 0 has signalled that its launch started
(its previous call, earlier on its stream, is done reading the slots). Compute loaders, before
TMA-loading a peer's block, acquire-wait its arrival flag and fence (``ld.acquire.sys``;
``fence.proxy.async.global``), before they wait for the free stage (the probe's round trip hides behind
the consumers); without a mask, a loader lane that has so acquired every peer block of a batch probes
none of that batch again (its later loads are ordered after those acquires). Flags count launches, so
they are never reset: the n-th launch waits for n (times the signals per launch), n read on entry from
arrive[LAUNCHES], the count of launches done on this rank, which the launch's last block advances
(:func:`..progress.read_launch_count`; device state, so the arguments never change and a CUDA graph
replays correctly). Waits name in their flag id the rank whose data is missing
(:data:`pkptx.launch.status.PEER_FLAG`).

Causal, zigzag: the global sequence is 2·world chunks of ``chunk`` rows; rank r holds chunks r and
2·world-1-r (its shard's two halves), so every rank does the same work. A (query chunk, key chunk)
pair is full (key chunk earlier), diagonal (the same chunk) or skipped (later): a run of keys with
``diag`` = chunk, 0 or -chunk in :mod:`.attention`'s terms. Non-causal: one chunk per shard, all full.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ...errors import PTXBuildError
from ...isa import Param, Scope, Sem, b8, f32, u32, u64
from ...primitives import Pipeline, StageRing
from ...primitives.layout import ParallelLayout
from ...primitives.sync import Deadline, flag_address, publish_async_writes, signal, signal_all, wait
from ...primitives.stream import stream_copy
from ...primitives.tma import tensor_map_param
from ..lcsc import WINDOW_SLACK, Buffer, Ring
from ..progress import close_barrier, read_launch_count
from . import attention

KR, VR, ARRIVE = ParallelLayout("kr"), ParallelLayout("vr"), ParallelLayout("arrive")
LAUNCHES = 0              # arrive[0]: launches of this kernel completed on this rank (written only here)
TASKS = 1                 # arrive[1]: compute tasks drawn in this launch (0 between launches; local)
STARTED = 2               # arrive[STARTED + i]: rank i's launch has started (it adds 1 per launch)
PEER_FLAG = 0x50000000    # flag ids of waits on a peer: PEER_FLAG | the rank whose data is awaited
KEY_BLOCK = 128           # keys per piece (and per arrival flag)
RELAY_CHUNK = 16 * 1024   # one SM moves 41-42 GB/s in 16 KiB bulk copies with 12 in flight, 23 in 32 KiB ones
RELAY_LANES = 12          # (H200, probe/push_probe.py, bench/RESULTS.md 2026-12-03)
PARAMS = tuple(Param(f"tmap_{t}", b8, 128, 64) for t in ("q", "k", "v", "o", "kr", "vr")) + (
    Param("lse", u64, pointer=True), Param("k_local", u64, pointer=True), Param("v_local", u64, pointer=True),
    Param("tasks", u32), Param("q_blocks", u32), Param("heads", u32), Param("group", u32), Param("chunk", u32),
    Param("k_blocks", u32), Param("pieces", u32), Param("row_bytes", u32), Param("scale_log2", f32))


@dataclass(frozen=True)
class Config:
    """The attention configuration of the compute blocks, and the mask (also Ulysses' Config)."""
    attention: attention.Config = attention.Config()
    causal: bool = False
    relay_lanes: int | None = None   # threads of a communicator that each move every lanes-th chunk of a piece
                                     # (and signal); None: as many as the window holds stages, at most RELAY_LANES
    relay_stages: int = 1     # shared-memory stages per lane: its loads run stages - 1 chunks ahead of its stores
    relay_chunk: int = RELAY_CHUNK   # bytes per chunk
    prefix = "ring"           # of the kernel name (a class attribute, not a field)

    @property
    def lanes(self) -> int:
        if self.relay_lanes is not None:
            return self.relay_lanes
        window = attention.template(self.attention).dynamic_smem - WINDOW_SLACK
        return max(1, min(RELAY_LANES, window // (self.relay_stages * self.relay_chunk)))

    @property
    def halves(self) -> int:
        """Chunks per shard: 2 with zigzag (causal), else 1."""
        return 2 if self.causal else 1

    @property
    def smem_bytes(self) -> int:
        return self.attention.smem_bytes

    @property
    def name(self) -> str:
        relay = "" if (self.relay_lanes, self.relay_stages, self.relay_chunk) == (None, 1, RELAY_CHUNK) else \
            f"_l{self.lanes}s{self.relay_stages}c{self.relay_chunk // 1024}"
        return f"{self.prefix}_{self.attention.name}{'_causal' if self.causal else ''}{relay}"


def arrival_index(b, batch, src, khalf, kb, ctx, halves: int):
    """arrive[STARTED + world + ((batch·world + src)·halves + khalf)·k_blocks + kb]: the flag of one piece."""
    slot = b.mad(u32, batch, ctx.world, src, mode="lo", name="src_slot")
    if halves == 2:
        slot = b.mad(u32, slot, 2, khalf, mode="lo", name="src_slot")
    first = b.add(u32, ctx.world, STARTED, name="first_piece_flag")
    return b.add(u32, b.mad(u32, slot, ctx.p.k_blocks, kb, mode="lo"), first, name="piece_flag")


def announce_start(ctx) -> None:
    """Ticket 0's thread 0: to every rank, in its arrive[STARTED + this rank]."""
    b = ctx.b
    signal_all(b, ctx.layouts["arrive"], b.add(u32, ctx.rank, STARTED, name="started_flag"), 1, world=ctx.world,
               sem=Sem.RELEASE, scope=Scope.SYS, multicast=False)


def await_starts(ctx) -> None:
    """Before a communicator's first push: every rank's launch has started (so no previous call still
    reads the slots), waited rank by rank, so a rank that never comes is named by every rank's
    communicators first; then the bulk or TMA stores into the peers come after their start."""
    b = ctx.b
    for other in b.range(0, ctx.world, name="rank"):
        started = flag_address(b, ctx.layouts["arrive"], ctx.rank, b.add(u32, other, STARTED, name="started_flag"))
        wait(b, started, ctx.launch, sem=Sem.ACQUIRE, scope=Scope.SYS, deadline=ctx.deadline,
             flag_id=b.or_("b32", other, PEER_FLAG, name="awaited_rank"))
    b.fence_proxy_async("global")


def later_deadline(ctx, shift: int = 3) -> Deadline:
    """The compute blocks' budgets: the loaders' waits for peer data end timeout / 2^shift later than the
    communicators' (shift 3), the consumers' waits for their loader later still (shift 2). So when a rank
    never comes, a communicator's wait on that rank itself expires and is reported first (every rank's
    communicators wait on every other rank), not a wait on data that was never pushed because of it, nor
    a consumer's wait on a loader that is still waiting."""
    b = ctx.b
    margin = b.shr(u64, b.load_param("timeout_ns"), shift, name="compute_margin")
    return dataclasses.replace(ctx.deadline, end=b.add(u64, ctx.deadline.end, margin, name="compute_deadline"))


class PeerPlan(attention.Plan):
    """What the ring and Ulysses plans share: the consumers' later budget."""

    def __init__(self, cfg):
        super().__init__(drawn=True)     # communicating() draws the compute tasks
        self.cfg = cfg

    def consumer_deadline(self, ctx):
        return later_deadline(ctx, 2)


def await_piece(ctx, index, src, lanes: int, *, deadline: Deadline) -> None:
    """Acquire the piece's arrival (every relay lane of the sender has signalled, ``lanes`` per launch),
    then order it before the async proxy's (TMA) reads of the data."""
    b = ctx.b
    expected = b.mul(u32, ctx.launch, lanes, mode="lo", name="piece_signals")
    wait(b, flag_address(b, ctx.layouts["arrive"], ctx.rank, index), expected, sem=Sem.ACQUIRE,
         scope=Scope.SYS, deadline=deadline, flag_id=b.or_("b32", src, PEER_FLAG, name="awaited_rank"))
    b.fence_proxy_async("global")


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
    """Tasks (batch, head, query chunk, query block), the later chunk and the last block first (drawn in
    this order by whichever block is free, so no static balancing); runs of keys shard by shard in arrival
    order (own shard first), chunk by chunk."""

    def task(self, ctx, task) -> attention.Task:
        b, halves = ctx.b, self.cfg.halves
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
            # Without a mask a task reads every peer's every block of its batch, so once the loader lane has
            # acquired them all (and fenced the async proxy after each), its later TMA loads of that batch are
            # ordered after those acquires: it probes no flag of a batch below ``confirmed`` again.
            confirmed = None if cfg.causal else b.carried(u32, 0, name="batches_confirmed")
            unconfirmed = (None if confirmed is None
                           else b.setp("ge", u32, t.batch, confirmed, name="batch_unconfirmed"))
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
                probe = b.not_("pred", own, name="from_peer")
                if unconfirmed is not None:
                    probe = b.and_("pred", probe, unconfirmed, name="probe_piece")
                with b.if_then(probe):
                    await_piece(ctx, arrival_index(b, t.batch, src, khalf, kb, ctx, halves), src, cfg.lanes,
                                deadline=deadline)

            body(attention.Keys(chunk, diag, tmaps.__getitem__,
                                lambda col, key, slot=slot: (col, kv_head, key, slot, t.batch), before_load))
        if loader and confirmed is not None:
            b.max(u32, confirmed, b.add(u32, t.batch, 1, name="next_batch"), into=confirmed)


def launches_word(ctx):
    """arrive[LAUNCHES] on this rank: how many launches of the kernel have completed here."""
    return flag_address(ctx.b, ctx.layouts["arrive"], ctx.rank, LAUNCHES)


def tasks_word(ctx):
    """arrive[TASKS] on this rank: the counter the launch's blocks draw compute tasks from."""
    return flag_address(ctx.b, ctx.layouts["arrive"], ctx.rank, TASKS)


def close_launch(ctx) -> None:
    """The rank barrier that ends the launch (:mod:`..progress`), leaving this launch's number as the
    count of launches done on this rank and the task counter at 0 for the next launch."""
    close_barrier(ctx, 1, multicast=False, leave=((launches_word(ctx), ctx.launch), (tasks_word(ctx), 0)))


def communicating(cfg, plan, *, announce, **template):
    """Attention's template and roles for a kernel whose communicators take the first tickets (compute
    blocks wait on them; they never wait on compute blocks): the prologue also reads this launch's
    number (``ctx.launch``, from :func:`launches_word`; the epilogue must end with :func:`close_launch`)
    and lets ticket 0's thread 0 ``announce(ctx)`` that this launch has started. Compute tasks are drawn
    from :func:`tasks_word`, and a communicator that has sent its pieces draws them too (its SM would
    otherwise idle for the rest of the launch)."""
    base = attention.template(cfg.attention)
    t = dataclasses.replace(base, name=cfg.name, comm_first=True, progress=True,
                            **{k: v(base) if callable(v) else v for k, v in template.items()})
    parts = attention.roles(cfg.attention, plan)
    start = parts.pop("prologue")

    def prologue(ctx):
        start(ctx)
        b = ctx.b
        ctx.launch = read_launch_count(b, launches_word(ctx))
        with b.if_then(b.setp("eq", u32, b.or_("b32", ctx.ticket, ctx.tid), 0, name="ready_signaller")):
            announce(ctx)

    return t, dict(parts, prologue=prologue, task_counter=tasks_word, comm_joins=True)


def build(cfg: Config = Config()):
    a = cfg.attention
    if a.block_k != KEY_BLOCK:
        raise PTXBuildError(f"ring_attention: block_k must be the piece size {KEY_BLOCK}, got {a.block_k}")
    lanes, stages, chunk_bytes = cfg.lanes, cfg.relay_stages, cfg.relay_chunk
    window = attention.template(a).dynamic_smem - WINDOW_SLACK
    if not 1 <= lanes <= 32 or stages < 1 or chunk_bytes % 16 or window < lanes * stages * chunk_bytes:
        raise PTXBuildError(f"ring_attention: {lanes} relay lanes (1-32) of {stages} stages of {chunk_bytes} bytes "
                            f"(a multiple of 16) need more than the {window} bytes of shared memory of {a.name}")

    t, parts = communicating(cfg, RingPlan(cfg), announce=announce_start, params=PARAMS, layouts=(KR, VR, ARRIVE),
                             comm_buffers=(Buffer("relay_staging", lanes * stages * chunk_bytes, 1024),),
                             rings=lambda base: base.rings + (Ring("relay", lanes * stages, 1),))

    def relay(ctx, lane, relayed, dst, src, nbytes) -> None:
        """This lane's chunks (``lane``, ``lane + lanes``, ...) of ``nbytes`` from ``src`` (local) to
        ``dst`` (a peer) through its own ``stages`` stages of shared memory and mbarriers
        (:func:`stream_copy`, its position ``relayed``): the lanes' copies overlap, and each lane's loads
        run ahead of its stores."""
        b = ctx.b
        own = StageRing(b.mad(u32, lane, 8 * stages, ctx.rings["relay"].base, mode="lo", name="relay_bars"), stages)
        buf = b.mad(u32, lane, stages * chunk_bytes, ctx.smem["relay_staging"], mode="lo", name="relay_buf")
        stream_copy(b, Pipeline((own,), uses=relayed), dst, src, nbytes, chunk=chunk_bytes, buffer=buf,
                    deadline=ctx.deadline, first=lane, stride=lanes)

    def comm_tasks(ctx):
        """A piece for a peer: every piece to every other rank, piece by piece."""
        return ctx.b.mul(u32, ctx.p.pieces, ctx.b.sub(u32, ctx.world, 1), mode="lo", name="comm_tasks")

    def push(ctx, task):
        """One piece (batch, chunk half, key block; pieces in the compute tasks' order) to one peer, if
        that peer sees it (a zigzag shard's later chunk only goes to the ranks below this one): wait until
        every rank has started (the first task only), copy its K and V rows into the peer's slot for this
        rank, raise its flag there. Threads 0 .. lanes-1 each do all of it for their share of the chunks,
        with no barrier between them (a lane that times out just exits): each copies and adds 1 to the
        flag."""
        b, halves = ctx.b, cfg.halves
        world, rank = ctx.world, ctx.rank
        peers = b.sub(u32, world, 1, name="peers")
        piece = b.div(u32, task, peers, name="piece")
        dst = b.rem(u32, b.add(u32, b.add(u32, rank, 1), b.rem(u32, task, peers)), world, name="dst")
        k_blocks, chunk = ctx.p.k_blocks, ctx.p.chunk
        kb = b.rem(u32, piece, k_blocks, name="piece_kb")
        rest = b.div(u32, piece, k_blocks, name="piece_rest")
        khalf = b.rem(u32, rest, halves, name="piece_half")
        batch = b.div(u32, rest, halves, name="piece_batch")
        sees = b.setp("lt", u32, ctx.tid, lanes, name="forwarder")
        if halves == 2:
            early = b.setp("eq", u32, khalf, 0, combine="or", c=b.setp("lt", u32, dst, rank), name="sees_chunk")
            sees = b.and_("pred", sees, early, name="forwarder")
        with b.if_then(sees):
            with b.if_then(b.setp("eq", u32, task, ctx.ticket, name="first_task")):
                await_starts(ctx)
            key0 = b.mul(u32, kb, KEY_BLOCK, mode="lo", name="piece_key0")
            row = b.mad(u32, khalf, chunk, key0, mode="lo", name="piece_row")
            rows = b.min(u32, b.sub(u32, chunk, key0), KEY_BLOCK, name="piece_rows")
            nbytes = b.mul(u32, rows, ctx.p.row_bytes, mode="lo", name="piece_bytes")
            shard = b.mul(u32, chunk, halves, mode="lo", name="shard_rows")
            ring_row = b.mad(u32, b.mad(u32, batch, world, rank, mode="lo"), shard, row, mode="lo", name="ring_row")
            local_row = b.mad(u32, batch, shard, row, mode="lo", name="src_row")
            relayed = b.carried(u32, 0, name="relayed")     # the lane's chunks through its stages, over K, V, tasks
            for x, lay in (("k", "kr"), ("v", "vr")):
                src_addr = b.add(u64, ctx.p[f"{x}_local"], b.mul(u32, local_row, ctx.p.row_bytes, mode="wide"))
                dst_addr = b.add(u64, ctx.layouts[lay].peer(b, dst), b.mul(u32, ring_row, ctx.p.row_bytes,
                                                                           mode="wide"))
                relay(ctx, ctx.tid, relayed, dst_addr, src_addr, nbytes)
            publish_async_writes(b)
            flag = arrival_index(b, batch, rank, khalf, kb, ctx, halves)
            signal(b, flag_address(b, ctx.layouts["arrive"], dst, flag), 1, sem=Sem.RELEASE, scope=Scope.SYS)

    def epilogue(ctx):
        """O's stores done, then the rank barrier that leaves the launch counters (:mod:`..progress`)."""
        ctx.b.bulk_wait_group(0)
        close_launch(ctx)

    return t.build(**parts, comm_tasks=comm_tasks, communicator=push, epilogue=epilogue)


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
    """The configuration the op launches: attention's at D=128 (3 consumer warpgroups with setmaxnreg, two
    Q buffers, O out through the Q tile); at D=64 2 consumer warpgroups (with 3, the per-run bookkeeping
    spills at 128 registers a thread) and one Q buffer."""
    if head_dim == 128:
        return kind(attention.default_config(dtype, head_dim), causal)
    return kind(attention.Config(dtype=dtype, head_dim=head_dim, consumers=2, q_stages=1), causal)


LAUNCHED = [(dtype, head_dim, causal) for dtype in ("bf16", "f16") for head_dim in (64, 128) for causal in (False, True)]


def catalog():
    for launched in LAUNCHED:
        yield build(default_config(*launched))


__all__ = ["Config", "build", "default_config", "reference", "shard", "unshard", "schedule", "PEER_FLAG"]
