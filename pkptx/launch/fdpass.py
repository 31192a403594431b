"""File descriptors between the processes of one node, over AF_UNIX sockets (SCM_RIGHTS).

CUDA's POSIX-fd memory handles mean something only in a process that holds the fd, so they travel
here and never over MPI. Each rank listens on a socket in the Linux abstract namespace named by
:meth:`World.unique_name` (unique per job, nothing left on disk, gone when closed, even after a
crash). A connection counts only if it comes from the same user and carries this job's token.
"""
from __future__ import annotations

import os
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Sequence

from ..errors import WorldError
from .timeouts import resolve_timeout_s
from .world import World, format_ranks

MAX_FDS = 64
MAX_PAYLOAD = 4096
_HEADER = struct.Struct("!8sii")  # job token, sender's world rank, number of fds
_ACK = b"\x06"


@dataclass
class Received:
    """What one peer sent: its fds (now owned by the receiver, who must close them) and payload."""

    fds: list[int]
    payload: bytes = b""
    closed: bool = field(default=False, repr=False)

    def close(self) -> None:
        """Close the received fds (once)."""
        if not self.closed:
            self.closed = True
            for fd in self.fds:
                os.close(fd)


def _address(name: str) -> bytes:
    return b"\0" + name.encode()


def exchange_fds(world: World, fds: Sequence[int], *, payload: bytes = b"",
                 what: str = "fd exchange", timeout: float | None = None) -> dict[int, Received]:
    """Collective: send ``fds`` (and ``payload``) to every other rank on this node; get theirs.

    Returns ``{world rank: Received}`` for the other ranks on this node. The sender's fds stay open
    and its own; when this returns, every peer holds its copies (each one acknowledged receipt).
    """
    if not sys.platform.startswith("linux"):
        raise WorldError(f"{what}: passing fds uses Linux abstract sockets; this is {sys.platform}")
    if len(fds) > MAX_FDS or len(payload) > MAX_PAYLOAD:
        raise WorldError(f"{what}: at most {MAX_FDS} fds and {MAX_PAYLOAD} payload bytes per rank, "
                         f"not {len(fds)} fds and {len(payload)} bytes")
    peers = [r for r in world.local_ranks if r != world.rank]
    purpose = f"fd{world.next_sequence('fdpass')}"
    limit = resolve_timeout_s(timeout, world)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    outgoing: dict[int, socket.socket] = {}
    received: dict[int, Received] = {}
    waiting_on: tuple[list[int], str] = ([], "start")  # who we block on now, for the error
    try:
        listener.bind(_address(world.unique_name(purpose)))
        listener.listen(max(1, len(peers)))
        world.barrier(what=f"{what}: every rank listens", timeout=timeout)
        deadline = time.monotonic() + limit
        header = _HEADER.pack(bytes.fromhex(world.token), world.rank, len(fds))
        for peer in peers:  # never blocks for long: the connection waits in the peer's backlog
            waiting_on = ([peer], "accept our connection")
            outgoing[peer] = sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            sock.settimeout(_remaining(deadline))
            sock.connect(_address(world.unique_name(purpose, peer)))
            socket.send_fds(sock, [header + payload], list(fds))
        while len(received) < len(peers):
            waiting_on = ([p for p in peers if p not in received], "send its fds")
            listener.settimeout(_remaining(deadline))
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(_remaining(deadline))
                rank, got = _receive(conn, world, waiting_on[0], what)
                received[rank] = got
                conn.sendall(_ACK)
        for peer, sock in outgoing.items():
            waiting_on = ([peer], "acknowledge our fds")
            sock.settimeout(_remaining(deadline))
            if sock.recv(1) != _ACK:
                raise WorldError(f"{what}: rank {peer} closed the connection without acknowledging our fds")
    except BaseException as exc:
        for got in received.values():
            got.close()
        ranks, doing = waiting_on
        if isinstance(exc, socket.timeout):
            raise WorldError(f"{what}: {format_ranks(ranks)} did not {doing} within {limit:g} s "
                             f"(seen from rank {world.rank})") from None
        if isinstance(exc, OSError):
            raise WorldError(f"{what}: socket error on rank {world.rank} while waiting for "
                             f"{format_ranks(ranks)} to {doing}: {exc}") from exc
        raise
    finally:
        listener.close()
        for sock in outgoing.values():
            sock.close()
    return received


def _receive(conn: socket.socket, world: World, waiting: list[int], what: str) -> tuple[int, Received]:
    """One peer's message; refuses strangers and truncated messages, closing any fds they sent."""
    pid, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                      struct.calcsize("3i")))
    msg, fds, flags, _ = socket.recv_fds(conn, _HEADER.size + MAX_PAYLOAD, MAX_FDS)
    problem = None
    if uid != os.getuid():
        problem = f"a process of another user (pid {pid}, uid {uid}) connected"
    elif flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        problem = f"a message from pid {pid} was truncated"
    elif len(msg) < _HEADER.size:
        problem = f"pid {pid} sent a {len(msg)}-byte message, too short for a header"
    else:
        token, rank, count = _HEADER.unpack_from(msg)
        if token != bytes.fromhex(world.token):
            problem = f"pid {pid} presented another job's token"
        elif rank not in waiting:
            problem = f"pid {pid} claims to be rank {rank}, which is not expected here"
        elif count != len(fds):
            problem = f"rank {rank} announced {count} fds but {len(fds)} arrived"
    if problem is not None:
        for fd in fds:
            os.close(fd)
        raise WorldError(f"{what}: {problem} (on rank {world.rank})")
    return rank, Received(fds, msg[_HEADER.size:])


def _remaining(deadline: float) -> float:
    """Seconds left; an expired deadline reads as a socket timeout, reported like one."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise socket.timeout("deadline passed")
    return left
