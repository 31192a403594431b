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
        return _completion(w, barrier, generation, f"bar.sync {bar_id}")
    return run


def _completion(w, barrier, generation: int, what: str) -> Wait | None:
    """Wait until ``barrier`` completes ``generation`` (the race checker: then acquire its arrivals)."""
    checker = w.machine.checker

    def ready():
        if barrier.generation == generation:
            return False
        if checker is not None:
            checker.bar_resume(w, barrier, generation, what)
        return True
    if ready():
        return None
    return Wait(ready, lambda: f"{what}: {barrier.arrived} of {barrier.required()} threads arrived")


def cluster_arrive(op, prog):
    """``barrier.cluster.arrive``: this warp's active threads arrive on the cluster's barrier."""
    def run(w, mask):
        barrier = w.cta.cluster.barrier
        if w.machine.checker is not None:
            w.machine.checker.bar_arrive(w, barrier)
        w.cluster_generation = barrier.arrive(int(mask.sum()), None)
    return run


def cluster_wait(op, prog):
    """``barrier.cluster.wait``: until the phase this warp arrived in completes."""
    def run(w, mask):
        generation = w.cluster_generation
        if generation is None:
            raise w.error(InterpError, "barrier.cluster.wait without a barrier.cluster.arrive before it")
        w.cluster_generation = None
        return _completion(w, w.cta.cluster.barrier, generation, "barrier.cluster")
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
         "barrier.cluster.arrive": cluster_arrive, "barrier.cluster.wait": cluster_wait,
         "membar": fence, "fence": fence, "fence.proxy.async": fence, "fence.proxy.alias": fence,
         "fence.proxy.tensormap.release": fence, "fence.proxy.tensormap.acquire": fence,
         "fence.mbarrier_init": fence}
TABLE.update({key: nothing for key in ("nanosleep", "griddepcontrol", "setmaxnreg", "prefetch", "pmevent",
                                       "brkpt", "cp.async.bulk.prefetch.L2.global",
                                       "cp.async.bulk.prefetch.tensor")})
