"""Small test kernels, one per primitive form, built with the builder from pkptx.primitives.

The GPU programs of this folder launch them; the CPU tests assemble every one of them (so a GPU run
never meets a kernel that does not assemble) and read their PTX. Shapes, coordinates, ranks, sizes and
epochs are runtime parameters, so one cubin serves every hypothesis case of a form; only what changes
the instruction stream (dtype, reduce op, tensor rank, semantics, broadcast or not) is a build argument.

Launch conventions (the programs follow them):

- tile kernels: 1 block of ``TILE_THREADS`` threads, dynamic shared memory ``box_bytes + SMEM_SLACK``;
- bulk kernel: 1 block of 32 threads, dynamic shared memory ``nbytes + SMEM_SLACK``;
- ring kernel: ``nblocks`` blocks of 32 threads (block b uses counter b and data slots b*MAX_ROUNDS..);
- vector / peer kernels: any grid of ``VEC_THREADS``-thread blocks covering the element count;
- stage ring: 1 block of ``RING_THREADS`` threads, dynamic shared memory ``stages*MAX_CHUNK + SMEM_SLACK``.
"""
from __future__ import annotations

import functools

from pkptx.isa import Kernel, Param, Sem, address, b32, s32, u32, u64
from pkptx.primitives import StageRing, wait_parity
from pkptx.primitives.layout import ParallelLayout, WorldParams
from pkptx.primitives.p2p import TensorMapTable, load_async, peer_load, peer_red, peer_store, store_async, \
    store_async_all
from pkptx.primitives.sync import Deadline, barrier, flag_address, publish_async_writes, signal, signal_all, wait
from pkptx.primitives.tile import reduce_vector

TILE_THREADS = 128
VEC_THREADS = 128
RING_THREADS = 32 + 128          # warp 0: the producer lane; warps 1-4: consumers
RING_CONSUMERS = 128
SMEM_SLACK = 128                 # the dynamic window is aligned up to 128 bytes at run time
MAX_CHUNK = 4096                 # bytes per stage of the stage-ring kernel
MAX_ROUNDS = 64                  # data slots per block of the ring kernel
TMAP = 128                       # bytes of one tensor map in a table
TILE_OPS = (None, "add", "min", "max")
RING_FORMS = ("peer", "all", "barrier")

DST, SRC, FLAGS, DATA, ACC = (ParallelLayout(n) for n in ("dst", "src", "flags", "data", "acc"))
DST_MAPS, SRC_MAPS = TensorMapTable("dst"), TensorMapTable("src")


# ------------------------------------------------------------------------------------------ pieces
def aligned_window(k: Kernel, b, *, name: str = "tile"):
    """The dynamic shared-memory window, aligned up to 128 bytes (TMA tiles need 128-byte alignment)."""
    raw = b.mov(u32, k.dynamic_shared(align=128), name="dyn_raw")
    return b.and_(b32, b.add(u32, raw, SMEM_SLACK - 1), -SMEM_SLACK & 0xFFFFFFFF, name=name)


def copy_vectors(b, *, src, dst, nbytes, tid, threads: int, src_space: str, dst_space: str) -> None:
    """Threads ``tid`` of ``threads`` copy ``nbytes`` (a multiple of 16) in 16-byte vectors.

    A 64-bit ``src``/``dst`` is a global address, a 32-bit one a shared address."""
    n16 = b.shr(u32, nbytes, 4, name="n16")
    for i in b.range(tid, n16, threads, name="v"):
        def at(base):
            if base.type.bits == 64:
                return address(b.add(u64, base, b.mul(u32, i, 16, mode="wide")))
            return address(b.mad(u32, i, 16, base, mode="lo"))
        v = b.ld(b32, at(src), space=src_space, vec=4, name="w")
        b.st(b32, at(dst), v, space=dst_space)


