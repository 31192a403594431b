"""MoE dispatch: every (token, k) pair's hidden vector goes to the rank that owns its expert and lands
grouped by local expert, in two launches with no host sync.

Experts are split evenly: rank d owns experts ``[d·L, (d+1)·L)``, L = E / world. Rank d's receive buffer
holds its experts' rows one after the other; inside expert l, the rows from rank 0, then rank 1, ...;
inside one (source, expert) block, in the order the source's atomics hand out (so any order).

*Route* (:func:`build_route`, one block per rank): count the pairs per expert in shared memory
(``atom.shared.add`` returns each pair's position in its (source, expert) block), write the count row
into every rank's count matrix (``st.global`` into peers), ``bar.sync``, then thread 0 adds 1 to every
rank's ready counter (``red.release.sys``); the block computes the send order (below) and thread 0
waits for its own counter to reach ``n · world`` in the n-th launch (``ld.acquire.sys``, bounded),
``bar.sync``. n is read on entry from the ready array's count of route launches done on this rank, which
the launch advances as it ends (:func:`..progress.read_launch_count`), so the arguments never change
between launches and a CUDA graph replays correctly.
With every rank's counts, each thread computes for its experts the destination base (rows of the
owner's earlier experts, then rows of lower ranks for this expert) and this rank's receive layout (the
end row of each local expert, torch's ``offs``), and turns each pair's position into its destination
row (``slots``). Pairs whose expert id is outside
``[0, E)`` get slot -1 and are dropped.

Before it signals, route zeroes this rank's arrival counters (one per 128 received rows, ``blocks``
of them) and the word after them, the fused GEMM's tile counter (:func:`tile_counter`). That reset
is race-free: a peer adds to them only after acquiring our ready signal, which our release orders
after the zeroing, and our previous launch's readers of them came earlier on our stream.

Route also writes the send order (``order``): this rank's pairs sorted by expert, local expert 0 of
every owner first, then 1, ... (:func:`send_key`), so every owner's first row blocks fill first and a
fused GEMM can start on them while later experts are still on their way.

*Push* (:func:`push_roles`, communicator blocks): lane 0 of every warp takes one pair at a time, in
send order: a 1-D bulk copy of its token's row into the warp's shared buffer (mbarrier), a bulk store
into the owner's receive buffer at its slot; once the next row's store is issued,
``cp.async.bulk.wait_group 1`` + ``fence.proxy.async.global`` (pk-design 5: this row's writes are
complete), then ``red.release.sys.add`` of 1 on the owner's counter of the slot's 128-row block (the
last row's after ``wait_group 0``).
A block of the receive buffer is complete when its counter reaches ``min(128, rows - 128·block)``:
the fused GEMM's tiles wait for exactly that. The plain dispatch ends with the ranks' closing
barrier, so when it completes every rank's rows have arrived.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ...errors import PTXBuildError
from ...isa import Param, Scope, Sem, address, b32, s32, u32, u64
from ...primitives import Pipeline
from ...primitives.layout import ParallelLayout
from ...primitives.sync import flag_address, publish_async_writes, signal, wait
from ..lcsc import WINDOW_SLACK, Buffer, Ring, Template
from ..progress import FLAGS, close_barrier, read_launch_count

COUNTS, READY, ARRIVALS, RECV = (ParallelLayout(n) for n in ("counts", "ready", "arrivals", "recv"))
RANKS_READY = 0           # ready[0]: ranks whose counts are in (each adds 1 per launch)
ROUTES_DONE = 1           # ready[1]: route launches completed on this rank (written only here)
READY_WORDS = 2
ROUTE_THREADS = 1024
BLOCK_ROWS = 128          # rows per arrival counter (the GEMM's tile rows)
ROUTE_PARAMS = (Param("ids", u64, pointer=True), Param("pairs", u32), Param("experts", u32), Param("local", u32),
                Param("slots", u64, pointer=True), Param("order", u64, pointer=True),
                Param("recv_offsets", u64, pointer=True), Param("blocks", u32))
PUSH_PARAMS = (Param("x", u64, pointer=True), Param("pairs", u32), Param("topk", u32), Param("row_bytes", u32),
               Param("ids", u64, pointer=True), Param("slots", u64, pointer=True), Param("order", u64, pointer=True),
               Param("local", u32))


@dataclass(frozen=True)
class Config:
    max_experts: int = 1024       # shared tables of the route kernel
    warps: int = 8                # pushing warps per communicator block (plain dispatch)
    chunk: int = 16384            # bytes of a row each warp moves per bulk copy

    def __post_init__(self):
        if not 1 <= self.max_experts <= 4096 or not 1 <= self.warps <= 32:
            raise PTXBuildError(f"moe_dispatch Config: max_experts in 1..4096 and warps in 1..32, got {self}")
        if self.chunk % 16 or not 16 <= self.chunk <= 65536 or self.warps * self.chunk > 200 * 1024:
            raise PTXBuildError(f"moe_dispatch Config: chunk a multiple of 16 up to 64 KB, warps x chunk <= 200 KB,"
                                f" got {self}")

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory of the push kernel: a row buffer per warp, and the alignment slack."""
        return self.warps * self.chunk + WINDOW_SLACK


