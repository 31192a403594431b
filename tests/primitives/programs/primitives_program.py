"""Every primitive on GPU 0 with this job's ranks, against numpy, on hypothesis-chosen cases.

``python primitives_program.py [section ...]`` under mpirun (or alone: a world of one). Sections:
tma_store, tma_load, bulk, signal_wait, vector_reduce, peer_access, stage_ring (default: all).
Every rank draws the same cases (derandomized), builds every rank's input from the case's seed and the
run's seed (fresh data each run), poisons every output before each launch, and records failures instead
of raising them. ``PKPTX_EXAMPLES`` sets the cases per section. Multicast is never used (the unicast
forms are what runs here); the program refuses to run without ``PKPTX_DISABLE_MULTICAST=1``.
"""
from __future__ import annotations

import math
import os
import sys

import numpy as np
from hypothesis import given, strategies as st

from tests.helpers.mpi import hyp, report
from tests.primitives.programs import prim_kernels as P
from tests.primitives.programs.harness import (DTYPES, Case, Env, bound_failure, clip, combine, empty, first_mismatch,
                                               from_numpy, normal, poison, poison_bytes, poisoned, raw, section,
                                               tensor_maps, view, within)

BIG = 8 << 20                 # bytes of each of the two data buffers on every rank
MAX_TILE = 160 * 1024         # bytes of one TMA tile in shared memory
MAX_BULK = 128 * 1024         # bytes of one 1-D bulk copy
MAX_BLOCKS = 4
U32 = np.uint32


def layout_args(name: str, buf) -> dict:
    return {f"{name}_peers": buf.peer_table_ptr, f"{name}_mc": 0}


class Buffers:
    def __init__(self, env: Env):
        self.a = env.heap.alloc((BIG,), np.uint8)
        self.b = env.heap.alloc((BIG,), np.uint8)
        self.flags = env.heap.alloc((64,), U32)
        self.data = env.heap.alloc((2 * MAX_BLOCKS * P.MAX_ROUNDS,), U32)


