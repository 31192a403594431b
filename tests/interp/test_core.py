"""The interpreter's core against numpy: the README example, random integer/float programs with
divergent branches, 16-bit float rounding, warp collectives, atomics, barriers and errors."""
from __future__ import annotations

import contextlib
import io
import os
import runpy

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pkptx.interp import DeadlockError, MemoryFault, UninitializedRead, run
from pkptx.isa import Kernel, Param, address, b32, bf16, f32, pred, s32, u32, u64

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
M32 = (1 << 32) - 1


def test_hello_ptx_example():
    with contextlib.redirect_stdout(io.StringIO()):
        kernel = runpy.run_path(os.path.join(ROOT, "examples", "hello_ptx.py"))["k"]
    x = np.random.default_rng(1).random(1000).astype(np.float32)
    want = 2 * x
    kernel.interpret(4, 256, x, 1000, 2.0)
    assert np.array_equal(x, want)


# ------------------------------------------------------------------------ random integer programs
def _s32(v):
    v &= M32
    return v - (1 << 32) if v >> 31 else v


def _div(a, b, signed):
    if b == 0:
        return M32
    if signed:
        q = abs(_s32(a)) // abs(_s32(b)) * (1 if (_s32(a) < 0) == (_s32(b) < 0) else -1)
        return q & M32
    return a // b


INT_OPS = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
    "shl": lambda a, b: a << (b & 63) if (b & 63) < 32 else 0, "shr": lambda a, b: a >> (b & 63) if (b & 63) < 32 else 0,
    "min": min, "max": max, "div": lambda a, b: _div(a, b, False), "rem": lambda a, b: a % b if b else a,
    "smin": lambda a, b: min(_s32(a), _s32(b)), "sdiv": lambda a, b: _div(a, b, True),
}


def _emit_int(b, name, ty_hint, x, y, into=None):
    if name == "mul":
        return b.mul(u32, x, y, mode="lo", into=into)
    if name in ("shl", "shr"):
        return getattr(b, name)(b32, x, b.and_(b32, y, 63), into=into)
    if name in ("and", "or", "xor"):
        return getattr(b, name + ("" if name == "xor" else "_"))(b32, x, y, into=into)
    if name == "smin":
        return b.min(s32, x, y, into=into)
    if name == "sdiv":
        return b.div(s32, x, y, into=into)
    return getattr(b, name)(u32, x, y, into=into)


step = st.tuples(st.sampled_from(sorted(INT_OPS)), st.integers(0, 99), st.integers(0, 99),
                 st.booleans(), st.integers(0, 99), st.integers(0, 99))


@settings(max_examples=40, deadline=None)
@given(st.lists(step, min_size=1, max_size=12), st.integers(0, 2**31), st.integers(33, 96))
def test_random_integer_programs_with_divergence(steps, seed, threads):
    """Each step writes ``op(r_i, r_j)``; a guarded step does so only where ``r_k < r_l`` (an if_then
    that splits the warp). Every register's final value per thread is checked."""
    rng = np.random.default_rng(seed)
    inputs = rng.integers(0, 1 << 32, size=(threads, 2), dtype=np.uint64).astype(np.uint32)
    inputs[rng.random(inputs.shape) < 0.2] = 0
    k = Kernel("rand", [Param("inp", u64, pointer=True), Param("out", u64, pointer=True)], max_threads=128)
    b = k.builder()
    tid = b.special("tid.x")
    base = b.mad(u64, b.cvt(u64, u32, tid), 8, b.load_param("inp"), mode="lo")
    regs = [b.mov(u32, tid), b.ld(u32, address(base), space="global"), b.ld(u32, address(base, 4), space="global")]
    model = [[t, int(inputs[t, 0]), int(inputs[t, 1])] for t in range(threads)]
    for name, i, j, guarded, kk, ll in steps:
        x, y = regs[i % len(regs)], regs[j % len(regs)]
        if guarded:
            target = regs[(i + j) % len(regs)]
            cx, cy = regs[kk % len(regs)], regs[ll % len(regs)]
            with b.if_then(b.setp("lt", u32, cx, cy)):
                _emit_int(b, name, u32, x, y, into=target)
            for m in model:
                if m[kk % len(m)] < m[ll % len(m)]:
                    m[(i + j) % len(m)] = INT_OPS[name](m[i % len(m)], m[j % len(m)]) & M32
        else:
            regs.append(_emit_int(b, name, u32, x, y))
            for m in model:
                m.append(INT_OPS[name](m[i % len(m)], m[j % len(m)]) & M32)
    out_base = b.mad(u64, b.cvt(u64, u32, tid), 4 * len(regs), b.load_param("out"), mode="lo")
    for n, r in enumerate(regs):
        b.st(u32, address(out_base, 4 * n), r, space="global")
    b.ret()
    out = np.zeros((threads, len(regs)), np.uint32)
    run(k, 1, threads, inputs, out, seed=seed)
    assert out.tolist() == model


