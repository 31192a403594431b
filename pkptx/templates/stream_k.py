"""Stream-K for GEMM-shaped kernels: a persistent grid whose tiles leave the last wave partly empty
(2560x2560x8192 on 128 x 256 tiles: 200 tiles, 1.5 waves of 132) runs the whole waves as whole tiles and
cuts the tiles of the last one into equal runs of k-blocks, one run per worker, so every block ends at
about the same time. The runs sit at different K offsets, so they share less of A and B in L2 than a
wave of whole tiles: it pays where the last wave is weakly filled (gemm_plan.STREAM_K_FILL).

Tasks: the first ``dp_tiles`` are whole tiles (tile index = task). Task ``dp_tiles + i * workers + g`` is
worker g's i-th segment: worker g owns k-blocks ``[g*I/W, (g+1)*I/W)`` of the I = sk_tiles * k_blocks
k-blocks of the remaining tiles laid end to end, cut at tile boundaries (W = ``workers``; the host keeps
W * I below 2**32, so the products fit 32 bits: a 64-bit division is a call that serialises the wgmma). With
``dp_tiles`` a multiple of the grid and W the grid, block g walks exactly worker g's segments, in order.

Fixup (deterministic; nobody waits, so it progresses however few blocks are resident): the participants
of a tile are the workers whose runs meet it, position 0 (the one whose run reaches the tile's first
k-block, its last segment) to P-1. The sum is always ``part_0 + part_1 + ... + part_{P-1}`` in f32, in
that order, whichever block adds it up: the same bits run to run.
- Position p >= 1 (a run's first segment, computed before the run's later tiles): writes its partial to
  slot ``2g`` and takes a ticket on the tile's counter.
- Position 0 (a run's last segment, usually the last to finish): reads the counter first; if all P-1
  others have arrived it adds their partials to its own registers and writes nothing. Otherwise it
  writes its partial (slot ``2g + 1``) and takes a ticket like the others.
- The arrival that completes the count (a ticket drawn after P-1 others, or position 0's read of P-1) resets the
  counter to 0 for the next launch and stores C.

Memory ordering: the split-K ticket chain (:func:`.split_k.take_ticket`: partial stores, ``bar.sync``,
``atom.acq_rel.gpu`` on the counter); position 0's read is ``ld.acquire.gpu``, broadcast to its
warpgroup through shared memory between ``bar.sync`` (the first orders the word's earlier reads before
the leader's write).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..isa import Builder, Reg, Scope, Sem, address, u32, u64
from .split_k import add_partial, load_partial, partial_base, store_partial, take_ticket
from .lcsc import WARPGROUP

SEGMENTS_PER_WORKER = 2      # a worker's run is at most one tile long (sk_tiles <= workers): its tail of
                             # one tile and its head of the next


@dataclass
class Segment:
    """One task of the stream-K walk: ``tile`` (the grid's tile index), k-blocks [kb_first, kb_end)
    (empty: kb_first == kb_end), and for a cut tile its participants, this segment's position among
    them and the first participant's worker (whose last segment holds position 0)."""
    tile: Reg
    kb_first: Reg
    kb_end: Reg
    participants: Reg
    position: Reg
    first_worker: Reg
    sk_tile: Reg


def _run_start(b: Builder, worker, total: Reg, workers) -> Reg:
    """First k-block of ``worker``'s run: floor(worker * total / workers)."""
    return b.div(u32, b.mul(u32, worker, total, mode="lo", name="run_product"), workers, name="run_start")


def _worker_of(b: Builder, k_block: Reg, total: Reg, workers) -> Reg:
    """The worker whose run holds k-block ``k_block`` of the stream: floor(((k_block + 1) * W - 1) / total)."""
    product = b.mul(u32, b.add(u32, k_block, 1), workers, mode="lo", name="owner_product")
    return b.div(u32, b.sub(u32, product, 1), total, name="owner")


def segment_of(b: Builder, task, *, dp_tiles, workers, tiles, k_blocks) -> Segment:
    """The tile and k-block range of ``task`` (see the module docstring). Whole tiles (``task <
    dp_tiles``, or a stream-K tile inside one run) have one participant."""
    whole_phase = b.setp("lt", u32, task, dp_tiles, name="whole_phase")
    sk_task = b.sub(u32, task, dp_tiles, name="sk_task")
    index, worker = b.div(u32, sk_task, workers, name="segment_index"), b.rem(u32, sk_task, workers, name="worker")
    sk_tiles = b.sub(u32, tiles, dp_tiles, name="sk_tiles")
    total = b.mul(u32, sk_tiles, k_blocks, mode="lo", name="sk_blocks")
    lo = _run_start(b, worker, total, workers)
    hi = _run_start(b, b.add(u32, worker, 1), total, workers)
    sk_tile = b.add(u32, b.div(u32, lo, k_blocks), index, name="sk_tile")
    tile_lo = b.mul(u32, sk_tile, k_blocks, mode="lo", name="tile_lo")
    tile_hi = b.add(u32, tile_lo, k_blocks, name="tile_hi")
    start, end = b.max(u32, lo, tile_lo, name="seg_start"), b.min(u32, hi, tile_hi, name="seg_end")
    live = b.and_("pred", b.setp("lt", u32, sk_tile, sk_tiles), b.setp("lt", u32, start, end), name="live_segment")
    first = b.selp(u32, b.sub(u32, start, tile_lo), 0, live, name="seg_first")
    last = b.selp(u32, b.sub(u32, end, tile_lo), 0, live, name="seg_end_kb")
    first_worker = _worker_of(b, tile_lo, total, workers)
    participants = b.add(u32, b.sub(u32, _worker_of(b, b.sub(u32, tile_hi, 1), total, workers), first_worker), 1,
                         name="participants")
    return Segment(
        tile=b.selp(u32, task, b.add(u32, dp_tiles, sk_tile), whole_phase, name="sk_tile_index"),
        kb_first=b.selp(u32, 0, first, whole_phase, name="kb_first"),
        kb_end=b.selp(u32, k_blocks, last, whole_phase, name="kb_end"),
        participants=b.selp(u32, 1, participants, whole_phase, name="participants_or_one"),
        position=b.sub(u32, worker, first_worker, name="position"), first_worker=first_worker, sk_tile=sk_tile)


def settle(b: Builder, acc, seg: Segment, *, tile_n: int, consumers: int, wg, workspace: Reg, tickets: Reg,
           wg_tid: Reg, barrier_id, ticket_smem: Reg) -> Reg:
    """The fixup of warpgroup ``wg``'s 64-row slab of ``seg`` (see the module docstring). Returns a
    predicate, uniform over the warpgroup: true where ``acc`` now holds the finished slab to store."""
    def base(worker, head: int):
        slot = b.mad(u32, b.mad(u32, worker, 2, head, mode="lo"), consumers, wg, mode="lo", name="sk_slot")
        return partial_base(b, workspace, slot, tile_n, wg_tid)

    leader = b.setp("eq", u32, wg_tid, 0, name="sk_leader")
    cut = b.setp("gt", u32, seg.participants, 1, name="cut_tile")
    others = b.sub(u32, seg.participants, 1, name="others")
    counter = b.add(u64, tickets, b.mul(u32, b.mad(u32, seg.sk_tile, consumers, wg, mode="lo"), 4, mode="wide"),
                    name="sk_ticket")
    summer = b.setp("eq", u32, 0, 0, name="sums")     # a whole tile: this warpgroup stores it
    with b.if_then(cut, uniform=True):
        head = b.setp("eq", u32, seg.position, 0, name="position_zero")
        seen = b.mov(u32, 0, name="seen")
        with b.if_then(head, uniform=True):          # the others are usually done: check before writing
            b.bar_sync(barrier_id, WARPGROUP)        # the word's last reads (an earlier ticket) are done
            with b.if_then(leader):
                b.ld(u32, address(counter), space="global", sem=Sem.ACQUIRE, scope=Scope.GPU, into=seen)
                b.st(u32, address(ticket_smem), seen, space="shared")
            b.bar_sync(barrier_id, WARPGROUP)
            b.ld(u32, address(ticket_smem), space="shared", into=seen)
            b.bar_sync(barrier_id, WARPGROUP)
        early = b.and_("pred", head, b.setp("eq", u32, seen, others), name="all_arrived")
        with b.if_then(b.not_("pred", early), uniform=True):
            store_partial(b, acc, base(b.add(u32, seg.first_worker, seg.position), b.selp(u32, 1, 0, head)), tile_n)
            drawn = take_ticket(b, counter, leader=leader, barrier_id=barrier_id, ticket_smem=ticket_smem)
            b.setp("eq", u32, drawn, others, into=summer)
        with b.if_then(summer, uniform=True):
            # Every participant has arrived: nobody touches the counter again in this launch.
            b.st(u32, address(counter), 0, space="global", sem=Sem.RELAXED, scope=Scope.GPU, pred=leader)
            with b.if_then(b.not_("pred", head), uniform=True):     # position 0's partial is in memory
                load_partial(b, acc, base(seg.first_worker, 1), tile_n)
            for p in b.range(1, seg.participants, name="participant"):
                add_partial(b, acc, base(b.add(u32, seg.first_worker, p), 0), tile_n)
    return summer