# ---------------------------------------------------------------------------------------------- route
def send_key(b, e, ctx):
    """Where expert ``e``'s rows come in this rank's send order: ``l · world + (d - rank) mod world``
    for owner d and local index l (each source pushes every owner's expert 0, then 1, ...; owners
    visited from the next rank on, so sources do not all hit one owner)."""
    local = ctx.p.local
    owner = b.div(u32, e, local, name="key_owner")
    l = b.sub(u32, e, b.mul(u32, owner, local, mode="lo"), name="key_local")
    hop = b.sub(u32, b.add(u32, owner, ctx.world), ctx.rank, name="key_hop")
    b.sub(u32, hop, ctx.world, into=hop, pred=b.setp("ge", u32, hop, ctx.world))
    return b.mad(u32, l, ctx.world, hop, mode="lo", name="send_key")


def emit_send_order(ctx, each, word, global_word) -> None:
    """``order``: this rank's pairs in send order (by :func:`send_key` of their expert, then position),
    dropped pairs at the end. ``base[e]`` first holds the pairs sorted before expert e (an O(E) loop
    over shared counts per expert), then each pair's index is ``base[e] + position``; a dropped pair
    takes the next free index from the end (``atom.shared.add`` on ``dropped``)."""
    b = ctx.b
    experts, hist, base = ctx.p.experts, ctx.smem["hist"], ctx.smem["base"]
    for e in each(experts):
        key = send_key(b, e, ctx)
        before = b.mov(u32, 0, name="sent_before")
        for other in b.range(0, experts, name="other"):
            earlier = b.setp("lt", u32, send_key(b, other, ctx), key, name="sorts_before")
            b.add(u32, before, b.ld(u32, word(hist, other), space="shared"), into=before, pred=earlier)
        b.st(u32, word(base, e), before, space="shared")
    b.bar_sync(0)
    last = b.sub(u32, ctx.p.pairs, 1, name="last_pair")
    for p in each(ctx.p.pairs):
        e = b.ld(u32, global_word(ctx.p.ids, p), space="global", nc=True, name="expert")
        valid = b.setp("lt", u32, e, experts, name="valid_expert")
        at = b.mov(u32, 0, name="order_at")
        with b.if_else(valid) as (routed, dropped):
            with routed:
                pos = b.ld(u32, global_word(ctx.p.slots, p), space="global", name="pos")
                b.add(u32, b.ld(u32, word(base, e), space="shared"), pos, into=at)
            with dropped:
                taken = b.atom("add", u32, address(ctx.smem["dropped"]), 1, sem=Sem.RELAXED, scope=Scope.CTA,
                               space="shared", name="dropped_before")
                b.sub(u32, last, taken, into=at)
        b.st(u32, global_word(ctx.p.order, at), p, space="global")
    b.bar_sync(0)


