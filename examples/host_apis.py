import ml_dtypes
import numpy as np

import pkptx
from pkptx.launch import Device, SymmetricHeap, World, empty, from_numpy

world = World()                                        # from mpi4py; World.single() without MPI
Device(world.device_ordinal()).set_current()           # this rank's GPU (ranks may share one)
m, n, k = 1024, 512, 256
rng = np.random.default_rng(world.rank)
a = from_numpy(rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16))
b = from_numpy(rng.standard_normal((n, k)).astype(ml_dtypes.bfloat16))
c = pkptx.gemm(a, b)                                   # C = A·Bᵀ (b_layout="kn": C = A·B), bf16/f16/fp8, fp32 accumulate

heap = SymmetricHeap(world, 1 << 28)                   # reserved once; buffers need no new IPC
x = heap.alloc((m, n), "bfloat16")                     # same shape on every rank, checked collectively
x.local.copy_from_numpy(c.to_numpy())
pkptx.all_reduce(x, world, op="sum")                   # one launch, in place; also all_gather,
pkptx.synchronize()                                    # reduce_scatter, all_to_all (any dims); raises
                                                       # DeviceTimeoutError naming a rank that never came
out = heap.alloc((m // world.size, n), "float32")
pkptx.gemm_rs(a, b, world, out=out)                    # rows of the sum over ranks of A·Bᵀ; ag_gemm, gemm_ar likewise
copy = pkptx.bulk_copy(empty(c.shape, c.dtype), c)     # device copy by TMA bulk copies (0.96 of the copy engine)
pkptx.synchronize()
print(f"rank {world.rank} of {world.size}: all calls done")
heap.close()
world.close()
