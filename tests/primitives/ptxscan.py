"""Reading emitted PTX back for tests: instruction lines in a register-blind form, loops, and the
memory-model facts pk-design section 5 asks for.

``shape(line)`` replaces every register by ``%r`` and every label by ``$L``, so a test can name the exact
instruction it expects without knowing the builder's register numbering:
``red.release.sys.global.add.u32 [%r], 1;``. Guards stay (``@%r st.global.u32 [%r+4], %r;``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

REG = re.compile(r"%[A-Za-z_][A-Za-z0-9_]*")
LABEL = re.compile(r"\$L_[A-Za-z0-9_]+")
SPECIAL_NAMES = {"%globaltimer", "%tid", "%ctaid", "%nctaid", "%ntid", "%clock64", "%smid", "%laneid", "%warpid"}


def body_lines(ptx: str) -> list[str]:
    """The kernel body's instruction and label lines, stripped, comments and declarations dropped."""
    start = ptx.index("{")
    lines = []
    for raw in ptx[start + 1:ptx.rindex("}")].splitlines():
        line = raw.split("//")[0].strip()
        if not line or line.startswith(".reg"):
            continue
        lines.append(line)
    return lines


def shape(line: str) -> str:
    """A line with registers and labels made anonymous (special registers stay spelled)."""
    out = LABEL.sub("$L", line)
    return REG.sub(lambda m: m.group(0) if m.group(0) in SPECIAL_NAMES else "%r", out)


def shapes(ptx: str) -> list[str]:
    return [shape(line) for line in body_lines(ptx)]


def count(ptx: str, expected_shape: str) -> int:
    return shapes(ptx).count(expected_shape)


def mnemonic(line: str) -> str:
    """The instruction's mnemonic with its modifiers (after any guard), e.g. ``ld.acquire.sys.global.u32``."""
    text = line[line.index(" ") + 1:].strip() if line.startswith("@") else line
    return text.split()[0].rstrip(";") if text else ""


def is_label(line: str) -> bool:
    return line.endswith(":")


@dataclass
class Loop:
    """A loop of the structured builder: ``head:`` ... ``bra head;`` (the last backward branch)."""
    head: str
    start: int          # index of the head label in body_lines
    end: int            # index of the backward branch
    inner: list["Loop"] = field(default_factory=list)      # every loop nested in it, at any depth

    def lines(self, all_lines: list[str]) -> list[str]:
        return all_lines[self.start + 1:self.end]

    def direct(self, all_lines: list[str]) -> list[str]:
        """The body without the lines of nested loops."""
        skip = set()
        for sub in self.inner:
            skip.update(range(sub.start, sub.end + 1))
        return [all_lines[i] for i in range(self.start + 1, self.end) if i not in skip]


def loops(ptx: str) -> tuple[list[str], list[Loop]]:
    """(body lines, every loop) with nesting filled in."""
    lines = body_lines(ptx)
    heads = {line[:-1]: i for i, line in enumerate(lines) if is_label(line)}
    found = {}
    for i, line in enumerate(lines):
        m = re.search(r"\bbra(?:\.uni)?\s+(\$L_[A-Za-z0-9_]+);", line)
        if m and m.group(1) in heads and heads[m.group(1)] < i:
            found[m.group(1)] = Loop(m.group(1), heads[m.group(1)], i)
    result = sorted(found.values(), key=lambda lp: lp.start)
    for lp in result:
        lp.inner = [o for o in result if lp.start < o.start and o.end < lp.end]
    return lines, result


def operands(line: str) -> tuple[str, list[str], list[str]]:
    """(guard register or '', registers written, registers read) of one instruction line (first operand
    is the destination, as for every instruction these tests look at; stores and reds write memory)."""
    guard = ""
    text = line
    if line.startswith("@"):
        g, text = line.split(None, 1)
        guard = g.lstrip("@!")
    parts = text.rstrip(";").split(None, 1)
    if len(parts) < 2:
        return guard, [], []
    m, rest = parts
    ops = [o.strip() for o in re.split(r",(?![^{]*})", rest)]
    regs = [REG.findall(o) for o in ops]
    if m.startswith(("st.", "red.", "multimem.red", "multimem.st", "cp.", "bra", "mbarrier.init", "bar.")) or not ops:
        return guard, [], [r for rs in regs for r in rs]
    return guard, regs[0], [r for rs in regs[1:] for r in rs]


def loaded_exit(lines: list[str], loop: "Loop") -> list[str]:
    """The loads from global memory (not .nc, not .param) in the loop's own body whose value decides a
    branch out of the loop (to a label outside it: a forward branch within the body, an if of one
    iteration, does not end the loop): the flag polls of a spin-wait."""
    labels = {line[:-1]: i for i, line in enumerate(lines) if is_label(line)}

    def leaves(line: str) -> bool:
        m = re.search(r"\bbra(?:\.uni)?\s+(\$L_[A-Za-z0-9_]+);", line)
        return bool(m) and not loop.start <= labels.get(m.group(1), -1) <= loop.end

    body = loop.direct(lines)
    exits = [(operands(x)[0], x) for x in body if mnemonic(x).startswith("bra") and leaves(x)]
    exit_preds = {g for g, _ in exits if g}
    found = []
    for k, line in enumerate(body):
        m = mnemonic(line)
        if not (m.startswith("ld.") and ".global" in m and ".nc" not in m):
            continue
        tainted = set(operands(line)[1])
        for later in body[k + 1:]:
            _, written, read = operands(later)
            if tainted & set(read):
                tainted |= set(written)
        if tainted & exit_preds:
            found.append(line)
    return found


