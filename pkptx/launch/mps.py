"""A private CUDA MPS daemon, so that ranks sharing one GPU run at once, each on its own SM share.

Without MPS, kernels of several processes on one GPU are time-sliced (milliseconds per switch); under
MPS they run concurrently, and ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` caps each client's SMs. HBM is
shared and there is no NVLink between such ranks: figures taken this way measure the protocol, the
overlap and the SM split, never link bandwidth.

``daemon()`` starts a control daemon in fresh temporary pipe and log folders (never the system's
default ``/tmp/nvidia-mps``) and always stops it again, also after an exception or a timeout, and
checks that it is gone. It changes no GPU setting. Ranks get their share from ``PKPTX_MPS_SHARES``
(comma-separated percentages, one per local rank): :func:`apply_share` sets the cap before the
process creates its CUDA context. ``python -m pkptx mps start|stop|status|run`` wraps the same.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import PkptxError

CONTROL = "nvidia-cuda-mps-control"
SHARES_ENV = "PKPTX_MPS_SHARES"
PERCENT_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
PIPE_ENV, LOG_ENV = "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"
STATE_FILE = Path(tempfile.gettempdir()) / "pkptx-mps.env"     # what `pkptx mps start` left running
LOCAL_RANK_ENVS = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "PMIX_LOCAL_RANK",
                   "SLURM_LOCALID")


class MpsError(PkptxError):
    """The MPS daemon could not be started, reached or stopped."""


@dataclass(frozen=True)
class MpsStatus:
    running: bool
    pipe_dir: str | None
    detail: str


# The default equal shares of several ranks add up to this percent of the SMs. At 100 % (and at 92 %), in
# every repeat one rank's kernel ran about twice as long as the others' and the others waited for it at
# the next collective; at 80 % none did (4 ranks, H100, bench/RESULTS.md 2026-12-07).
SHARED_TOTAL = 80


def shares(n: int, split=None) -> list[int]:
    """Per-rank SM percentages: ``SHARED_TOTAL // n`` each by default (100 for a single rank), or
    ``split`` (e.g. ``(30, 70)``), which must have ``n`` entries in 1..100 adding up to at most 100."""
    if type(n) is not int or n < 1:
        raise MpsError(f"shares: n must be a positive int, got {n!r}")
    if split is None:
        return [100] if n == 1 else [max(1, SHARED_TOTAL // n)] * n
    split = [int(s) for s in split]
    if len(split) != n or not all(1 <= s <= 100 for s in split) or sum(split) > 100:
        raise MpsError(f"shares: split must be {n} percentages in 1..100 adding up to at most 100, got {split}")
    return split


def parse_shares(text: str) -> list[int]:
    try:
        values = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise MpsError(f"{SHARES_ENV}={text!r}: expected comma-separated integer percentages") from None
    return shares(len(values), values) if values else []


def local_rank() -> int:
    """This process's rank on its node, from the MPI launcher's environment (0 without one)."""
    for name in LOCAL_RANK_ENVS:
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


def apply_share() -> int | None:
    """Before the CUDA context exists: cap this process at its share from ``PKPTX_MPS_SHARES`` (by
    local rank), unless ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` is already set. Returns the percentage."""
    if os.environ.get(PERCENT_ENV):
        return int(float(os.environ[PERCENT_ENV]))
    text = os.environ.get(SHARES_ENV)
    if not text:
        return None
    split = parse_shares(text)
    rank = local_rank()
    if rank >= len(split):
        raise MpsError(f"{SHARES_ENV}={text!r} has {len(split)} shares, but this is local rank {rank}")
    os.environ[PERCENT_ENV] = str(split[rank])
    return split[rank]


def _control(pipe_dir: str, log_dir: str | None, command: str | None, *, timeout: float = 10.0) -> str:
    env = dict(os.environ, **{PIPE_ENV: pipe_dir, **({LOG_ENV: log_dir} if log_dir else {})})
    args = [CONTROL] + ([] if command else ["-d"])
    # Starting: no pipes to the daemon, which may keep inherited descriptors open for its whole life.
    out = subprocess.PIPE if command else subprocess.DEVNULL
    try:
        done = subprocess.run(args, input=(command + "\n") if command else None, env=env, stdout=out, stderr=out,
                              stdin=None if command else subprocess.DEVNULL, text=True, timeout=timeout)
    except FileNotFoundError:
        raise MpsError(f"{CONTROL} is not on PATH (it ships with the NVIDIA driver)") from None
    except subprocess.TimeoutExpired:
        raise MpsError(f"{CONTROL} {'-d' if command is None else repr(command)} did not answer in {timeout} s") \
            from None
    if done.returncode:
        raise MpsError(f"{CONTROL} {'-d' if command is None else repr(command)} failed ({done.returncode}): "
                       f"{(done.stderr or done.stdout or '').strip()}")
    return (done.stdout or "").strip()


def _control_pid(pipe_dir: str) -> int | None:
    """The PID of the control daemon serving ``pipe_dir`` (from /proc), or None."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(Path(c.decode(errors="replace")).name == CONTROL for c in cmd[:2]) and \
                f"{PIPE_ENV}={pipe_dir}".encode() in env:          # [:2]: also a script run by its interpreter
            return int(proc.name)
    return None


class Daemon:
    """A private MPS control daemon; ``env(share)`` is what each client process needs."""

    def __init__(self, pipe_dir: str | None = None, log_dir: str | None = None):
        self.pipe_dir = pipe_dir or tempfile.mkdtemp(prefix="pkptx-mps-pipe-")
        self.log_dir = log_dir or tempfile.mkdtemp(prefix="pkptx-mps-log-")
        self._made = [d for d, given in ((self.pipe_dir, pipe_dir), (self.log_dir, log_dir)) if given is None]
        self.running = False

    def start(self) -> "Daemon":
        _control(self.pipe_dir, self.log_dir, None)
        for _ in range(100):                         # the daemon forks; wait for its control pipe
            if (Path(self.pipe_dir) / "control").exists():
                break
            time.sleep(0.05)
        else:
            self.stop()
            raise MpsError(f"MPS control daemon started but made no control pipe in {self.pipe_dir}")
        self.running = True
        return self

    def env(self, share_percent: int | None = None) -> dict[str, str]:
        out = {PIPE_ENV: self.pipe_dir, LOG_ENV: self.log_dir}
        if share_percent is not None:
            out[PERCENT_ENV] = str(shares(1, [share_percent])[0])
        return out

    @property
    def alive(self) -> bool:
        """Whether a control daemon process for this pipe folder exists (however it was left)."""
        return _control_pid(self.pipe_dir) is not None

    def stop(self, timeout: float = 10.0) -> None:
        """``quit`` the daemon, wait until its process is gone (SIGKILL after ``timeout``), remove the
        folders this object made. Raises MpsError if a daemon process survives."""
        try:
            _control(self.pipe_dir, self.log_dir, "quit", timeout=timeout)
        except MpsError:
            pass                                     # not running, or not answering: checked below
        deadline = time.monotonic() + timeout
        while (pid := _control_pid(self.pipe_dir)) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
            if _control_pid(self.pipe_dir) is not None:
                raise MpsError(f"the MPS daemon (pid {pid}, pipe {self.pipe_dir}) did not stop")
        self.running = False
        for folder in self._made:
            shutil.rmtree(folder, ignore_errors=True)
        self._made = []


@contextlib.contextmanager
def daemon(pipe_dir: str | None = None, log_dir: str | None = None):
    """``with daemon() as d: run clients with d.env(share)``; the daemon is stopped however the block ends."""
    d = Daemon(pipe_dir, log_dir)
    try:
        yield d.start()
    finally:
        d.stop()


def status(pipe_dir: str | None = None) -> MpsStatus:
    """Whether an MPS control daemon answers on ``pipe_dir`` (default: ``$CUDA_MPS_PIPE_DIRECTORY``,
    else the state `pkptx mps start` left, else the system default ``/tmp/nvidia-mps``)."""
    pipe_dir = pipe_dir or os.environ.get(PIPE_ENV) or _saved().get(PIPE_ENV) or "/tmp/nvidia-mps"
    if not (Path(pipe_dir) / "control").exists():
        return MpsStatus(False, pipe_dir, f"no MPS control pipe in {pipe_dir}")
    try:
        servers = _control(pipe_dir, None, "get_server_list", timeout=5)
    except MpsError as exc:
        return MpsStatus(False, pipe_dir, str(exc))
    return MpsStatus(True, pipe_dir, f"MPS daemon up on {pipe_dir}; servers: {servers or 'none yet'}")


def in_client_env() -> bool:
    """Whether this process's CUDA context connects to an MPS daemon: its pipe folder is in the
    environment and holds the daemon's control pipe (no call to the control binary, which a busy
    daemon may not answer in time)."""
    pipe_dir = os.environ.get(PIPE_ENV)
    return bool(pipe_dir) and (Path(pipe_dir) / "control").exists()


def _saved() -> dict[str, str]:
    if not STATE_FILE.exists():
        return {}
    return dict(line.split("=", 1) for line in STATE_FILE.read_text().splitlines() if "=" in line)


def main(argv=None) -> int:
    """``pkptx mps start`` (prints the variables to export), ``stop``, ``status``, or
    ``run [--shares 30,70] -- CMD...`` (daemon up for CMD only, shares in ``PKPTX_MPS_SHARES``)."""
    ap = argparse.ArgumentParser(prog="pkptx mps", description=main.__doc__)
    ap.add_argument("action", choices=("start", "stop", "status", "run"))
    ap.add_argument("--shares", help="comma-separated SM percentages, one per local rank (run)")
    ap.add_argument("--ranks", type=int, help="equal shares for this many ranks (run)")
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args, cmd = ap.parse_args(argv[:cut]), argv[cut + 1:]
    try:
        if args.action == "status":
            st = status()
            print(st.detail)
            return 0 if st.running else 1
        if args.action == "start":
            if _saved():
                raise MpsError(f"a daemon started by `pkptx mps start` is recorded in {STATE_FILE}; stop it first")
            d = Daemon().start()
            env = d.env()
            STATE_FILE.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
            print("".join(f"export {k}={v}\n" for k, v in env.items()), end="")
            return 0
        if args.action == "stop":
            saved = _saved()
            if not saved:
                print("no daemon recorded by `pkptx mps start`")
                return 1
            Daemon(saved[PIPE_ENV], saved[LOG_ENV]).stop()
            shutil.rmtree(saved[PIPE_ENV], ignore_errors=True)
            shutil.rmtree(saved[LOG_ENV], ignore_errors=True)
            STATE_FILE.unlink()
            print("MPS daemon stopped")
            return 0
        if not cmd:
            raise MpsError("pkptx mps run: give the command after --")
        split = parse_shares(args.shares) if args.shares else shares(args.ranks) if args.ranks else None
        with daemon() as d:
            env = dict(os.environ, **d.env(), **({SHARES_ENV: ",".join(map(str, split))} if split else {}))
            return subprocess.run(cmd, env=env).returncode
    except MpsError as exc:
        print(f"pkptx mps: {exc}")
        return 2