def acquire_maps(b, table, ranks) -> None:
    """``fence.proxy.tensormap::generic.acquire.sys [table + 128*r], 128`` for each rank r: makes the
    host-written tensor maps of a global-memory table visible to the TMA unit (the tensormap proxy)
    before a ``cp.async.bulk.tensor`` reads them. ``ranks``: a Python list or a register bound
    (every rank below it)."""
    def one(r):
        at = b.add(u64, table, TMAP * r) if isinstance(r, int) else b.mad(u64, b.cvt(u64, u32, r), TMAP, table,
                                                                         mode="lo", name="tmap_at")
        b.fence_proxy_tensormap_acquire(address(at), "sys")
    if isinstance(ranks, (list, tuple)):
        for r in ranks:
            one(r)
    else:
        for r in b.range(0, ranks, name="map"):
            one(r)


def _coords(b, dims: int):
    """The tensor coordinates ``c0`` (innermost) .. ``c<dims-1>`` as .s32 registers."""
    return [b.load_param(f"c{i}") for i in range(dims)]


def _coord_params(dims: int) -> list[Param]:
    return [Param(f"c{i}", s32) for i in range(dims)]


def _name(*parts) -> str:
    return "_".join(str(p) for p in parts if p not in (None, "")).replace("-", "m")


# ------------------------------------------------------------------------------------------ TMA tiles
@functools.lru_cache(maxsize=None)
def tile_store(dims: int, reduce_op: str | None, broadcast: bool, notify: bool = False, fence_maps: bool = True,
               target: str | None = None) -> Kernel:
    """Stage a ``nbytes`` tile from ``src`` in shared memory, then one thread stores it at tile
    coordinates into rank ``dst_rank``'s buffer (``broadcast``: into every rank's, the unicast
    fallback) through the ``dst_tmaps`` table; ``reduce_op`` reduces into the destination instead.
    The thread then waits for the writes themselves (publish_async_writes).

    ``fence_maps``: acquire the table's maps (``fence.proxy.tensormap::generic.acquire``) before storing,
    belt and braces (host-written maps need none: the ``tma_unfenced`` section checks that).

    Hardware rules seen on an H200 (a violation is CUDA_ERROR_ILLEGAL_INSTRUCTION, the context is lost):
    tensor *stores* take no negative coordinate (beyond the far end is clipped; loads zero-fill on both
    sides); loads need ``c0 * element size`` to be a multiple of 16 bytes (stores: assumed, untested).

    ``notify``: the pk-design 5 protocol inside the kernel. After publishing, the thread signals the
    destination's counter 0 (broadcast: every rank's, signal_all) with release, waits (acquire) for its
    own counter to reach ``base + senders`` (1, or ``world`` when broadcasting), and after a ``bar.sync``
    the block copies its own whole ``dst`` copy (``total`` bytes) to ``out`` with generic loads.
    """
    params = ([Param("src", u64, pointer=True), Param("nbytes", u32)] + _coord_params(dims)
              + [Param("dst_rank", u32)] + WorldParams.params() + DST_MAPS.params())
    if notify:
        params += ([Param("out", u64, pointer=True), Param("total", u32), Param("base", u32)]
                   + Deadline.params() + DST.params() + FLAGS.params())
    k = Kernel(_name("tile_store", f"{dims}d", reduce_op or "copy", "all" if broadcast else "peer",
                     "notify" if notify else None, None if fence_maps else "unfenced"), params,
               req_threads=TILE_THREADS, target=target)
    b = k.builder()
    tid = b.special("tid.x")
    smem = aligned_window(k, b)
    copy_vectors(b, src=b.load_param("src"), dst=smem, nbytes=b.load_param("nbytes"), tid=tid,
                 threads=TILE_THREADS, src_space="global", dst_space="shared")
    b.fence_proxy_async("shared::cta")          # generic writes of the tile -> the TMA engine's reads
    b.bar_sync(0)
    issuer = b.setp("eq", u32, tid, 0, name="issuer")
    with b.if_then(issuer):
        rank, world = WorldParams.load(b)
        maps = DST_MAPS.bind(b)
        coords = _coords(b, dims)
        dst_rank = b.load_param("dst_rank")
        if fence_maps:
            acquire_maps(b, maps.table, world if broadcast else [dst_rank])
        if broadcast:
            store_async_all(b, maps, coords, smem, world=world, multicast=False, reduce_op=reduce_op)
        else:
            store_async(b, maps.of(b, dst_rank), coords, smem, reduce_op=reduce_op)
        publish_async_writes(b)
        if notify:
            deadline = Deadline.start(b, rank)
            flags = FLAGS.bind(b)
            if broadcast:
                signal_all(b, flags, 0, 1, world=world, sem=Sem.RELEASE, scope="sys", multicast=False)
                senders = world
            else:
                signal(b, flag_address(b, flags, dst_rank, 0), 1, sem=Sem.RELEASE, scope="sys")
                senders = 1
            expected = b.add(u32, b.load_param("base"), senders, name="expected")
            wait(b, flag_address(b, flags, rank, 0), expected, sem=Sem.ACQUIRE, scope="sys", deadline=deadline,
                 flag_id=0)
    if notify:
        b.bar_sync(0)
        rank = b.load_param("rank")
        mine = DST.bind(b).peer(b, rank)
        copy_vectors(b, src=mine, dst=b.load_param("out"), nbytes=b.load_param("total"), tid=tid,
                     threads=TILE_THREADS, src_space="global", dst_space="global")
    b.ret()
    return k