def polls(lines: list[str]) -> list[str]:
    """Loads with an ordering (acquire, relaxed, volatile) from global memory."""
    return [x for x in lines if re.match(r"ld\.(acquire|relaxed|volatile)\.", mnemonic(x)) and ".global" in mnemonic(x)]


def spin_loops(ptx: str):
    """(lines, loops that spin on memory: their exit depends on a global load made in the loop body)."""
    lines, lps = loops(ptx)
    return lines, [lp for lp in lps if loaded_exit(lines, lp)]


def mbarrier_loops(ptx: str):
    lines, lps = loops(ptx)
    return lines, [lp for lp in lps if any(mnemonic(x).startswith(("mbarrier.try_wait", "mbarrier.test_wait"))
                                           for x in lp.direct(lines))]


def status_register(lines: list[str]) -> str | None:
    """The register loaded from the ``status`` parameter, if any."""
    for line in lines:
        m = re.match(r"ld\.param\.u64 (%\w+), \[status\];", line)
        if m:
            return m.group(1)
    return None


def bounded(lines: list[str], loop: Loop) -> list[str]:
    """What a spin loop lacks of the bounded-wait contract (empty: nothing): it reads %globaltimer,
    compares it with the deadline, and on expiry claims the status words (atom.cas), writes rank, flag,
    expected, observed and block into them, and exits (or, an abandoned mbarrier wait, leaves the loop)."""
    body = loop.direct(lines)
    status = status_register(lines)
    missing = []
    timer = [x for x in body if re.match(r"mov\.u64 %\w+, %globaltimer;", x)]
    if not timer:
        missing.append("no %globaltimer read")
    if not any(mnemonic(x) == "setp.gt.u64" for x in body):
        missing.append("no deadline comparison (setp.gt.u64)")
    if status is None:
        missing.append("no status parameter")
    else:
        if not any(x.startswith("atom.global.cas.b32") and f"[{status}]" in x for x in body):
            missing.append("no atom.global.cas.b32 on the status words")
        for word in range(1, 6):
            if not any(mnemonic(x) == "st.global.u32" and f"[{status}+{4 * word}]" in x for x in body):
                missing.append(f"status word {word} is not written")
    late = [m.group(1) for x in body for m in [re.match(r"setp\.gt\.u64 (%\w+),", x)] if m]
    leaves = any(re.match(rf"@{re.escape(r)} bra ", x) for r in late for x in body)   # an abandoned wait
    if "exit;" not in body and not leaves:
        missing.append("no exit (or leaving the loop) on expiry")
    return missing


def ordered(lines: list[str], first: str, then: str) -> bool:
    """Whether some line whose mnemonic starts with ``first`` comes before one starting with ``then``."""
    a = [i for i, x in enumerate(lines) if mnemonic(x).startswith(first)]
    b = [i for i, x in enumerate(lines) if mnemonic(x).startswith(then)]
    return bool(a and b and min(a) < max(b))


ASYNC_GLOBAL_WRITES = ("cp.async.bulk.global.", "cp.async.bulk.tensor.1d.global", "cp.async.bulk.tensor.2d.global",
                       "cp.async.bulk.tensor.3d.global", "cp.async.bulk.tensor.4d.global",
                       "cp.async.bulk.tensor.5d.global", "cp.reduce.async.bulk.global", "cp.reduce.async.bulk.tensor")
SIGNALS = ("red.release.", "st.release.", "multimem.red.release.", "atom.release.", "atom.acq_rel.")


def is_async_global_write(line: str) -> bool:
    return mnemonic(line).startswith(ASYNC_GLOBAL_WRITES)


def is_signal(line: str) -> bool:
    return mnemonic(line).startswith(SIGNALS)


def unpublished_signals(lines: list[str]) -> list[str]:
    """Release signals issued after a TMA/bulk write to global memory without, in between, the full
    ``cp.async.bulk.wait_group 0`` (``.read`` does not count) and a ``fence.proxy.async`` (program order)."""
    bad, pending, waited, fenced = [], False, False, False
    for line in lines:
        m = mnemonic(line)
        if is_async_global_write(line):
            pending, waited, fenced = True, False, False
        elif m == "cp.async.bulk.wait_group" and line.endswith(" 0;"):
            waited, fenced = True, False
        elif m.startswith("fence.proxy.async") and waited:
            fenced = True
        elif is_signal(line) and pending and not (waited and fenced):
            bad.append(line)
    return bad


GENERIC_SHARED_WRITES = ("st.shared", "stmatrix")
ASYNC_SHARED_READS = ASYNC_GLOBAL_WRITES + ("wgmma.mma_async",)


def unfenced_shared_handoffs(lines: list[str]) -> list[str]:
    """Async-proxy reads of shared memory (TMA stores, bulk stores, reduce-stores) issued after generic
    writes to shared memory with no ``fence.proxy.async{.shared::cta}`` in between (program order)."""
    bad, dirty = [], False
    for line in lines:
        m = mnemonic(line)
        if m.startswith(GENERIC_SHARED_WRITES):
            dirty = True
        elif m in ("fence.proxy.async", "fence.proxy.async.shared::cta"):
            dirty = False
        elif dirty and m.startswith(ASYNC_SHARED_READS) and ".shared::cta" in m:
            bad.append(line)
    return bad
