"""Dev probe (H200): host microseconds per call of pkptx.gemm / attention / all_reduce against torch, GPU
time with a 0.2 ms and a 2 ms hold before each repeat (a difference means the host, not the kernel, set
the 0.2 ms figure), and a cProfile of each pkptx call by own time."""
import cProfile
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from pkptx.bench.common import event_ms  # noqa: E402
from pkptx.launch import Device, Stream, SymmetricHeap, World, from_dlpack  # noqa: E402
from pkptx.ops import collectives  # noqa: E402
from pkptx.ops.attention import attention  # noqa: E402
from pkptx.ops.gemm import gemm  # noqa: E402

stream = Stream.wrap(torch.cuda.current_stream().cuda_stream)
PROFILE = os.environ.get("PROBE_PROFILE", "1") == "1"


def host_us(fn, calls=300):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t = (time.perf_counter() - t0) / calls * 1e6
    torch.cuda.synchronize()
    return t


def measure(name, ours, theirs):
    row = [name]
    for fn in (ours, theirs):
        row += [host_us(fn), event_ms(fn, stream, repeats=20) * 1e3, event_ms(fn, stream, repeats=20, hold_ns=2_000_000) * 1e3]
    print(f"{name:32s} pkptx host {row[1]:7.1f} us, gpu {row[2]:8.1f} / {row[3]:8.1f} us (0.2/2 ms hold) | "
          f"torch host {row[4]:7.1f} us, gpu {row[5]:8.1f} / {row[6]:8.1f} us", flush=True)
    if PROFILE:
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(300):
            ours()
        pr.disable()
        torch.cuda.synchronize()
        pstats.Stats(pr, stream=sys.stdout).sort_stats("tottime").print_stats(12)


for m, n, k in ((512, 512, 512), (1024, 1024, 1024), (128, 8192, 8192), (4096, 4096, 4096)):
    a, b = torch.randn(m, k, device="cuda", dtype=torch.bfloat16), torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    measure(f"gemm {m}x{n}x{k} torch args", lambda: gemm(a, b, c, stream=stream), lambda: torch.matmul(a, b.T, out=c))
    da, db, dc = from_dlpack(a), from_dlpack(b), from_dlpack(c)
    measure(f"gemm {m}x{n}x{k} DeviceArrays", lambda: gemm(da, db, dc, stream=stream), lambda: torch.matmul(a, b.T, out=c))

for batch, heads, seq, dim in ((1, 32, 4096, 128), (32, 16, 1024, 128), (8, 16, 4096, 64)):
    q, k, v = (torch.randn(batch, seq, heads, dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    views = [x.transpose(1, 2) for x in (q, k, v)]
    out = torch.empty_like(q)
    for causal in (False, True):
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
            measure(f"attention {batch}x{heads}x{seq}x{dim} c{causal:d}",
                    lambda: attention(q, k, v, causal=causal, out=out, stream=stream),
                    lambda: F.scaled_dot_product_attention(*views, is_causal=causal))

world = World()
Device(0).set_current()
heap = SymmetricHeap(world, 64 << 20)
x, y = heap.alloc((1024,), np.float32), heap.alloc((1024,), np.float32)
t = torch.empty(1024, device="cuda")
measure("all_reduce 4 KiB world 1", lambda: collectives.all_reduce(x, world, out=y, algorithm="one_shot", stream=stream),
        lambda: t.add_(1.0))
heap.close()
world.close()