@functools.lru_cache(maxsize=None)
def tile_load(dims: int, fence_maps: bool = True, target: str | None = None) -> Kernel:
    """One thread loads the tile at coordinates of rank ``src_rank``'s buffer (``src_tmaps`` table) into
    shared memory through an mbarrier; every thread waits on it, then the block writes it to ``out``.
    ``fence_maps``: as for :func:`tile_store`."""
    params = ([Param("out", u64, pointer=True), Param("nbytes", u32)] + _coord_params(dims)
              + [Param("src_rank", u32)] + WorldParams.params() + SRC_MAPS.params())
    k = Kernel(_name("tile_load", f"{dims}d", None if fence_maps else "unfenced"), params, req_threads=TILE_THREADS,
               target=target)
    b = k.builder()
    tid = b.special("tid.x")
    smem = aligned_window(k, b)
    bar = b.mov(u32, k.shared("full", 8, 8), name="full")
    leader = b.setp("eq", u32, tid, 0, name="leader")
    StageRing(bar, 1).init(b, 1, leader=leader)
    b.bar_sync(0)
    nbytes = b.load_param("nbytes")
    with b.if_then(leader):
        maps = SRC_MAPS.bind(b)
        src_rank = b.load_param("src_rank")
        if fence_maps:
            acquire_maps(b, maps.table, [src_rank])
        load_async(b, maps, src_rank, _coords(b, dims), smem, bar, nbytes)
    wait_parity(b, bar, 0, deadline=None)       # test kernels: the harness bounds the launch
    copy_vectors(b, src=smem, dst=b.load_param("out"), nbytes=nbytes, tid=tid, threads=TILE_THREADS,
                 src_space="shared", dst_space="global")
    b.ret()
    return k