def build_route(cfg: Config = Config()):
    t = Template(f"moe_route_e{cfg.max_experts}", params=ROUTE_PARAMS, layouts=(COUNTS, READY, ARRIVALS),
                 buffers=(Buffer("hist", 4 * cfg.max_experts, 16), Buffer("base", 4 * cfg.max_experts, 16),
                          Buffer("dropped", 4, 4)),
                 comm_threads=ROUTE_THREADS)      # one block, but it waits: a launch ticket all the same

    def comm_tasks(ctx):
        return ctx.b.mov(u32, 1, name="one_task")

    def route(ctx, task):
        b, tid = ctx.b, ctx.tid
        experts, hist, base = ctx.p.experts, ctx.smem["hist"], ctx.smem["base"]

        def each(stop):
            return b.range(tid, stop, ROUTE_THREADS, name="item")

        def word(table, i):
            return address(b.mad(u32, i, 4, table, mode="lo"))

        def global_word(ptr, i):
            return address(b.mad(u64, b.cvt(u64, u32, i), 4, ptr, mode="lo"))

        for e in each(experts):
            b.st(u32, word(hist, e), 0, space="shared")
        b.st(u32, address(ctx.smem["dropped"]), 0, space="shared", pred=b.setp("eq", u32, tid, 0))
        mine = ctx.layouts["arrivals"].peer(b, ctx.rank, name="my_arrivals")
        for blk in each(b.add(u32, ctx.p.blocks, 1, name="arrival_words")):
            b.st(u32, global_word(mine, blk), 0, space="global")
        b.bar_sync(0)
        for p in each(ctx.p.pairs):                       # position of each pair in its block
            e = b.ld(u32, global_word(ctx.p.ids, p), space="global", nc=True, name="expert")
            valid = b.setp("lt", u32, e, experts, name="valid_expert")
            pos = b.mov(u32, 0xFFFFFFFF, name="pos")
            b.atom("add", u32, word(hist, e), 1, sem=Sem.RELAXED, scope=Scope.CTA, space="shared", into=pos, pred=valid)
            b.st(u32, global_word(ctx.p.slots, p), pos, space="global")
        b.bar_sync(0)
        row = b.mul(u32, ctx.rank, experts, mode="lo", name="my_row")
        for d in b.range(0, ctx.world, name="dst"):               # our counts into every rank's matrix
            theirs = ctx.layouts["counts"].peer(b, d)
            for e in each(experts):
                b.st(u32, global_word(theirs, b.add(u32, row, e)),
                     b.ld(u32, word(hist, e), space="shared"), space="global")
        b.bar_sync(0)
        signaller = b.setp("eq", u32, tid, 0, name="signaller")
        with b.if_then(signaller):
            for d in b.range(0, ctx.world, name="dst"):
                signal(b, flag_address(b, ctx.layouts["ready"], d, RANKS_READY), 1, sem=Sem.RELEASE,
                       scope=Scope.SYS)
        emit_send_order(ctx, each, word, global_word)               # while the peers' counts come in
        with b.if_then(signaller):
            wait(b, flag_address(b, ctx.layouts["ready"], ctx.rank, RANKS_READY),
                 b.mul(u32, ctx.launch, ctx.world, mode="lo", name="ready_expected"), sem=Sem.ACQUIRE,
                 scope=Scope.SYS, deadline=ctx.deadline, flag_id=b.mov(u32, 0))
        b.bar_sync(0)                  # every thread now sees every rank's counts (weak loads below)
        counts, local = ctx.layouts["counts"].peer(b, ctx.rank, name="matrix"), ctx.p.local

        def rows_before(owner, expert_end, expert, src_end):
            """Rows of ``owner``'s experts before ``expert_end`` from every rank, plus rows of ``expert``
            from ranks before ``src_end``."""
            total = b.mov(u32, 0, name="rows_before")
            for s in b.range(0, ctx.world, name="src"):
                at = b.mul(u32, s, experts, mode="lo", name="src_row")
                for e in b.range(b.mul(u32, owner, local, mode="lo"), expert_end, name="earlier"):
                    b.add(u32, total, b.ld(u32, global_word(counts, b.add(u32, at, e)), space="global"), into=total)
                with b.if_then(b.setp("lt", u32, s, src_end)):
                    b.add(u32, total, b.ld(u32, global_word(counts, b.add(u32, at, expert)), space="global"),
                          into=total)
            return total

        for e in each(experts):                                    # where our rows of e start on its owner
            owner = b.div(u32, e, local, name="owner")
            b.st(u32, word(base, e), rows_before(owner, e, e, ctx.rank), space="shared")
        first = b.mul(u32, ctx.rank, local, mode="lo", name="first_local")
        for l in each(local):                                      # our layout: end row of each local expert
            e = b.add(u32, first, l, name="local_expert")
            b.st(u32, global_word(ctx.p.recv_offsets, l), rows_before(ctx.rank, e, e, ctx.world),
                 space="global")
        b.bar_sync(0)
        for p in each(ctx.p.pairs):
            e = b.ld(u32, global_word(ctx.p.ids, p), space="global", nc=True, name="expert")
            with b.if_then(b.setp("lt", u32, e, experts, name="valid_expert")):
                at = global_word(ctx.p.slots, p)
                pos = b.ld(u32, at, space="global", name="pos")
                b.st(u32, at, b.add(u32, pos, b.ld(u32, word(base, e), space="shared")), space="global")

    def routes_done(ctx):
        return flag_address(ctx.b, ctx.layouts["ready"], ctx.rank, ROUTES_DONE)

    def prologue(ctx):
        ctx.launch = read_launch_count(ctx.b, routes_done(ctx))

    def epilogue(ctx):
        """The rank barrier that leaves the launch counters, this launch's number among them."""
        close_barrier(ctx, 1, multicast=False, leave=((routes_done(ctx), ctx.launch),))

    return t.build(comm_tasks=comm_tasks, communicator=route, prologue=prologue, epilogue=epilogue)


