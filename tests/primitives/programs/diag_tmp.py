from pkptx.launch import Device, empty, TensorMap
import numpy as np
Device(0).set_current()
a = empty((1 << 16,), np.float32)
for shape, box in [((16,), (16,)), ((64,), (16,)), ((256,), (256,)), ((4, 16), (4, 16)), ((8, 16), (16, 16))]:
    try:
        TensorMap.tiled(a.ptr, "float32", shape, box=box); print(shape, box, "ok")
    except Exception as e:
        print(shape, box, type(e).__name__, str(e)[:300])
from cuda.bindings import driver as cu
E = cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32
args = (cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE, cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
for strides in ([], [cu.cuuint64_t(256)]):
    r = cu.cuTensorMapEncodeTiled(E, 1, a.ptr, [cu.cuuint64_t(64)], strides, [cu.cuuint32_t(16)], [cu.cuuint32_t(1)], *args)
    print("rank 1, strides", len(strides), "->", r[0])
