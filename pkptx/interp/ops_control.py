"""Branches, exits, CTA barriers, fences and the instructions that only hint (PTX ISA 9.7.12.1-4, 9.7.13)."""
from __future__ import annotations


from .errors import InterpError
from .operands import reader
from .warp import CONTROL


class Wait:
    """A blocked warp's condition: ``ready()`` and what it waits for (for deadlock reports)."""

    def __init__(self, ready, note):
        self.ready, self.note = ready, note


def bra(op, prog):
    target = prog.label(op.operands[0].name)

    def run(w, mask):
        w.jump(mask, target)
        return CONTROL
    return run


def finish(op, prog):
    def run(w, mask):
        rest = w.active & ~mask
        if rest.any():
            w.advance(rest)
        w.kill(mask)
        return CONTROL
    return run


def trap(op, prog):
    def run(w, mask):
        raise w.error(InterpError, "trap executed")
    return run


def bar_sync(op, prog):
    ident = reader(op.operands[0], "u32")
    count = reader(op.operands[1], "u32") if len(op.operands) > 1 else None
    waits = op.key.endswith("sync")

    def run(w, mask):
        bar_id = int(ident(w)[0])
        barrier = w.cta.barrier(bar_id)
        expected = int(count(w)[0]) if count is not None else None
        checker = w.machine.checker
        if checker is not None:
            checker.bar_arrive(w, barrier)
        generation = barrier.arrive(int(mask.sum()), expected)
        if not waits:
            return None

        def ready():
            if barrier.generation == generation:
                return False
            if checker is not None:
                checker.bar_resume(w, barrier, generation, bar_id)
            return True
        return Wait(ready, lambda: f"bar.sync {bar_id}: {barrier.arrived} of {barrier.required()} threads arrived")
    return run


def fence(op, prog):
    """Fences order memory; the race checker (when on) records them, otherwise they do nothing."""
    def run(w, mask):
        checker = w.machine.checker
        if checker is not None:
            checker.fence(w, op, mask)
    return run


def nothing(op, prog):
    return lambda w, mask: None


TABLE = {"bra": bra, "ret": finish, "exit": finish, "trap": trap, "bar.sync": bar_sync,
         "barrier.sync": bar_sync, "bar.arrive": bar_sync, "barrier.arrive": bar_sync,
         "membar": fence, "fence": fence, "fence.proxy.async": fence, "fence.proxy.alias": fence,
         "fence.proxy.tensormap.release": fence, "fence.proxy.tensormap.acquire": fence,
         "fence.mbarrier_init": fence}
TABLE.update({key: nothing for key in ("nanosleep", "griddepcontrol", "setmaxnreg", "prefetch", "pmevent",
                                       "brkpt", "cp.async.bulk.prefetch.L2.global",
                                       "cp.async.bulk.prefetch.tensor")})
