"""Pipeline: stages of shared memory handed from a producer to a consumer through mbarriers, with the
ring's position (stage index and phase bit) kept by the object, so no kernel writes that arithmetic.

A stage's *full* barrier completes a phase when the producer's announced bytes have landed; its *empty*
barrier when every consumer has released it. The k-th use of a stage is phase ``k & 1``: the consumer
waits for that phase of the full barrier, the producer for phase ``(k & 1) ^ 1`` of the empty one
(the phase before a fresh barrier's first counts as complete, so the first use does not wait)::

    producer                                          consumer
    slot = pipe.acquire(b, deadline=d)                slot = pipe.wait(b, deadline=d)
    bar = pipe.commit(b, nbytes, stage=slot.stage)    ... use the stage ...
    ... TMA loads completing on bar ...               pipe.release(b, slot, pred=lane0)
    pipe.advance(b)                                   pipe.advance(b)

PTX: acquire ``mbarrier.try_wait.parity`` loop on ``[empty + 8*stage]`` with ``phase ^ 1``
(:func:`wait_parity`); commit ``mbarrier.arrive.expect_tx.shared::cta.b64 _, [full + 8*stage], nbytes``;
wait the loop on ``[full + 8*stage]`` with ``phase``; release ``mbarrier.arrive.shared::cta.b64 _,
[empty + 8*stage]``. The completing wait acquires at CTA scope, so the consumer sees the bytes and the
producer sees the consumers done with the stage; generic-proxy writes into a stage that TMA later reads
still owe ``fence.proxy.async.shared::cta``.

Without an empty ring the consumer is the producer's own TMA store: the thread loads a chunk, waits for
it and stores it out, so a stage is free again once its bulk store has read it (acquire:
``cp.async.bulk.wait_group.read pending``). A *bounce* pipeline (:meth:`Pipeline.bounce`) is the case
of one barrier at a fixed address.

The position is kept one of two ways (the protocol is the same; the PTX differs):

- counted (``uses``: stages used so far): stage ``uses mod S`` and phase ``(uses / S) & 1``, masks and
  shifts for S = 2^n (this sits on the consumers' critical path, and ptxas leaves a general division
  there); any position can be named, e.g. the one behind (:meth:`behind`). A bounce pipeline with a
  count: stage 0, phase ``uses & 1``.
- stepped (``stage`` and ``phase`` registers): advancing costs a compare and two selects, no division;
  with one stage only the phase bit, flipped (``xor``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import PTXBuildError
from ..isa import Builder, Reg, b32, u32
from ..isa.instruction import locate
from .mbarrier import StageRing, wait_parity

_NO_DEADLINE = object()      # acquire's default: without an empty ring it waits on no barrier


def stage_phase(b: Builder, position, stages: int):
    """(stage, phase parity) of ring position ``position``: masks and shifts for 2^n stages, else
    ``rem`` and ``div``.

    PTX (2^n stages): ``and.b32 stage, pos, S-1; shr.u32 t, pos, n; and.b32 phase, t, 1;``
    """
    if stages & (stages - 1) == 0:
        return (b.and_(b32, position, stages - 1, name="stage"),
                b.and_(b32, b.shr(u32, position, stages.bit_length() - 1), 1, name="phase"))
    return b.rem(u32, position, stages, name="stage"), b.and_(b32, b.div(u32, position, stages), 1, name="phase")


@dataclass(frozen=True)
class Slot:
    """One position of a pipeline: its stage (a register, or an int) and phase bit (None where the
    caller needs only the stage)."""
    stage: object
    phase: object = None


@dataclass(frozen=True)
class Pipeline:
    """``full`` rings (one or more, sharing the stage index: e.g. K and V of one block), the ``empty``
    ring (None: a stage is freed by the bulk store that read it), and the position: ``uses``
    (counted) or ``phase`` (and ``stage`` with more than one stage: stepped). Frozen: the registers
    advance in place, the object does not change."""
    full: tuple[StageRing, ...]
    empty: StageRing | None = None
    uses: Reg | None = None
    stage: Reg | None = None
    phase: Reg | None = None
    bounce_count: bool = False       # counted bounce pipeline: phase = uses & 1, no stage arithmetic

    @classmethod
    def bounce(cls, bar, *, uses: Reg | None = None, phase: Reg | None = None) -> "Pipeline":
        """A one-stage pipeline on the barrier at ``bar`` (an address), its position the count ``uses``
        or the phase bit ``phase`` (exactly one of them)."""
        if (uses is None) == (phase is None):
            raise locate(PTXBuildError("Pipeline.bounce: give exactly one of uses= (a count) and phase= (a bit)"))
        return cls((StageRing(bar, 1),), uses=uses, phase=phase, bounce_count=uses is not None)

    @property
    def stages(self) -> int:
        return self.full[0].stages

    def stepped(self, b: Builder) -> "Pipeline":
        """This pipeline at position 0, kept as (stage, phase) registers.

        PTX: ``mov.u32 stage, 0; mov.u32 parity, 0;`` (no stage register with one stage).
        """
        stage = b.mov(u32, 0, name="stage") if self.stages > 1 else None
        return replace(self, uses=None, stage=stage, phase=b.mov(u32, 0, name="parity"), bounce_count=False)

    def at(self, b: Builder, position=None) -> Slot:
        """The slot of ``position`` (default: the current one; counted pipelines only name others).
        Stepped pipelines emit nothing; counted ones :func:`stage_phase` (a bounce: ``and.b32 p, uses, 1``)."""
        if self.phase is not None:
            if position is not None:
                raise locate(PTXBuildError("Pipeline.at: a stepped pipeline knows only its current slot"))
            return Slot(0 if self.stage is None else self.stage, self.phase)
        position = self.uses if position is None else position
        if self.bounce_count:
            return Slot(0, b.and_(b32, position, 1))
        return Slot(*stage_phase(b, position, self.stages))

    def behind(self, b: Builder) -> Slot:
        """The slot one position back (the stage the consumer last used, or the producer refills).

        Counted: ``sub.u32 p, uses, 1`` and :func:`stage_phase`. Stepped (stage only): ``setp.eq.u32 f,
        stage, 0; sub.u32 t, stage, 1; selp.u32 prev, S-1, t, f;``.
        """
        if self.phase is None:
            return self.at(b, b.sub(u32, self.uses, 1))
        if self.stage is None:
            return Slot(0)
        first = b.setp("eq", u32, self.stage, 0, name="first_stage")
        return Slot(b.selp(u32, self.stages - 1, b.sub(u32, self.stage, 1), first, name="prev_stage"))

    def full_bar(self, b: Builder, stage, *, ring: int = 0):
        """The address of ``stage``'s barrier in full ring ``ring`` (the loads complete on it)."""
        return self.full[ring].bar(b, stage)

    # ------------------------------------------------------------------------------------ producer
    def acquire(self, b: Builder, *, deadline=_NO_DEADLINE, pending: int = 0, name: str = "wait_free") -> Slot | None:
        """Wait until the current slot's stage is free; returns the slot.

        With an empty ring: :func:`wait_parity` on ``[empty + 8*stage]`` for ``phase ^ 1`` (``deadline``
        required, None the explicit opt-out, as there). Without one: ``cp.async.bulk.wait_group.read
        pending`` (the store that last read the stage is done with it; ``pending``: later bulk groups that
        may stay in flight); returns None.
        """
        if self.empty is None:
            b.bulk_wait_group(pending, read=True)
            return None
        if deadline is _NO_DEADLINE:
            raise locate(PTXBuildError("Pipeline.acquire: a wait on the empty ring needs deadline= (a lost "
                                       "release is then reported, not a hang; None: the explicit opt-out)"))
        slot = self.at(b)
        wait_parity(b, self.empty.bar(b, slot.stage), b.xor(b32, slot.phase, 1), deadline=deadline, name=name)
        return slot

    def commit(self, b: Builder, nbytes, *, stage=None, ring: int = 0, bar=None):
        """Announce ``nbytes`` that TMA or bulk copies will bring into ``stage`` (default: the only stage)
        of full ring ``ring``: ``mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], nbytes;``. Returns
        the barrier's address for the copies' ``complete_tx``. ``bar``: the barrier, when the caller
        already holds it (:meth:`full_bar`)."""
        if bar is None:
            if stage is None and self.stages > 1:
                raise locate(PTXBuildError(f"Pipeline.commit: which of the {self.stages} stages? (stage=)"))
            bar = self.full_bar(b, 0 if stage is None else stage, ring=ring)
        b.mbarrier_arrive_expect_tx(bar, nbytes)
        return bar

    # ------------------------------------------------------------------------------------ consumer
    def wait(self, b: Builder, slot: Slot | None = None, *, deadline, abandon: bool = False, ring: int = 0,
             name: str = "mbwait") -> Slot:
        """Wait until ``slot``'s bytes (default: the current slot's) have landed in full ring ``ring``:
        :func:`wait_parity` on ``[full + 8*stage]`` for ``phase`` (``abandon`` as there). Returns the slot."""
        slot = self.at(b) if slot is None else slot
        wait_parity(b, self.full_bar(b, slot.stage, ring=ring), slot.phase, deadline=deadline, abandon=abandon,
                    name=name)
        return slot

    def release(self, b: Builder, slot: Slot, *, pred=None) -> None:
        """This thread is done with ``slot``'s stage: ``@pred mbarrier.arrive.shared::cta.b64 _, [empty +
        8*stage];`` (the ring expects one arrival per releasing thread: ``pred`` picks them)."""
        if self.empty is None:
            raise locate(PTXBuildError("Pipeline.release: there is no empty ring; a stage is freed by the bulk "
                                       "store that read it (acquire waits for that)"))
        b.mbarrier_arrive(self.empty.bar(b, slot.stage), pred=pred)

    # ------------------------------------------------------------------------------------ both
    def skip(self, b: Builder, count) -> None:
        """Move ``count`` positions on at once (the stages another consumer takes). Counted: ``add.u32
        uses, uses, count``. Stepped: ``add.u32 t, stage, count; div.u32 w, t, S; rem.u32 stage, t, S;
        and.b32 w, w, 1; xor.b32 phase, phase, w`` (one stage: the parity of ``count``)."""
        if self.phase is None:
            b.add(u32, self.uses, count, into=self.uses)
            return
        total = count if self.stage is None else b.add(u32, self.stage, count, name="skipped_to")
        if self.stage is not None:
            b.rem(u32, total, self.stages, into=self.stage)
        laps = total if self.stage is None else b.div(u32, total, self.stages, name="laps")
        b.xor(b32, self.phase, b.and_(b32, laps, 1, name="lap_parity"), into=self.phase)

    def advance(self, b: Builder) -> None:
        """Move to the next position. Counted: ``add.u32 uses, uses, 1``. One stage, stepped:
        ``xor.b32 phase, phase, 1``. Stepped: ``add.u32 stage, stage, 1; setp.eq.u32 w, stage, S;
        selp.u32 stage, 0, stage, w; selp.u32 t, 1, 0, w; xor.b32 phase, phase, t``."""
        if self.phase is None:
            b.add(u32, self.uses, 1, into=self.uses)
        elif self.stage is None:
            b.xor(b32, self.phase, 1, into=self.phase)
        else:
            b.add(u32, self.stage, 1, into=self.stage)
            wrap = b.setp("eq", u32, self.stage, self.stages, name="wrap")
            b.selp(u32, 0, self.stage, wrap, into=self.stage)
            b.xor(b32, self.phase, b.selp(u32, 1, 0, wrap), into=self.phase)
