"""String-valued enums for the memory-ordering modifiers, ``sem=`` and ``scope=`` (style rule 5: ordering
is always spelled out). Builder methods accept these or the plain PTX spelling; pkptx's own primitives
and kernels write the enums, and every other modifier (state space, comparison, operator) as its PTX
word."""
from __future__ import annotations

from enum import Enum


class _PtxEnum(str, Enum):
    def __str__(self) -> str:
        return self.value


class Sem(_PtxEnum):
    WEAK = "weak"
    RELAXED = "relaxed"
    ACQUIRE = "acquire"
    RELEASE = "release"
    ACQ_REL = "acq_rel"
    SC = "sc"
    VOLATILE = "volatile"


class Scope(_PtxEnum):
    CTA = "cta"
    CLUSTER = "cluster"
    GPU = "gpu"
    SYS = "sys"


def spell(value) -> str | None:
    """The PTX spelling of an enum member, string or None."""
    if value is None:
        return None
    return value.value if isinstance(value, Enum) else str(value)
