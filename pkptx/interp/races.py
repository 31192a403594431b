"""The happens-before race checker (``Machine(check_races=True)``): vector clocks per agent, shadow
memory per byte, and the synchronisation that orders them.

Agents are warps (lanes of one warp count as one agent, so races inside a warp go unseen) and async
copies (each bulk or tensor copy is its own agent, starting from its issuer's clock). A weak load or
store of shared or global memory (any rank's) must be ordered after the last write of every byte by a
chain of: ``bar.sync`` (arrivals release, the wait acquires), mbarrier arrivals and transaction
completions (released into the phase, acquired by the successful test/try_wait), release/acquire
accesses of one location (``st.release``/``red.release``/``atom.acq_rel``..., ``ld.acquire``; a relaxed
access publishes or acquires through the preceding / following ``fence.acq_rel``/``fence.sc``), and
``cp.async.bulk.wait_group`` (not ``.read``) completing a copy for its issuer. Proxy fences are not
modelled (the generic and async proxies are one here), nor write-after-read races. Memory written
before ``Machine.run`` (by the host, or a finished run) is ordered before everything."""
from __future__ import annotations

import numpy as np

from .errors import RaceError

SYNC_SEMS = ("relaxed", "acquire", "release", "acq_rel", "volatile")


def join(into: dict, other: dict | None) -> dict:
    if other:
        for agent, clock in other.items():
            if into.get(agent, 0) < clock:
                into[agent] = clock
    return into


def _note(note) -> str:
    if note[0] == "flag":
        _, alloc, word, op = note
        return f"flag {alloc.name}[{word}] of rank {alloc.rank} ({op.text} at {op.origin})"
    return f"{note[0]} {note[1]}"


class Shadow:
    """Per byte of one allocation: the last writer and the last reader (agent, -1 before the run; its
    clock; the site of the access). One reader per byte: a write unordered after an earlier reader
    that a later reader replaced goes unseen."""

    def __init__(self, nbytes: int):
        self.agent = np.full((2, nbytes), -1, np.int32)       # [0]: writer, [1]: reader
        self.clock = np.zeros((2, nbytes), np.int64)
        self.site = np.zeros((2, nbytes), np.int32)


