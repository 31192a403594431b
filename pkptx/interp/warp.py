"""One warp: 32 lanes' registers, per-lane program counters and the loop that executes its ops.

Lanes that branch apart run min-PC first: the lanes at the lowest program counter execute together,
so lanes that skip an ``if`` body wait at its end label and lanes leaving a loop wait past it until
the others leave too; the builder's structured control flow reconverges there by construction."""
from __future__ import annotations

import numpy as np

from .dtypes import storage
from .errors import InterpError

LANES = 32
CONTROL = object()          # an op's result: it set the program counters itself


class RegFile(dict):
    """Registers by name; a register nothing wrote yet reads as zeros of its width."""

    def __init__(self, registers: dict):
        super().__init__()
        self.declared = registers

    def __missing__(self, name):
        reg = self.declared[name]
        value = np.zeros(LANES, storage(reg.type.bits))
        self[name] = value
        return value


class Warp:
    def __init__(self, cta, index: int, threads: np.ndarray):
        self.cta, self.index = cta, index
        self.launch, self.machine = cta.launch, cta.launch.machine
        self.prog = self.launch.program.ops
        self.regs = RegFile(self.launch.program.registers)
        self.live = threads >= 0
        self.exited = False                   # every lane has exited
        self.tids = threads                   # linear thread index per lane (-1: no thread)
        self.pc0, self.pc, self.diverged = 0, np.zeros(LANES, np.int64), False
        self.active = self.live
        self.wait = None                      # a Wait while blocked
        self.cluster_generation = None        # the barrier.cluster phase this warp arrived in
        self.wait_active = None
        self.last_poll = None                 # (pc, epoch) of the previous poll
        self.spinning = None                  # the epoch at which the warp found itself spinning
        self.poll_note = None                 # what it polls (for deadlock reports)
        self.bulk_groups: dict[int, list] = {}    # lane -> [open group, committed groups...]
        self.wgmma = [{}]                      # wgmma groups' pending results; the last is open
        self._specials = {}
        if self.machine.checker is not None:
            self.machine.checker.new_warp(self)

    # ------------------------------------------------------------------ state used by the ops
    @property
    def finished(self) -> bool:
        return self.exited

    def special(self, name: str) -> np.ndarray:
        if name in ("%globaltimer", "%clock64", "%clock"):
            value = self.machine.clock_ns
            return np.full(LANES, value % (1 << (32 if name == "%clock" else 64)),
                           np.uint32 if name == "%clock" else np.uint64)
        if name not in self._specials:
            self._specials[name] = self.cta.special(name, self)
        return self._specials[name]

    def symbol_address(self, name: str) -> np.ndarray:
        return np.full(LANES, self.cta.symbol_address(name), np.uint64)

    def location(self, op=None, lanes=None) -> str:
        op = op if op is not None else self.prog[self.current_pc()]
        lanes = np.nonzero(self.active if lanes is None else lanes)[0]
        shown = ",".join(map(str, lanes[:4])) + ("..." if lanes.size > 4 else "")
        return (f"rank {self.launch.rank} block {self.cta.ctaid} warp {self.index} lanes {shown}: "
                f"{op.text} ({op.origin})")

    def describe(self, text: str, lane: int | None = None) -> str:
        lanes = None
        if lane is not None:
            lanes = np.zeros(LANES, bool)
            lanes[lane] = True
        return f"{text}\n  at {self.location(lanes=lanes)}"

    def error(self, cls, text: str, lanes=None):
        return cls(text, self.location(lanes=lanes))

    def poll(self, note) -> None:
        """Record a poll of memory that others may change (a flag load, a failed mbarrier test).
        Polling twice at one pc and the same addresses with no change anywhere in between means the
        warp spins (one load walking several flags, as a wait on every peer's slot does, does not)."""
        where = note[2][note[3]].tobytes() if note[0] == "flag" else None
        mark = (self.current_pc(), self.machine.epoch, where)
        if self.last_poll == mark:
            self.spinning = self.machine.epoch
        self.last_poll, self.poll_note = mark, note

    def current_pc(self) -> int:
        return int(self.pc[self.live].min()) if self.diverged else self.pc0

    # ------------------------------------------------------------------ control flow
    def jump(self, taken: np.ndarray, target: int) -> None:
        """Lanes ``taken`` go to ``target``, the other active lanes to the next op."""
        active = self.active
        if not self.diverged and (taken == active).all():
            self.pc0 = target
            return
        if not self.diverged and not taken.any():
            self.pc0 += 1
            return
        if not self.diverged:
            self.pc = np.full(LANES, self.pc0, np.int64)
            self.diverged = True
        self.pc = np.where(taken, target, np.where(active, self.pc + 1, self.pc))

    def kill(self, lanes: np.ndarray) -> None:
        """``exit``/``ret``: these lanes are done."""
        self.live = self.live & ~lanes
        self.exited = not self.live.any()
        self.cta.threads_exited(int(lanes.sum()))
        if self.diverged and not self.exited:
            self._reconverge()

    def advance(self, active) -> None:
        if self.diverged:
            self.pc = np.where(active, self.pc + 1, self.pc)
        else:
            self.pc0 += 1

    def _reconverge(self) -> None:
        pcs = self.pc[self.live]
        if pcs.size and (pcs == pcs[0]).all():
            self.pc0, self.diverged = int(pcs[0]), False

    # ------------------------------------------------------------------ execution
    def resume(self) -> bool:
        """If blocked, whether the wait is over (then the waiting lanes move on)."""
        if self.wait is None:
            return True
        if not self.wait.ready():
            return False
        self.active = self.wait_active
        self.wait = None
        self.advance(self.active)
        if self.diverged:
            self._reconverge()
        return True

    def run(self, budget: int) -> int:
        """Execute up to ``budget`` ops; stop early when blocked, spinning or finished. Returns the
        number executed."""
        prog, regs, machine = self.prog, self.regs, self.machine
        end = len(prog)
        done = 0
        self.spinning = None
        while done < budget:
            if self.diverged:
                live = self.live
                pc = int(self.pc[live].min())
                active = live & (self.pc == pc)
            else:
                pc, active = self.pc0, self.live
            if pc >= end:
                raise InterpError("ran past the last instruction (a missing ret or exit)",
                                  f"rank {self.launch.rank} block {self.cta.ctaid} warp {self.index}")
            op = prog[pc]
            self.active = mask = active
            if op.guard is not None:
                g = regs[op.guard[0]]
                mask = active & ~g if op.guard[1] else active & g
            done += 1
            machine.steps += 1
            result = op.run(self, mask) if (mask is active or mask.any()) else None
            if result is None:
                if self.diverged:
                    self.pc = np.where(active, self.pc + 1, self.pc)
                    self._reconverge()
                else:
                    self.pc0 += 1
            elif result is not CONTROL:
                self.wait, self.wait_active = result, active
                break
            elif self.diverged:
                self._reconverge()
            if self.spinning is not None or self.exited:
                break
        return done
