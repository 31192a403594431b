"""Bulk and tensor asynchronous copies (PTX ISA 9.7.9.25): ``cp.async.bulk``, ``cp.reduce.async.bulk`` and
their ``.tensor`` forms, with bulk groups (commit / wait_group) and mbarrier transaction completion.

A copy runs in two steps, each after a random number of warp-ops: it reads its source (then a
``wait_group.read`` may finish), later it writes its destination (then a plain ``wait_group`` may finish,
and an mbarrier destination gets ``complete_tx`` of the bytes). So a kernel that reuses a source before
``.read``, or signals after only ``.read``, sees what a GPU may show it. Tensor copies read the tensor
map model (:mod:`.tensormap`): out-of-bounds box elements load as zero (NaN with ``oob_fill="nan"``) and
are dropped on stores; shared-memory tiles are laid out with the map's swizzle."""
from __future__ import annotations

import numpy as np

from . import mbarrier as mbar
from .dtypes import np_dtype
from .errors import MemoryFault, UnsupportedError
from .memory import SHARED_BASE, SHARED_STRIDE
from .ops_control import Wait
from .operands import address, reader
from .tensormap import decode, swizzle

TMA_ALIGN = 128          # shared-memory tile address alignment of tensor copies
READ_CLOCK, WRITE_CLOCK = 1, 2   # a copy's own clock while it reads its source, then while it writes


class Copy:
    """One lane's copy in flight: ``read`` then ``write`` steps; ``read_done`` / ``done`` for the waits."""

    def __init__(self, w, op, lane: int):
        self.machine, self.op = w.machine, op
        self.where = w.location(op, lanes=np.arange(32) == lane)
        self.read_done = self.done = False
        self.checker = w.machine.checker
        if self.checker is not None:
            self.checker.new_copy(w, self)

    def access(self, space, addrs: np.ndarray, size: int, data=None):
        """Read (``data`` None: returns the bytes) or write ``data`` as this copy, for the race checker."""
        if self.checker is not None:
            self.checker.data(self, self.op, space, addrs, size, data is not None, self.where)
        if data is None:
            return space.load(addrs, size, self.describe, check_uninit=self.machine.check_uninit)
        space.store(addrs, data, self.describe)
        return None

    def complete_tx(self, bar, nbytes: int) -> None:
        if self.checker is not None:
            self.checker.copy_release(self, bar)
        bar.complete(nbytes)

    def describe(self, text: str, i=None) -> str:
        return f"{text}\n  at {self.where}"

    def start(self, read, write) -> None:
        """``read()`` -> data, later ``write(data)``."""
        def first():
            data = read()
            self.read_done = True
            self.machine.later(lambda: self._finish(write, data), self.where)
        self.machine.later(first, self.where)

    def _finish(self, write, data) -> None:
        if self.checker is not None:
            self.vc[self.agent] = WRITE_CLOCK       # a `.read` wait orders the reads only
        write(data)
        self.done = True


# ---------------------------------------------------------------------------------------------- bulk groups
def _groups(w, lane: int) -> list:
    """The lane's bulk groups, oldest first; the last one is still open."""
    return w.bulk_groups.setdefault(lane, [[]])


def commit_group(op, prog):
    def run(w, mask):
        for lane in np.nonzero(mask)[0]:
            _groups(w, int(lane)).append([])
    return run


def wait_group(op, prog):
    """Blocks until all but the ``n`` most recent committed groups have finished (``.read``: read)."""
    n = int(op.operands[0].name)
    reads = bool(op.mods.get("read"))

    def finished(copy):
        return copy.read_done if reads else copy.done

    def run(w, mask):
        lanes = [int(lane) for lane in np.nonzero(mask)[0]]

        def ready():
            for lane in lanes:
                groups = _groups(w, lane)
                committed = groups[:-1]
                older = committed[:len(committed) - n] if n else committed
                if not all(finished(c) for g in older for c in g):
                    return False
            for lane in lanes:
                for c in (c for g in _groups(w, lane)[:-1] for c in g):
                    if reads and c.checker is not None and c.read_done:
                        c.checker.acquire(w, {c.agent: READ_CLOCK}, ("the source reads of", c.where))
            if reads:
                return True
            for lane in lanes:           # a full wait: forget the groups that are over, acquiring their writes
                groups = _groups(w, lane)
                while len(groups) > 1 and all(c.done for c in groups[0]):
                    for c in groups.pop(0):
                        if c.checker is not None:
                            c.checker.acquire(w, c.vc, ("the completion of", c.where))
            return True
        if ready():
            return None
        return Wait(ready, lambda: f"cp.async.bulk.wait_group{'.read' if reads else ''} {n}: bulk copies of "
                                   f"lanes {lanes} still in flight")
    return run


