"""Why do the ring's communicators crawl beside the attention? Each rank pushes ``BESIDE_PROBE_BYTES`` per block
from ``BESIDE_PROBE_BLOCKS`` blocks into the next rank's symmetric buffer while the rest of its SMs run a
load, every rank at once (one GPU: under MPS, e.g. ``python -m pkptx mps run --ranks 4 -- mpirun -n 4 python
probe/push_beside_probe.py``). Loads: none; pkptx.attention (B=4, S=``BESIDE_PROBE_SEQ``, H=16, D=128, the
ring's compute); ``spin`` (one thread per block polls a flag with ``ld.acquire.sys``, as the ring's loaders
wait for a piece); ``fma`` (every thread runs dependent f32 FMAs: power and clocks, no memory); ``l2`` (12
lanes a block bulk-load 16 KiB chunks of a 32 MiB buffer over and over: L2 reads, as the attention's K/V
loads, without its compute). Paths: the ring's bounce lanes (12 x 16 KiB bulk copies), all_gather's register
copies (256 threads x 8 vectors), Ulysses' TMA boxes. The push is launched first, the load right after on a
second stream; the push's CUDA-event time gives GB/s, the load's its slowdown. The copy engine path
(``cuMemcpyDtoDAsync`` into the peer, no SMs) shows what pushes cost when they leave the SMs alone. Rank 0
prints the table. Not a test."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import pkptx  # noqa: E402
from probe.peer_push_probe import BOX, BOXES, tensor_boxes  # noqa: E402
from probe.push_probe import bounce_lanes, register_block_copy  # noqa: E402
from pkptx.isa import Kernel, Param, address, f32, u32, u64  # noqa: E402
from pkptx.isa.enums import Scope, Sem  # noqa: E402
from pkptx.launch import Device, Event, Stream, SymmetricHeap, World, empty, from_numpy  # noqa: E402
from pkptx.launch import LoadedKernel as Loaded  # noqa: E402
from pkptx.launch.driver import call  # noqa: E402
from pkptx.launch.occupancy import context_sm_count  # noqa: E402
from pkptx.launch.status import device_status  # noqa: E402
from pkptx.launch.tensormap import TensorMap  # noqa: E402
from pkptx.primitives import Pipeline, StageRing  # noqa: E402
from pkptx.primitives.sync import Deadline  # noqa: E402

PER_BLOCK = int(os.environ.get("BESIDE_PROBE_BYTES", 16 << 20))
BLOCKS = int(os.environ.get("BESIDE_PROBE_BLOCKS", 8))
SEQ = int(os.environ.get("BESIDE_PROBE_SEQ", 8192))
LOAD_NS = 30_000_000           # the spin and fma loads run this long (the push is timed, not the load)
ONE_PER_SM = 200 * 1024        # dynamic shared memory that keeps a load block alone on its SM, as attention's
L2_BUFFER, L2_CHUNK, L2_LANES = 32 << 20, 16384, 12


def load_kernel(kind: str) -> Kernel:
    """``spin``: thread 0 polls ``flag`` (never raised) with ld.acquire.sys; ``fma``: every thread chains FMAs;
    ``l2``: lanes 0-11 each bulk-load chunks of ``src`` (L2_BUFFER bytes) one after another. Each stops
    LOAD_NS after its block started."""
    k = Kernel(f"beside_{kind}", [Param("flag", u64, pointer=True), Param("src", u64, pointer=True),
                                  *Deadline.params()],
               req_threads=384, dynamic_smem=ONE_PER_SM)
    b = k.builder()
    end = b.add(u64, b.special("globaltimer"), LOAD_NS, name="end")
    flag = b.load_param("flag")
    acc = b.cvt(f32, u32, b.special("tid.x"), rnd="rn")
    tid = b.special("tid.x")
    if kind == "l2":
        ring = StageRing(b.mov(u32, k.shared("bars", 8 * L2_LANES, align=8), name="bars"), L2_LANES)
        ring.init(b, 1, leader=b.setp("eq", u32, tid, 0))
        b.bar_sync(0)
        with b.if_then(b.setp("lt", u32, tid, L2_LANES)):
            deadline = Deadline.start(b, rank=b.mov(u32, 0, name="rank"))
            pipe = Pipeline.bounce(ring.bar(b, tid), uses=b.mov(u32, 0, name="uses"))
            buf = b.mad(u32, tid, L2_CHUNK, b.mov(u32, k.dynamic_shared(align=1024)), mode="lo", name="buf")
            spread = b.mad(u32, b.special("ctaid.x"), 7, tid, mode="lo", name="spread")
            off = b.mul(u32, b.rem(u32, spread, L2_BUFFER // L2_CHUNK), L2_CHUNK, mode="lo", name="off")
            with b.loop("stream") as lp:
                bar = pipe.commit(b, L2_CHUNK)
                b.bulk_load(address(buf), address(b.add(u64, b.load_param("src"), b.cvt(u64, u32, off))),
                            L2_CHUNK, bar)
                pipe.wait(b, deadline=deadline)
                pipe.advance(b)
                b.rem(u32, b.add(u32, off, L2_LANES * L2_CHUNK), L2_BUFFER, into=off)
                lp.break_if(b.setp("gt", u64, b.special("globaltimer"), end))
    elif kind == "spin":
        with b.if_then(b.setp("eq", u32, b.special("tid.x"), 0)):
            with b.loop("poll") as lp:
                seen = b.ld(u32, address(flag), space="global", sem=Sem.ACQUIRE, scope=Scope.SYS, name="seen")
                lp.break_if(b.setp("ne", u32, seen, 0))
                lp.break_if(b.setp("gt", u64, b.special("globaltimer"), end))
    else:
        with b.loop("burn") as lp:
            for _ in range(64):
                b.fma(f32, acc, acc, 0.999, into=acc, rnd="rn")
            lp.break_if(b.setp("gt", u64, b.special("globaltimer"), end))
        with b.if_then(b.setp("eq", f32, acc, 12345.0)):          # never: keeps the FMAs alive
            b.st(u32, address(flag, 4), b.mov(u32, 1), space="global")
    b.ret()
    return k


def main():
    world = World()
    dev = Device(world.device_ordinal()).set_current()
    push_stream, load_stream = Stream(dev), Stream(dev)
    status, timeout = device_status(dev).ptr, 10 * 10**9
    n = BLOCKS * PER_BLOCK
    heap = SymmetricHeap(world, n + (64 << 20))
    dst = heap.alloc((n,), np.uint8)
    src = from_numpy(np.random.default_rng(world.rank).integers(0, 256, n, dtype=np.uint8))
    target = dst.peer((world.rank + 1) % world.size).ptr
    rows_total = n // (BOX * 2)
    src_map = TensorMap.tiled(src.ptr, "bfloat16", (rows_total, BOX), box=(BOX, BOX), swizzle=128)
    dst_map = TensorMap.tiled(target, "bfloat16", (rows_total, BOX), box=(BOX, BOX), swizzle=128)
    bounce = Loaded.load(bounce_lanes(12, 16384).compile(), dev)
    regs = Loaded.load(register_block_copy(256, 8).compile(), dev)
    boxes = Loaded.load(tensor_boxes(False).compile(), dev)
    paths = {"bounce 12x16K (ring)": lambda: bounce[BLOCKS, 32, 12 * 16384 + 1024](
                 target, src, PER_BLOCK, status, timeout, stream=push_stream),
             "registers 256t x8 (all_gather)": lambda: regs[BLOCKS, 256](target, src, PER_BLOCK, stream=push_stream),
             "TMA boxes (Ulysses)": lambda: boxes[BLOCKS, 32, BOXES * BOX * BOX * 2 + 1024](
                 src_map, dst_map, PER_BLOCK // (BOX * 2), status, timeout, stream=push_stream),
             "copy engine (cuMemcpyDtoDAsync)": lambda: call("cuMemcpyDtoDAsync", target, src.ptr, n,
                                                             push_stream.cu),
             "no push (the load alone)": lambda: None}
    rng = np.random.default_rng(100 + world.rank)
    qkv = [from_numpy(rng.standard_normal((4, SEQ, 16, 128), dtype=np.float32).astype(ml_dtypes.bfloat16))
           for _ in range(3)]
    flag = empty((2,), np.uint32, stream=load_stream).fill(0, stream=load_stream)
    spare = context_sm_count(dev) - BLOCKS
    loaders = {name: Loaded.load(load_kernel(name).compile(), dev) for name in ("spin", "fma", "l2")}
    l2_src = empty((L2_BUFFER,), np.uint8, stream=load_stream).fill(7, stream=load_stream)
    out = empty((4, SEQ, 16, 128), ml_dtypes.bfloat16, stream=load_stream)
    loads = {"none": lambda: None,
             "attention": lambda: pkptx.attention(*qkv, out=out, stream=load_stream),
             **{name: lambda name=name: loaders[name][spare, 384, ONE_PER_SM](flag, l2_src, status, timeout,
                                                                               stream=load_stream)
                for name in ("spin", "fma", "l2")}}
    rows = []
    for load_name, load in loads.items():
        load()                                   # warm (builds attention once)
        load_stream.synchronize()
        for path_name, push in paths.items():
            times, load_times = [], []
            for rep in range(6):
                world.barrier(what="beside start")
                start, end, load_start, load_end = Event(), Event(), Event(), Event()
                start.record(push_stream)
                push()
                end.record(push_stream)
                load_start.record(load_stream)
                load()
                load_end.record(load_stream)
                end.synchronize()
                load_end.synchronize()
                if rep:
                    times.append(start.elapsed_ms(end))
                    load_times.append(load_start.elapsed_ms(load_end))
            world.barrier(what="beside check")
            writer = (world.rank - 1) % world.size
            want = np.random.default_rng(writer).integers(0, 256, n, dtype=np.uint8)
            ok = bool(np.array_equal(dst.local.to_numpy(push_stream), want))
            t = float(np.median(times))
            rows.append((load_name, path_name, ok, t, n / t / 1e6, float(np.median(load_times))))
    all_rows = world.allgather(rows, what="beside rows")
    if world.rank == 0:
        print(f"{world.size} ranks, {BLOCKS} pushing blocks a rank, {PER_BLOCK >> 20} MiB each, load on {spare} blocks")
        print("| load | path | ok (all ranks) | push ms (rank 0) | load ms (rank 0) | GB/s a rank (min..max) | "
              "GB/s a block (min) |")
        print("|---|---|---|---|---|---|---|")
        for i, (load_name, path_name, ok, t, gbs, load_ms) in enumerate(rows):
            per_rank = [r[i][4] for r in all_rows]
            oks = all(r[i][2] for r in all_rows)
            print(f"| {load_name} | {path_name} | {oks} | {t:.3f} | {load_ms:.3f} | "
                  f"{min(per_rank):.1f}..{max(per_rank):.1f} | {min(per_rank) / BLOCKS:.2f} |", flush=True)
    heap.close()
    world.close()


if __name__ == "__main__":
    main()
