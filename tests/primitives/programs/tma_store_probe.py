import sys, os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import prim_kernels as P
from pkptx.launch import Device, Kernel, TensorMap, empty, from_numpy
op = None if sys.argv[1] == "copy" else sys.argv[1]
R, C, BH, BW, Y, X = map(int, sys.argv[2:])
dev = Device(0).set_current()
dst = from_numpy(np.ones((R, C), np.float32))
table = from_numpy(np.frombuffer(TensorMap.tiled(dst, box=(BH, BW)).data, np.uint8).copy())
src = from_numpy(np.full((BH, BW), 2.0, np.float32))
k = Kernel.load(P.tile_store(2, op, False).compile(), dev)
nb = BH * BW * 4
try:
    k[1, P.TILE_THREADS, nb + P.SMEM_SLACK](src, nb, X, Y, 0, 0, 1, table); dev.synchronize()
    print("ok", sys.argv[1:], float(dst.to_numpy().sum()))
except Exception as e:
    print("CRASH", sys.argv[1:], str(e).split(":")[1][:40])