# ----------------------------------------------------------------------------------------------- push
PUSH_BUFFER, PUSH_RING = "push_rows", "rows_in"


def with_pushers(t: Template, warps: int, chunk: int) -> Template:
    """``t`` with what :func:`push_roles` uses: a communicator's ``warps · chunk`` bytes of the dynamic
    window (a compute block's buffers, on a communicator block) and the ring of ``warps`` barriers."""
    return replace(t, comm_buffers=t.comm_buffers + (Buffer(PUSH_BUFFER, warps * chunk, 128),),
                   rings=t.rings + (Ring(PUSH_RING, warps, 1),))


def push_roles(warps: int, chunk: int) -> dict:
    """``comm_tasks`` and ``communicator`` for pushing rows (the template from :func:`with_pushers`):
    warp w of a block takes the pair at ``order[task · warps + w]`` (route's send order: expert by
    expert, so each owner's first row blocks fill first), through its ``chunk`` bytes of the buffer and
    its barrier of the ring.

    A row's counter is raised once the pusher's next row is on its way (``cp.async.bulk.wait_group 1``:
    every bulk group but the newest has written), not after a wait for its own writes, so a pusher
    keeps a load and a store in flight; its last row's is raised after its last task
    (``wait_group 0``)."""
    push_tasks = None           # made by comm_tasks, before the task loop

    def comm_tasks(ctx):
        nonlocal push_tasks
        push_tasks = ctx.b.div(u32, ctx.b.add(u32, ctx.p.pairs, warps - 1), warps, name="push_tasks")
        return push_tasks

    def raise_unsignalled(b, unsignalled):
        """The counter of the row before (written: the caller waited), if there is one."""
        with b.if_then(b.setp("ne", u64, unsignalled, 0, name="row_unsignalled")):
            signal(b, unsignalled, 1, sem=Sem.RELEASE, scope=Scope.SYS)

    def communicator(ctx, task):
        b = ctx.b
        warp, lane = b.shr(u32, ctx.tid, 5, name="push_warp"), b.and_(b32, ctx.tid, 31, name="push_lane")
        j = b.mad(u32, task, warps, warp, mode="lo", name="send_index")
        mine = b.setp("lt", u32, j, ctx.p.pairs, combine="and", c=b.setp("eq", u32, lane, 0), name="pusher")
        # carried over the tasks: the pusher's rows through its buffer, and its last row's counter (0: none)
        phase, unsignalled = b.carried(u32, 0, name="push_phase"), b.carried(u64, 0, name="unsignalled")
        with b.if_then(mine):
            def word(name, i):
                return address(b.mad(u64, b.cvt(u64, u32, i), 4, ctx.p[name], mode="lo"))

            # route's outputs, final before this launch: read-only here
            pair = b.ld(u32, word("order", j), space="global", nc=True, name="pair")
            slot = b.ld(s32, word("slots", pair), space="global", nc=True, name="slot")
            with b.if_then(b.setp("ge", s32, slot, 0, name="routed")):
                expert = b.ld(u32, word("ids", pair), space="global", nc=True, name="pair_expert")
                owner = b.div(u32, expert, ctx.p.local, name="owner")
                token = b.div(u32, pair, ctx.p.topk, name="token")
                buf = b.mad(u32, warp, chunk, ctx.smem[PUSH_BUFFER], mode="lo", name="row_buffer")
                pipe = Pipeline.bounce(ctx.rings[PUSH_RING].bar(b, warp), phase=phase)
                row_bytes = b.cvt(u64, u32, ctx.p.row_bytes, name="row_bytes64")
                src = b.mad(u64, b.cvt(u64, u32, token), row_bytes, ctx.p.x, mode="lo", name="token_row")
                dst = b.mad(u64, b.cvt(u64, s32, slot), row_bytes, ctx.layouts["recv"].peer(b, owner), mode="lo",
                            name="slot_row")
                for off in b.range(0, ctx.p.row_bytes, chunk, name="row_offset"):
                    size = b.min(u32, b.sub(u32, ctx.p.row_bytes, off), chunk, name="chunk_bytes")
                    at = b.cvt(u64, u32, off, name="chunk_offset")
                    pipe.acquire(b)                            # the last chunk's store has read the buffer
                    bar = pipe.commit(b, size)
                    b.bulk_load(address(buf), address(b.add(u64, src, at)), size, bar)
                    pipe.wait(b, deadline=ctx.deadline, name="row_in")
                    pipe.advance(b)
                    b.bulk_store(address(b.add(u64, dst, at)), address(buf), size)
                    b.bulk_commit_group()
                b.bulk_wait_group(1)                          # the rows before this one are written
                b.fence_proxy_async("global")
                raise_unsignalled(b, unsignalled)
                blk = b.shr(u32, b.mov(u32, slot), BLOCK_ROWS.bit_length() - 1, name="slot_block")
                b.mov(u64, flag_address(b, ctx.layouts["arrivals"], owner, blk), into=unsignalled)
        last = b.setp("ge", u32, b.add(u32, task, ctx.p.num_comm_sms), push_tasks,
                      name="last_push_task")
        with b.if_then(b.setp("eq", u32, lane, 0, combine="and", c=last, name="flush_pusher")):
            publish_async_writes(b)                           # the last row is written, not only read out
            raise_unsignalled(b, unsignalled)

    return dict(comm_tasks=comm_tasks, communicator=communicator)


