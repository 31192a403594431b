"""How fast do blocks push into a peer rank's memory, by copy path? Run under MPI, every rank at once
(on one GPU: under MPS, e.g. ``python -m pkptx mps run --ranks 2 -- mpirun -n 2 python probe/peer_push_probe.py``).

Each rank copies ``PEER_PROBE_BYTES`` per block from a local buffer into a symmetric buffer, either its
own copy (local) or the next rank's (peer), with the kernels of ``push_probe.py``: bulk bounce lanes
(``cp.async.bulk`` global -> shared -> global), the pipelined one-thread bulk stream (the ring
communicators' path), register copies (``ld.global.v4`` / ``st.global``, every thread; all_gather's
path), and TMA tensor boxes (64 x 64 bf16, 128-byte swizzle, 8 boxes = 64 KiB a step: TMA-loaded,
waited, TMA-stored through a map passed by value or read from a table in global memory, then
``cp.async.bulk.wait_group 0``; Ulysses' path). Rank 0 prints GB/s per rank and per block (bytes it
copied / its time, median of CUDA events; the ranks start each variant together). Not a test."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402

from probe.push_probe import bounce_lanes, register_block_copy  # noqa: E402
from pkptx.isa import Kernel, Param, address, b8, u32, u64  # noqa: E402
from pkptx.launch import Device, Stream, SymmetricHeap, World, empty, from_numpy, time_cuda  # noqa: E402
from pkptx.launch import LoadedKernel as Loaded  # noqa: E402
from pkptx.launch.tensormap import TensorMap  # noqa: E402
from pkptx.primitives import Pipeline, StageRing  # noqa: E402
from pkptx.primitives.sync import Deadline  # noqa: E402
from pkptx.primitives.tma import tensor_map_param  # noqa: E402
from pkptx.templates.kernels import copy as bulk_copy  # noqa: E402

BOX, BOXES = 64, 8          # a step: 8 boxes of 64 x 64 bf16 (64 KiB)


def tensor_boxes(table: bool) -> Kernel:
    """Block g moves rows [g·per, (g+1)·per) of a (rows, 64) bf16 array, 512 rows a step: TMA-load 8 boxes,
    wait, TMA-store them through ``tmap_dst`` (by value) or the map at ``dst_table`` (global memory),
    ``cp.async.bulk.wait_group 0``."""
    dst = [Param("dst_table", u64, pointer=True)] if table else [Param("tmap_dst", b8, 128, 64)]
    k = Kernel(f"tensor_boxes_{'table' if table else 'param'}", [Param("tmap_src", b8, 128, 64), *dst,
                                                                  Param("per_block", u32), *Deadline.params()],
               req_threads=32, dynamic_smem=BOXES * BOX * BOX * 2 + 1024)
    b = k.builder()
    raw = b.mov(u32, k.dynamic_shared(align=16), name="raw")
    data = b.and_("b32", b.add(u32, raw, 1023), 0xFFFFFC00, name="tiles")
    ring = StageRing(b.mov(u32, k.shared("bar", 8, align=8), name="bar"), 1)
    tid = b.special("tid.x")
    ring.init(b, 1, leader=b.setp("eq", u32, tid, 0))
    b.bar_sync(0)
    with b.if_then(b.setp("eq", u32, tid, 0)):
        deadline = Deadline.start(b, rank=b.mov(u32, 0, name="rank"))
        per = b.load_param("per_block")
        first = b.mul(u32, b.special("ctaid.x"), per, mode="lo", name="first_row")
        src = tensor_map_param(b, "tmap_src")
        target = b.load_param("dst_table") if table else tensor_map_param(b, "tmap_dst")
        pipe = Pipeline.bounce(ring.bar(b, 0), uses=b.mov(u32, 0, name="uses"))
        for row in b.range(first, b.add(u32, first, per), BOXES * BOX, name="step"):
            bar = pipe.commit(b, BOXES * BOX * BOX * 2)
            for i in range(BOXES):
                b.tensor_load(address(data, i * BOX * BOX * 2), src, (0, b.add(u32, row, i * BOX)), bar)
            pipe.wait(b, deadline=deadline)
            pipe.advance(b)
            for i in range(BOXES):
                b.tensor_store(target, (0, b.add(u32, row, i * BOX)), address(data, i * BOX * BOX * 2))
            b.bulk_commit_group()
            b.bulk_wait_group(0)
    b.ret()
    return k

PER_BLOCK = int(os.environ.get("PEER_PROBE_BYTES", 8 << 20))


def main():
    world = World()
    dev = Device(world.device_ordinal()).set_current()
    stream = Stream(dev)
    from pkptx.launch.status import device_status
    status = device_status(dev).ptr
    timeout = 10 * 10**9
    most = 64
    heap = SymmetricHeap(world, most * PER_BLOCK + (64 << 20))
    dst = heap.alloc((most * PER_BLOCK,), np.uint8)
    src = empty((most * PER_BLOCK,), np.uint8, stream=stream)
    host = np.random.default_rng(world.rank).integers(0, 256, most * PER_BLOCK, dtype=np.uint8)
    src.copy_from_numpy(host)
    kernels = {"bounce 12x16K": (Loaded.load(bounce_lanes(12, 16384).compile(), dev), 32, 12 * 16384 + 1024),
               "registers 256t x8": (Loaded.load(register_block_copy(256, 8).compile(), dev), 256, 0),
               "registers 384t x4": (Loaded.load(register_block_copy(384, 4).compile(), dev), 384, 0)}
    rows_total = most * PER_BLOCK // (BOX * 2)
    src_map = TensorMap.tiled(src.ptr, "bfloat16", (rows_total, BOX), box=(BOX, BOX), swizzle=128)
    dst_maps = [TensorMap.tiled(ptr, "bfloat16", (rows_total, BOX), box=(BOX, BOX), swizzle=128)
                for ptr in dst.peer_ptrs]
    tables = [from_numpy(np.frombuffer(m.data, np.uint8).copy()) for m in dst_maps]
    by_value, by_table = (Loaded.load(tensor_boxes(t).compile(), dev) for t in (False, True))
    smem_boxes = BOXES * BOX * BOX * 2 + 1024
    stream_cfg = bulk_copy.Config(chunk=16384, stages=12)
    stream_kernel = Loaded.load(bulk_copy.build(stream_cfg).compile(), dev)
    rows = []
    for where in ("local", "peer"):
        to = (world.rank + (1 if where == "peer" else 0)) % world.size
        target = dst.peer(to)
        for blocks in (1, 8, 32, 64):
            n = blocks * PER_BLOCK
            variants = []
            for name, (kern, threads, smem) in kernels.items():
                if name.startswith("bounce"):
                    variants.append((name, lambda kern=kern, smem=smem: kern[blocks, 32, smem](
                        target, src, PER_BLOCK, status, timeout, stream=stream)))
                else:
                    variants.append((name, lambda kern=kern, threads=threads: kern[blocks, threads](
                        target, src, PER_BLOCK, stream=stream)))
            variants.append(("bulk stream 16Kx12", lambda: stream_kernel[blocks, 32, stream_cfg.smem_bytes](
                target, src, n, status, timeout, stream=stream)))
            rows_per = PER_BLOCK // (BOX * 2)
            variants.append(("TMA boxes, map by value", lambda: by_value[blocks, 32, smem_boxes](
                src_map, dst_maps[to], rows_per, status, timeout, stream=stream)))
            variants.append(("TMA boxes, map in a table", lambda: by_table[blocks, 32, smem_boxes](
                src_map, tables[to], rows_per, status, timeout, stream=stream)))
            for name, fn in variants:
                world.barrier(what="probe start")
                fn()
                stream.synchronize()
                world.barrier(what="probe copied")
                got = dst.local.to_numpy(stream)[:n]
                writer = (world.rank - (1 if where == "peer" else 0)) % world.size
                want = np.random.default_rng(writer).integers(0, 256, most * PER_BLOCK, dtype=np.uint8)[:n]
                ok = bool(np.array_equal(got, want))
                world.barrier(what="probe timed")
                t = time_cuda(fn, stream=stream, warmup=2, repeats=7).median_ms
                rows.append((where, blocks, name, ok, t, n / t / 1e6))
    all_rows = world.allgather(rows, what="probe rows")
    if world.rank == 0:
        print(f"{world.size} ranks, {PER_BLOCK >> 20} MiB per block")
        print("| where | blocks | path | ok (all ranks) | ms (rank 0) | GB/s a rank (min..max) | GB/s a block (min) |")
        print("|---|---|---|---|---|---|---|")
        for i, (where, blocks, name, ok, t, gbs) in enumerate(rows):
            per_rank = [r[i][5] for r in all_rows]
            oks = all(r[i][3] for r in all_rows)
            print(f"| {where} | {blocks} | {name} | {oks} | {t:.3f} | {min(per_rank):.1f}..{max(per_rank):.1f} | "
                  f"{min(per_rank) / blocks:.2f} |")
    heap.close()
    world.close()


if __name__ == "__main__":
    main()
