"""Deterministic split-K for GEMM-shaped kernels: the K loop of a tile is cut into ``splits`` slices run
by different blocks, so a problem with few output tiles still fills the device.

Each slice's consumer warpgroup writes its 64-row f32 partial to a workspace slot (fragment layout:
thread t's accumulator quad q at ``(q * 128 + t) * 16`` bytes, so every access is a coalesced 16-byte
vector), then takes a ticket on its slab's counter. The warpgroup that draws the last ticket sums the
``splits`` partials in slice order 0, 1, ..., splits-1 (always that order, whichever block arrives last:
the result has the same bits run to run), resets the counter to 0 for the next launch and stores C.
Nobody waits for anybody, so the kernel progresses however few of its blocks are resident.

Memory ordering per slab: every thread's ``st.global`` of the partial, ``bar.sync`` of the warpgroup
(orders them before the leader's release), the leader's ``atom.acq_rel.gpu.global.add.u32`` on the
counter (release for the partial just written; acquire of every earlier slice's, through the counter's
chain of read-modify-writes), the drawn ticket through shared memory and a second ``bar.sync`` (orders
the acquire before every thread's ``ld.global`` of the other partials).
"""
from __future__ import annotations

from ..isa import Builder, Reg, Scope, Sem, Vec, address, f32, u32, u64
from .gemm_parts import SUBTILE_ROWS
from .lcsc import WARPGROUP

QUAD_BYTES = 16 * WARPGROUP          # one accumulator quad of a whole warpgroup


def slab_bytes(tile_n: int) -> int:
    """Bytes of one 64-row f32 partial (one workspace slot)."""
    return SUBTILE_ROWS * tile_n * 4


def slice_of(b: Builder, task, splits) -> tuple[Reg, Reg]:
    """(tile index, K slice) of a work unit: the slices of one tile are consecutive units, so they run
    side by side and their partials are still in L2 when the last one sums them."""
    return b.div(u32, task, splits, name="split_tile"), b.rem(u32, task, splits, name="split_slice")


def k_range(b: Builder, k_slice, splits, k_blocks) -> tuple[Reg, Reg]:
    """[first, end) k-blocks of a slice: ``floor(s * k_blocks / splits)`` bounds, so slices differ by at
    most one k-block (the host keeps ``splits <= k_blocks``: no slice is empty)."""
    first = b.div(u32, b.mul(u32, k_slice, k_blocks, mode="lo"), splits, name="kb_first")
    end = b.div(u32, b.mad(u32, k_slice, k_blocks, k_blocks, mode="lo"), splits, name="kb_end")
    return first, end


def partial_base(b: Builder, workspace: Reg, slot, tile_n: int, wg_tid: Reg) -> Reg:
    """This thread's address in workspace slot ``slot`` (one 64-row f32 partial, fragment layout)."""
    thread_bytes = b.mul(u32, wg_tid, 16, mode="wide", name="thread_bytes")
    return b.add(u64, b.mad(u64, b.cvt(u64, u32, slot), slab_bytes(tile_n), workspace, mode="lo"), thread_bytes,
                 name="slot_base")


def store_partial(b: Builder, acc, base: Reg, tile_n: int) -> None:
    """``st.global.v4.f32`` of every accumulator quad at ``base`` (:func:`partial_base`)."""
    for q in range(tile_n // 8):
        b.st(f32, address(base, q * QUAD_BYTES), Vec(acc.items[4 * q:4 * q + 4]), space="global")


def load_partial(b: Builder, acc, base: Reg, tile_n: int) -> None:
    """Overwrite ``acc`` with the partial at ``base``."""
    for q in range(tile_n // 8):
        b.ld(f32, address(base, q * QUAD_BYTES), space="global", vec=4, into=Vec(acc.items[4 * q:4 * q + 4]))


def add_partial(b: Builder, acc, base: Reg, tile_n: int) -> None:
    """``acc += `` the partial at ``base`` (``add.rn.f32``, element by element)."""
    for q in range(tile_n // 8):
        v = b.ld(f32, address(base, q * QUAD_BYTES), space="global", vec=4, name="partial")
        for j in range(4):
            b.add(f32, acc[4 * q + j], v[j], rnd="rn", into=acc[4 * q + j])


def take_ticket(b: Builder, counter: Reg, *, leader: Reg, barrier_id, ticket_smem: Reg) -> Reg:
    """The warpgroup's draw on ``counter`` after its partial is written: ``bar.sync`` (every thread's
    stores before the leader's release), ``@leader atom.acq_rel.gpu.global.add.u32``, the old value
    through shared memory and a second ``bar.sync`` (the acquire before every thread's loads)."""
    b.bar_sync(barrier_id, WARPGROUP)
    with b.if_then(leader):
        old = b.atom("add", u32, address(counter), 1, sem=Sem.ACQ_REL, scope=Scope.GPU, space="global",
                     name="ticket")
        b.st(u32, address(ticket_smem), old, space="shared")
    b.bar_sync(barrier_id, WARPGROUP)
    return b.ld(u32, address(ticket_smem), space="shared", name="drawn")


def reduce_slab(b: Builder, acc, *, tile_n: int, slab, k_slice, splits, workspace: Reg, tickets: Reg,
                wg_tid: Reg, barrier_id: Reg, ticket_smem: Reg) -> Reg:
    """Publish this slice's partial of slab ``slab`` (tile * consumers + warpgroup) and, if this is the
    last slice to arrive, overwrite ``acc`` with the sum over slices in slice order. Returns a predicate
    (uniform over the warpgroup): true where this warpgroup holds the finished slab and must store it.

    PTX (per thread, quad q): ``st.global.v4.f32 [slot + 16*(128q + t)], {acc}; bar.sync id, 128;
    @leader atom.acq_rel.gpu.global.add.u32 old, [ticket], 1; @leader st.shared.u32 [bcast], old;
    bar.sync id, 128; ld.shared.u32 old, [bcast]; setp.eq.u32 last, old, splits - 1;`` then, on the last
    arriver: ``@leader st.relaxed.gpu.global.u32 [ticket], 0;`` and ``ld.global.v4.f32`` + ``add.rn.f32``
    over slots 0..splits-1.
    """
    first_slot = b.mul(u32, slab, splits, mode="lo", name="first_slot")
    store_partial(b, acc, partial_base(b, workspace, b.add(u32, first_slot, k_slice, name="my_slot"), tile_n, wg_tid),
                  tile_n)
    leader = b.setp("eq", u32, wg_tid, 0, name="ticket_leader")
    counter = b.add(u64, tickets, b.mul(u32, slab, 4, mode="wide"), name="ticket_addr")
    drawn = take_ticket(b, counter, leader=leader, barrier_id=barrier_id, ticket_smem=ticket_smem)
    last = b.setp("eq", u32, b.add(u32, drawn, 1), splits, name="last_slice")
    with b.if_then(last, uniform=True):
        # Every slice has arrived: nobody touches the counter again in this launch.
        b.st(u32, address(counter), 0, space="global", sem=Sem.RELAXED, scope=Scope.GPU, pred=leader)
        load_partial(b, acc, partial_base(b, workspace, first_slot, tile_n, wg_tid), tile_n)
        for s in b.range(1, splits, name="slice_sum"):
            add_partial(b, acc, partial_base(b, workspace, b.add(u32, first_slot, s), tile_n, wg_tid), tile_n)
    return last
