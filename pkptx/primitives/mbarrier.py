"""mbarrier helpers: a ring of stage barriers with phase bits, and the wait loop.

A stage barrier completes a phase when its arrival count is reached and every expected transaction
byte (from TMA or bulk copies) has landed. The k-th use of a stage waits for parity ``k & 1``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..isa import Builder, Reg, address, u32


MBARRIER_FLAG_ID = 0xFFFFFFFF      # the "flag" an expired mbarrier wait reports


def wait_parity(b: Builder, bar_addr, parity, *, deadline, abandon: bool = False, name: str = "mbwait"):
    """Spin until the barrier's phase with ``parity`` has completed.

    PTX::

        $L_mbwait:  mbarrier.try_wait.parity.shared::cta.b64 p, [bar], parity;
                    @p bra $L_mbwait_end;
                    [with a deadline: mov.u64 t, %globaltimer; setp.gt.u64 late, t, end; @late <report, exit>]
                    bra $L_mbwait;
        $L_mbwait_end:

    ``try_wait`` suspends in hardware for a bounded time per probe. Acquire at CTA scope is the
    default semantics, so data written by the completing TMA is visible to this thread afterwards.
    ``deadline`` (a :class:`sync.Deadline`) is required, so that a lost completion (a wrong expect-tx
    count, a copy that faulted) is reported with flag id ``MBARRIER_FLAG_ID`` and the parity as the
    expected value instead of hanging the GPU (pk-design 5). The clock is read only after a failed
    probe, so a wait that succeeds first time costs nothing extra. ``deadline=None`` is an explicit
    opt-out for test kernels whose host bounds the whole launch.

    Returns the last probe's predicate: true once the phase completed, false only when an abandoned
    wait expired.

    ``abandon=True``: on expiry, report and leave the loop rather than ``exit``; the caller goes on
    with whatever the stage holds, and the host's timeout error says the results are void. For waits
    inside a wgmma pipeline: an ``exit`` there makes ptxas serialise every wgmma (info C7518), which
    cost the GEMM 8 to 25% on the H200. Every later wait of the kernel expires at once, so the kernel
    still ends promptly.
    """
    with b.loop(name) as lp:
        done = b.mbarrier_try_wait(address(bar_addr), parity, parity=True)
        lp.break_if(done)
        if deadline is not None:
            late = b.setp("gt", "u64", b.special("globaltimer"), deadline.end, name="mb_late")
            with b.if_then(late):
                deadline.report(b, MBARRIER_FLAG_ID, parity, 0, then_exit=not abandon)
            if abandon:
                lp.break_if(late)
    return done


@dataclass(frozen=True)
class StageRing:
    """``stages`` mbarriers, 8 bytes apart, starting at shared address ``base`` (a .u32 register)."""
    base: Reg
    stages: int

    def bar(self, b: Builder, stage) -> object:
        """The shared address of stage ``stage``'s barrier (a Python int stage is free)."""
        if isinstance(stage, int):
            return address(self.base, 8 * stage)
        return address(b.mad(u32, stage, 8, self.base, mode="lo"))

    def init(self, b: Builder, arrivals: int, *, leader) -> None:
        """Leader thread initialises every stage barrier with ``arrivals`` expected arrivals, then
        ``fence.mbarrier_init.release.cluster`` publishes them. The caller still owes a CTA barrier
        (``bar.sync``) before any other thread uses them.

        PTX: ``@leader mbarrier.init.shared::cta.b64 [bar+8i], arrivals;`` (per stage) and
        ``@leader fence.mbarrier_init.release.cluster;``.
        """
        with b.if_then(leader):
            for s in range(self.stages):
                b.mbarrier_init(self.bar(b, s), arrivals)
            b.fence_mbarrier_init()