# ------------------------------------------------------------------------------------------ 1-D bulk
@functools.lru_cache(maxsize=None)
def bulk(reduce_op: str | None, ty: str, target: str | None = None) -> Kernel:
    """One thread: ``cp.async.bulk`` ``nbytes`` from rank ``src_rank``'s ``src`` (at ``src_off``) into
    shared memory through an mbarrier, then ``cp.async.bulk`` (or ``cp.reduce.async.bulk.<op>.<ty>``)
    into rank ``dst_rank``'s ``dst`` at ``dst_off``; waits for the writes before it ends."""
    params = ([Param("src_rank", u32), Param("dst_rank", u32), Param("src_off", u64), Param("dst_off", u64),
               Param("nbytes", u32)] + WorldParams.params() + SRC.params() + DST.params())
    k = Kernel(_name("bulk", reduce_op or "copy", ty if reduce_op else None), params, req_threads=32,
               target=target)
    b = k.builder()
    smem = aligned_window(k, b)
    bar = b.mov(u32, k.shared("full", 8, 8), name="full")
    tid = b.special("tid.x")
    leader = b.setp("eq", u32, tid, 0, name="leader")
    StageRing(bar, 1).init(b, 1, leader=leader)
    b.bar_sync(0)                               # the init is visible to the warp (StageRing.init's contract)
    with b.if_then(leader):
        src, dst = SRC.bind(b), DST.bind(b)
        nbytes = b.load_param("nbytes")
        src_at = b.add(u64, src.peer(b, b.load_param("src_rank")), b.load_param("src_off"), name="src_at")
        dst_at = b.add(u64, dst.peer(b, b.load_param("dst_rank")), b.load_param("dst_off"), name="dst_at")
        b.mbarrier_arrive_expect_tx(address(bar), nbytes)
        b.bulk_load(address(smem), address(src_at), nbytes, address(bar))
        wait_parity(b, bar, 0, deadline=None)
        if reduce_op is None:
            b.bulk_store(address(dst_at), address(smem), nbytes)
        else:
            b.bulk_reduce(reduce_op, ty, address(dst_at), address(smem), nbytes)
        b.bulk_commit_group()
        publish_async_writes(b)
    b.ret()
    return k


# ------------------------------------------------------------------------------------------ signal / wait
@functools.lru_cache(maxsize=None)
def ring(form: str, wait_sem: str, target: str | None = None) -> Kernel:
    """``rounds`` rounds of a ring exchange between the ranks, one thread per block.

    Round j: write a token into the next rank's ``data`` slot, then

    - ``peer``: signal(next rank's counter, +value, release) and wait(own counter >= base + value*(j+1));
    - ``all``: signal_all(+value) (unicast loop) and wait(own >= base + value*world*(j+1));
    - ``barrier``: barrier(counter, expected base + world*(j+1));

    then read the previous rank's token from the own slot into ``out`` (slots ``slot0 + b*MAX_ROUNDS + j``,
    tokens ``tag<<24 | rank<<16 | b<<8 | j+1``, so a second launch can use fresh slots). Counters start at ``base``
    (any u32: the waits are wrap-safe); block b uses counter b. Waits use ``wait_sem`` (acquire, or
    relaxed + fence) at .sys scope and report into the status words after ``timeout_ns``.
    """
    if form not in RING_FORMS:
        raise ValueError(form)
    params = ([Param("out", u64, pointer=True), Param("rounds", u32), Param("base", u32), Param("value", u32),
               Param("slot0", u32), Param("tag", u32)]
              + WorldParams.params() + Deadline.params() + FLAGS.params() + DATA.params())
    k = Kernel(_name("ring", form, wait_sem), params, req_threads=32, target=target)
    b = k.builder()
    tid = b.special("tid.x")
    with b.if_then(b.setp("eq", u32, tid, 0, name="lead")):
        rank, world = WorldParams.load(b)
        deadline = Deadline.start(b, rank)
        flags, data = FLAGS.bind(b), DATA.bind(b)
        blk = b.special("ctaid.x")
        base, value = b.load_param("base"), b.load_param("value")
        out = b.load_param("out")
        nxt = b.rem(u32, b.add(u32, rank, 1), world, name="next_rank")
        own = flag_address(b, flags, rank, blk)
        if form == "peer":
            step = value
        elif form == "all":
            step = b.mul(u32, value, world, mode="lo", name="step")
        else:
            step = world
        first = b.mad(u32, blk, MAX_ROUNDS, b.load_param("slot0"), mode="lo", name="first_slot")
        stamp = b.mad(u32, b.load_param("tag"), 1 << 24, b.mad(u32, rank, 1 << 16, b.mul(u32, blk, 256, mode="lo"),
                                                                  mode="lo"), mode="lo", name="stamp")
        for j in b.range(0, b.load_param("rounds"), name="round"):
            slot = b.add(u32, first, j, name="slot")
            token = b.add(u32, b.add(u32, stamp, j), 1, name="token")
            b.st(u32, address(b.add(u64, data.peer(b, nxt), b.mul(u32, slot, 4, mode="wide"))), token,
                 space="global")
            expected = b.mad(u32, b.add(u32, j, 1), step, base, mode="lo", name="expected")
            if form == "barrier":
                barrier(b, flags, blk, expected, rank=rank, world=world, scope="sys", deadline=deadline,
                        multicast=False)
            else:
                if form == "peer":
                    signal(b, flag_address(b, flags, nxt, blk), value, sem=Sem.RELEASE, scope="sys")
                else:
                    signal_all(b, flags, blk, value, world=world, sem=Sem.RELEASE, scope="sys", multicast=False)
                wait(b, own, expected, sem=Sem(wait_sem), scope="sys", deadline=deadline, flag_id=blk)
            got = b.ld(u32, address(b.add(u64, data.peer(b, rank), b.mul(u32, slot, 4, mode="wide"))),
                       space="global", name="got")
            b.st(u32, address(b.add(u64, out, b.mul(u32, slot, 4, mode="wide"))), got, space="global")
    b.ret()
    return k


