"""The ranks of a job: who they are, which GPU each uses, and host-side collectives that cannot hang.

Every collective here is made of point-to-point messages polled against a deadline. That costs
N*(N-1) small messages, which is nothing for setup traffic (handles, names, agreement checks), and it
buys the one thing MPI's own collectives cannot give: when a rank never arrives, every other rank
knows exactly which one it was waiting for and raises a :class:`WorldError` naming it, instead of
hanging the job. Not meant for bulk data.

After such a timeout the world is *lost*: it refuses every later collective, and it tells the other
ranks that it gave up (a notice naming the collective and its sequence number), so a rank that
arrives late at the abandoned collective, or at any later one, raises instead of passing it. A
process whose world was lost must not reach MPI_Finalize, which waits for every rank, the dead one
included, forever: at exit (after the exit handlers registered after pkptx was imported, World
closers included) it ends itself with exit status 1, flushing stdout and stderr first. Only that
process ends (with MPICH; Open MPI's mpirun may end the rest of the job with it). Call
:meth:`World.abort` to leave at once with a status of your choice.

MPICH's launcher run with ``-disable-auto-cleanup`` tells the surviving ranks that a process died by
sending them SIGUSR1, whose default action ends a Python process at once, silently. Where SIGUSR1 still
has its default action, World() notes the signal instead, so the survivors live to name the dead rank
at the timeout (the message says the launcher reported a failure).
"""
from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import re
import secrets
import signal
import struct
import sys
import threading
import time
import warnings
from typing import Any, Callable, Iterable, Iterator, NoReturn

from ..errors import WorldError
from .timeouts import check_timeout_s, default_timeout_s, resolve_timeout_s

# World() greets every rank on the caller's communicator before duplicating it (MPI_Comm_dup
# would hang on a missing rank); these tags are reserved on that communicator for the greeting
# and for the notice that a rank gave up on it.
HELLO_TAG = 31_111
HELLO_NOTICE_TAG = HELLO_TAG + 1
_TAG_SPAN = 30_000  # tags 1.._TAG_SPAN on the private duplicate; MPI guarantees up to 32767
NOTICE_TAG = _TAG_SPAN + 1  # on the private duplicate: "I gave up on collective #seq, missing ranks ..."
LOST_EXIT_STATUS = 1
_FIRST_PAUSE, _MAX_PAUSE = 1e-4, 0.01
_NOTICE_PUSH_S = 0.2  # how long a rank that gives up drives its notices out
_QUIET_PROBES = 8     # empty probes in a row before a rank believes no notice is waiting
_NAME_PART = re.compile(r"[A-Za-z0-9_.-]+")


