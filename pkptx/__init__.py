"""pkptx: overlapped multi-GPU kernels written in pure Python.

``pkptx.isa`` builds PTX, ``pkptx.primitives`` and ``pkptx.templates`` build kernels from it,
``pkptx.launch`` runs them; the names below are the host APIs most users start from. Importing pkptx
needs no GPU.
"""
from .errors import (AssemblyError, CudaError, DeviceTimeoutError, LaunchError, PkptxError, PTXBuildError,
                     TargetError, WorldError)
from .ops.attention import attention, attention_merge
from .ops.collectives import all_gather, all_reduce, all_to_all, reduce_scatter, synchronize
from .ops.copy import bulk_copy
from .ops.fused import ag_gemm, gemm_ar, gemm_rs
from .ops.gemm import gemm
from .ops.moe import grouped_gemm, moe_combine, moe_dispatch, moe_dispatch_gemm
from .ops.sequence import ring_attention, ulysses_attention

__version__ = "0.1.0"

__all__ = [
    "gemm", "grouped_gemm", "moe_dispatch", "moe_dispatch_gemm", "moe_combine", "attention", "attention_merge", "ring_attention", "ulysses_attention", "bulk_copy", "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "synchronize", "ag_gemm", "gemm_rs",
    "gemm_ar", "PkptxError", "PTXBuildError", "TargetError", "AssemblyError", "CudaError", "LaunchError",
    "WorldError", "DeviceTimeoutError",
]