@functools.lru_cache(maxsize=None)
def wait_only(target: str | None = None) -> Kernel:
    """Thread 0 waits (acquire, .sys) for its own counter ``index`` to reach ``expected``, then writes
    what it saw to ``out``: the timeout test's kernel."""
    params = ([Param("out", u64, pointer=True), Param("index", u32), Param("expected", u32)]
              + WorldParams.params() + Deadline.params() + FLAGS.params())
    k = Kernel("wait_only", params, req_threads=32, target=target)
    b = k.builder()
    with b.if_then(b.setp("eq", u32, b.special("tid.x"), 0, name="lead")):
        rank, _ = WorldParams.load(b)
        deadline = Deadline.start(b, rank)
        flags = FLAGS.bind(b)
        index = b.load_param("index")
        seen = wait(b, flag_address(b, flags, rank, index), b.load_param("expected"), sem=Sem.ACQUIRE,
                    scope="sys", deadline=deadline, flag_id=index)
        b.st(u32, address(b.load_param("out")), seen, space="global")
    b.ret()
    return k


# ------------------------------------------------------------------------------------------ vectors
@functools.lru_cache(maxsize=None)
def vector_reduce(ty: str, op: str, write_all: bool, target: str | None = None) -> Kernel:
    """Thread i reduces 16-byte vector ``first + i`` (i < ``count``) of ``src`` over every rank into
    ``dst`` (the local copy, or every rank's with ``write_all``): the unicast reduce / all_reduce."""
    params = [Param("first", u32), Param("count", u32)] + WorldParams.params() + SRC.params() + DST.params()
    k = Kernel(_name("vreduce", ty, op, "all" if write_all else "local"), params, max_threads=VEC_THREADS,
               target=target)
    b = k.builder()
    i = b.mad(u32, b.special("ctaid.x"), b.special("ntid.x"), b.special("tid.x"), mode="lo", name="i")
    with b.if_then(b.setp("lt", u32, i, b.load_param("count"))):
        rank, world = WorldParams.load(b)
        src, dst = SRC.bind(b), DST.bind(b)
        v = b.add(u32, b.load_param("first"), i, name="vec")
        reduce_vector(b, src, b.mul(u32, v, 16, mode="wide"), ty=ty, op=op, world=world, rank=rank,
                      write_all=write_all, multicast=False, dst=dst)
    b.ret()
    return k


