"""Dev probe: where the host time of one small collective call goes (world 1, cProfile)."""
import cProfile, pstats, sys, os, time
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import numpy as np
from pkptx.launch import Device, SymmetricHeap, World, Stream
from pkptx.ops import collectives
world = World(); Device(0).set_current(); heap = SymmetricHeap(world, 64 << 20); s = Stream()
a, b = heap.alloc((1024,), np.float32), heap.alloc((1024,), np.float32)
for name, fn in [("all_reduce", lambda: collectives.all_reduce(a, world, out=b, stream=s)),
                 ("all_gather", lambda: collectives.all_gather(a, world, dim=0, out=b, stream=s))]:
    for _ in range(200): fn()
    s.synchronize()
    t0 = time.perf_counter()
    for _ in range(2000): fn()
    print(name, "host us per call", (time.perf_counter() - t0) / 2000 * 1e6); s.synchronize()
    pr = cProfile.Profile(); pr.enable()
    for _ in range(2000): fn()
    pr.disable(); s.synchronize()
    pstats.Stats(pr).sort_stats("tottime").print_stats(14)
heap.close(); world.close()