class RaceChecker:
    def __init__(self):
        self.names: list[str] = []          # agent -> who it is
        self.sites: list[str] = []
        self._site_ids: dict = {}
        self.shadow: dict[int, Shadow] = {}
        self.sync: dict[tuple, dict] = {}    # (allocation, byte offset) -> released clocks

    def start_run(self) -> None:
        """Everything before a run is ordered before it."""
        self.shadow.clear()
        self.sync.clear()

    # ------------------------------------------------------------------ agents
    def agent(self, state, name: str) -> None:
        """Make ``state`` (a warp or a copy) an agent: ``vc``, ``fence_vc``, ``pending``, ``acquired``."""
        state.agent = len(self.names)
        self.names.append(name)
        state.vc = join({state.agent: 1}, getattr(state, "vc", None))
        state.fence_vc, state.pending, state.pending_note = {}, {}, None
        state.acquired = state.flag = None

    def new_warp(self, w) -> None:
        self.agent(w, f"rank {w.launch.rank} block {w.cta.ctaid} warp {w.index}")

    def new_copy(self, w, copy) -> None:
        """A copy starts from its issuer's clocks (and what the issuer last acquired, for reports)."""
        copy.vc = dict(w.vc)
        self.agent(copy, f"the copy issued by rank {w.launch.rank} block {w.cta.ctaid} warp {w.index}")
        copy.acquired, copy.flag = w.acquired, w.flag

    @staticmethod
    def release(state) -> dict:
        """A snapshot of ``state``'s clocks to publish; later accesses get a newer clock."""
        out = dict(state.vc)
        state.vc[state.agent] += 1
        return out

    @staticmethod
    def acquire(state, clocks: dict | None, note) -> None:
        """Join ``clocks``; ``note`` (what was acquired, formatted only for a report) is remembered."""
        join(state.vc, clocks)
        state.acquired = note
        if note[0] == "flag":
            state.flag = note

    # ------------------------------------------------------------------ data accesses
    def _site(self, state, op) -> int:
        key = (state.agent, op.index)
        sid = self._site_ids.get(key)
        if sid is None:
            sid = self._site_ids[key] = len(self.sites)
            self.sites.append(f"{self.names[state.agent]}: {op.text} ({op.origin})")
        return sid

    def data(self, state, op, mem, addrs: np.ndarray, size: int, write: bool, where: str) -> None:
        """A weak access of ``size`` bytes at each of ``addrs``: check it is ordered after the last write
        (and, for a write, the last read) of those bytes by other agents; then it is the last one."""
        for alloc, _, off in mem.locate(addrs, size, lambda text, i=None: text):
            idx = (off[:, None] + np.arange(size)).reshape(-1)
            sh = self.shadow.get(id(alloc))
            if sh is None:
                sh = self.shadow[id(alloc)] = Shadow(alloc.nbytes)
            for kind in ((0, 1) if write else (0,)):
                self._ordered(state, sh, kind, idx, alloc, write, where)
            kind = 0 if write else 1
            sh.agent[kind, idx], sh.clock[kind, idx] = state.agent, state.vc[state.agent]
            sh.site[kind, idx] = self._site(state, op)

    def _ordered(self, state, sh, kind: int, idx, alloc, write: bool, where: str) -> None:
        agents = sh.agent[kind, idx]
        foreign = np.unique(agents[(agents >= 0) & (agents != state.agent)])
        for a in foreign.tolist():
            sel = agents == a
            clocks = sh.clock[kind, idx][sel]
            if state.vc.get(a, 0) < clocks.max():
                byte = int(idx[sel][int(np.argmax(clocks))])
                self._race(state, alloc, byte, int(sh.site[kind, byte]), write, kind, where)

    def _race(self, state, alloc, byte: int, site: int, write: bool, kind: int, where: str):
        what = "write" if write else "read"
        acquired = f"its last acquire was {_note(state.acquired)}" if state.acquired else "it acquired nothing"
        if state.flag is not None and state.flag is not state.acquired:
            acquired += f", its last flag acquire {_note(state.flag)}"
        raise RaceError(f"data race: {what} of {alloc.name}+{byte} (rank {alloc.rank}) is not ordered after the "
                        f"{'read' if kind else 'write'} by {self.sites[site]}\n  ({acquired}; a missing release fence before a flag, "
                        f"a missing barrier or wait?)", where)

    # ------------------------------------------------------------------ synchronisation
    def access(self, w, op, mem, addrs: np.ndarray, size: int, lanes, write: bool) -> None:
        """The hook of every ld/st/atom/red: weak ones are data accesses; the others synchronise."""
        sem = op.mods.get("sem") or ("relaxed" if op.key in ("atom", "red", "multimem.red") else None)
        if sem not in SYNC_SEMS:
            self.data(w, op, mem, addrs, size, write, w.location(op))
            return
        for alloc, _, off in mem.locate(addrs, size, lambda text, i=None: text):
            for o in off.tolist():
                key = (id(alloc), o)
                note = ("flag", alloc, o // size, op)
                if write:
                    published = self.release(w) if sem in ("release", "acq_rel") else w.fence_vc
                    self.sync[key] = join(self.sync.get(key, {}), published)
                elif sem in ("acquire", "acq_rel"):
                    self.acquire(w, self.sync.get(key), note)
                else:
                    join(w.pending, self.sync.get(key))
                    w.pending_note = note

    def fence(self, w, op, mask) -> None:
        """fence.acq_rel / fence.sc / membar: acquire what relaxed loads saw, publish for relaxed stores."""
        if op.key not in ("fence", "membar"):
            return
        if w.pending_note is not None:
            self.acquire(w, w.pending, w.pending_note)
        w.pending, w.pending_note = {}, None
        w.fence_vc = self.release(w)

    def bar_arrive(self, w, barrier) -> None:
        barrier.pending_vc = join(getattr(barrier, "pending_vc", None) or {}, self.release(w))

    def bar_complete(self, barrier) -> None:
        barrier.released = getattr(barrier, "released", {})
        barrier.released[barrier.generation - 1] = getattr(barrier, "pending_vc", None) or {}
        barrier.released.pop(barrier.generation - 3, None)
        barrier.pending_vc = {}

    def bar_resume(self, w, barrier, generation: int, what: str) -> None:
        self.acquire(w, barrier.released.get(generation), (what, ""))

    def release_to(self, w, lane, mb) -> None:
        mb.releases = join(mb.releases or {}, self.release(w))

    def copy_release(self, copy, mb) -> None:
        mb.releases = join(mb.releases or {}, copy.vc)

    def acquire_from(self, w, lane, mb) -> None:
        self.acquire(w, mb.completed_releases, ("mbarrier", mb.name))