@functools.lru_cache(maxsize=None)
def peer_copy(vec: int, target: str | None = None) -> Kernel:
    """Thread i < ``count`` copies ``4*vec`` bytes at ``(4*vec)*i`` from rank ``src_rank``'s ``src`` to
    rank ``dst_rank``'s ``dst`` with peer_load / peer_store."""
    params = ([Param("src_rank", u32), Param("dst_rank", u32), Param("count", u32)] + WorldParams.params()
              + SRC.params() + DST.params())
    k = Kernel(_name("peer_copy", f"v{vec}"), params, max_threads=VEC_THREADS, target=target)
    b = k.builder()
    i = b.mad(u32, b.special("ctaid.x"), b.special("ntid.x"), b.special("tid.x"), mode="lo", name="i")
    with b.if_then(b.setp("lt", u32, i, b.load_param("count"))):
        src, dst = SRC.bind(b), DST.bind(b)
        off = b.mul(u32, i, 4 * vec, mode="wide", name="off")
        v = peer_load(b, src.peer(b, b.load_param("src_rank")), off, b32, vec=vec)
        peer_store(b, dst.peer(b, b.load_param("dst_rank")), off, b32, v)
    b.ret()
    return k


@functools.lru_cache(maxsize=None)
def peer_reduce(op: str, ty: str, sem: str | None, scope: str | None, target: str | None = None) -> Kernel:
    """Thread i < ``count`` reads 4-byte element i of its local ``src`` and peer_red's it into element i of
    every rank's ``acc`` (a loop over ranks)."""
    params = ([Param("src", u64, pointer=True), Param("count", u32)] + WorldParams.params() + ACC.params())
    k = Kernel(_name("peer_red", op, ty, sem, scope), params, max_threads=VEC_THREADS, target=target)
    b = k.builder()
    i = b.mad(u32, b.special("ctaid.x"), b.special("ntid.x"), b.special("tid.x"), mode="lo", name="i")
    with b.if_then(b.setp("lt", u32, i, b.load_param("count"))):
        _, world = WorldParams.load(b)
        acc = ACC.bind(b)
        off = b.mul(u32, i, 4, mode="wide", name="off")
        x = b.ld(ty, address(b.add(u64, b.load_param("src"), off)), space="global", name="x")
        for r in b.range(0, world, name="dst"):
            peer_red(b, acc.peer(b, r), off, op, ty, x, sem=sem, scope=scope)
    b.ret()
    return k


