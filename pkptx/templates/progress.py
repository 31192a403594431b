"""Forward progress on a shared GPU, and launch state that lives in device memory.

CUDA promises nothing about which blocks of a grid are resident together: under MPS, beside another
stream's kernel or in a green context, a persistent grid may run a few blocks at a time. A block that
spins on another block that has not started would then wait forever (or until its deadline). pkptx
kernels follow one rule so that this cannot happen:

    **A block waits only on blocks that have already started or that never wait themselves.**

Two devices make it hold:

- *Tickets.* A block's role and worker index come from the order in which blocks actually start (an
  atomic counter taken by thread 0 on entry), not from ``%ctaid``. So ticket ``t`` runs only when every
  ticket below ``t`` has started. Roles that never wait (AG+GEMM's pushing communicators, every GEMM
  worker) take the low tickets; roles that wait on them take the high ones.
- *One arrival per rank.* A barrier between ranks counts ranks, not blocks: ticket 0 announces that its
  rank has started (:func:`open_barrier`), and only the rank's last block to finish announces that all
  its blocks are done and waits for the others (:func:`close_barrier`); every other block simply exits.
  So no block waits on a block of its own grid at a barrier, ranks may run different grid sizes (SM
  shares of 30 % and 70 %), and a rank's kernel completes once every rank has reached the same point.

Every number a launch needs from earlier launches is in device memory, not in kernel arguments, so
the same arguments serve every launch and a CUDA graph can replay a kernel any number of times. The
heap's flag array (``FLAGS``, :func:`flag_words` u32 words per rank) holds, local to each rank:
[STARTED] blocks that took a ticket, [FINISHED] blocks that finished, [LAUNCH_BASE] STARTED when the
current launch began, [ROUNDS] barrier rounds this rank completed before it; then [ARRIVED + p], the
last round rank p reached, written only by rank p (``st.release.sys``), so a waiter sees whose arrival
is missing. Thread 0 of each block reads LAUNCH_BASE and ROUNDS on entry (written by the previous
launch, which the stream ordered before this one); the last block to finish writes both after the
closing barrier. A launch's ``epoch`` (ROUNDS on entry + 1) is the same on every rank, grows with
every launch on the heap, and is what the fused kernels stamp their flags with. A kernel whose flags
are counters its peers add to a fixed number of times per launch (ring and Ulysses attention, MoE
route) waits for a multiple of its own launch count instead, kept the same way in a word of its own
flag array: read on entry (:func:`read_launch_count`), stored by the last block (``close_barrier``'s
``leave``). Every comparison is a wrap-safe signed difference. Launches on one heap must be ordered
(one stream, or events), as the counters are shared; after a timeout the words are out of step and the
heap must be reset (:meth:`pkptx.launch.SymmetricHeap.reset`, which zeroes the ops' flag arrays too).
"""
from __future__ import annotations

from typing import Sequence

from ..errors import PTXBuildError
from ..isa import Kind, Param, Reg, Scope, Sem, address, u32, u64
from ..primitives.layout import ParallelLayout
from ..primitives.sync import flag_address, stamp, wait_peers

FLAGS = ParallelLayout("flags", Kind.FLAGS)
STARTED, FINISHED, LAUNCH_BASE, ROUNDS, ARRIVED = 0, 1, 2, 3, 4
BARRIER_FLAG_ID = 0xFFFFFFFE       # pkptx.launch.status.BARRIER_FLAG_ID: "the heap's barrier" in reports
_SLOTS = 3                         # shared words: ticket, launch base, rounds base


def flag_words(world_size: int) -> int:
    """Words of the heap's flag array for ``world_size`` ranks."""
    return ARRIVED + world_size


