"""How fast can a few blocks push bytes? Per-block copy bandwidth of the shapes a communicator can take
(one GPU, local buffers standing in for a peer's): the relay's bounce lanes (each lane: load a chunk,
wait, store, wait for the store to read; no lane runs ahead), the pipelined one-thread stream of
``templates/kernels/copy.py`` (loads ``stages - 1`` ahead of the store) and a register copy by every
thread. Not a test: prints a table (GB/s = bytes copied / time, median of CUDA events)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402

from pkptx.isa import Kernel, Param, address, b32, u32, u64  # noqa: E402
from pkptx.launch import Device, Stream, empty, time_cuda  # noqa: E402
from pkptx.launch import LoadedKernel as Loaded  # noqa: E402
from pkptx.primitives import Pipeline, StageRing  # noqa: E402
from pkptx.primitives.sync import Deadline  # noqa: E402
from pkptx.templates.kernels import copy as bulk_copy  # noqa: E402

NBYTES = int(os.environ.get("PUSH_PROBE_BYTES", 64 << 20))   # per block


def bounce_lanes(lanes: int, chunk: int) -> Kernel:
    """Block-strided bounce relay: block g copies bytes [g*per, (g+1)*per); lane l of it chunks l, l+L, ..."""
    k = Kernel(f"bounce_l{lanes}_c{chunk}", [Param("dst", u64, pointer=True), Param("src", u64, pointer=True),
                                             Param("per_block", u32), *Deadline.params()],
               req_threads=32, dynamic_smem=lanes * chunk + 1024)
    b = k.builder()
    data = b.mov(u32, k.dynamic_shared(align=1024), name="stage0")
    ring = StageRing(b.mov(u32, k.shared("bars", 8 * lanes, align=8), name="bars"), lanes)
    tid = b.special("tid.x")
    ring.init(b, 1, leader=b.setp("eq", u32, tid, 0))
    b.bar_sync(0)
    with b.if_then(b.setp("lt", u32, tid, lanes)):
        deadline = Deadline.start(b, rank=b.mov(u32, 0, name="rank"))
        per = b.load_param("per_block")
        base = b.mul(u32, b.special("ctaid.x"), per, mode="wide", name="block_base")
        src = b.add(u64, b.load_param("src"), base)
        dst = b.add(u64, b.load_param("dst"), base)
        uses = b.mov(u32, 0, name="uses")
        pipe = Pipeline.bounce(ring.bar(b, tid), uses=uses)
        buf = b.mad(u32, tid, chunk, data, mode="lo", name="buf")
        first = b.mul(u32, tid, chunk, mode="lo")
        for done in b.range(first, per, lanes * chunk, name="relay"):
            size = b.min(u32, b.sub(u32, per, done), chunk, name="size")
            pipe.acquire(b)
            bar = pipe.commit(b, size)
            off = b.cvt(u64, u32, done)
            b.bulk_load(address(buf), address(b.add(u64, src, off)), size, bar)
            pipe.wait(b, deadline=deadline)
            b.bulk_store(address(b.add(u64, dst, off)), address(buf), size)
            b.bulk_commit_group()
            pipe.advance(b)
        b.bulk_wait_group(0)
    b.ret()
    return k


def register_block_copy(threads: int, unroll: int) -> Kernel:
    """Block g copies its share with every thread moving ``unroll`` 16-byte vectors per step."""
    k = Kernel(f"reg_t{threads}_u{unroll}", [Param("dst", u64, pointer=True), Param("src", u64, pointer=True),
                                              Param("per_block", u32)], req_threads=threads)
    b = k.builder()
    per = b.load_param("per_block")
    base = b.mul(u32, b.special("ctaid.x"), per, mode="wide", name="block_base")
    src = b.add(u64, b.load_param("src"), base)
    dst = b.add(u64, b.load_param("dst"), base)
    step = threads * 16 * unroll
    first = b.mul(u32, b.special("tid.x"), 16, mode="lo")
    for done in b.range(first, per, step, name="copy"):
        words = []
        for u in range(unroll):
            off = b.cvt(u64, u32, b.add(u32, done, u * threads * 16))
            words.append(b.ld(b32, address(b.add(u64, src, off)), space="global", vec=4, name="w"))
        for u in range(unroll):
            off = b.cvt(u64, u32, b.add(u32, done, u * threads * 16))
            b.st(b32, address(b.add(u64, dst, off)), words[u], space="global")
    b.ret()
    return k


def main():
    dev = Device(0).set_current()
    stream = Stream(dev)
    from pkptx.launch.status import device_status
    status = device_status(dev).ptr
    timeout = 10 * 10**9
    rows = []
    for blocks in (1, 2, 4, 8):
        n = NBYTES * blocks
        src = empty((n,), np.uint8, stream=stream)
        dst = empty((n,), np.uint8, stream=stream)
        host = np.random.default_rng(blocks).integers(0, 256, n, dtype=np.uint8)
        src.copy_from_numpy(host)
        variants = []
        for lanes, chunk in ((6, 32768), (12, 16384), (24, 8192), (1, 32768)):
            kern = Loaded.load(bounce_lanes(lanes, chunk).compile(), dev)
            variants.append((f"bounce {lanes}x{chunk // 1024}K",
                             lambda kern=kern, lanes=lanes, chunk=chunk:
                             kern[blocks, 32, lanes * chunk + 1024](dst, src, NBYTES, status, timeout, stream=stream)))
        for chunk, stages in ((32768, 6), (16384, 12), (8192, 24), (4096, 32), (2048, 8)):
            cfg = bulk_copy.Config(chunk=chunk, stages=stages)
            kern = Loaded.load(bulk_copy.build(cfg).compile(), dev)
            # one CTA per block-share: the copy kernel strides chunks over its grid, which is the same bytes
            variants.append((f"pipelined {chunk // 1024}Kx{stages}",
                             lambda kern=kern, cfg=cfg: kern[blocks, 32, cfg.smem_bytes](dst, src, n, status, timeout,
                                                                                        stream=stream)))
        for threads, unroll in ((128, 8), (256, 8), (1024, 2)):
            kern = Loaded.load(register_block_copy(threads, unroll).compile(), dev)
            variants.append((f"registers {threads}t x{unroll}",
                             lambda kern=kern, threads=threads: kern[blocks, threads](dst, src, NBYTES, stream=stream)))
        for name, fn in variants:
            dst.fill(0xA5, stream)
            fn()
            stream.synchronize()
            ok = np.array_equal(dst.to_numpy(stream), host)
            t = time_cuda(fn, stream=stream, warmup=2, repeats=7).median_ms
            rows.append((blocks, name, ok, t, n / t / 1e6, n / t / 1e6 / blocks))
            print(f"{blocks:3d} blocks  {name:24s} ok={ok}  {t:8.3f} ms  {n / t / 1e6:8.1f} GB/s"
                  f"  {n / t / 1e6 / blocks:7.1f} GB/s/block", flush=True)
    return rows


if __name__ == "__main__":
    main()
