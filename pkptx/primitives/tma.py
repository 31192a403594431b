"""Helpers around TMA operands."""
from __future__ import annotations

from ..isa import Builder, Reg, u64


def tensor_map_param(b: Builder, name: str) -> Reg:
    """The generic address of a by-value tensor-map kernel parameter (``.param .align 64 .b8 name[128]``),
    as ``cp.async.bulk.tensor`` needs it: the parameter's address converted out of the param space.

    PTX: ``mov.u64 a, name; cvta.param.u64 g, a;``
    """
    return b.cvta(u64, "param", b.param_address(name), name=f"{name}_generic")
