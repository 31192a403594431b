"""The ranks of a job: who they are, which GPU each uses, and host-side collectives that cannot hang.

Every collective here is made of point-to-point messages polled against a deadline. That costs
N*(N-1) small messages, which is nothing for setup traffic (handles, names, agreement checks), and it
buys the one thing MPI's own collectives cannot give: when a rank never arrives, every other rank
knows exactly which one it was waiting for and raises a :class:`WorldError` naming it, instead of
hanging the job. Not meant for bulk data.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import re
import secrets
import struct
import time
import warnings
from typing import Any, Callable, Iterable, Iterator

from ..errors import WorldError

DEFAULT_TIMEOUT = 60.0
# World() greets every rank on the caller's communicator before duplicating it (MPI_Comm_dup
# would hang on a missing rank); this tag is reserved on that communicator for the greeting.
HELLO_TAG = 31_111
_TAG_SPAN = 30_000  # tags 1.._TAG_SPAN on the private duplicate; MPI guarantees up to 32767
_FIRST_PAUSE, _MAX_PAUSE = 1e-4, 0.01
_NAME_PART = re.compile(r"[A-Za-z0-9_.-]+")


def format_ranks(ranks: Iterable[int]) -> str:
    """'rank 2' or 'ranks 0, 3': how every message here names ranks."""
    ranks = sorted(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


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
    collective waits by default). Every collective takes ``what``, the name errors give it; it
    must be the same string on every rank (a mismatch means ranks went different ways).
    """

    def __init__(self, comm=None, *, timeout: float = DEFAULT_TIMEOUT):
        try:
            from mpi4py import MPI
        except ImportError as exc:
            raise WorldError("World() needs mpi4py (pip install mpi4py); "
                             "World.single() runs one rank without MPI") from exc
        base = MPI.COMM_WORLD if comm is None else comm
        self._setup(MPI, base.Get_rank(), base.Get_size(), timeout)
        token = secrets.token_hex(8) if self.rank == 0 else ""
        hello = pickle.dumps((os.getpid(), token))
        greetings = [pickle.loads(g) for g in
                     self._exchange(base, hello, HELLO_TAG, "World(): greeting every rank", None)]
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
    def single(cls, *, timeout: float = DEFAULT_TIMEOUT) -> World:
        """A world of one rank that never imports mpi4py: for scripts, tests, single-GPU runs."""
        self = cls.__new__(cls)
        self._setup(None, 0, 1, timeout)
        self.pids, self.token = [os.getpid()], secrets.token_hex(8)
        self._comm = self._local = None
        self.local_rank, self.local_size, self.local_ranks = 0, 1, [0]
        atexit.register(self.close)
        return self

    def _setup(self, mpi, rank: int, size: int, timeout: float) -> None:
        if not timeout > 0:
            raise WorldError(f"World timeout must be a positive number of seconds, not {timeout!r}")
        self._mpi, self.rank, self.size, self.timeout = mpi, rank, size, float(timeout)
        self._seq = 0
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
        if self.size == 1:
            return [bytes(data)]
        self._seq += 1
        return self._exchange(self._comm, bytes(data), 1 + self._seq % _TAG_SPAN, what, timeout)

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

    def _exchange(self, comm, payload: bytes, tag: int, what: str,
                  timeout: float | None) -> list[bytes]:
        """All-to-all of ``payload`` over ``comm``; names the ranks not heard from by the deadline.

        Each message carries ``what``, so ranks that run collectives in different orders get a
        WorldError saying where each one is, not each other's bytes.
        """
        mpi, n, me = self._mpi, comm.Get_size(), comm.Get_rank()
        if n == 1:
            return [payload]
        limit = self.timeout if timeout is None else timeout
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
            if time.monotonic() >= deadline:
                arrived = set(range(n)) - pending
                self._fail(f"{what}: {format_ranks(pending)} did not arrive within {limit:g} s "
                           f"(seen from rank {me} of {n}; {format_ranks(arrived)} arrived)")
            time.sleep(pause)
            pause = min(2 * pause, _MAX_PAUSE)
        if elsewhere:
            places = "; ".join(f"rank {r} is in {w!r}" for r, w in sorted(elsewhere.items()))
            self._fail(f"{what}: ranks run collectives in different orders: {places} "
                       f"(seen from rank {me})")
        while not mpi.Request.Testall(sends):
            if time.monotonic() >= deadline:
                self._fail(f"{what}: not every rank took this rank's message within {limit:g} s "
                           f"(seen from rank {me} of {n})")
            time.sleep(_MAX_PAUSE)
        return out

    def _fail(self, message: str) -> None:
        """A rank went missing: collectives after this one could pair up wrongly, so refuse them."""
        self._broken = message
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
