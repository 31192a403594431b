"""signal / signal_all / wait / barrier on flag arrays, with bounded waits (pk-design 3 and 5).

Flags are 32-bit counters that only grow (epochs): a waiter asks for "at least ``expected``" using
wrap-safe signed differences, so no flag is ever reset and no reset kernel or reset race exists.

A wait that outlives its budget does not hang the GPU: the first thread to expire records
``(1, rank, flag id, expected, observed, block, first missing peer, missing-peer mask)`` in the kernel's
status words (``status`` parameter, see :mod:`pkptx.launch.status`) and exits; the host raises a
timeout error naming them. Waits on per-peer slots (:func:`wait_peers`) or on a flag with one known
signaller (``wait(..., peer=)``) report which ranks' signals are missing.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import PTXBuildError
from ..isa import Builder, Kind, Param, Reg, Sem, address, s32, u32, u64
from ..isa.instruction import locate
from .layout import BoundLayout

STATUS_WORDS = 8          # status, rank, flag id, expected, observed, block, first missing peer, peer mask
TIMEOUT_CODE = 1
NO_PEER = 0xFFFFFFFF      # status word 6 when the wait cannot say whose signal is missing


@dataclass(frozen=True)
class Deadline:
    """When bounded waits expire (``%globaltimer`` + ``timeout_ns``) and where an expiry is reported."""
    end: Reg
    status: Reg
    rank: Reg

    @staticmethod
    def params() -> list[Param]:
        return [Param("status", u64, pointer=True, kind=Kind.STATUS), Param("timeout_ns", u64)]

    @classmethod
    def start(cls, b: Builder, rank: Reg) -> "Deadline":
        """Read the clock once; every wait of the kernel shares this budget."""
        end = b.add(u64, b.special("globaltimer"), b.load_param("timeout_ns"), name="deadline")
        return cls(end, b.load_param("status"), rank)

    def report(self, b: Builder, flag_id, expected, observed, *, missing=(NO_PEER, 0),
               then_exit: bool = True) -> None:
        """Record the expiry (first reporter wins, ``atom.global.cas.b32``), then ``exit`` unless the
        caller abandons its wait instead (``then_exit=False``, see ``wait_parity``). ``missing``: (the
        first rank whose signal is missing, a mask of the missing ranks below 32), or (NO_PEER, 0).

        PTX: ``atom.global.cas.b32 old, [status], 0, 1; setp.eq.u32 first, old, 0;``
        ``@first st.global.u32 [status+4*i], ...`` for i = 1..7; ``exit;``.
        """
        old = b.atom("cas", "b32", address(self.status), 0, TIMEOUT_CODE, space="global", name="old_status")
        first = b.setp("eq", u32, old, 0, name="first_timeout")
        for i, value in enumerate((self.rank, flag_id, expected, observed, b.special("ctaid.x"), *missing),
                                  start=1):
            b.st(u32, address(self.status, 4 * i), value, space="global", pred=first)
        if then_exit:
            b.exit()


def signal(b: Builder, flag_addr, value, *, sem: Sem, scope) -> None:
    """Add ``value`` to one counter (local or a peer's), ordered by ``sem`` (use Sem.RELEASE).

    PTX: ``red.<sem>.<scope>.global.add.u32 [flag], value;``. Release orders this thread's earlier
    writes (and, being cumulative, writes it observed, e.g. the CTA's after a ``bar.sync``) before the
    flag. TMA writes are the caller's to complete first: :func:`publish_async_writes`.
    """
    if sem not in (Sem.RELEASE, Sem.RELAXED) or scope is None:
        raise locate(PTXBuildError(f"signal: sem must be Sem.RELEASE (or Sem.RELAXED after your own fence) "
                                   f"with a scope, got sem={sem!r}, scope={scope!r}: a signal without release "
                                   f"publishes nothing"))
    b.red("add", u32, address(flag_addr), value, sem=sem, scope=scope, space="global")


def stamp(b: Builder, flag_addr, value, *, sem: Sem, scope) -> None:
    """Set a flag that has one writer to ``value`` (a launch's epoch, which only grows), ordered by
    ``sem`` (use Sem.RELEASE). Unlike :func:`signal`, a stamp needs no host-side count of earlier
    uses, so a kernel replayed from a CUDA graph waits for the right value.

    PTX: ``st.<sem>.<scope>.global.u32 [flag], value;``. Release orders as in :func:`signal`.
    """
    if sem not in (Sem.RELEASE, Sem.RELAXED) or scope is None:
        raise locate(PTXBuildError(f"stamp: sem must be Sem.RELEASE (or Sem.RELAXED after your own fence) "
                                   f"with a scope, got sem={sem!r}, scope={scope!r}: a stamp without release "
                                   f"publishes nothing"))
    b.st(u32, address(flag_addr), value, space="global", sem=sem, scope=scope)


def publish_async_writes(b: Builder) -> None:
    """Before signalling data written by this thread's TMA stores: wait for the writes themselves,
    not only for the shared-memory reads (pk-design 5), then order the async proxy's global writes
    before the generic-proxy release that follows.

    PTX: ``cp.async.bulk.wait_group 0; fence.proxy.async.global;``.
    """
    b.bulk_wait_group(0)
    b.fence_proxy_async("global")


def flag_address(b: Builder, flags: BoundLayout, rank, index) -> Reg:
    """Address of counter ``index`` in ``rank``'s flag array."""
    base = flags.peer(b, rank)
    return b.add(u64, base, b.mul(u32, index, 4, mode="wide") if isinstance(index, Reg) else 4 * index)


def signal_all(b: Builder, flags: BoundLayout, index, value, *, world: Reg, sem: Sem, scope,
               multicast: bool) -> None:
    """Add ``value`` to counter ``index`` on every rank.

    multicast: ``multimem.red.<sem>.<scope>.global.add.u32 [flags_mc + 4*index], value;`` (one access,
    NVSwitch fans it out). Unicast fallback (same result anywhere): a loop over ranks of
    ``red.<sem>.<scope>.global.add.u32 [peer_r + 4*index], value;``.
    """
    if multicast:
        mc = b.add(u64, flags.mc, b.mul(u32, index, 4, mode="wide") if isinstance(index, Reg) else 4 * index)
        b.multimem_red("add", u32, address(mc), b.mov(u32, value), sem=sem, scope=scope)
        return
    for r in b.range(0, world, name="peer"):
        signal(b, flag_address(b, flags, r, index), value, sem=sem, scope=scope)


def wait(b: Builder, flag_addr, expected, *, sem: Sem, scope, deadline: Deadline, flag_id, peer=None,
         missing=None) -> Reg:
    """Spin until the counter at ``flag_addr`` is at least ``expected`` (wrap-safe), or the deadline.

    ``sem=Sem.ACQUIRE``: each probe is ``ld.acquire.<scope>.global.u32``. ``sem=Sem.RELAXED``: probes
    are ``ld.relaxed.<scope>.global.u32`` and one ``fence.acq_rel.<scope>`` follows the loop, the
    cheaper form when many probes are expected. Either way, data released before the matching signal
    is visible to this thread afterwards (other threads of the CTA need a ``bar.sync``). Per probe::

        ld.<sem>.<scope>.global.u32 v, [flag];  sub.s32 d, v, expected;  setp.ge.s32 ok, d, 0;
        @ok bra done;  mov.u64 t, %globaltimer;  setp.gt.u64 late, t, deadline;  @late <report, exit>

    On expiry the report names whose signal is missing: ``peer`` (a register: the one rank that
    signals this flag), or ``missing()`` (emitted on the expiry path only; returns the report's
    ``(first, mask)`` pair, see :func:`wait_peers`). Returns the observed value.
    """
    if sem not in (Sem.ACQUIRE, Sem.RELAXED) or scope is None:
        raise locate(PTXBuildError(f"wait: sem must be Sem.ACQUIRE or Sem.RELAXED with a scope, got "
                                   f"sem={sem!r}, scope={scope!r}: a weak poll orders nothing and may be "
                                   f"hoisted out of the loop"))
    seen = b.reg(u32, "seen")
    with b.loop("wait_flag") as lp:
        b.ld(u32, address(flag_addr), space="global", sem=sem, scope=scope, into=seen)
        ok = b.setp("ge", s32, b.sub(s32, seen, expected), 0, name="reached")
        lp.break_if(ok)
        late = b.setp("gt", u64, b.special("globaltimer"), deadline.end, name="late")
        with b.if_then(late):
            if missing is not None:
                who = missing()
            elif peer is not None:
                who = (peer, b.shl("b32", b.mov(u32, 1), peer, name="peer_bit"))
            else:
                who = (NO_PEER, 0)
            deadline.report(b, flag_id, expected, seen, missing=who)
    if sem == Sem.RELAXED:
        b.fence(Sem.ACQ_REL, scope)
    return seen


def barrier(b: Builder, flags: BoundLayout, index, expected, *, rank: Reg, world: Reg, scope,
            deadline: Deadline, multicast: bool) -> None:
    """All ranks meet: signal_all(+1, release) then wait(own counter >= expected, acquire).

    With epochs, the n-th barrier on a counter by ``k`` participants per rank expects ``n * k * world``.
    Called by one thread per participant; the caller owes ``bar.sync`` around it for the rest of its CTA.
    """
    signal_all(b, flags, index, 1, world=world, sem=Sem.RELEASE, scope=scope, multicast=multicast)
    if multicast:       # the add went through the multicast address, the wait reads the unicast one
        b.fence_proxy_alias()
    wait(b, flag_address(b, flags, rank, index), expected, sem=Sem.ACQUIRE, scope=scope, deadline=deadline,
         flag_id=index)


def wait_peers(b: Builder, slots: Reg, world: Reg, expected, *, per_peer: int = 1, sem: Sem, scope,
               deadline: Deadline, flag_id) -> None:
    """Spin until every rank's slots reach ``expected``: ``world * per_peer`` u32 counters from
    ``slots``, rank p's at ``slots + 4 * (p * per_peer + j)`` (each written only by rank p).

    One :func:`wait` per slot, in rank order. On expiry the report names the ranks still behind: the
    expiry path reads every slot again (``ld.relaxed.<scope>``) and records the first rank behind and
    a mask of those below 32 (``shl.b32`` clamps larger shifts to 0), so every waiting rank can say
    which peers never arrived rather than only which counter it watched.
    """
    count = world if per_peer == 1 else b.mul(u32, world, per_peer, mode="lo", name="slot_count")

    def missing():
        first, mask = b.mov(u32, NO_PEER, name="first_missing"), b.mov(u32, 0, name="missing_mask")
        for j in b.range(0, count, name="probe"):
            v = b.ld(u32, address(b.add(u64, slots, b.mul(u32, j, 4, mode="wide"))), space="global",
                     sem=Sem.RELAXED, scope=scope, name="slot_seen")
            behind = b.setp("lt", s32, b.sub(s32, v, expected), 0, name="behind")
            peer = j if per_peer == 1 else b.div(u32, j, per_peer, name="slot_peer")
            b.min(u32, first, peer, into=first, pred=behind)
            b.or_("b32", mask, b.shl("b32", b.mov(u32, 1), peer), into=mask, pred=behind)
        return first, mask

    for i in b.range(0, count, name="slot"):
        wait(b, b.add(u64, slots, b.mul(u32, i, 4, mode="wide")), expected, sem=sem, scope=scope,
             deadline=deadline, flag_id=flag_id, missing=missing)
