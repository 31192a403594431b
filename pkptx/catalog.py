"""Every kernel pkptx ships, at representative configurations, for ``python -m pkptx build``.

Each module listed here has a ``catalog()`` returning built (not yet assembled) Kernel objects.
"""
from __future__ import annotations

from importlib import import_module

KERNEL_MODULES = (
    "pkptx.templates.kernels.copy",
    "pkptx.templates.kernels.all_reduce",
    "pkptx.templates.kernels.all_gather",
    "pkptx.templates.kernels.reduce_scatter",
    "pkptx.templates.kernels.all_to_all",
    "pkptx.templates.kernels.gemm",
    "pkptx.templates.kernels.gemm_rs",
    "pkptx.templates.kernels.ag_gemm",
    "pkptx.templates.kernels.gemm_ar",
    "pkptx.templates.kernels.attention",
    "pkptx.templates.kernels.attention_merge",
    "pkptx.templates.kernels.ring_attention",
    "pkptx.templates.kernels.ulysses",
)


def kernels():
    """Yield every catalogued Kernel, module by module."""
    for name in KERNEL_MODULES:
        yield from import_module(name).catalog()
