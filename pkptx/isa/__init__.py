"""The PTX builder: types, operands, the spec table, the Builder and Kernel. One call = one instruction."""
from .builder import Builder, Loop, Params, as_operand
from .enums import Scope, Sem
from .kernel import MAX_PTX, Kernel
from .ops_async import tensor_ref
from .ops_data import address
from .signature import Kind, Signature
from .spec import SPECS, Spec
from .types import (ALL_TYPES, PtxType, b8, b16, b32, b64, b128, bf16, bf16x2, compatible, e4m3, e5m2, f16,
                    f16x2, f32, f64, pred, ptx_type, s8, s16, s32, s64, tf32, u8, u16, u32, u64)
from .values import Addr, Imm, Label, NotPred, Param, Pipe, Reg, Sink, Special, Symbol, TensorRef, Vec

__all__ = [
    "Builder", "Loop", "Params", "as_operand", "Scope", "Sem", "MAX_PTX", "Kernel", "Kind", "Signature",
    "tensor_ref", "address", "SPECS", "Spec", "ALL_TYPES", "PtxType", "compatible", "ptx_type",
    "b8", "b16", "b32", "b64", "b128", "bf16", "bf16x2", "e4m3", "e5m2", "f16", "f16x2", "f32", "f64",
    "pred", "s8", "s16", "s32", "s64", "tf32", "u8", "u16", "u32", "u64",
    "Addr", "Imm", "Label", "NotPred", "Param", "Pipe", "Reg", "Sink", "Special", "Symbol", "TensorRef", "Vec",
]
