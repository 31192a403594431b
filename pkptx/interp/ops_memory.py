"""Loads, stores, atomics and reductions (PTX ISA 9.7.9.8-9, 9.7.12.5-6) over the fake address spaces.

A load with ``.acquire``/``.relaxed``/``.volatile`` is a poll: the scheduler learns from it that the
warp may be spinning on memory that another warp (of any rank) will change."""
from __future__ import annotations

import numpy as np


from .dtypes import HALVES, join_halves, np_dtype, split_halves
from .errors import UnsupportedError
from .operands import LANES, address, reader, vector_items, writer

GENERIC_SHARED = 0x0000_0100_0000_0000      # generic address of shared byte a: GENERIC_SHARED + a
POLLING = ("acquire", "relaxed", "volatile")


def spaces(w, space: str | None, addrs: np.ndarray):
    """(AddressSpace, addresses in it) for a state space; generic addresses route by their range."""
    if space in ("shared", "shared::cta", "shared::cluster"):
        return w.cta.cluster.shared, w.cta.resolve(addrs)
    if space in ("global", "param", "const") or space is None and not (addrs >= GENERIC_SHARED).any():
        return w.machine.global_space, addrs
    if space is None and (addrs >= GENERIC_SHARED).all() and (addrs < GENERIC_SHARED + (1 << 32)).all():
        return w.cta.cluster.shared, w.cta.resolve(addrs - np.uint64(GENERIC_SHARED))
    if space is None:
        raise UnsupportedError("a generic access mixing shared and global addresses in one warp")
    raise UnsupportedError(f".{space} accesses are not modelled")


def access(w, op, space, addrs, size, mask, *, write=None):
    """Load (``write`` None) or store ``write`` (uint8, (lanes, size)) for the lanes in ``mask``."""
    lanes = np.nonzero(mask)[0]
    mem, addrs = spaces(w, space, addrs[lanes])
    if space == "shared::cta" or (space == "shared" and mem is w.cta.cluster.shared):
        w.cta.check_own_window(w, addrs, size)

    def describe(text, i=None):
        return w.describe(text, None if i is None else int(lanes[i]))
    checker = w.machine.checker
    if write is None:
        data = mem.load(addrs, size, describe, check_uninit=w.machine.check_uninit)
    else:
        w.machine.epoch += 1
        mem.store(addrs, write[lanes], describe)
        data = None
    if checker is not None:            # after the access, which checked the addresses
        checker.access(w, op, mem, addrs, size, lanes, write is not None)
    return lanes, data


def _to_bytes(values: list[np.ndarray]) -> np.ndarray:
    """Per-lane values (each a 32-array) packed side by side as bytes: (32, total size)."""
    return np.concatenate([v.view(np.uint8).reshape(LANES, -1) for v in values], axis=1)


def ld(op, prog):
    ty = op.type(0)
    dests = vector_items(op.operands[0])
    writes = [writer(d, ty) for d in dests]
    addr = address(op.operands[1])
    size, space, dt = ty.bytes, op.mods.get("space"), np_dtype(ty)
    polls = op.mods.get("sem") in POLLING

    def run(w, mask):
        addrs = addr(w)
        lanes, data = access(w, op, space, addrs, size * len(dests), mask)
        for i, write in enumerate(writes):
            value = np.zeros(LANES, dt)
            value[lanes] = data[:, i * size:(i + 1) * size].copy().view(dt).reshape(-1)
            write(w, value, mask)
        if polls:
            w.poll(("flag", op, addrs, mask, dests[0]))
    return run


def st(op, prog):
    ty = op.type(0)
    srcs = [reader(s, ty) for s in vector_items(op.operands[1])]
    addr = address(op.operands[0])
    size, space = ty.bytes, op.mods.get("space")

    def run(w, mask):
        access(w, op, space, addr(w), size * len(srcs), mask, write=_to_bytes([s(w) for s in srcs]))
    return run


