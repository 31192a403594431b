"""stream_copy: one thread moves bytes global -> shared -> global with bulk copies, its loads running
ahead of its stores through the stages of a pipeline, so several chunks are in flight at once.

A thread that loads a chunk, waits for it, stores it and waits for the store before the next load keeps
one chunk in flight: it moves about chunk / (two round trips) bytes a second, whatever the bandwidth.
Here a stage is reloaded once the store that read it is done reading (``wait_group.read 1``: the store
just issued may stay in flight), and the loads of the next ``stages - 1`` chunks are already under way.
The stores stay in flight when it returns; a caller that signals the data first publishes them
(:func:`pkptx.primitives.sync.publish_async_writes`).
"""
from __future__ import annotations

from ..errors import PTXBuildError
from ..isa import Builder, Reg, address, u32, u64
from ..isa.instruction import locate
from .pipeline import Pipeline


def stream_copy(b: Builder, pipe: Pipeline, dst, src, nbytes, *, chunk: int, buffer, deadline, first=0,
                stride=1) -> None:
    """Copy chunks ``first``, ``first + stride``, ... (``chunk`` bytes each, the last one short) of the
    ``nbytes`` at global ``src`` to global ``dst`` through ``pipe``: a counted pipeline without an empty
    ring (``uses``: the chunks it has carried so far, advanced here), its stage s the ``chunk`` bytes at
    shared ``buffer + s·chunk``. ``nbytes`` a 16-byte multiple; ``first`` and ``stride`` of its type (u32,
    or u64 for copies past 4 GiB: 64-bit division is a subroutine call, which serialises every wgmma of
    the kernel).

    PTX per chunk j (S stages; S = 1 loads right before it waits)::

        (once, before the first S-1 loads: cp.async.bulk.wait_group.read 0)
        mbarrier.arrive.expect_tx [full + 8·s(j+S-1)], size;  cp.async.bulk.shared::cluster.global ... (j+S-1)
        mbarrier.try_wait.parity [full + 8·s(j)], phase(j);   cp.async.bulk.global.shared::cta ... (j)
        cp.async.bulk.commit_group;  cp.async.bulk.wait_group.read 1   (before reloading a stage)
    """
    if pipe.empty is not None or pipe.uses is None:
        raise locate(PTXBuildError("stream_copy: pipe must be a counted pipeline without an empty ring (its bulk "
                                   "stores free the stages)"))
    if chunk % 16 or chunk <= 0:
        raise locate(PTXBuildError(f"stream_copy: chunk must be a positive multiple of 16 bytes, got {chunk}"))
    ahead = pipe.stages - 1
    ty = u64 if isinstance(nbytes, Reg) and nbytes.type is u64 else u32   # u32 counts: no 64-bit division
    chunks = b.div(ty, b.add(ty, nbytes, chunk - 1), chunk, name="stream_chunks")
    left = b.sub(ty, b.max(ty, chunks, first), first, name="stream_left")
    mine = b.div(ty, b.add(ty, left, b.sub(ty, stride, 1)), stride, name="stream_mine")
    base = b.mov(u32, pipe.uses, name="stream_base")

    def narrow(x):
        return x if ty is u32 else b.cvt(u32, u64, x)

    def piece(j):
        """(offset, size, slot, stage buffer) of this thread's j-th chunk."""
        index = b.mad(ty, j, stride, first, mode="lo", name="stream_chunk")
        off = b.mul(ty, index, chunk, mode="lo", name="stream_off")
        size = narrow(b.min(ty, b.sub(ty, nbytes, off), chunk, name="stream_bytes"))
        wide = off if ty is u64 else b.cvt(u64, u32, off)
        slot = pipe.at(b, b.add(u32, base, narrow(j)))
        stage = b.mad(u32, slot.stage, chunk, buffer, mode="lo", name="stream_stage") if pipe.stages > 1 else buffer
        return wide, size, slot, stage

    def load(j):
        off, size, slot, stage = piece(j)
        b.bulk_load(address(stage), address(b.add(u64, src, off)), size, pipe.commit(b, size, stage=slot.stage))

    if ahead:
        pipe.acquire(b)                     # an earlier copy's stores through these stages have read them
        for j in b.range(0, b.min(ty, mine, ahead), ty=ty, name="stream_pro"):
            load(j)
    for j in b.range(0, mine, ty=ty, name="stream"):
        if not ahead:
            pipe.acquire(b)                                   # the last store has read the one stage
            load(j)
        off, size, slot, stage = piece(j)
        pipe.wait(b, slot, deadline=deadline, name="stream_in")
        b.bulk_store(address(b.add(u64, dst, off)), address(stage), size)
        b.bulk_commit_group()
        if ahead:
            with b.if_then(b.setp("lt", ty, b.add(ty, j, ahead), mine, name="stream_refill")):
                pipe.acquire(b, pending=1)                    # the store before this one has read its stage
                load(b.add(ty, j, ahead))
    b.add(u32, pipe.uses, narrow(mine), into=pipe.uses)
