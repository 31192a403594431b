"""Warpgroup matrix multiply-accumulate (PTX ISA 9.7.15): ``wgmma.mma_async`` as a numpy matmul on the
fragment layout, with shared-memory operands read through their matrix descriptors (swizzle included).

Each warp of the warpgroup computes its own 16 rows of D (warp ``index % 4``). Results are held back
until a ``wgmma.wait_group`` retires their group, as on a GPU: an instruction that reads an accumulator
before the wait sees the old value (the next wgmma of a chain reads the pending one)."""
from __future__ import annotations

import numpy as np

from .dtypes import np_dtype
from .errors import UnsupportedError
from .ops_control import nothing
from .operands import LANES, reader
from .tensormap import swizzle

LANE = np.arange(LANES)
FLOAT_INPUTS = ("f16", "bf16", "e4m3", "e5m2")
SPANS = {0: 0, 1: 128, 2: 64, 3: 32}       # descriptor bits 62-63 -> swizzle span in bytes


def _fragment(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) within the warp's 16 x n slab of each f32 accumulator register, per lane."""
    regs = np.arange(n // 2)
    chunk, half, pair = regs // 4, regs // 2 % 2, regs % 2
    rows = LANE[None] // 4 + 8 * half[:, None]
    cols = 8 * chunk[:, None] + 2 * (LANE[None] % 4) + pair[:, None]
    return rows, cols


def _a_fragment() -> tuple[np.ndarray, np.ndarray]:
    """(row, k) of each 16-bit element of A held in 4 .b32 registers (2 elements each), per lane."""
    j = np.arange(8)                           # register j // 2, half j % 2
    reg, half = j // 2, j % 2
    rows = LANE[None] // 4 + 8 * (reg % 2)[:, None]
    ks = 2 * (LANE[None] % 4) + half[:, None] + 8 * (reg // 2)[:, None]
    return rows, ks


def _smem_matrix(w, op, desc: int, rows: np.ndarray, k: int, dtype: np.dtype, mn_major: bool, where) -> np.ndarray:
    """Elements (rows, 0..k) of a shared-memory operand described by ``desc``, as (len(rows), k)."""
    start = (desc & 0x3FFF) << 4
    lbo, sbo = (desc >> 16 & 0x3FFF) << 4, (desc >> 32 & 0x3FFF) << 4
    span = SPANS[desc >> 62 & 3]
    item = dtype.itemsize
    r, kk = rows[:, None].astype(np.int64), np.arange(k, dtype=np.int64)[None]
    if mn_major:
        if not span:
            raise UnsupportedError("wgmma: MN-major operands without swizzle are not modelled", where)
        per = span // item
        off = r // per * lbo + kk // 8 * sbo + kk % 8 * span + r % per * item
    elif span:
        off = r // 8 * sbo + r % 8 * span + kk * item
    else:                                       # 8 x 16-byte core matrices
        off = r // 8 * sbo + kk * item // 16 * lbo + r % 8 * 16 + kk * item % 16
    addrs = w.cta.resolve(swizzle(np.uint64(start) + off.reshape(-1).astype(np.uint64), span))
    shared = w.cta.cluster.shared
    if w.machine.checker is not None:
        w.machine.checker.data(w, op, shared, addrs, item, False, where)
    raw = shared.load(addrs, item, w.describe, check_uninit=w.machine.check_uninit)
    return raw.view(dtype).reshape(rows.size, k)


def _pending(w, name: str) -> np.ndarray:
    """A register's value as the next wgmma sees it: the newest pending result, else the register."""
    for group in reversed(w.wgmma):
        if name in group:
            return group[name]
    return w.regs[name].view(np.uint32)


def mma(op, prog):
    acc_t, a_t, b_t = (np_dtype(op.type(i)) for i in range(3))
    shape = op.mods["shape"]
    n, k = int(shape[shape.index("n") + 1:shape.index("k")]), int(shape[shape.index("k") + 1:])
    if op.type(0).name != "f32" or op.type(1).name not in FLOAT_INPUTS:
        raise UnsupportedError(f"{op.text}: only f32 accumulation of float inputs is modelled", op.origin)
    register_a = op.key == "wgmma.mma_async.rs"
    d_names = [item.name for item in op.operands[0].items]
    a_regs = [reader(item, "b32") for item in op.operands[1].items] if register_a else None
    a_desc = None if register_a else reader(op.operands[1], "b64")
    b_desc = reader(op.operands[2], "b64")
    scale_d = reader(op.operands[3], "pred")
    imms = [int(o.name) for o in op.operands[4:]]
    scale_a, scale_b = (imms[0], imms[1]) if len(imms) >= 2 else (1, 1)
    trans_a = imms[2] if not register_a and len(imms) == 4 else 0
    trans_b = imms[-1] if len(imms) >= 3 else 0
    rows, cols = _fragment(n)
    a_rows, a_ks = _a_fragment()

    def run(w, mask):
        lane = int(np.argmax(mask))
        where = w.location(op)
        slab = np.arange(16) + 16 * (w.index % 4)
        if register_a:
            halves = np.stack([r(w) for r in a_regs]).view(np.uint16).reshape(4, LANES, 2)
            a = np.zeros((16, k), a_t)
            a[a_rows, a_ks] = halves.transpose(0, 2, 1).reshape(8, LANES).view(a_t)
        else:
            a = _smem_matrix(w, op, int(a_desc(w)[lane]), slab, k, a_t, bool(trans_a), where)
        bm = _smem_matrix(w, op, int(b_desc(w)[lane]), np.arange(n), k, b_t, bool(trans_b), where)
        d = np.zeros((16, n), np.float32)
        if scale_d(w)[lane]:
            d[rows, cols] = np.stack([_pending(w, name) for name in d_names]).view(np.float32)
        d += (scale_a * a.astype(np.float32)) @ (scale_b * bm.astype(np.float32)).T
        out = d[rows, cols]
        group = w.wgmma[-1]
        for i, name in enumerate(d_names):
            group[name] = np.where(mask, out[i].view(np.uint32), _pending(w, name))
    return run


def commit(op, prog):
    def run(w, mask):
        w.wgmma.append({})
    return run


def wait(op, prog):
    """Retire all committed groups but the ``n`` newest: their results reach the registers."""
    n = int(op.operands[0].name)

    def run(w, mask):
        committed = len(w.wgmma) - 1
        for group in w.wgmma[:max(committed - n, 0)]:
            w.regs.update(group)
        del w.wgmma[:max(committed - n, 0)]
    return run


TABLE = {"wgmma.mma_async.ss": mma, "wgmma.mma_async.rs": mma, "wgmma.commit_group": commit,
         "wgmma.wait_group": wait, "wgmma.fence": nothing}
