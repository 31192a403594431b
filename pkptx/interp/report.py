"""What each stuck warp waits for, in words: the flag (allocation, owning rank, word, observed and
expected value), the mbarrier (phase, arrivals and bytes pending) or the CTA barrier."""
from __future__ import annotations

import numpy as np

from .operands import reader


def _expected(w, op, dest, lane: int) -> str:
    """The value a poll loop compares its loaded register with: the other operand of the first later
    instruction that reads it (``sub.s32 d, seen, expected`` or ``setp.ge.u32 p, seen, expected``)."""
    prog = w.prog
    for later in prog[op.index + 1:op.index + 8]:
        sources = later.operands[1:]
        if any(s.kind == "reg" and s.name == dest.name for s in sources):
            for s in sources:
                if s.kind in ("reg", "imm") and s.name != dest.name:
                    value = reader(s, later.type(0))(w)[lane]
                    return f"expects {int(value) if np.issubdtype(type(value), np.integer) else value} " \
                           f"({later.text} at {later.origin})"
    return "expected value unknown"


def _flag(w, note) -> str:
    _, op, addrs, mask, dest = note
    lane = int(np.nonzero(mask)[0][0])
    addr = int(addrs[lane])
    alloc = w.machine.global_space.find(addr)
    size = op.type(0).bytes
    if alloc is None:
        return f"polls {addr:#x} ({op.origin})"
    word = (addr - alloc.base) // size
    observed = alloc.view(np.uint8, addr - alloc.base, size).view(f"u{size}")[0]
    return (f"waits on flag {alloc.name}[{word}] of rank {alloc.rank} (address {addr:#x}, polled by {op.text} at "
            f"{op.origin}): observed {int(observed)}, {_expected(w, op, dest, lane)}")


def _mbarrier(note) -> str:
    _, op, mb, token, parity = note
    want = f"parity {token}" if parity else f"phase {token}"
    return f"waits for {want} of {mb.describe()} ({op.text} at {op.origin})"


def describe(w) -> str:
    """What the warp waits for (without saying which warp it is)."""
    if w.wait is not None:
        return f"{w.wait.note()} ({w.prog[w.current_pc()].origin})"
    note = w.poll_note
    if note is None:
        return f"at {w.prog[w.current_pc()].text} ({w.prog[w.current_pc()].origin})"
    return _flag(w, note) if note[0] == "flag" else _mbarrier(note)


def waiting(machine, warps) -> str:
    """One line per rank, block and wait: warps of a block waiting alike share a line."""
    groups: dict[tuple, list] = {}
    for w in warps:
        if not w.finished:
            groups.setdefault((w.launch.rank, w.cta.ctaid, describe(w)), []).append(w.index)
    lines = [f"rank {rank} block {block} warp{'s' if len(ids) > 1 else ''} {_span(ids)}: {what}"
             for (rank, block, what), ids in groups.items()]
    return "no warp can make progress:\n  " + "\n  ".join(lines[:24]) + \
        (f"\n  ... and {len(lines) - 24} more" if len(lines) > 24 else "")


def _span(ids: list) -> str:
    return str(ids[0]) if len(ids) == 1 else f"{ids[0]}-{ids[-1]}" if ids == list(range(ids[0], ids[-1] + 1)) \
        else ",".join(map(str, ids))
