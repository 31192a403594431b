"""Checks of what a kernel declares (its name, parameters, launch bounds, shared memory), so nothing
reaches nvJitLink that no launch could use. Each check returns the normalised value or raises
PTXBuildError naming the argument, what was expected and (through ``locate``) the caller's line.

The limits are those of sm_90 (H100/H200): at most 1024 threads per block (x, y <= 1024, z <= 64);
clusters of at most 16 CTAs (8 are portable; 9..16 need the launch to allow a non-portable cluster
size, cudaFuncAttributeNonPortableClusterSizeAllowed); at most 227 KiB of dynamic shared memory per
block (the opt-in maximum).
"""
from __future__ import annotations

import re

from ..errors import PTXBuildError
from .instruction import locate
from .types import PtxType, ptx_type

MAX_NAME = 255                          # characters; a 99,870-character name crashed nvJitLink
MAX_BLOCK_THREADS = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_CLUSTER = 16
MAX_DYNAMIC_SMEM = 227 * 1024
# .bf16, .f16x2 and .bf16x2 are declared as their bit types (ptxas takes no .param of them); the packer
# still knows them as floats.
PARAM_TYPES = ("b8", "b16", "b32", "b64", "u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "f16", "f32", "f64",
               "bf16", "f16x2", "bf16x2")
# ASCII PTX identifiers without the $ and % forms: a letter then letters, digits, _; or _ and at least one more.
_IDENTIFIER = re.compile(r"(?:[A-Za-z][A-Za-z0-9_]*|_[A-Za-z0-9_]+)\Z")


def fail(message: str):
    raise locate(PTXBuildError(message))


def identifier(name, what: str) -> str:
    """``name`` if it is an ASCII PTX identifier of at most MAX_NAME characters."""
    if not isinstance(name, str):
        fail(f"{what} must be a str, got {type(name).__name__} {name!r}")
    if len(name) > MAX_NAME:
        fail(f"{what} is {len(name)} characters long; expected at most {MAX_NAME}")
    if not _IDENTIFIER.match(name):
        fail(f"{what} {name!r} is not a PTX identifier: expected ASCII letters, digits and _, starting with a "
             f"letter (or _ and one more character)")
    return name


def integer(value, what: str, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or (hi is not None and value > hi):
        span = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        fail(f"{what}={value!r}: expected an int in {span}")
    return value


def param_type(ty, what: str) -> PtxType:
    try:
        ty = ptx_type(ty)
    except PTXBuildError as exc:
        fail(f"{what}: {exc.args[0]}")
    if ty.name not in PARAM_TYPES:
        hint = "; pass a .u32 and compare it with setp" if ty.name == "pred" else ""
        fail(f"{what}: a kernel parameter cannot be .{ty}; expected one of "
             f"{', '.join('.' + t for t in PARAM_TYPES)}{hint}")
    return ty


def pointer(ty: PtxType, count: int, what: str) -> None:
    """A device pointer is one 64-bit value: the launcher packs 8 bytes for it."""
    if ty.name not in ("u64", "b64") or count != 1:
        fail(f"{what}: pointer=True needs type .u64 or .b64 and count=1 (a 64-bit device address), got "
             f".{ty} x {count}")


def param_kind(kind, default, bits: int, what: str):
    """The parameter's Kind: ``default`` (what its attributes imply) when None, else ``kind`` if those
    attributes can carry it (a pointer any kind of device address, a 64-bit scalar a multicast address)."""
    from .signature import Kind, legal_kinds
    if kind is None:
        return default
    legal = legal_kinds(default, bits)
    try:
        kind = Kind(kind)
    except ValueError:
        fail(f"{what}: kind={kind!r}; expected one of {', '.join(k.value for k in Kind)}")
    if kind not in legal:
        fail(f"{what}: kind={kind.value!r} does not fit its attributes, which imply {default.value!r}; they can "
             f"carry {', '.join(sorted(k.value for k in legal))}")
    return kind


def alignment(align, what: str) -> int | None:
    if align is None:
        return None
    if isinstance(align, bool) or not isinstance(align, int) or align < 1 or align & (align - 1):
        fail(f"{what}: align={align!r}; expected None or a power of two")
    return align


def dims(value, what: str, *, most: int, per_dim=MAX_BLOCK):
    """1 to 3 positive ints, padded to 3, within ``per_dim`` each and ``most`` in total; None passes."""
    if value is None:
        return None
    items = (value,) if isinstance(value, int) else tuple(value) if isinstance(value, (tuple, list)) else None
    if items is None or not 1 <= len(items) <= 3 or any(isinstance(d, bool) or not isinstance(d, int) or d < 1
                                                          for d in items):
        fail(f"{what} must be 1 to 3 positive ints, got {value!r}")
    items = items + (1,) * (3 - len(items))
    total = items[0] * items[1] * items[2]
    if total > most or any(d > cap for d, cap in zip(items, per_dim)):
        fail(f"{what}={value!r} ({total} in all): expected at most {most} in all and {per_dim} per dimension")
    return items


def version(value) -> tuple[int, int] | None:
    if value is None:
        return None
    if not (isinstance(value, (tuple, list)) and len(value) == 2 and
            all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)):
        fail(f"ptx_version={value!r}: expected a (major, minor) pair of ints such as (8, 0)")
    return tuple(value)