# ---------------------------------------------------------------------------------------------- memory helpers
def _cluster_targets(w, dst: int, bar: int, multicast: int | None) -> list[tuple[int, int]]:
    """(destination, mbarrier) shared addresses of a copy into shared memory: one pair, or the same
    offsets in every CTA of the cluster named in the multicast mask."""
    if multicast is None:
        return [(dst, bar)]
    base, stride = SHARED_BASE, SHARED_STRIDE
    ranks = [r for r in range(len(w.cta.cluster.ctas)) if multicast >> r & 1]
    return [(base + r * stride + dst % stride, base + r * stride + bar % stride) for r in ranks]


def _read(machine, space, addrs: np.ndarray, size: int, describe) -> np.ndarray:
    return space.load(addrs, size, describe, check_uninit=machine.check_uninit)


def _combine(name: str, dtype: np.dtype, where: str):
    """old, new (arrays of ``dtype``) -> reduced, for the reductions of cp.reduce.async.bulk (16-bit
    floats add in f32 and round once)."""
    fns = {"add": np.add, "min": np.minimum, "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or,
           "xor": np.bitwise_xor}
    if name not in fns:
        raise UnsupportedError(f"cp.reduce.async.bulk .{name} is not modelled", where)
    fn = fns[name]
    if dtype.itemsize == 2 and dtype.kind not in "iu":
        return lambda old, new: fn(old.astype(np.float32), new.astype(np.float32)).astype(dtype)
    return lambda old, new: fn(old, new).astype(dtype)


def _tensor_box(w, op, tmap, coords, lane: int):
    """The decoded tensor map of a ``[tmap, {coords}]`` operand (its readers) and that lane's coordinates."""
    raw = _read(w.machine, w.machine.global_space, np.array([tmap(w)[lane]], np.uint64), 128,
                lambda text, i=None: w.describe(text, lane))[0]
    box = decode(raw, w.location(op))
    coords = [int(c(w)[lane]) for c in coords]
    if len(coords) != len(box.box):
        raise UnsupportedError(f"{len(coords)} coordinates for a rank-{len(box.box)} tensor map", w.location(op))
    return box, coords


def _tile_addresses(w, copy, box, smem: int, soff: np.ndarray) -> np.ndarray:
    """The cluster-space addresses of a box's elements in its swizzled shared-memory tile."""
    if smem % TMA_ALIGN:
        raise MemoryFault(copy.describe(f"tensor copy shared-memory tile at {smem:#x} is not {TMA_ALIGN}-byte "
                                        f"aligned"))
    return w.cta.resolve(swizzle(np.uint64(smem) + soff.astype(np.uint64), box.swizzle))


# ---------------------------------------------------------------------------------------------- the copies
def bulk(op, prog):
    """1-D copies: global -> shared::cluster (mbarrier), shared::cta -> shared::cluster (mbarrier),
    shared::cta -> global (bulk group); ``cp.reduce`` forms combine into the destination."""
    key = op.key
    to_global = key.endswith("global.shared::cta")
    dst_a, src_a, size_r = address(op.operands[0]), address(op.operands[1]), reader(op.operands[2], "u32")
    bar_a = None if to_global else address(op.operands[3])
    mask_r = reader(op.operands[4], "u16") if op.mods.get("multicast") else None
    reduces = key.startswith("cp.reduce")
    combine_dtype = np_dtype(op.type(0)) if reduces else None
    combine = _combine(op.mods["op"], combine_dtype, op.origin) if reduces else None

    def run(w, mask):
        m = w.machine
        dsts, srcs, sizes = dst_a(w), src_a(w), size_r(w)
        bars = bar_a(w) if bar_a is not None else None
        masks = mask_r(w) if mask_r is not None else None
        src_space = m.global_space if key == "cp.async.bulk.shared::cluster.global" else w.cta.cluster.shared
        dst_space = m.global_space if to_global else w.cta.cluster.shared
        for lane in np.nonzero(mask)[0]:
            lane = int(lane)
            copy = Copy(w, op, lane)
            n, src = int(sizes[lane]), np.array([srcs[lane]], np.uint64)
            if src_space is w.cta.cluster.shared:
                src = w.cta.resolve(src)
                w.cta.check_own_window(w, src, n)
            if to_global:
                targets = [(int(dsts[lane]), None)]
                _groups(w, lane)[-1].append(copy)
            else:
                targets = _cluster_targets(w, int(dsts[lane]), int(bars[lane]),
                                           int(masks[lane]) if masks is not None else None)
                targets = [(d, mbar.lookup(w, b, space="shared::cluster")) for d, b in targets]

            def read(src=src, n=n, copy=copy):
                return copy.access(src_space, src, n)

            def write(data, targets=targets, n=n, copy=copy):
                for d, bar in targets:
                    at = np.array([d], np.uint64) if to_global else w.cta.resolve(np.array([d], np.uint64))
                    if combine is not None:         # an atomic reduction: no race with other reductions
                        old = _read(m, dst_space, at, n, copy.describe)
                        data = combine(old.view(combine_dtype), data.view(combine_dtype)).view(np.uint8)
                        dst_space.store(at, data.reshape(1, -1), copy.describe)
                    else:
                        copy.access(dst_space, at, n, data)
                    if bar is not None:
                        copy.complete_tx(bar, n)
            copy.start(read, write)
    return run