# ------------------------------------------------------------------------ floats
@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**31))
def test_float_arithmetic_and_bf16_rounding(seed):
    rng = np.random.default_rng(seed)
    n = 64
    a = (rng.standard_normal(n) * 10 ** rng.uniform(-3, 3, n)).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32)
    k = Kernel("floats", [Param("a", u64, pointer=True), Param("c", u64, pointer=True),
                          Param("out", u64, pointer=True), Param("packed", u64, pointer=True)], max_threads=64)
    b = k.builder()
    tid = b.special("tid.x")
    off = b.mul(u32, tid, 4, mode="wide")
    x = b.ld(f32, address(b.add(u64, b.load_param("a"), off)), space="global")
    y = b.ld(f32, address(b.add(u64, b.load_param("c"), off)), space="global")
    s = b.add(f32, b.mul(f32, x, y), y)
    h = b.cvt(bf16, f32, s, rnd="rn")
    back = b.cvt(f32, bf16, h)
    pair = b.cvt("bf16x2", f32, x, y, rnd="rn")
    b.st(f32, address(b.add(u64, b.load_param("out"), off)), b.max(f32, back, b.neg(f32, x)), space="global")
    b.st(b32, address(b.add(u64, b.load_param("packed"), off)), pair, space="global")
    b.ret()
    out, packed = np.zeros(n, np.float32), np.zeros(n, np.uint32)
    run(k, 1, n, a, c, out, packed)
    s_ref = (a * c).astype(np.float32) + c
    want = np.maximum(s_ref.astype(ml_dtypes.bfloat16).astype(np.float32), -a)
    assert np.array_equal(out, want)
    pairs = packed.view(np.uint16).reshape(n, 2)
    assert np.array_equal(pairs[:, 1], a.astype(ml_dtypes.bfloat16).view(np.uint16))     # d.hi = a
    assert np.array_equal(pairs[:, 0], c.astype(ml_dtypes.bfloat16).view(np.uint16))