def _atomic_fn(name: str, ty):
    """f(old, b, c) -> new value, for one lane's atomic (numpy scalars of the op's type)."""
    if ty.kind == "fx2":
        half = HALVES[ty.name]
        if name != "add":
            raise UnsupportedError(f"atom/red .{name} on .{ty} is not modelled")

        def packed(old, b, c):
            (lo, hi), (blo, bhi) = split_halves(np.array([old]), ty), split_halves(np.array([b]), ty)
            return join_halves((lo.astype(np.float32) + blo).astype(half),
                               (hi.astype(np.float32) + bhi).astype(half))[0]
        return packed
    fns = {"add": lambda o, b, c: o + b, "and": lambda o, b, c: o & b, "or": lambda o, b, c: o | b,
           "xor": lambda o, b, c: o ^ b, "exch": lambda o, b, c: b, "min": lambda o, b, c: min(o, b),
           "max": lambda o, b, c: max(o, b), "cas": lambda o, b, c: c if o == b else o,
           "inc": lambda o, b, c: type(o)(0) if o >= b else o + type(o)(1),
           "dec": lambda o, b, c: b if o == 0 or o > b else o - type(o)(1)}
    if ty.kind == "f" and ty.bits == 16:
        dt = np_dtype(ty)
        return lambda o, b, c: dt.type(np.float32(fns[name](np.float32(o), np.float32(b), c)))
    return fns[name]


def atomic_update(name: str, ty):
    """``update(w, op, space, addrs, b, c, mask)`` -> old values: one read-modify-write per lane of
    ``mask``, in lane order (``atom``, ``red`` and each copy of a ``multimem.red``)."""
    fn, dt, size = _atomic_fn(name, ty), np_dtype(ty), ty.bytes

    def update(w, op, space, addrs, bv, cv, mask):
        old_all = np.zeros(LANES, dt)
        with np.errstate(over="ignore"):
            for lane in np.nonzero(mask)[0]:
                one = np.zeros(LANES, bool)
                one[lane] = True
                _, data = access(w, op, space, addrs, size, one)
                old = data[0].view(dt)[0]
                new = np.array([fn(old, bv[lane], cv[lane])], dt)
                access(w, op, space, addrs, size, one, write=np.repeat(new.view(np.uint8)[None], LANES, 0))
                old_all[lane] = old
        return old_all
    return update


def atomic(op, prog):
    """``atom`` (old value into d) and ``red`` (no result)."""
    ty = op.type(0)
    is_atom = op.key == "atom"
    first = 1 if is_atom else 0
    addr = address(op.operands[first])
    b = reader(op.operands[first + 1], ty)
    c = reader(op.operands[first + 2], ty) if op.mods["op"] == "cas" else None
    write = writer(op.operands[0], ty) if is_atom else None
    update, space = atomic_update(op.mods["op"], ty), op.mods.get("space")

    def run(w, mask):
        bv = b(w)
        old = update(w, op, space, addr(w), bv, c(w) if c is not None else bv, mask)
        if write is not None:
            write(w, old, mask)
    return run


def stmatrix(op, prog):
    """``stmatrix.sync.aligned.m8n8.x<n>.shared.b16 [a], {r0, ..}``: lanes 8i .. 8i+7 give the addresses of
    matrix i's eight 16-byte rows; row j of matrix i is register i of lanes 4j .. 4j+3, in lane order."""
    if op.mods.get("trans"):
        raise UnsupportedError("stmatrix .trans is not modelled")
    srcs = [reader(s, "b32") for s in vector_items(op.operands[1])]
    addr, space, count = address(op.operands[0]), op.mods.get("space"), len(srcs)
    rows = np.zeros(LANES, bool)
    rows[:8 * count] = True

    def run(w, mask):
        if not mask.all():
            raise UnsupportedError(w.describe("stmatrix is .aligned: every lane of the warp must execute it"))
        data = np.zeros((LANES, 16), np.uint8)
        data[:8 * count] = np.stack([s(w) for s in srcs]).astype(np.uint32).view(np.uint8).reshape(8 * count, 16)
        access(w, op, space, addr(w), 16, rows, write=data)
    return run


TABLE = {"ld": ld, "st": st, "atom": atomic, "red": atomic, "stmatrix": stmatrix}
