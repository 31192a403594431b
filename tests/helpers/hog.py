"""Work that holds part of the GPU's SMs for a while on its own stream, as a framework's compute or
another stream's kernel would: the forward-progress tests run pkptx's persistent kernels beside it.

``Hog(fraction).start(ms)`` launches blocks for ``fraction`` of this context's SMs, each with enough
dynamic shared memory that no large-footprint block fits beside it, spinning for ``ms`` on a
non-blocking stream (so work on the default stream runs beside it, not after it).
"""
from __future__ import annotations

from pkptx.launch import LoadedKernel, Stream
from pkptx.launch.occupancy import context_sm_count
from pkptx.launch.timing import spin_kernel

SMEM = 200 * 1024


class Hog:
    def __init__(self, fraction: float = 0.5):
        self.kernel = LoadedKernel.load(spin_kernel(32, SMEM).compile())
        self.blocks = max(1, int(context_sm_count() * fraction))
        self.stream = Stream(non_blocking=True)

    def start(self, ms: float) -> None:
        self.kernel[self.blocks, 32, SMEM](int(ms * 1e6), stream=self.stream)


def hog_from_env():
    """A callable that starts a hog for ``PKPTX_TEST_HOG_MS`` ms over half of the SMs, or does nothing
    when the variable is unset."""
    import os
    ms = float(os.environ.get("PKPTX_TEST_HOG_MS", "0"))
    if not ms:
        return lambda: None
    hog = Hog(0.5)
    return lambda: hog.start(ms)