# ---------------------------------------------------------------------------------------- TMA store
@st.composite
def tiles(draw, world: int, *, store: bool):
    dtype = draw(st.sampled_from(sorted(DTYPES)))
    item = DTYPES[dtype].itemsize
    ops = [None, "add", "min", "max"] if dtype != "f32" else [None, "add"]   # TMA has no f32 min/max
    op = draw(st.sampled_from(ops)) if store else None
    dims = draw(st.sampled_from([1, 2, 3]))
    w = 16 * draw(st.integers(1, 16))
    if dims == 1:
        box = (w,)
    else:
        h_cap = max(1, min(16, MAX_TILE // (16 * w * item)))
        h = 16 * draw(st.integers(1, h_cap))
        d = draw(st.integers(1, max(1, min(4, MAX_TILE // (h * w * item)))))
        box = (h, w) if dims == 2 else (d, h, w)
    broadcast = draw(st.booleans()) if store else False
    spread = broadcast and op is None         # plain broadcast stores: sender s's tile one box further out
    shape = []
    for i, b in enumerate(box):
        top = (world + 1) * b if (spread and i == 0) else 3 * b
        if i == len(box) - 1:
            shape.append(16 * draw(st.integers(1, max(1, top // 16))))
        else:
            shape.append(draw(st.integers(1, top)))
    while math.prod(shape) * item > BIG and shape[0] > 1:
        shape[0] //= 2
    low = (lambda b: 0) if store else (lambda b: -(b // 2))   # TMA stores fault on negative coordinates
    coords = [draw(st.integers(low(b), max(0, s - 1))) for b, s in zip(box, shape)]
    step = 16 // item                  # TMA faults (ILLEGAL_INSTRUCTION) unless c0 * item is a multiple of 16
    coords[-1] -= coords[-1] % step
    return dict(dtype=dtype, op=op, dims=dims, box=tuple(box), shape=tuple(shape), coords=tuple(coords),
                broadcast=broadcast, notify=draw(st.booleans()) if store else False,
                shift=draw(st.integers(0, world - 1)), seed=draw(st.integers(0, 2**31)))


def tile_coords(c: dict, sender: int) -> tuple:
    """Numpy-order coordinates of ``sender``'s tile."""
    coords = list(c["coords"])
    if c["broadcast"] and c["op"] is None:
        coords[0] += sender * c["box"][0]
    return tuple(coords)


def run_tma_store(env: Env, bufs: Buffers):
    W, r = env.size, env.rank

    def body(cases, failures):
        @hyp()
        @given(c=tiles(W, store=True))
        def case(c):
            cases.append(c)
            cs = Case(env, "tma_store", c, failures)
            dtype, op, box, shape = c["dtype"], c["op"], c["box"], c["shape"]
            dt = DTYPES[dtype]
            total = math.prod(shape) * dt.itemsize
            tile_bytes = math.prod(box) * dt.itemsize
            tiles_ = [normal(env.rng(c["seed"], s, 1), box, dtype) for s in range(W)]
            inits = [normal(env.rng(c["seed"], s, 2), shape, dtype) for s in range(W)]
            dst = view(bufs.a.local_ptr, shape, dt, bufs.a)
            out = empty((total,), np.uint8) if c["notify"] else None
            state = {}

            def prepare():
                if op is None:
                    poison(dst, dtype)
                else:
                    dst.copy_from_numpy(inits[r])
                if out is not None:
                    poison_bytes(out)
                state["src"] = from_numpy(tiles_[r])
                state["maps"] = tensor_maps(bufs.a.peer_ptrs, dtype, shape, box)
                view(bufs.flags.local_ptr, (1,), U32, bufs.flags).copy_from_numpy(np.array([c["seed"]], U32))

            def launch():
                k = P.tile_store(c["dims"], op, c["broadcast"], c["notify"])
                coords = tile_coords(c, r)[::-1]
                extra = {}
                if c["notify"]:
                    extra = dict(out=out, total=total, base=c["seed"], **layout_args("dst", bufs.a),
                                 **layout_args("flags", bufs.flags))
                env.launch(k, 1, P.TILE_THREADS, tile_bytes + P.SMEM_SLACK, src=state["src"], nbytes=tile_bytes,
                           dst_rank=(r + c["shift"]) % W, dst_tmaps=state["maps"],
                           **{f"c{i}": v for i, v in enumerate(coords)}, **extra)

            def check():
                senders = range(W) if c["broadcast"] else [(r - c["shift"]) % W]
                got = dst.to_numpy()
                if op is None:
                    want = poisoned(shape, dtype)
                    for s in senders:
                        part = clip(tile_coords(c, s), box, shape)
                        if part:
                            want[part[1]] = tiles_[s][part[0]]
                    cs.expect("stored tiles (bitwise, poison outside)", np.array_equal(raw(got), raw(want)),
                              **first_mismatch(raw(got), raw(want)))
                elif op == "add":
                    exact = inits[r].astype(np.float64)
                    mag, terms = np.abs(exact), np.zeros(shape, np.int64)
                    for s in senders:
                        part = clip(tile_coords(c, s), box, shape)
                        if part:
                            x = tiles_[s][part[0]].astype(np.float64)
                            exact[part[1]] += x
                            mag[part[1]] += np.abs(x)
                            terms[part[1]] += 1
                    untouched = terms == 0
                    cs.expect("add outside the tiles is untouched",
                              np.array_equal(raw(got)[untouched], raw(inits[r])[untouched]),
                              **first_mismatch(raw(got)[untouched], raw(inits[r])[untouched]))
                    ok = within(got, exact, mag, W, dtype) | untouched
                    cs.expect("add inside the tiles within the rounding bound", bool(ok.all()),
                              **bound_failure(got, exact, ok))
                else:
                    want = inits[r].astype(np.float64)
                    for s in senders:
                        part = clip(tile_coords(c, s), box, shape)
                        if part:
                            want[part[1]] = combine(op, want[part[1]], tiles_[s][part[0]].astype(np.float64))
                    want = want.astype(dt)
                    cs.expect(f"{op} (exact)", np.array_equal(raw(got), raw(want)),
                              **first_mismatch(raw(got), raw(want)))
                if out is not None:
                    seen = out.to_numpy()
                    cs.expect("after the acquire, the kernel read what the stores wrote",
                              np.array_equal(seen, got.reshape(-1).view(np.uint8)),
                              **first_mismatch(seen, got.reshape(-1).view(np.uint8)))

            cs.phases(prepare, launch, check, ready="destinations ready", done="stores done")

        case()
    section(env, "tma_store", body)


# ---------------------------------------------------------------------------------------- TMA load
def run_tma_load(env: Env, bufs: Buffers):
    W, r = env.size, env.rank

    def body(cases, failures):
        @hyp()
        @given(c=tiles(W, store=False))
        def case(c):
            cases.append(c)
            cs = Case(env, "tma_load", c, failures)
            dtype, box, shape = c["dtype"], c["box"], c["shape"]
            dt = DTYPES[dtype]
            tile_bytes = math.prod(box) * dt.itemsize
            srcs = [normal(env.rng(c["seed"], s, 3), shape, dtype) for s in range(W)]
            owner = (r + c["shift"]) % W
            src = view(bufs.b.local_ptr, shape, dt, bufs.b)
            out = empty(box, dt)
            state = {}

            def prepare():
                src.copy_from_numpy(srcs[r])
                poison(out, dtype)
                state["maps"] = tensor_maps(bufs.b.peer_ptrs, dtype, shape, box)

            def launch():
                coords = c["coords"][::-1]
                env.launch(P.tile_load(c["dims"]), 1, P.TILE_THREADS, tile_bytes + P.SMEM_SLACK, out=out,
                           nbytes=tile_bytes, src_rank=owner, src_tmaps=state["maps"],
                           **{f"c{i}": v for i, v in enumerate(coords)})

            def check():
                want = np.zeros(box, dt)        # out-of-bounds elements load as zeros
                part = clip(c["coords"], box, shape)
                if part:
                    want[part[0]] = srcs[owner][part[1]]
                got = out.to_numpy()
                cs.expect("loaded tile (bitwise, zeros out of bounds)", np.array_equal(raw(got), raw(want)),
                          **first_mismatch(raw(got), raw(want)))

            # "loads done": no rank rewrites its source while a peer still loads it
            cs.phases(prepare, launch, check, ready="sources ready", done="loads done")

        case()
    section(env, "tma_load", body)


# ---------------------------------------------------------------------------------------- 1-D bulk
@st.composite
def bulks(draw, world: int):
    dtype = draw(st.sampled_from(sorted(DTYPES)))
    op = draw(st.sampled_from([None, "add", "min", "max"] if dtype != "f32" else [None, "add"]))
    n = 16 * draw(st.one_of(st.integers(1, 64), st.integers(1, MAX_BULK // 16)))
    cap = (BIG // 4) // 16
    return dict(dtype=dtype, op=op, nbytes=n, src_off=16 * draw(st.integers(0, cap - n // 16)),
                dst_off=16 * draw(st.integers(0, cap - n // 16)), sshift=draw(st.integers(0, world - 1)),
                dshift=draw(st.integers(0, world - 1)),
                target=draw(st.one_of(st.none(), st.integers(0, world - 1))) if op else None,
                seed=draw(st.integers(0, 2**31)))


def run_bulk(env: Env, bufs: Buffers):
    W, r = env.size, env.rank
    region = BIG // 4

    def body(cases, failures):
        @hyp()
        @given(c=bulks(W))
        def case(c):
            cases.append(c)
            cs = Case(env, "bulk", c, failures)
            dtype, op, n = c["dtype"], c["op"], c["nbytes"]
            dt = DTYPES[dtype]
            count = region // dt.itemsize
            srcs = [normal(env.rng(c["seed"], s, 4), (count,), dtype) for s in range(W)]
            inits = [normal(env.rng(c["seed"], s, 5), (count,), dtype) for s in range(W)]
            src = view(bufs.a.local_ptr, (count,), dt, bufs.a)
            dst = view(bufs.b.local_ptr, (count,), dt, bufs.b)

            def dst_of(s):
                return c["target"] if c["target"] is not None else (s + c["dshift"]) % W

            def prepare():
                src.copy_from_numpy(srcs[r])
                if op is None:
                    poison(dst, dtype)
                else:
                    dst.copy_from_numpy(inits[r])

            def launch():
                env.launch(P.bulk(op, dtype if op else "b32"), 1, 32, n + P.SMEM_SLACK,
                           src_rank=(r + c["sshift"]) % W, dst_rank=dst_of(r), src_off=c["src_off"],
                           dst_off=c["dst_off"], nbytes=n, **layout_args("src", bufs.a), **layout_args("dst", bufs.b))

            def check():
                got = dst.to_numpy()
                i0, i1 = c["dst_off"] // dt.itemsize, (c["dst_off"] + n) // dt.itemsize
                j0, j1 = c["src_off"] // dt.itemsize, (c["src_off"] + n) // dt.itemsize
                senders = [s for s in range(W) if dst_of(s) == r]
                parts = [srcs[(s + c["sshift"]) % W][j0:j1] for s in senders]
                if op is None:
                    want = poisoned((count,), dtype)
                    for p in parts:
                        want[i0:i1] = p
                    cs.expect("bulk copy (bitwise, poison outside)", np.array_equal(raw(got), raw(want)),
                              **first_mismatch(raw(got), raw(want)))
                    return
                outside = np.ones(count, bool)
                if parts:
                    outside[i0:i1] = False
                cs.expect("bulk reduce leaves the rest untouched",
                          np.array_equal(raw(got)[outside], raw(inits[r])[outside]),
                          **first_mismatch(raw(got)[outside], raw(inits[r])[outside]))
                if not parts:
                    return
                if op == "add":
                    exact = inits[r][i0:i1].astype(np.float64) + sum(p.astype(np.float64) for p in parts)
                    mag = np.abs(inits[r][i0:i1].astype(np.float64)) + sum(np.abs(p.astype(np.float64)) for p in parts)
                    ok = within(got[i0:i1], exact, mag, len(parts), dtype)
                    cs.expect("bulk add within the rounding bound", bool(ok.all()),
                              **bound_failure(got[i0:i1], exact, ok))
                else:
                    want = inits[r][i0:i1].astype(np.float64)
                    for p in parts:
                        want = combine(op, want, p.astype(np.float64))
                    want = want.astype(dt)
                    cs.expect(f"bulk {op} (exact)", np.array_equal(raw(got[i0:i1]), raw(want)),
                              **first_mismatch(raw(got[i0:i1]), raw(want)))

            cs.phases(prepare, launch, check, ready="buffers ready", done="copies done")

        case()
    section(env, "bulk", body)


# ---------------------------------------------------------------------------------------- signal / wait
@st.composite
def rings(draw):
    return dict(form=draw(st.sampled_from(P.RING_FORMS)), sem=draw(st.sampled_from(["acquire", "relaxed"])),
                rounds=draw(st.integers(1, 16)), nblocks=draw(st.integers(1, MAX_BLOCKS)),
                base=draw(st.one_of(st.integers(0, 2**32 - 1), st.integers(2**32 - 40, 2**32 - 1))),
                value=draw(st.integers(1, 5)), launches=draw(st.integers(1, 2)), seed=draw(st.integers(0, 2**31)))


def run_signal_wait(env: Env, bufs: Buffers):
    W, r = env.size, env.rank
    slots = MAX_BLOCKS * P.MAX_ROUNDS

    def body(cases, failures):
        @hyp()
        @given(c=rings())
        def case(c):
            cases.append(c)
            cs = Case(env, "signal_wait", c, failures)
            form, rounds, nb = c["form"], c["rounds"], c["nblocks"]
            step = {"peer": c["value"], "all": c["value"] * W, "barrier": W}[form]
            flags = view(bufs.flags.local_ptr, (MAX_BLOCKS,), U32, bufs.flags)
            data = view(bufs.data.local_ptr, (2 * slots,), U32, bufs.data)
            out = empty((2 * slots,), U32)

            def prepare():
                flags.copy_from_numpy(np.full(MAX_BLOCKS, c["base"], U32))
                data.fill(0)
                out.fill(0xFFFFFFFF)

            def launch(n):
                base = (c["base"] + n * rounds * step) % 2**32      # epochs: no reset between launches
                env.launch(P.ring(form, c["sem"]), nb, 32, rounds=rounds, base=base, value=c["value"],
                           slot0=n * slots, tag=n + 1, out=out, **layout_args("flags", bufs.flags),
                           **layout_args("data", bufs.data))

            def check():
                got, counters = out.to_numpy(), flags.to_numpy()
                prev = (r - 1) % W
                want = np.full(2 * slots, 0xFFFFFFFF, U32)
                for n in range(c["launches"]):
                    for blk in range(nb):
                        for j in range(rounds):
                            token = ((n + 1) << 24) + (prev << 16) + (blk << 8) + j + 1
                            want[n * slots + blk * P.MAX_ROUNDS + j] = token
                cs.expect("every round read the previous rank's token", np.array_equal(got, want),
                          **first_mismatch(got, want))
                final = np.full(MAX_BLOCKS, c["base"], U32)
                final[:nb] = (c["base"] + c["launches"] * rounds * step) % 2**32
                cs.expect("counters end at base + launches*rounds*step (mod 2**32)", np.array_equal(counters, final),
                          got=counters.tolist(), want=final.tolist())

            cs.phases(prepare, lambda: [launch(n) for n in range(c["launches"])], check,
                      ready="counters at base", done="rings done")

        case()
    section(env, "signal_wait", body)


# ---------------------------------------------------------------------------------------- vector reduce
@st.composite
def vectors(draw):
    return dict(dtype=draw(st.sampled_from(sorted(DTYPES))), op=draw(st.sampled_from(["sum", "max", "min"])),
                mode=draw(st.sampled_from(["reduce", "all_reduce"])),
                n_vec=draw(st.one_of(st.integers(1, 40), st.integers(1, 20000))), seed=draw(st.integers(0, 2**31)))


def reduce_reference(inputs: list[np.ndarray], op: str, dtype: str) -> np.ndarray:
    """What the unicast form computes: f32 accumulation in rank order from the identity, rounded once."""
    acc = np.full(inputs[0].shape, {"sum": 0.0, "max": -np.inf, "min": np.inf}[op], np.float32)
    for x in inputs:
        x32 = x.astype(np.float32)
        acc = (acc + x32) if op == "sum" else (np.maximum(acc, x32) if op == "max" else np.minimum(acc, x32))
        acc = acc.astype(np.float32)
    return acc.astype(DTYPES[dtype])


def run_vector_reduce(env: Env, bufs: Buffers):
    W, r = env.size, env.rank

    def body(cases, failures):
        @hyp()
        @given(c=vectors())
        def case(c):
            cases.append(c)
            cs = Case(env, "vector_reduce", c, failures)
            dtype, n_vec = c["dtype"], c["n_vec"]
            dt = DTYPES[dtype]
            per_vec = 16 // dt.itemsize
            count = (n_vec + 8) * per_vec                      # 8 vectors beyond: must stay poisoned
            inputs = [normal(env.rng(c["seed"], s, 6), (count,), dtype) for s in range(W)]
            src = view(bufs.a.local_ptr, (count,), dt, bufs.a)
            dst = view(bufs.b.local_ptr, (count,), dt, bufs.b)
            write_all = c["mode"] == "all_reduce"

            def prepare():
                src.copy_from_numpy(inputs[r])
                poison(dst, dtype)

            def launch():
                if write_all:
                    per = -(-n_vec // W)
                    first = min(r * per, n_vec)
                    todo = max(0, min(per, n_vec - first))
                else:
                    first, todo = 0, n_vec
                if todo:
                    env.launch(P.vector_reduce(dtype, c["op"], write_all), -(-todo // P.VEC_THREADS), P.VEC_THREADS,
                               first=first, count=todo, **layout_args("src", bufs.a), **layout_args("dst", bufs.b))

            def check():
                got = dst.to_numpy()
                want = poisoned((count,), dtype)
                m = n_vec * per_vec
                want[:m] = reduce_reference([x[:m] for x in inputs], c["op"], dtype)
                cs.expect("reduced vectors (bitwise: f32 in rank order, one rounding; poison after)",
                          np.array_equal(raw(got), raw(want)), **first_mismatch(raw(got), raw(want)))

            cs.phases(prepare, launch, check, ready="inputs ready", done="reduced")

        case()
    section(env, "vector_reduce", body)


# ---------------------------------------------------------------------------------------- peer ld/st/red
RED_NP = {"u32": np.uint32, "s32": np.int32, "f32": np.float32, "f16x2": np.float16, "bf16x2": DTYPES["bf16"]}


@st.composite
def peer_cases(draw, world: int):
    kind = draw(st.sampled_from(["copy", "red"]))
    c = dict(kind=kind, count=draw(st.one_of(st.integers(1, 64), st.integers(1, 8192))),
             seed=draw(st.integers(0, 2**31)))
    if kind == "copy":
        c.update(vec=draw(st.sampled_from([1, 2, 4])), sshift=draw(st.integers(0, world - 1)),
                 dshift=draw(st.integers(0, world - 1)))
    else:
        op, ty = draw(st.sampled_from(P.PEER_RED_FORMS))
        c.update(op=op, ty=ty, relaxed=draw(st.booleans()))
    return c


def red_inputs(rng: np.random.Generator, ty: str, n: int) -> np.ndarray:
    if ty == "u32":
        return rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    if ty == "s32":
        return rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    if ty == "f32":
        return rng.standard_normal(n, dtype=np.float32)
    return rng.standard_normal(2 * n, dtype=np.float32).astype(RED_NP[ty])      # packed pairs


def run_peer_access(env: Env, bufs: Buffers):
    W, r = env.size, env.rank

    def body(cases, failures):
        @hyp()
        @given(c=peer_cases(W))
        def case(c):
            cases.append(c)
            cs = Case(env, "peer_access", c, failures)
            n = c["count"]
            if c["kind"] == "copy":
                nbytes = 4 * c["vec"] * n
                srcs = [env.rng(c["seed"], s, 7).integers(0, 256, nbytes + 64, dtype=np.uint8) for s in range(W)]
                src, dst = (view(buf.local_ptr, (nbytes + 64,), np.uint8, buf) for buf in (bufs.a, bufs.b))

                def prepare():
                    src.copy_from_numpy(srcs[r])
                    poison_bytes(dst)

                def launch():
                    env.launch(P.peer_copy(c["vec"]), -(-n // P.VEC_THREADS), P.VEC_THREADS,
                               src_rank=(r + c["sshift"]) % W, dst_rank=(r + c["dshift"]) % W, count=n,
                               **layout_args("src", bufs.a), **layout_args("dst", bufs.b))

                def check():
                    sender = (r - c["dshift"]) % W
                    want = np.full(nbytes + 64, 0xA5, np.uint8)
                    want[:nbytes] = srcs[(sender + c["sshift"]) % W][:nbytes]
                    got = dst.to_numpy()
                    cs.expect("peer_load/peer_store copy (bytes; poison after)", np.array_equal(got, want),
                              **first_mismatch(got, want))
            else:
                op, ty = c["op"], c["ty"]
                npty = RED_NP[ty]
                width = 2 if ty.endswith("x2") else 1
                srcs = [red_inputs(env.rng(c["seed"], s, 8), ty, n) for s in range(W)]
                inits = [red_inputs(env.rng(c["seed"], s, 9), ty, n + 16) for s in range(W)]
                acc = view(bufs.b.local_ptr, ((n + 16) * width,), npty, bufs.b)
                state = {}

                def prepare():
                    acc.copy_from_numpy(inits[r])
                    state["src"] = from_numpy(srcs[r])

                def launch():
                    sem, scope = ("relaxed", "sys") if c["relaxed"] else (None, None)
                    env.launch(P.peer_reduce(op, ty, sem, scope), -(-n // P.VEC_THREADS), P.VEC_THREADS,
                               src=state["src"], count=n, **layout_args("acc", bufs.b))

                def check():
                    got = acc.to_numpy()
                    m = n * width
                    cs.expect("elements after the last are untouched", np.array_equal(raw(got[m:]), raw(inits[r][m:])))
                    if ty in ("u32", "s32"):
                        want = inits[r][:m].astype(np.int64)
                        for x in srcs:
                            want = combine(op, want, x.astype(np.int64))
                        want = (want % 2**32).astype(np.uint32).view(npty)     # add wraps; min/max stay in range
                        cs.expect(f"red.{op}.{ty} (exact)", np.array_equal(got[:m], want),
                                  **first_mismatch(got[:m], want))
                    else:
                        exact = inits[r][:m].astype(np.float64) + sum(x.astype(np.float64) for x in srcs)
                        mag = np.abs(inits[r][:m].astype(np.float64)) + sum(np.abs(x.astype(np.float64)) for x in srcs)
                        unit = {"f32": "f32", "f16x2": "f16", "bf16x2": "bf16"}[ty]
                        ok = within(got[:m], exact, mag, W, unit)
                        cs.expect(f"red.add.{ty} within the rounding bound", bool(ok.all()),
                                  **bound_failure(got[:m], exact, ok))

            cs.phases(prepare, launch, check, ready="buffers ready", done="peer accesses done")

        case()
    section(env, "peer_access", body)


# ---------------------------------------------------------------------------------------- stage ring
@st.composite
def pipelines(draw, world: int):
    return dict(stages=draw(st.integers(1, 4)), chunk=16 * draw(st.integers(1, P.MAX_CHUNK // 16)),
                nbytes=16 * draw(st.one_of(st.integers(1, 64), st.integers(1, 16384))),
                shift=draw(st.integers(0, world - 1)), seed=draw(st.integers(0, 2**31)))


def run_stage_ring(env: Env, bufs: Buffers):
    W, r = env.size, env.rank

    def body(cases, failures):
        @hyp()
        @given(c=pipelines(W))
        def case(c):
            cases.append(c)
            cs = Case(env, "stage_ring", c, failures)
            n = c["nbytes"]
            srcs = [env.rng(c["seed"], s, 10).integers(0, 256, n, dtype=np.uint8) for s in range(W)]
            src = view(bufs.a.local_ptr, (n,), np.uint8, bufs.a)
            out = empty((n + 64,), np.uint8)

            def prepare():
                src.copy_from_numpy(srcs[r])
                poison_bytes(out)

            def launch():
                env.launch(P.stage_ring(c["stages"]), 1, P.RING_THREADS, c["stages"] * P.MAX_CHUNK + P.SMEM_SLACK,
                           out=out, src_rank=(r + c["shift"]) % W, nbytes=n, chunk=c["chunk"],
                           **layout_args("src", bufs.a))

            def check():
                want = np.full(n + 64, 0xA5, np.uint8)
                want[:n] = srcs[(r + c["shift"]) % W]
                got = out.to_numpy()
                cs.expect("pipelined copy (bytes; poison after)", np.array_equal(got, want),
                          **first_mismatch(got, want))

            cs.phases(prepare, launch, check, ready="sources ready", done="pipelines done")

        case()
    section(env, "stage_ring", body)


def run_tma_unfenced(env: Env, bufs: Buffers):
    """One TMA load through a global-memory map table *without* fence.proxy.tensormap::generic.acquire,
    as p2p's docstring says is enough for host-written maps (passed on an H200)."""
    shape, box = (64, 64), (16, 32)
    data = normal(env.rng(1, env.rank, 11), shape, "f32")
    src = view(bufs.b.local_ptr, shape, np.float32, bufs.b)
    src.copy_from_numpy(data)
    out = empty(box, np.float32)
    poison(out, "f32")
    maps = tensor_maps(bufs.b.peer_ptrs, "f32", shape, box)
    env.device.synchronize()
    env.world.barrier(what="tma_unfenced: sources ready")
    outcome = dict(cases=1, failures=[])
    try:
        env.launch(P.tile_load(2, fence_maps=False), 1, P.TILE_THREADS, 16 * 32 * 4 + P.SMEM_SLACK, out=out,
                   nbytes=16 * 32 * 4, src_rank=env.rank, src_tmaps=maps, c0=8, c1=4)
        env.finish("tma_unfenced")
        ok = np.array_equal(raw(out.to_numpy()), raw(data[4:20, 8:40]))
        if not ok:
            outcome["failures"].append(dict(error="wrong data"))
    except Exception as exc:                 # noqa: BLE001 (the outcome is the report)
        outcome["failures"].append(dict(error=f"{type(exc).__name__}: {exc}"[:600]))
    report(env.rank, "tma_unfenced", **outcome)


SECTIONS = {"tma_store": run_tma_store, "tma_load": run_tma_load, "bulk": run_bulk, "signal_wait": run_signal_wait,
            "vector_reduce": run_vector_reduce, "peer_access": run_peer_access, "stage_ring": run_stage_ring,
            "tma_unfenced": run_tma_unfenced}
DEFAULT = [name for name in SECTIONS if name != "tma_unfenced"]     # run alone: a fault would end the process


def main(argv: list[str]) -> None:
    wanted = argv or DEFAULT
    unknown = [w for w in wanted if w not in SECTIONS]
    if unknown:
        raise SystemExit(f"unknown sections {unknown}; known: {', '.join(SECTIONS)}")
    if os.environ.get("PKPTX_DISABLE_MULTICAST") != "1":
        raise SystemExit("set PKPTX_DISABLE_MULTICAST=1: these programs test the unicast forms only")
    env = Env()
    report(env.rank, "setup", ok=True, size=env.size, device=env.device.ordinal, sections=wanted)
    bufs = Buffers(env)
    for name in wanted:
        SECTIONS[name](env, bufs)
    env.close()


if __name__ == "__main__":
    main(sys.argv[1:])