def build(cfg: Config = Config()):
    """The plain dispatch: every block a communicator, then the ranks' closing barrier."""
    t = Template(f"moe_dispatch_w{cfg.warps}_c{cfg.chunk}", params=PUSH_PARAMS, layouts=(RECV, ARRIVALS, FLAGS),
                 comm_threads=32 * cfg.warps)
    t = with_pushers(t, cfg.warps, cfg.chunk)
    return t.build(**push_roles(cfg.warps, cfg.chunk),
                   epilogue=lambda ctx: close_barrier(ctx, 1, multicast=False))


def tile_counter(ctx, rows):
    """The address of this rank's tile counter: the arrivals word after the ``ceil(rows / 128)`` block
    counters of a ``rows``-row receive buffer, zeroed by route with them."""
    b = ctx.b
    blocks = b.shr(u32, b.add(u32, rows, BLOCK_ROWS - 1), BLOCK_ROWS.bit_length() - 1, name="arrival_blocks")
    return flag_address(b, ctx.layouts["arrivals"], ctx.rank, blocks)


def arrival_target(ctx, rows, blk):
    """Rows that land in 128-row block ``blk`` when ``rows`` rows arrive: ``min(128, rows - 128·blk)``."""
    b = ctx.b
    return b.min(u32, b.sub(u32, rows, b.mul(u32, blk, BLOCK_ROWS, mode="lo")), BLOCK_ROWS, name="block_rows")


def wait_rows(ctx, first_row, end_row, rows) -> None:
    """Wait (acquire, bounded) until rows ``[first_row, end_row)`` of the receive buffer have arrived,
    ``rows`` rows arriving in all; then ``fence.proxy.async.global`` so TMA reads see them."""
    b = ctx.b
    last = b.shr(u32, b.sub(u32, end_row, 1), BLOCK_ROWS.bit_length() - 1, name="last_block")
    for blk in b.range(b.shr(u32, first_row, BLOCK_ROWS.bit_length() - 1), b.add(u32, last, 1), name="blk"):
        wait(b, flag_address(b, ctx.layouts["arrivals"], ctx.rank, blk), arrival_target(ctx, rows, blk),
             sem=Sem.ACQUIRE, scope=Scope.SYS, deadline=ctx.deadline, flag_id=blk)
    b.fence_proxy_async("global")


