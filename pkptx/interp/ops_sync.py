"""Warp collectives (shfl, vote, redux, elect, activemask) and mbarrier operations (PTX ISA 9.7.12)."""
from __future__ import annotations

import numpy as np

from . import mbarrier as mbar
from .operands import LANES, address, reader, writer

LANE_IDS = np.arange(LANES, dtype=np.uint32)
_BITS = np.uint32(1) << LANE_IDS


def _bitmask(lanes: np.ndarray) -> np.uint32:
    return np.uint32(_BITS[lanes].sum()) if lanes.any() else np.uint32(0)


def _lanes_of(membermask: np.uint32) -> np.ndarray:
    return (np.uint32(membermask) & _BITS) != 0


def shfl(op, prog):
    mode = op.mods["mode"]
    a, b, c = reader(op.operands[1], "b32"), reader(op.operands[2], "u32"), reader(op.operands[3], "u32")
    write = writer(op.operands[0], "b32")

    def run(w, mask):
        bval, cval = b(w) & np.uint32(0x1F), c(w)
        seg = (cval >> np.uint32(8)) & np.uint32(0x1F)
        clamp = cval & np.uint32(0x1F)
        lane = LANE_IDS
        max_lane = (lane & seg) | (clamp & ~seg)
        min_lane = lane & seg
        if mode == "up":
            j = lane - bval
            ok = (j.astype(np.int64) >= max_lane.astype(np.int64)) & (lane >= bval)
        else:
            j = {"down": lambda: lane + bval, "bfly": lambda: lane ^ bval,
                 "idx": lambda: min_lane | (bval & ~seg)}[mode]()
            ok = j <= max_lane
        j = np.where(ok, j, lane).astype(np.int64) & 31
        write(w, a(w)[j], mask)
    return run


def vote(op, prog):
    mode, ty = op.mods["mode"], op.type(0)
    a = reader(op.operands[1], "pred")
    write = writer(op.operands[0], ty)

    def run(w, mask):
        p = a(w) & mask
        if mode == "ballot":
            return write(w, np.full(LANES, _bitmask(p), np.uint32), mask)
        voters = p[mask]
        value = {"all": voters.all(), "any": voters.any(), "uni": voters.all() or not voters.any()}[mode]
        write(w, np.full(LANES, value, bool), mask)
    return run


def redux(op, prog):
    kind, ty = op.mods["op"], op.type(0)
    a, write = reader(op.operands[1], ty), writer(op.operands[0], ty)
    fold = {"add": np.add.reduce, "min": np.minimum.reduce, "max": np.maximum.reduce,
            "and": np.bitwise_and.reduce, "or": np.bitwise_or.reduce, "xor": np.bitwise_xor.reduce}[kind]

    def run(w, mask):
        with np.errstate(over="ignore"):
            value = fold(a(w)[mask])
        write(w, np.full(LANES, value, a(w).dtype), mask)
    return run


def elect(op, prog):
    first, second = op.operands[0].items
    write_d, write_p = writer(first, "b32"), writer(second, "pred")
    members = reader(op.operands[1], "u32")

    def run(w, mask):
        candidates = mask & _lanes_of(members(w)[0])
        leader = int(np.argmax(candidates)) if candidates.any() else 0
        write_d(w, np.full(LANES, leader, np.uint32), mask)
        write_p(w, LANE_IDS == leader, mask)
    return run


def activemask(op, prog):
    write = writer(op.operands[0], "b32")
    return lambda w, mask: write(w, np.full(LANES, _bitmask(w.active), np.uint32), mask)


# ---------------------------------------------------------------------------------------------- mbarrier
def _each_lane(mask):
    return np.nonzero(mask)[0]


def mbarrier_init(op, prog):
    addr, count = address(op.operands[0]), reader(op.operands[1], "u32")

    def run(w, mask):
        addrs, counts = addr(w), count(w)
        for lane in _each_lane(mask):
            mbar.lookup(w, int(addrs[lane]), create=int(counts[lane]))
        w.machine.epoch += 1
    return run


def mbarrier_inval(op, prog):
    return lambda w, mask: None


def mbarrier_arrive(op, prog):
    """arrive / arrive_drop / arrive.expect_tx (with their state result) and expect_tx / complete_tx."""
    key, space = op.key, op.mods.get("space", "shared::cta")
    has_state = key.startswith("mbarrier.arrive")
    first = 1 if has_state else 0
    addr = address(op.operands[first])
    arg = reader(op.operands[first + 1], "u32") if len(op.operands) > first + 1 else None
    write = writer(op.operands[0], "b64") if has_state else None

    def run(w, mask):
        addrs = addr(w)
        values = arg(w) if arg is not None else np.ones(LANES, np.uint32)
        states = np.zeros(LANES, np.uint64)
        checker = w.machine.checker
        for lane in _each_lane(mask):
            mb = mbar.lookup(w, int(addrs[lane]), space=space)
            n = int(values[lane])
            if key == "mbarrier.expect_tx":
                mb.expect(n)
                continue
            if key == "mbarrier.complete_tx":
                mb.complete(n)
                continue
            if checker is not None:
                checker.release_to(w, lane, mb)
            if key == "mbarrier.arrive.expect_tx":
                mb.expect(n)
                states[lane] = mb.arrive(1)
            elif key == "mbarrier.arrive_drop":
                states[lane] = mb.drop(n)
            else:
                states[lane] = mb.arrive(n)
        w.machine.epoch += 1
        if write is not None:
            write(w, states, mask)
    return run


def mbarrier_wait(op, prog):
    """test_wait / try_wait, by state or parity: p = whether that phase completed (never blocks: the
    kernel loops, and the scheduler runs other warps meanwhile)."""
    parity = op.key.endswith("parity")
    addr = address(op.operands[1])
    token = reader(op.operands[2], "u32" if parity else "b64")
    write = writer(op.operands[0], "pred")

    def run(w, mask):
        addrs, tokens = addr(w), token(w)
        done = np.zeros(LANES, bool)
        checker = w.machine.checker
        for lane in _each_lane(mask):
            mb = mbar.lookup(w, int(addrs[lane]))
            t = int(tokens[lane])
            done[lane] = mb.parity_done(t) if parity else mb.state_done(t)
            if done[lane] and checker is not None:
                checker.acquire_from(w, lane, mb)
        write(w, done, mask)
        if not done[mask].all():
            first = _each_lane(mask & ~done)[0]
            w.poll(("mbarrier", op, mbar.lookup(w, int(addrs[first])), int(tokens[first]), parity))
    return run


def mbarrier_pending(op, prog):
    write = writer(op.operands[0], "u32")
    return lambda w, mask: write(w, np.zeros(LANES, np.uint32), mask)


TABLE = {"shfl.sync": shfl, "vote.sync": vote, "redux.sync": redux, "elect.sync": elect, "activemask": activemask,
         "mbarrier.init": mbarrier_init, "mbarrier.inval": mbarrier_inval, "mbarrier.pending_count": mbarrier_pending}
TABLE.update({k: mbarrier_arrive for k in ("mbarrier.arrive", "mbarrier.arrive_drop", "mbarrier.arrive.expect_tx",
                                           "mbarrier.expect_tx", "mbarrier.complete_tx")})
TABLE.update({k: mbarrier_wait for k in ("mbarrier.test_wait", "mbarrier.try_wait", "mbarrier.test_wait.parity",
                                         "mbarrier.try_wait.parity")})