def tensor(op, prog):
    """Tensor (TMA) copies, tile mode: a box at coordinates between global memory and a swizzled tile."""
    key = op.key
    load = key == "cp.async.bulk.tensor.shared::cluster.global"
    if op.mods.get("load_mode", "tile") != "tile":
        raise UnsupportedError(f"{op.text}: .{op.mods['load_mode']} tensor copies are not modelled")
    tref = op.operands[1] if load else op.operands[0]
    tmap, coords_r = reader(tref.base, "u64"), [reader(c, "s32") for c in tref.items]
    smem_a = address(op.operands[0] if load else op.operands[1])
    bar_a = address(op.operands[2]) if load else None
    mask_r = None
    if load and op.mods.get("multicast"):
        mask_r = reader(op.operands[4] if op.operands[3].kind == "vec" else op.operands[3], "u16")
    reduce_op = op.mods.get("op") if key == "cp.reduce.async.bulk.tensor" else None

    def run(w, mask):
        m = w.machine
        smems = smem_a(w)
        bars = bar_a(w) if bar_a is not None else None
        masks = mask_r(w) if mask_r is not None else None
        shared = w.cta.cluster.shared
        for lane in np.nonzero(mask)[0]:
            lane = int(lane)
            copy = Copy(w, op, lane)
            box, coords = _tensor_box(w, op, tmap, coords_r, lane)
            goff, inside, soff = box.elements(coords)
            gaddrs = np.uint64(box.ptr) + goff[inside].astype(np.uint64)
            item = box.dtype.itemsize
            if load:
                targets = _cluster_targets(w, int(smems[lane]), int(bars[lane]),
                                           int(masks[lane]) if masks is not None else None)
                targets = [(_tile_addresses(w, copy, box, d, soff), mbar.lookup(w, b, space="shared::cluster"))
                           for d, b in targets]
                fill = np.full(1, np.nan if box.nan_fill else 0, box.dtype).view(np.uint8)

                def read(gaddrs=gaddrs, inside=inside, fill=fill, copy=copy, item=item):
                    data = np.repeat(fill[None], inside.size, 0)
                    data[inside] = copy.access(m.global_space, gaddrs, item)
                    return data

                def write(data, targets=targets, box=box, copy=copy):
                    for saddrs, bar in targets:
                        copy.access(shared, saddrs, item, data)
                        copy.complete_tx(bar, box.nbytes)
            else:
                saddrs = _tile_addresses(w, copy, box, int(smems[lane]), soff)
                w.cta.check_own_window(w, saddrs, item)
                _groups(w, lane)[-1].append(copy)
                combine = _combine(reduce_op, box.dtype, op.origin) if reduce_op else None

                def read(saddrs=saddrs, inside=inside, copy=copy, item=item):
                    return copy.access(shared, saddrs[inside], item)

                def write(data, gaddrs=gaddrs, combine=combine, copy=copy, box=box, item=item):
                    if combine is None:
                        copy.access(m.global_space, gaddrs, item, data)
                        return
                    old = _read(m, m.global_space, gaddrs, item, copy.describe)     # atomic, as above
                    data = combine(old.copy().view(box.dtype), data.copy().view(box.dtype))
                    m.global_space.store(gaddrs, data.view(np.uint8).reshape(-1, item), copy.describe)
            copy.start(read, write)
    return run


TABLE = {"cp.async.bulk.commit_group": commit_group, "cp.async.bulk.wait_group": wait_group}
TABLE.update({k: bulk for k in ("cp.async.bulk.shared::cluster.global", "cp.async.bulk.shared::cluster.shared::cta",
                                "cp.async.bulk.global.shared::cta", "cp.reduce.async.bulk.global.shared::cta",
                                "cp.reduce.async.bulk.shared::cluster.shared::cta")})
TABLE.update({k: tensor for k in ("cp.async.bulk.tensor.shared::cluster.global",
                                  "cp.async.bulk.tensor.global.shared::cta", "cp.reduce.async.bulk.tensor")})