# ------------------------------------------------------------------------------------ numpy models
@dataclass(frozen=True)
class Layout:
    """The routing layout for every rank: ``counts[s, e]`` pairs of rank s for expert e; ``offsets[d]``
    rank d's end row of each local expert; ``base[s, e]`` the first row of (s, e)'s block on e's owner."""
    counts: np.ndarray
    offsets: np.ndarray
    base: np.ndarray

    @property
    def world(self) -> int:
        return self.counts.shape[0]

    @property
    def local(self) -> int:
        return self.counts.shape[1] // self.world


def layout(ids: list[np.ndarray], num_experts: int) -> Layout:
    """The layout that route computes, from every rank's top-k ids (ids outside [0, E) dropped)."""
    world = len(ids)
    local = num_experts // world
    counts = np.array([np.bincount(i[(i >= 0) & (i < num_experts)].ravel(), minlength=num_experts) for i in ids],
                      dtype=np.int64)
    per_owner = counts.sum(axis=0).reshape(world, local)                # rows of each expert at its owner
    offsets = np.cumsum(per_owner, axis=1)
    starts = (offsets - per_owner).reshape(-1)                          # first row of each expert
    base = starts[None, :] + np.cumsum(counts, axis=0) - counts         # then the lower ranks' rows
    return Layout(counts, offsets, base)


def stable_slots(ids: np.ndarray, rank: int, lay: Layout) -> np.ndarray:
    """One valid choice of rank ``rank``'s slots: pairs in token order within each (source, expert)
    block (the device may hand them out in any order within the block); -1 for dropped pairs."""
    flat = ids.ravel()
    slots = np.full(flat.shape, -1, dtype=np.int64)
    seen = np.zeros(lay.counts.shape[1], dtype=np.int64)
    for p, e in enumerate(flat):
        if 0 <= e < lay.counts.shape[1]:
            slots[p] = lay.base[rank, e] + seen[e]
            seen[e] += 1
    return slots.reshape(ids.shape)


def send_keys(ids: np.ndarray, rank: int, lay: Layout) -> np.ndarray:
    """The key of each pair's place in rank ``rank``'s send order (the device's order sorts by it):
    ``l · world + (owner - rank) mod world``; dropped pairs sort last."""
    flat = ids.ravel().astype(np.int64)
    experts = lay.counts.shape[1]
    owner, l = flat // lay.local, flat % lay.local
    key = l * lay.world + (owner - rank) % lay.world
    return np.where((flat >= 0) & (flat < experts), key, experts)


def check_slots(ids: np.ndarray, slots: np.ndarray, rank: int, lay: Layout) -> list[str]:
    """What is wrong with a device's slots for rank ``rank`` (empty when each (rank, expert) block's
    slots are exactly its rows in some order, and dropped pairs have -1)."""
    problems = []
    flat, got = ids.ravel(), np.asarray(slots).ravel().astype(np.int64)
    experts = lay.counts.shape[1]
    dropped = (flat < 0) | (flat >= experts)
    if (got[dropped] != -1).any():
        problems.append("a pair with an invalid expert id got a slot")
    for e in np.unique(flat[~dropped]):
        want = np.arange(lay.base[rank, e], lay.base[rank, e] + lay.counts[rank, e])
        if not np.array_equal(np.sort(got[flat == e]), want):
            problems.append(f"expert {e}: slots {np.sort(got[flat == e])[:8]}... are not rows {want[:8]}...")
    return problems


def reference(xs: list[np.ndarray], ids: list[np.ndarray], slots: list[np.ndarray], num_experts: int) -> list:
    """Every rank's receive rows (float64, rows past its total left out) for the given slots."""
    lay = layout(ids, num_experts)
    out = [np.zeros((int(lay.offsets[d, -1]), xs[0].shape[1])) for d in range(lay.world)]
    for s, (x, i, sl) in enumerate(zip(xs, ids, slots)):
        for (t, kk), e in np.ndenumerate(i):
            if 0 <= e < num_experts:
                out[e // lay.local][sl[t, kk]] = x[t]
    return out


def catalog():
    yield build_route(Config())
    yield build(Config())
