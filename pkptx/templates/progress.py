"""Forward progress on a shared GPU: launch tickets and one arrival per rank at every barrier.

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

Counters (one flag array per heap, ``FLAGS``): [0] the ranks' barrier counter (peers add to it),
[1] started blocks, [2] finished blocks (local). The host passes ``barrier_base`` (counter 0 before the
launch; each round adds ``world``) and ``launch_base`` (counters 1 and 2 before the launch; each launch
adds its grid size). Counters only grow; every comparison is a wrap-safe signed difference.
"""
from __future__ import annotations

from ..isa import Param, Reg, Sem, address, b32, u32
from ..primitives.layout import ParallelLayout
from ..primitives.sync import flag_address, signal_all, wait

FLAGS = ParallelLayout("flags")
BARRIER, STARTED, FINISHED = 0, 1, 2
FLAG_COUNT = 3
PARAMS = (Param("barrier_base", u32), Param("launch_base", u32))


def take_ticket(b, k, rank: Reg, flags, tid: Reg) -> Reg:
    """This block's start order in the launch (0, 1, ...), for every thread of the block.

    PTX (thread 0): ``atom.relaxed.gpu.global.add.u32 t, [started], 1; sub.u32 t, t, launch_base;
    st.shared.u32 [ticket], t; fence.proxy.async.shared::cta;`` then ``bar.sync 0; ld.shared.u32 t,
    [ticket];``. Relaxed: the ticket orders no data, only roles. The proxy fence keeps the kernel's TMA
    (async-proxy) accesses of shared memory ordered after this generic write, as pk-design 5 asks.
    """
    slot = b.mov(u32, k.shared("ticket_slot", 4, 4), name="ticket_slot")
    base = b.load_param("launch_base")
    with b.if_then(b.setp("eq", u32, tid, 0, name="ticket_taker")):
        raw = b.atom("add", u32, address(flag_address(b, flags, rank, STARTED)), 1, sem=Sem.RELAXED, scope="gpu",
                     space="global", name="ticket_raw")
        b.st(u32, address(slot), b.sub(u32, raw, base), space="shared")
        b.fence_proxy_async("shared::cta")
    b.bar_sync(0)
    return b.ld(u32, address(slot), space="shared", name="ticket")


def open_barrier(ctx, *, multicast: bool) -> None:
    """Every rank has started this launch (so its inputs are final and its buffers may be written).

    Ticket 0's thread 0 adds 1 on every rank (release, ``.sys``); thread 0 of every block waits for its
    own counter to reach ``barrier_base + world`` (acquire); then ``bar.sync``. A waiter depends only on
    ticket 0 of each rank, which waits on nothing before it signals.
    """
    b = ctx.b
    with b.if_then(b.setp("eq", u32, ctx.tid, 0, name="barrier_thread")):
        with b.if_then(b.setp("eq", u32, ctx.ticket, 0, name="first_block")):
            signal_all(b, ctx.layouts[FLAGS.name], BARRIER, 1, world=ctx.world, sem=Sem.RELEASE, scope="sys",
                       multicast=multicast)
        _wait_ranks(ctx, 1, multicast=multicast)
    b.bar_sync(0)


def close_barrier(ctx, round_in_launch: int, *, multicast: bool) -> None:
    """Every block of every rank is done with this launch's peer accesses (call after ``bar.sync``).

    Thread 0 counts its block finished (``atom.acq_rel.sys``: releases the block's writes, which it saw
    through the ``bar.sync``, and acquires the earlier finishers'). The block that finishes last adds 1
    on every rank and waits for the counter to reach ``barrier_base + round * world``; the others exit.
    """
    b = ctx.b
    with b.if_then(b.setp("eq", u32, ctx.tid, 0, name="finish_thread")):
        flags = ctx.layouts[FLAGS.name]
        done = b.atom("add", u32, address(flag_address(b, flags, ctx.rank, FINISHED)), 1, sem=Sem.ACQ_REL,
                      scope="sys", space="global", name="finished_before")
        order = b.sub(u32, done, b.load_param("launch_base"), name="finish_order")
        last = b.setp("eq", u32, b.add(u32, order, 1), b.special("nctaid.x"), name="last_block")
        with b.if_then(last):
            signal_all(b, flags, BARRIER, 1, world=ctx.world, sem=Sem.RELEASE, scope="sys", multicast=multicast)
            _wait_ranks(ctx, round_in_launch, multicast=multicast)


def _wait_ranks(ctx, round_in_launch: int, *, multicast: bool) -> None:
    b = ctx.b
    if multicast:       # the add went through the multicast address, the wait reads the unicast one
        b.fence_proxy_alias()
    expected = b.mad(u32, ctx.world, round_in_launch, b.load_param("barrier_base"), mode="lo",
                     name="ranks_expected")
    wait(b, flag_address(b, ctx.layouts[FLAGS.name], ctx.rank, BARRIER), expected, sem=Sem.ACQUIRE, scope="sys",
         deadline=ctx.deadline, flag_id=b.mov(b32, BARRIER))