def format_ranks(ranks: Iterable[int]) -> str:
    """'rank 2' or 'ranks 0, 3': how every message here names ranks."""
    ranks = sorted(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


_lost: list[str] = []  # why a world of this process lost a rank: leave without MPI_Finalize at exit


def _end_process(status: int, why: str) -> NoReturn:
    """Flush, say why on stderr, and end this process only, skipping MPI_Finalize. Not MPI_Abort, even
    on MPI_COMM_SELF: MPICH's launcher answers any abort by killing every rank of the job, survivors
    that have not yet reported included."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.write(f"pkptx: pid {os.getpid()} ends with status {status} without MPI_Finalize: {why}\n")
        sys.stderr.flush()
    os._exit(status)


_failure_notices: list[float] = []  # when the launcher signalled that some process of the job failed


def _note_failure_notice(signum, frame) -> None:
    _failure_notices.append(time.monotonic())


def _heed_failure_notices() -> None:
    """Note MPICH's SIGUSR1 failure notices rather than die of them (see the module docstring); a
    handler someone else installed is left alone, and only the main thread may install one."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL:
        signal.signal(signal.SIGUSR1, _note_failure_notice)


@atexit.register
def _leave_if_lost() -> None:
    """Registered when pkptx.launch is imported, so it runs after every exit handler registered later."""
    if _lost:
        _end_process(LOST_EXIT_STATUS, _lost[0])


def choose_device(local_rank: int, local_size: int, visible: int) -> int:
    """The GPU ordinal of a local rank: round-robin over the visible GPUs.

    More ranks than GPUs is allowed on purpose: it is how multi-rank code is tested on one GPU.
    """
    if visible <= 0:
        raise WorldError(f"no GPU is visible to local rank {local_rank} of {local_size} "
                         "(cuDeviceGetCount returned 0; check CUDA_VISIBLE_DEVICES)")
    return local_rank % visible


class Step:
    """What :meth:`World.step` shares: set ``value`` inside the block, read ``values`` after it."""

    def __init__(self) -> None:
        self.value: Any = None
        self.values: list[Any] = []


class World:
    """The MPI world of this job (``comm`` or COMM_WORLD), or a world of one (:meth:`single`).

    Attributes: ``rank``, ``size``, ``local_rank``, ``local_size`` (ranks on this node, from
    MPI_Comm_split_type(COMM_TYPE_SHARED)), ``local_ranks`` (their world ranks, by local rank),
    ``pids``, ``token`` (random, from rank 0: unique per job) and ``timeout`` (seconds every
    collective waits unless the call says otherwise: ``timeout=`` here, else ``PKPTX_TIMEOUT_S``,
    else 60; see :mod:`pkptx.launch.timeouts`). Every collective takes ``what``, the name errors
    give it; it must be the same string on every rank (a mismatch means ranks went different ways).
    """

    def __init__(self, comm=None, *, timeout: float | None = None):
        try:
            from mpi4py import MPI
        except ImportError as exc:
            raise WorldError("World() needs mpi4py (pip install mpi4py); "
                             "World.single() runs one rank without MPI") from exc
        _heed_failure_notices()
        base = MPI.COMM_WORLD if comm is None else comm
        self._setup(MPI, base.Get_rank(), base.Get_size(), timeout)
        token = secrets.token_hex(8) if self.rank == 0 else ""
        hello = pickle.dumps((os.getpid(), token))
        greetings = [pickle.loads(g) for g in
                     self._exchange(base, hello, (HELLO_TAG, HELLO_NOTICE_TAG), "World(): greeting every rank",
                                    self.timeout)]
        self.pids = [g[0] for g in greetings]
        self.token = greetings[0][1]
        self._comm = base.Dup()
        self._local = self._comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        self.local_rank, self.local_size = self._local.Get_rank(), self._local.Get_size()
        local_group, group = self._local.Get_group(), self._comm.Get_group()
        self.local_ranks = local_group.Translate_ranks(list(range(self.local_size)), group)
        local_group.Free()
        group.Free()
        atexit.register(self.close)

    @classmethod
    def single(cls, *, timeout: float | None = None) -> World:
        """A world of one rank that never imports mpi4py: for scripts, tests, single-GPU runs."""
        self = cls.__new__(cls)
        self._setup(None, 0, 1, timeout)
        self.pids, self.token = [os.getpid()], secrets.token_hex(8)
        self._comm = self._local = None
        self.local_rank, self.local_size, self.local_ranks = 0, 1, [0]
        atexit.register(self.close)
        return self

    def _setup(self, mpi, rank: int, size: int, timeout: float | None) -> None:
        self.timeout = default_timeout_s() if timeout is None else check_timeout_s(timeout, "World(timeout)")
        self._mpi, self.rank, self.size = mpi, rank, size
        self._seq = 0
        self._notices: list = []  # pending sends of "gave up" notices (their buffers live in them)
        self._sequences: dict[str, int] = {}
        self._closers: list[Callable[[], None]] = []
        self._broken: str | None = None
        self._closing = self._closed = False
        self._warned_sharing = False

    # ----------------------------------------------------------------------------- collectives

    def barrier(self, *, what: str = "barrier", timeout: float | None = None) -> None:
        """Every rank meets; a rank that does not come within the timeout is named."""
        self.allgather_bytes(b"", what=what, timeout=timeout)

    def allgather_bytes(self, data: bytes, *, what: str = "allgather",
                        timeout: float | None = None) -> list[bytes]:
        """Every rank's ``data``, indexed by rank."""
        self._check_usable(what)
        limit = resolve_timeout_s(timeout, self)
        if self.size == 1:
            return [bytes(data)]
        self._seq += 1
        return self._exchange(self._comm, bytes(data), (1 + self._seq % _TAG_SPAN, NOTICE_TAG), what, limit)

    def allgather(self, obj: Any, *, what: str = "allgather", timeout: float | None = None) -> list:
        """Every rank's ``obj`` (pickled), indexed by rank."""
        blobs = self.allgather_bytes(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL), what=what,
                                     timeout=timeout)
        return [pickle.loads(b) for b in blobs]

    @contextlib.contextmanager
    def step(self, what: str, *, timeout: float | None = None) -> Iterator[Step]:
        """Run a local block, then learn on every rank whether it worked everywhere.

        A failure on one rank reaches the others at once as a WorldError naming it and its error,
        rather than as a timeout at the next collective. The gather doubles as a barrier.
        """
        shared = Step()
        try:
            yield shared
        except BaseException as exc:
            if self._broken is None and isinstance(exc, Exception):
                with contextlib.suppress(WorldError):
                    self.allgather(("failed", f"{type(exc).__name__}: {exc}"), what=what, timeout=timeout)
            raise
        outcomes = self.allgather(("ok", shared.value), what=what, timeout=timeout)
        failed = {r: text for r, (status, text) in enumerate(outcomes) if status == "failed"}
        if failed:
            details = "\n".join(f"  rank {r}: {text}" for r, text in failed.items())
            raise WorldError(f"{what} failed on {format_ranks(failed)}:\n{details}")
        shared.values = [value for _, value in outcomes]

    def _exchange(self, comm, payload: bytes, tags: tuple[int, int], what: str, limit: float) -> list[bytes]:
        """All-to-all of ``payload`` over ``comm``; names the ranks not heard from in ``limit`` seconds.

        ``tags`` are this collective's message tag and the tag of "gave up" notices on ``comm``.
        Each message carries ``what``, so ranks that run collectives in different orders get a
        WorldError saying where each one is, not each other's bytes. A notice from a rank that gave
        up (on this collective or an earlier one) fails this one at once: the others' messages may
        all be here, but the rank that sent them has left.
        """
        mpi, n, me = self._mpi, comm.Get_size(), comm.Get_rank()
        if n == 1:
            return [payload]
        tag, notice_tag = tags
        self._heed_notices(comm, notice_tag, what)
        deadline = time.monotonic() + limit
        label = what.encode()
        message = struct.pack("!I", len(label)) + label + payload
        sends = [comm.Isend([message, mpi.BYTE], dest=p, tag=tag) for p in range(n) if p != me]
        out: list[bytes] = [b""] * n
        out[me] = payload
        elsewhere: dict[int, str] = {}
        pending, status, pause = set(range(n)) - {me}, mpi.Status(), _FIRST_PAUSE
        while pending:
            probed = comm.Improbe(mpi.ANY_SOURCE, tag, status)
            if probed is not None:
                buf = bytearray(status.Get_count(mpi.BYTE))
                probed.Recv([buf, mpi.BYTE])
                source, (size,) = status.Get_source(), struct.unpack_from("!I", buf)
                if buf[4:4 + size] != label:
                    elsewhere[source] = buf[4:4 + size].decode(errors="replace")
                out[source] = bytes(buf[4 + size:])
                pending.discard(source)
                pause = _FIRST_PAUSE
                continue
            self._heed_notices(comm, notice_tag, what, pending)
            if time.monotonic() >= deadline:
                arrived = set(range(n)) - pending
                told = "; the MPI launcher reported a failed process (SIGUSR1)" if _failure_notices else ""
                self._give_up(comm, notice_tag, what, limit, pending,
                              f"{what}: {format_ranks(pending)} did not arrive within {limit:g} s "
                              f"(seen from rank {me} of {n}; {format_ranks(arrived)} arrived){told}")
            time.sleep(pause)
            pause = min(2 * pause, _MAX_PAUSE)
        if elsewhere:
            places = "; ".join(f"rank {r} is in {w!r}" for r, w in sorted(elsewhere.items()))
            self._fail(f"{what}: ranks run collectives in different orders: {places} "
                       f"(seen from rank {me})")
        while not mpi.Request.Testall(sends):
            if time.monotonic() >= deadline:
                self._give_up(comm, notice_tag, what, limit, set(),
                              f"{what}: not every rank took this rank's message within {limit:g} s "
                              f"(seen from rank {me} of {n})")
            time.sleep(_MAX_PAUSE)
        self._heed_notices(comm, notice_tag, what)
        return out

    def _give_up(self, comm, notice_tag: int, what: str, waited: float, missing: set[int],
                 message: str) -> NoReturn:
        """A rank went missing: tell every other rank that this one gives up on collective
        #``self._seq`` (so a late arrival raises instead of passing it), then fail as lost."""
        mpi = self._mpi
        notice = pickle.dumps((self._seq, waited, what, sorted(missing)))
        for p in range(comm.Get_size()):
            if p != comm.Get_rank():
                with contextlib.suppress(mpi.Exception):   # a dead peer may refuse it
                    self._notices.append(comm.Isend([notice, mpi.BYTE], dest=p, tag=notice_tag))
        # MPI moves a message only while the sender is inside MPI: drive the sends a moment (those
        # to a dead rank may never complete), so the notices are out before this rank goes quiet
        until = time.monotonic() + _NOTICE_PUSH_S
        with contextlib.suppress(mpi.Exception):
            while not mpi.Request.Testall(self._notices) and time.monotonic() < until:
                time.sleep(_FIRST_PAUSE)
        self._fail(message, lost=True)

    def _heed_notices(self, comm, notice_tag: int, what: str, pending: set[int] = frozenset()) -> None:
        """Fail as lost if some rank said it gave up on a collective (any: it has left the world).

        ``pending``: the ranks this collective still waits for, named first when there are any."""
        mpi, status, gave_up = self._mpi, self._mpi.Status(), {}
        quiet = 0
        while quiet < _QUIET_PROBES:   # one probe may move only one message in from shared memory
            probed = comm.Improbe(mpi.ANY_SOURCE, notice_tag, status)
            if probed is None:
                quiet += 1
                continue
            buf = bytearray(status.Get_count(mpi.BYTE))
            probed.Recv([buf, mpi.BYTE])
            gave_up[status.Get_source()] = pickle.loads(buf)
        if not gave_up:
            return
        me, n = comm.Get_rank(), comm.Get_size()
        told = "; ".join(f"rank {r} gave up on {w!r} (host collective #{seq}) after {t:g} s, missing "
                         f"{format_ranks(missing)}" for r, (seq, t, w, missing) in sorted(gave_up.items()))
        if pending:
            self._fail(f"{what}: {format_ranks(pending)} did not arrive (seen from rank {me} of {n}); {told}",
                       lost=True)
        self._fail(f"{what}: {told}; this rank (rank {me} of {n}, at #{self._seq}) came too late or was "
                   "left behind, and the world is lost", lost=True)

    def _fail(self, message: str, *, lost: bool = False) -> NoReturn:
        """Collectives after this one could pair up wrongly, so refuse them. ``lost``: a rank went
        missing, so this process must not reach MPI_Finalize (see the module docstring)."""
        self._broken = message
        if lost and self._mpi is not None:
            _lost.append(message)
        raise WorldError(message)

    def _check_usable(self, what: str) -> None:
        if self._closed:
            raise WorldError(f"{what}: this World is closed")
        if self._broken is not None:
            raise WorldError(f"{what}: this World is unusable after an earlier failure: {self._broken}")

    @property
    def broken(self) -> str | None:
        """Why the world stopped working (a rank went missing), or None."""
        return self._broken

    def abort(self, status: int = LOST_EXIT_STATUS) -> NoReturn:
        """End this rank now with exit ``status``: flush stdout and stderr, then leave (``os._exit``).
        MPI_Finalize, which would wait for a dead rank forever, and every later exit handler and closer
        are skipped; the process's memory and GPU handles go with it. Other ranks are not ended: they
        learn at their own timeout."""
        if isinstance(status, bool) or not isinstance(status, int) or not 0 <= status <= 255:
            raise WorldError(f"World.abort(status={status!r}): expected an int exit status in 0..255")
        _end_process(status, f"World.abort({status}) on rank {self.rank}" +
                     (f" after: {self._broken}" if self._broken else ""))

    # ------------------------------------------------------------------------ names and devices

    def next_sequence(self, purpose: str) -> int:
        """0, 1, 2... per purpose; equal on every rank as long as the callers are collective."""
        value = self._sequences.get(purpose, 0)
        self._sequences[purpose] = value + 1
        return value

    def unique_name(self, purpose: str, rank: int | None = None) -> str:
        """A name that no other job, and no other rank, uses (sockets, temp files).

        Built from the job token rank 0 drew, the rank and its pid, so any rank can compute the
        name of any other rank's endpoint.
        """
        if not _NAME_PART.fullmatch(purpose):
            raise WorldError(f"unique_name: purpose {purpose!r} may only hold letters, digits, '_.-'")
        r = self.rank if rank is None else rank
        if not 0 <= r < self.size:
            raise WorldError(f"unique_name: rank {r} does not exist; the world has ranks 0..{self.size - 1}")
        return f"pkptx-{self.token}-{purpose}-r{r}-{self.pids[r]}"

    def device_ordinal(self, visible: int | None = None) -> int:
        """This rank's GPU: local rank modulo the visible GPUs (warns when ranks share one)."""
        if visible is None:
            from .driver import call

            visible = call("cuDeviceGetCount")
        ordinal = choose_device(self.local_rank, self.local_size, visible)
        if self.local_size > visible and not self._warned_sharing:
            self._warned_sharing = True
            warnings.warn(f"{self.local_size} ranks on this node share {visible} GPU(s); rank "
                          f"{self.rank} uses GPU {ordinal}. Fine for testing multi-rank logic; "
                          "bandwidth measured this way means nothing.", RuntimeWarning, stacklevel=2)
        return ordinal

    # -------------------------------------------------------------------------------- teardown

    def on_close(self, closer: Callable[[], None]) -> Callable[[], None]:
        """Run ``closer`` when the world closes (newest first); returns a function that forgets it."""
        self._closers.append(closer)

        def forget() -> None:
            if closer in self._closers:
                self._closers.remove(closer)

        return forget

    def close(self) -> None:
        """Close what was built on this world (heaps: newest first), then free the communicators.

        Runs at exit too. The first teardown error is raised after everything else was closed.
        """
        if self._closing or self._closed:
            return
        self._closing = True
        errors = []
        while self._closers:
            try:
                self._closers.pop()()
            except Exception as exc:  # keep closing the rest; report the first afterwards
                errors.append(exc)
        if self._comm is not None and not self._mpi.Is_finalized():
            self._local.Free()
            self._comm.Free()
        self._closed = True
        atexit.unregister(self.close)
        if errors:
            raise errors[0]

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        kind = "single" if self._mpi is None else "mpi"
        return (f"World({kind}, rank={self.rank}/{self.size}, "
                f"local={self.local_rank}/{self.local_size}, token={self.token})")