def take_ticket(b, k, rank: Reg, flags, tid: Reg) -> tuple[Reg, Reg, Reg]:
    """(ticket, launch base, rounds base) for every thread of the block: its start order in the
    launch (0, 1, ...) and the two counters the previous launch left.

    PTX (thread 0): ``ld.relaxed.gpu.global.u32 base, [launch_base]; ld.relaxed.gpu.global.u32 rounds,
    [rounds]; atom.relaxed.gpu.global.add.u32 t, [started], 1; sub.u32 t, t, base;`` three
    ``st.shared.u32``; ``fence.proxy.async.shared::cta;`` then ``bar.sync 0;`` and three ``ld.shared.u32``.
    Relaxed: the previous launch's writes are ordered before this one by the stream, and the ticket
    orders no data, only roles. The proxy fence keeps the kernel's TMA (async-proxy) accesses of shared
    memory ordered after these generic writes, as pk-design 5 asks.
    """
    slot = b.mov(u32, k.shared("ticket_slot", 4 * _SLOTS, 4), name="ticket_slot")
    with b.if_then(b.setp("eq", u32, tid, 0, name="ticket_taker")):
        base = b.ld(u32, address(flag_address(b, flags, rank, LAUNCH_BASE)), space="global", sem=Sem.RELAXED,
                    scope=Scope.GPU, name="launch_base_seen")
        rounds = b.ld(u32, address(flag_address(b, flags, rank, ROUNDS)), space="global", sem=Sem.RELAXED,
                      scope=Scope.GPU, name="rounds_seen")
        raw = b.atom("add", u32, address(flag_address(b, flags, rank, STARTED)), 1, sem=Sem.RELAXED, scope=Scope.GPU,
                     space="global", name="ticket_raw")
        for i, value in enumerate((b.sub(u32, raw, base), base, rounds)):
            b.st(u32, address(slot, 4 * i), value, space="shared")
        b.fence_proxy_async("shared::cta")
    b.bar_sync(0)
    names = ("ticket", "launch_base", "rounds_base")
    return tuple(b.ld(u32, address(slot, 4 * i), space="shared", name=n) for i, n in enumerate(names))


def read_launch_count(b, word: Reg) -> Reg:
    """This launch's number (1, 2, ...) among the launches counted in ``word``: a u32 of the kernel's
    own flag array, local to this rank, holding how many of its launches have completed here. Read it on
    entry, before the role split, in every thread that uses it; the last block stores the number back
    (pass ``(word, number)`` to :func:`close_barrier`'s ``leave``).

    PTX: ``ld.relaxed.gpu.global.u32 done, [word]; add.u32 launch, done, 1;``. Relaxed: the previous
    launch's store is ordered before this launch by the stream, and in this launch only the last block
    to finish stores, after its finish ``atom.acq_rel``, which acquires every other block's: each block
    read the word before its ``bar.sync`` and its own finish atom, so no read sees this launch's store.
    """
    done = b.ld(u32, address(word), space="global", sem=Sem.RELAXED, scope=Scope.GPU, name="launches_done")
    return b.add(u32, done, 1, name="launch")


DRAWN, DRAWERS_DONE = 0, 1      # the words of a local task counter (:func:`release_task_counter`)
TASK_COUNTER_PARAM = Param("task_counter", u64, pointer=True)   # where a one-GPU kernel's counter lies


def task_counter_param(ctx) -> Reg:
    """The local task counter a one-GPU kernel was launched with (its ``task_counter`` parameter)."""
    return ctx.b.load_param(TASK_COUNTER_PARAM.name)


def release_task_counter(ctx, counter: Reg) -> None:
    """End of a one-GPU launch that draws its tasks from ``counter`` (two u32 words, 0 when the launch
    starts: [DRAWN] tasks drawn, [DRAWERS_DONE] blocks done): the last block to be done leaves both at
    0 for the next launch on the stream. Call after the closing ``bar.sync`` (every draw of the block is
    done). No block waits on another, so no tickets are needed: a block that is not resident until
    others finish draws what is left, where a fixed stride would hand it a share to run after them
    (under MPS beside other ranks' kernels the attention took 1.4-1.7x its drawn time, bench/RESULTS.md).

    PTX (thread 0): ``atom.acq_rel.gpu.global.add.u32 done, [counter+4], 1;`` and, where ``done + 1 ==
    %nctaid.x``: ``st.relaxed.gpu.global.u32 [counter], 0; st.relaxed.gpu.global.u32 [counter+4], 0;``.
    The acq_rel atom acquires every earlier block's (each came after that block's last draw), so the
    stores follow every draw of the launch; the next launch reads them after this kernel has ended."""
    b = ctx.b
    with b.if_then(b.setp("eq", u32, ctx.tid, 0, name="release_thread")):
        done = b.atom("add", u32, address(counter, 4 * DRAWERS_DONE), 1, sem=Sem.ACQ_REL, scope=Scope.GPU,
                      space="global", name="blocks_done_before")
        with b.if_then(b.setp("eq", u32, b.add(u32, done, 1), b.special("nctaid.x"), name="last_block")):
            for word in (DRAWN, DRAWERS_DONE):
                b.st(u32, address(counter, 4 * word), 0, space="global", sem=Sem.RELAXED, scope=Scope.GPU)


def open_barrier(ctx, *, multicast: bool) -> None:
    """Every rank has started this launch (so its inputs are final and its buffers may be written).

    Ticket 0's thread 0 writes round ``rounds_base + 1`` into its slot on every rank (release,
    ``.sys``); thread 0 of every block waits for every rank's slot to reach it (acquire); then
    ``bar.sync``. A waiter depends only on ticket 0 of each rank, which waits on nothing before it
    signals.
    """
    b = ctx.b
    with b.if_then(b.setp("eq", u32, ctx.tid, 0, name="barrier_thread")):
        target = b.add(u32, ctx.rounds_base, 1, name="round_open")
        with b.if_then(b.setp("eq", u32, ctx.ticket, 0, name="first_block")):
            _arrive(ctx, target, multicast=multicast)
        _wait_ranks(ctx, target, multicast=multicast)
    b.bar_sync(0)


