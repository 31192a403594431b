"""One TMA tile load (tile_load kernel, 2-D) at given dtype/shape/box/coords in this process; prints ok/bad/crash.
python tma_probe.py DTYPE R C BH BW Y X"""
import sys, os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import prim_kernels as P
from harness import DTYPES, clip, raw
from pkptx.launch import Device, Kernel, TensorMap, empty, from_numpy
dt, R, C, BH, BW, Y, X = sys.argv[1], *map(int, sys.argv[2:])
dev = Device(0).set_current()
data = (np.arange(R * C) % 1000).astype(DTYPES[dt]).reshape(R, C)
src = from_numpy(data)
table = from_numpy(np.frombuffer(TensorMap.tiled(src, box=(BH, BW)).data, np.uint8).copy())
out = empty((BH, BW), DTYPES[dt]); out.fill(7)
k = Kernel.load(P.tile_load(2).compile(), dev)
nb = BH * BW * DTYPES[dt].itemsize
try:
    k[1, P.TILE_THREADS, nb + P.SMEM_SLACK](out, nb, X, Y, 0, 0, 1, table)
    dev.synchronize()
except Exception as e:
    print("CRASH", sys.argv[1:], str(e).split(":")[1][:60]); sys.exit()
want = np.zeros((BH, BW), DTYPES[dt]); part = clip((Y, X), (BH, BW), (R, C))
if part: want[part[0]] = data[part[1]]
print("ok" if np.array_equal(raw(out.to_numpy()), raw(want)) else "BAD", sys.argv[1:])