# ------------------------------------------------------------------------------------------ mbarrier ring
@functools.lru_cache(maxsize=None)
def stage_ring(stages: int, target: str | None = None) -> Kernel:
    """A ``stages``-deep producer/consumer pipeline through a StageRing pair (full, empty).

    Lane 0 of warp 0 streams ``chunk``-byte pieces of rank ``src_rank``'s ``src`` (``nbytes`` in all,
    the last piece may be short) into the stages with ``cp.async.bulk``; each completes on its ``full``
    barrier (use k of a stage: parity k & 1). Warps 1-4 wait on it, copy the piece to ``out``, and arrive
    on the stage's ``empty`` barrier, which the producer waits on (parity (k-1) & 1) before reusing it.
    """
    params = ([Param("out", u64, pointer=True), Param("src_rank", u32), Param("nbytes", u32), Param("chunk", u32)]
              + WorldParams.params() + SRC.params())
    k = Kernel(_name("stage_ring", f"s{stages}"), params, req_threads=RING_THREADS, target=target)
    b = k.builder()
    tid = b.special("tid.x")
    data = aligned_window(k, b, name="stages")
    full = StageRing(b.mov(u32, k.shared("full", 8 * stages, 8), name="full"), stages)
    empty = StageRing(b.mov(u32, k.shared("empty", 8 * stages, 8), name="empty"), stages)
    leader = b.setp("eq", u32, tid, 0, name="leader")
    full.init(b, 1, leader=leader)
    empty.init(b, RING_CONSUMERS, leader=leader)
    b.bar_sync(0)
    nbytes, chunk = b.load_param("nbytes"), b.load_param("chunk")
    nchunks = b.div(u32, b.add(u32, nbytes, b.sub(u32, chunk, 1)), chunk, name="nchunks")

    def piece(j):
        stage = b.rem(u32, j, stages, name="stage")
        use = b.div(u32, j, stages, name="use")
        off = b.mul(u32, j, chunk, mode="lo", name="off")
        size = b.min(u32, chunk, b.sub(u32, nbytes, off), name="size")
        smem = b.mad(u32, stage, MAX_CHUNK, data, mode="lo", name="smem")
        return stage, use, off, size, smem

    warp = b.shr(u32, tid, 5, name="warp")
    with b.if_else(b.setp("eq", u32, warp, 0, name="is_producer"), uniform=True) as (producer, consumers):
        with producer:
            with b.if_then(leader):
                src = SRC.bind(b).peer(b, b.load_param("src_rank"))
                for j in b.range(0, nchunks, name="load"):
                    stage, use, off, size, smem = piece(j)
                    with b.if_then(b.setp("ge", u32, j, stages, name="reuse")):
                        wait_parity(b, empty.bar(b, stage), b.and_(b32, b.sub(u32, use, 1), 1, name="freed"),
                                    deadline=None, name="empty_wait")
                    b.mbarrier_arrive_expect_tx(full.bar(b, stage), size)
                    b.bulk_load(address(smem), address(b.add(u64, src, b.cvt(u64, u32, off))), size,
                                full.bar(b, stage))
        with consumers:
            ctid = b.sub(u32, tid, 32, name="ctid")
            out = b.load_param("out")
            for j in b.range(0, nchunks, name="use"):
                stage, use, off, size, smem = piece(j)
                wait_parity(b, full.bar(b, stage), b.and_(b32, use, 1, name="parity"), deadline=None,
                            name="full_wait")
                copy_vectors(b, src=smem, dst=b.add(u64, out, b.cvt(u64, u32, off)), nbytes=size, tid=ctid,
                             threads=RING_CONSUMERS, src_space="shared", dst_space="global")
                b.mbarrier_arrive(empty.bar(b, stage))
    b.ret()
    return k


def catalogue(target: str | None = None):
    """(name, Kernel) for every kernel the GPU programs launch, at every build argument they use."""
    for dims in (1, 2, 3):
        for op in TILE_OPS:
            for broadcast in (False, True):
                for notify in (False, True):
                    yield (f"tile_store({dims}, {op}, {broadcast}, {notify})",
                           tile_store(dims, op, broadcast, notify, target=target))
        yield f"tile_load({dims})", tile_load(dims, target=target)
        yield f"tile_load({dims}, unfenced)", tile_load(dims, fence_maps=False, target=target)
    yield "bulk(None)", bulk(None, "b32", target=target)
    for ty in ("bf16", "f16", "f32"):
        for op in ("add", "min", "max"):
            if not (ty == "f32" and op != "add"):
                yield f"bulk({op}, {ty})", bulk(op, ty, target=target)
    for form in RING_FORMS:
        for sem in ("acquire", "relaxed"):
            yield f"ring({form}, {sem})", ring(form, sem, target=target)
    yield "wait_only()", wait_only(target=target)
    for ty in ("bf16", "f16", "f32"):
        for op in ("sum", "max", "min"):
            for write_all in (False, True):
                yield f"vector_reduce({ty}, {op}, {write_all})", vector_reduce(ty, op, write_all, target=target)
    for vec in (1, 2, 4):
        yield f"peer_copy({vec})", peer_copy(vec, target=target)
    for op, ty in PEER_RED_FORMS:
        for sem, scope in (("relaxed", "sys"), (None, None)):
            yield f"peer_reduce({op}, {ty}, {sem})", peer_reduce(op, ty, sem, scope, target=target)
    for stages in (1, 2, 3, 4):
        yield f"stage_ring({stages})", stage_ring(stages, target=target)


PEER_RED_FORMS = (("add", "u32"), ("add", "s32"), ("add", "f32"), ("min", "u32"), ("min", "s32"),
                  ("max", "u32"), ("max", "s32"), ("add", "f16x2"), ("add", "bf16x2"))
