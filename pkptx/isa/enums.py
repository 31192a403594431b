"""String-valued enums for the modifiers that carry meaning: memory ordering, scope, state space,
comparison and reduction operators. Builder methods accept these or the plain PTX spelling."""
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


class Space(_PtxEnum):
    GENERIC = ""
    GLOBAL = "global"
    SHARED = "shared"
    SHARED_CTA = "shared::cta"
    SHARED_CLUSTER = "shared::cluster"
    LOCAL = "local"
    PARAM = "param"
    CONST = "const"


class Cmp(_PtxEnum):
    EQ = "eq"
    NE = "ne"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    LO = "lo"
    LS = "ls"
    HI = "hi"
    HS = "hs"


class RedOp(_PtxEnum):
    ADD = "add"
    MIN = "min"
    MAX = "max"
    AND = "and"
    OR = "or"
    XOR = "xor"
    INC = "inc"
    DEC = "dec"


def spell(value) -> str | None:
    """The PTX spelling of an enum member, string or None."""
    if value is None:
        return None
    return value.value if isinstance(value, Enum) else str(value)