def close_barrier(ctx, round_in_launch: int, *, multicast: bool, leave: Sequence[tuple[Reg, Reg]] = ()) -> None:
    """Every block of every rank is done with this launch's peer accesses (call after ``bar.sync``);
    then the launch's counters are left for the next launch.

    Thread 0 counts its block finished (``atom.acq_rel.sys``: releases the block's writes, which it saw
    through the ``bar.sync``, and acquires the earlier finishers'). The block that finishes last writes
    round ``rounds_base + round_in_launch`` into its slot on every rank, waits for every rank's slot to
    reach it, and stores ROUNDS and LAUNCH_BASE, then each ``(address, value)`` of ``leave`` (u32 words
    of the kernel's own, e.g. a launch count from :func:`read_launch_count`), all ``st.relaxed.gpu``:
    the next launch reads them after this kernel has ended. The others exit. ``leave`` is pairs, not a
    callable run in that branch, so that what runs after the closing wait stays plain local stores with
    the one ordering stated here (a wait or a peer access there would break the barrier's promise).
    Every kernel with tickets must end here exactly once, and ``round_in_launch`` becomes its
    ``barrier_rounds`` (what one launch adds to ROUNDS).
    """
    if ctx.closed:
        raise PTXBuildError(f"{ctx.kernel.name}: close_barrier emitted twice; a launch ends once")
    ctx.closed = True
    ctx.kernel.barrier_rounds = round_in_launch
    b = ctx.b
    with b.if_then(b.setp("eq", u32, ctx.tid, 0, name="finish_thread")):
        flags = ctx.layouts[FLAGS.name]
        done = b.atom("add", u32, address(flag_address(b, flags, ctx.rank, FINISHED)), 1, sem=Sem.ACQ_REL,
                      scope=Scope.SYS, space="global", name="finished_before")
        order = b.sub(u32, done, ctx.launch_base, name="finish_order")
        nblocks = b.special("nctaid.x")
        with b.if_then(b.setp("eq", u32, b.add(u32, order, 1), nblocks, name="last_block")):
            target = b.add(u32, ctx.rounds_base, round_in_launch, name="round_close")
            _arrive(ctx, target, multicast=multicast)
            _wait_ranks(ctx, target, multicast=multicast)
            b.st(u32, address(flag_address(b, flags, ctx.rank, ROUNDS)), target, space="global", sem=Sem.RELAXED,
                 scope=Scope.GPU)
            b.st(u32, address(flag_address(b, flags, ctx.rank, LAUNCH_BASE)), b.add(u32, ctx.launch_base, nblocks),
                 space="global", sem=Sem.RELAXED, scope=Scope.GPU)
            for word, value in leave:
                b.st(u32, address(word), value, space="global", sem=Sem.RELAXED, scope=Scope.GPU)


def _arrive(ctx, target: Reg, *, multicast: bool) -> None:
    """This rank has reached round ``target``: its slot on every rank := target, with release.

    multicast: ``multimem.st.release.sys.global.u32 [flags_mc + 4*(ARRIVED+rank)], target;`` (the switch
    writes every copy). Unicast: ``st.release.sys.global.u32`` into each rank's slot in turn.
    """
    b, flags = ctx.b, ctx.layouts[FLAGS.name]
    index = b.add(u32, ctx.rank, ARRIVED, name="my_slot")
    if multicast:
        mc = b.add(u64, flags.mc, b.mul(u32, index, 4, mode="wide"))
        b.multimem_st(u32, address(mc), target, sem=Sem.RELEASE, scope=Scope.SYS)
        return
    for r in b.range(0, ctx.world, name="peer"):
        stamp(b, flag_address(b, flags, r, index), target, sem=Sem.RELEASE, scope=Scope.SYS)


def _wait_ranks(ctx, target: Reg, *, multicast: bool) -> None:
    b = ctx.b
    if multicast:       # the store went through the multicast address, the wait reads the unicast one
        b.fence_proxy_alias()
    slots = flag_address(b, ctx.layouts[FLAGS.name], ctx.rank, ARRIVED)
    wait_peers(b, slots, ctx.world, target, sem=Sem.ACQUIRE, scope=Scope.SYS, deadline=ctx.deadline,
               flag_id=b.mov(u32, BARRIER_FLAG_ID))
