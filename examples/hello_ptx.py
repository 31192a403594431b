import numpy as np
from pkptx.isa import Kernel, Param, address, f32, u32, u64

k = Kernel("scale", [Param("x", u64, pointer=True), ("n", u32), ("alpha", f32)], max_threads=256)
b = k.builder()                                  # the builder is passed explicitly, never global
x, n, alpha = b.load_param("x"), b.load_param("n"), b.load_param("alpha")
i = b.mad(u32, b.special("ctaid.x"), b.special("ntid.x"), b.special("tid.x"), mode="lo")
with b.if_then(b.setp("lt", u32, i, n)):         # structured control flow
    p = b.add(u64, x, b.mul(u32, i, 4, mode="wide"))
    v = b.ld(f32, address(p), space="global")
    b.st(f32, address(p), b.mul(f32, v, alpha), space="global")
b.ret()
print(k.render())                                # readable, deterministic PTX
compiled = k.compile()                           # nvJitLink -> cubin; no GPU needed
print(compiled.resources)                        # registers, shared memory, spills

from pkptx.launch import Device, LoadedKernel, from_numpy  # noqa: E402
if Device.available():                         # on a GPU machine: launch it and check
    host = np.random.rand(1000).astype(np.float32)
    xs = from_numpy(host)
    LoadedKernel.load(compiled)[4, 256](xs, 1000, 2.0)
    assert np.allclose(xs.to_numpy(), 2 * host)
    print("scaled 1000 floats on", Device(0).name)