# ------------------------------------------------------------------------ warp collectives, atomics, barriers
def test_shfl_vote_atom_and_bar_sync():
    threads = 96
    k = Kernel("coll", [Param("out", u64, pointer=True), Param("counter", u64, pointer=True)], max_threads=128)
    b = k.builder()
    k.shared("stage", 4 * threads)
    tid = b.special("tid.x")
    lane = b.and_(b32, tid, 31)
    down = b.reg(b32)
    b.emit("shfl.sync", down, tid, 1, 31, 0xFFFFFFFF, mode="down")
    bfly = b.reg(b32)
    b.emit("shfl.sync", bfly, tid, 3, 31, 0xFFFFFFFF, mode="bfly")
    odd = b.setp("eq", u32, b.and_(b32, tid, 1), 1)
    ballot = b.reg(b32)
    b.emit("vote.sync", ballot, odd, 0xFFFFFFFF, mode="ballot", types=("b32",))
    ticket = b.atom("add", u32, address(b.load_param("counter")), 1, space="global")
    slot = b.mov(u32, k.shared_symbols[0][0])
    b.st(u32, address(b.mad(u32, tid, 4, slot, mode="lo")), tid, space="shared")
    b.bar_sync(0)
    mirror = b.sub(u32, threads - 1, tid)
    other = b.ld(u32, address(b.mad(u32, mirror, 4, slot, mode="lo")), space="shared")
    base = b.mad(u64, b.cvt(u64, u32, tid), 20, b.load_param("out"), mode="lo")
    for i, r in enumerate((down, bfly, ballot, ticket, other)):
        b.st(u32, address(base, 4 * i), r, space="global")
    del lane
    b.ret()
    out = np.zeros((threads, 5), np.uint32)
    counter = np.zeros(1, np.uint32)
    run(k, 1, threads, out, counter, seed=3)
    t = np.arange(threads)
    lanes = t % 32
    assert np.array_equal(out[:, 0], np.where(lanes + 1 <= 31, t + 1, t))
    assert np.array_equal(out[:, 1], (t // 32) * 32 + (lanes ^ 3))
    assert np.all(out[:, 2] == 0xAAAAAAAA)
    assert sorted(out[:, 3]) == list(range(threads)) and counter[0] == threads
    assert np.array_equal(out[:, 4], threads - 1 - t)


@settings(max_examples=10, deadline=None)
@given(count=st.sampled_from([1, 2, 4]), seed=st.integers(0, 2**16))
def test_stmatrix_writes_each_lanes_pair_into_its_matrix_row(count, seed):
    """stmatrix.x<n>: lane 8i + j names row j of matrix i (here at a random 16-byte slot); that row holds
    register i of lanes 4j .. 4j+3. Read back through shared memory and compared with the model."""
    rng = np.random.default_rng(seed)
    slots = rng.permutation(64)[:8 * count].astype(np.uint32)
    values = rng.integers(0, 2**32, (count, 32), dtype=np.uint64).astype(np.uint32)
    k = Kernel("stm", [Param("out", u64, pointer=True), Param("slots", u64, pointer=True),
                       Param("values", u64, pointer=True)], max_threads=32)
    b = k.builder()
    k.shared("tile", 64 * 16, 16)
    tid = b.special("tid.x")
    base = b.mov(u32, k.shared_symbols[0][0])
    for i in range(64 * 4 // 32):           # each lane zeroes its words of the tile (as it reads them back)
        b.st(u32, address(b.mad(u32, b.add(u32, tid, 32 * i), 4, base, mode="lo")), 0, space="shared")
    slot = b.ld(u32, address(b.mad(u64, b.cvt(u64, u32, b.min(u32, tid, 8 * count - 1)), 4, b.load_param("slots"),
                                   mode="lo")), space="global")
    regs = [b.ld(u32, address(b.mad(u64, b.cvt(u64, u32, b.add(u32, tid, 32 * i)), 4, b.load_param("values"),
                                    mode="lo")), space="global") for i in range(count)]
    b.bar_sync(0)
    b.stmatrix(b.mad(u32, slot, 16, base, mode="lo"), regs)
    b.bar_sync(0)
    out = b.load_param("out")
    for i in range(64 * 4 // 32):
        word = b.add(u32, tid, 32 * i)
        v = b.ld(u32, address(b.mad(u32, word, 4, base, mode="lo")), space="shared")
        b.st(u32, address(b.mad(u64, b.cvt(u64, u32, word), 4, out, mode="lo")), v, space="global")
    b.ret()
    out = np.full(64 * 4, 7, np.uint32)
    run(k, 1, 32, out, np.pad(slots, (0, 32 - 8 * count)), values.reshape(-1), seed=seed)
    want = np.zeros((64, 4), np.uint32)
    for i in range(count):
        for j in range(8):
            want[slots[8 * i + j]] = values[i, 4 * j:4 * j + 4]
    assert np.array_equal(out.reshape(64, 4), want)


def test_loop_with_divergent_trip_counts():
    """Lane t loops t times (a b.range with a register bound): min-PC execution reconverges after."""
    k = Kernel("loops", [Param("out", u64, pointer=True)], max_threads=64)
    b = k.builder()
    tid = b.special("tid.x")
    acc = b.mov(u32, 0)
    for i in b.range(0, tid):
        b.add(u32, acc, i, into=acc)
    b.st(u32, address(b.mad(u64, b.cvt(u64, u32, tid), 4, b.load_param("out"), mode="lo")), acc, space="global")
    b.ret()
    out = np.zeros(64, np.uint32)
    run(k, 1, 64, out)
    t = np.arange(64)
    assert np.array_equal(out, t * (t - 1) // 2)


def test_out_of_bounds_store_names_the_python_line():
    k = Kernel("oob", [Param("x", u64, pointer=True)], max_threads=32)
    b = k.builder()
    p = b.mad(u64, b.cvt(u64, u32, b.special("tid.x")), 4, b.load_param("x"), mode="lo")
    b.st(u32, address(p, 4), 7, space="global")      # one past the end for the last thread
    b.ret()
    with pytest.raises(MemoryFault, match=r"(?s)out-of-bounds 4-byte global .*test_core.py:\d+") as info:
        run(k, 1, 32, np.zeros(32, np.uint32))
    assert "lanes 31" in str(info.value)


def test_uninitialised_read_is_reported():
    k = Kernel("uninit", [Param("x", u64, pointer=True), Param("y", u64, pointer=True)], max_threads=32)
    b = k.builder()
    v = b.ld(u32, address(b.load_param("x")), space="global")
    b.st(u32, address(b.load_param("y")), v, space="global")
    b.ret()
    from pkptx.interp import Machine
    m = Machine(check_uninit=True)
    x, y = m.alloc(4, name="x"), m.alloc(4, name="y")
    m.launch(k, 1, 1, x, y)
    with pytest.raises(UninitializedRead, match="never-written global memory .* <x rank 0"):
        m.run()


def test_spin_on_a_flag_nobody_sets_is_a_deadlock_naming_the_flag():
    k = Kernel("spin", [Param("flag", u64, pointer=True)], max_threads=32)
    b = k.builder()
    f = b.load_param("flag")
    with b.loop() as lp:
        seen = b.ld(u32, address(f), space="global", sem="acquire", scope="gpu")
        lp.break_if(b.setp("ge", u32, seen, 5))
    b.ret()
    from pkptx.interp import Machine
    m = Machine()
    flag = m.alloc(4, name="flags", rank=0, fill=0)
    m.launch(k, 1, 32, flag)
    with pytest.raises(DeadlockError, match=r"flag flags\[0\] of rank 0 .*observed 0, expects 5"):
        m.run()
    _ = pred


def test_signed_division_rounds_toward_zero_at_the_extremes():
    """Pinned: 30 / -2**31 is 0 (np.abs(-2**31) overflows, which once made it 1)."""
    cases = [(30, -2**31), (-7, 2), (7, -2), (-7, -2), (-2**31, 3), (2**31 - 1, -1), (5, 0)]
    k = Kernel("sdiv", [Param("out", u64, pointer=True)], max_threads=32)
    b = k.builder()
    for n, (x, y) in enumerate(cases):
        q = b.div(s32, b.mov(s32, x), b.mov(s32, y))
        b.st(s32, address(b.load_param("out"), 4 * n), q, space="global")
    b.ret()
    out = np.zeros(len(cases), np.int32)
    run(k, 1, 1, out)
    assert out.tolist() == [0, -3, -3, 3, -715827882, -(2**31 - 1), -1]
