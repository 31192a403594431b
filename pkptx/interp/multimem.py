"""NVLink SHARP in one process: multicast addresses bound to one allocation per rank, and the
``multimem`` instructions (PTX ISA 9.7.12.14) over them: ``ld_reduce`` reads every copy and reduces
(16-bit floats in f32, rounded once), ``st`` writes every copy, ``red`` reduces into every copy
atomically. A plain ``ld``/``st`` of a multicast address faults, as the address is in no allocation."""
from __future__ import annotations

import numpy as np

from .dtypes import HALVES, join_halves, np_dtype, split_halves
from .errors import MemoryFault, UnsupportedError
from .operands import LANES, address, reader, vector_items, writer
from .ops_memory import _to_bytes, access, atomic_update

MULTICAST_BASE = 0x7E00_0000_0000
MULTICAST_ALIGN = 1 << 30


class Multicast:
    """Multicast objects of a machine: ``bind(allocations)`` -> address; ``targets`` resolves one."""

    def __init__(self):
        self.objects: list[tuple[int, list]] = []

    def bind(self, allocations: list) -> int:
        base = MULTICAST_BASE + len(self.objects) * MULTICAST_ALIGN
        self.objects.append((base, allocations))
        return base

    def targets(self, w, addrs: np.ndarray, size: int) -> list[np.ndarray]:
        """The unicast addresses of every rank's copy (rank order) for each lane's multicast address."""
        for base, allocs in self.objects:
            off = addrs.astype(np.int64) - base
            if (off >= 0).all() and (off + size <= allocs[0].nbytes).all():
                return [np.uint64(a.base) + off.astype(np.uint64) for a in allocs]
        bad = int(addrs[0])
        raise MemoryFault(w.describe(f"multimem access at {bad:#x}: not inside one multicast object"))


def _reduce(kind: str, ty):
    """f(list of arrays of ``ty``) -> reduced array of ``ty``."""
    fns = {"add": np.add, "min": np.minimum, "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or,
           "xor": np.bitwise_xor}
    if kind not in fns:
        raise UnsupportedError(f"multimem .{kind} is not modelled")
    fn = fns[kind]
    if ty.kind == "fx2":
        half = HALVES[ty.name]

        def packed(values):
            halves = [split_halves(v, ty) for v in values]
            lo = halves[0][0].astype(np.float32)
            hi = halves[0][1].astype(np.float32)
            for h in halves[1:]:
                lo, hi = fn(lo, h[0].astype(np.float32)), fn(hi, h[1].astype(np.float32))
            return join_halves(lo.astype(half), hi.astype(half))
        return packed
    dt = np_dtype(ty)
    wide = np.float32 if ty.kind == "f" and ty.bits == 16 else dt

    def plain(values):
        acc = values[0].astype(wide)
        for v in values[1:]:
            acc = fn(acc, v.astype(wide))
        return acc.astype(dt)
    return plain


def _copies(w, op, addr_fn, size: int, mask):
    lanes = np.nonzero(mask)[0]
    return lanes, w.machine.multicast.targets(w, addr_fn(w)[lanes], size)


def ld_reduce(op, prog):
    ty = op.type(0)
    dests = vector_items(op.operands[0])
    writes = [writer(d, ty) for d in dests]
    addr, size, dt = address(op.operands[1]), ty.bytes * len(dests), np_dtype(ty)
    fold = _reduce(op.mods["op"], ty)

    def run(w, mask):
        lanes, copies = _copies(w, op, addr, size, mask)
        parts = []
        for target in copies:
            full = np.zeros(LANES, np.uint64)
            full[lanes] = target
            _, data = access(w, op, "global", full, size, mask)
            parts.append(data)
        for i, write in enumerate(writes):
            value = np.zeros(LANES, dt)
            value[lanes] = fold([p[:, i * ty.bytes:(i + 1) * ty.bytes].copy().view(dt).reshape(-1) for p in parts])
            write(w, value, mask)
    return run


def store(op, prog):
    """``multimem.st`` (every copy gets the values) and ``multimem.red`` (every copy reduced, lane by lane)."""
    ty = op.type(0)
    srcs = [reader(s, ty) for s in vector_items(op.operands[1])]
    addr, size = address(op.operands[0]), ty.bytes * len(srcs)
    red = op.key == "multimem.red"
    if red and len(srcs) != 1:
        raise UnsupportedError(f"{op.text}: vector multimem.red is not modelled")
    update = atomic_update(op.mods["op"], ty) if red else None

    def run(w, mask):
        lanes, copies = _copies(w, op, addr, size, mask)
        values = [s(w) for s in srcs]
        for target in copies:
            full = np.zeros(LANES, np.uint64)
            full[lanes] = target
            if red:
                update(w, op, "global", full, values[0], values[0], mask)
            else:
                access(w, op, "global", full, size, mask, write=_to_bytes(values))
    return run


TABLE = {"multimem.ld_reduce": ld_reduce, "multimem.st": store, "multimem.red": store}
