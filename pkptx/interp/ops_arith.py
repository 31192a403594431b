"""Integer, float, logic, comparison and conversion semantics (PTX ISA 9.7.1-9.7.9.21) over 32 lanes.

Integers wrap (numpy unsigned/signed arrays); f32/f64 are IEEE round-to-nearest-even; 16-bit floats
and packed pairs compute in f32 and round once to their type through ml_dtypes."""
from __future__ import annotations

import numpy as np

from ..isa.types import ptx_type
from .dtypes import HALVES, join_halves, np_dtype, signed, split_halves, storage
from .errors import UnsupportedError
from .operands import reader, writer


def _widened(ty, mode):
    return ptx_type(f"{ty.name[0]}{2 * ty.bits}") if mode == "wide" else ty


def _packed(fn, ty):
    """Lift an f32 function to a packed pair type: per half, computed in f32, rounded to the half type."""
    half = HALVES[ty.name]

    def lifted(*args):
        halves = [split_halves(a, ty) for a in args]
        lo = fn(*[h[0].astype(np.float32) for h in halves]).astype(half)
        hi = fn(*[h[1].astype(np.float32) for h in halves]).astype(half)
        return join_halves(lo, hi)
    return lifted


def _on_type(fn, ty):
    """16-bit floats compute in f32 and round to their type; other types compute natively."""
    if ty.kind == "fx2":
        return _packed(fn, ty)
    if ty.kind == "f" and ty.bits == 16:
        dt = np_dtype(ty)
        return lambda *args: fn(*[a.astype(np.float32) for a in args]).astype(dt)
    return fn


def _mul_hi(ty):
    bits = ty.bits
    if bits == 64:
        def hi(a, b):
            obj = [(int(x) * int(y)) >> 64 for x, y in zip(a.tolist(), b.tolist())]
            return np.array([v % (1 << 64) for v in obj], np.uint64).view(a.dtype)
        return hi
    wide = signed(2 * bits) if ty.kind == "s" else storage(2 * bits)
    return lambda a, b: ((a.astype(wide) * b.astype(wide)) >> bits).astype(a.dtype)


def _mul(ty, mode):
    if mode == "wide":
        wide = np_dtype(_widened(ty, "wide"))
        return lambda a, b: a.astype(wide) * b.astype(wide)
    if mode == "hi":
        return _mul_hi(ty)
    return lambda a, b: a * b


def _shift(left: bool, ty):
    bits = ty.bits

    def shift(a, b):
        amount = b.astype(np.uint32)
        big = amount >= bits
        amount = np.minimum(amount, bits - 1).astype(a.dtype)
        out = (a << amount) if left else (a >> amount)
        if left or ty.kind != "s":
            return np.where(big, np.zeros_like(a), out)
        return np.where(big, a >> np.array(bits - 1, a.dtype), out)
    return shift


def _truncated_quotient(a, b):
    """Signed division rounding toward zero, wrapping as the hardware does (INT_MIN / -1 is INT_MIN):
    in int64 for narrower types (|INT_MIN| does not fit their own width), in Python ints for 64-bit."""
    if a.dtype.itemsize < 8:
        a64, b64 = a.astype(np.int64), b.astype(np.int64)
        return np.abs(a64) // np.abs(b64) * np.sign(a64) * np.sign(b64)
    q = [abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1) for x, y in zip(a.tolist(), b.tolist())]
    return np.array([v % (1 << 64) for v in q], np.uint64).view(np.int64)


def _div(ty):
    if ty.is_float:
        return lambda a, b: a / b
    ones = np.array(-1).astype(np_dtype(ty))        # all bits set: the quotient of a division by zero

    def div(a, b):
        """Rounds toward zero: numpy's floor division, moved up by one where the signs differ and it was
        inexact (np.abs would overflow on the most negative value, e.g. 30 / -2**31)."""
        safe = np.where(b == 0, np.ones_like(b), b)
        q = _truncated_quotient(a, safe) if ty.kind == "s" else a // safe
        return np.where(b == 0, ones, q).astype(a.dtype)
    return div


def _rem(ty):
    def rem(a, b):
        safe = np.where(b == 0, np.ones_like(b), b)
        r = np.fmod(a, safe) if ty.kind == "s" else a % safe
        return np.where(b == 0, a, r).astype(a.dtype)
    return rem


def _minmax(fn, ty, nan: bool):
    if ty.is_float and not nan:
        return {np.minimum: np.fmin, np.maximum: np.fmax}[fn]
    return fn


def _popc(a):
    bits = np.unpackbits(a.view(np.uint8).reshape(a.size, -1), axis=1)
    return bits.sum(axis=1).astype(np.uint32)


def _clz(ty):
    def clz(a):
        out = np.full(a.size, ty.bits, np.uint32)
        for i, v in enumerate(a.astype(np.uint64).tolist()):
            out[i] = ty.bits - int(v).bit_length()
        return out
    return clz


def _brev(ty):
    def brev(a):
        return np.array([int(f"{int(v):0{ty.bits}b}"[::-1], 2) for v in a.tolist()], a.dtype)
    return brev


def _bfe(ty):
    def bfe(a, pos, length):
        out = []
        for v, p, n in zip(a.tolist(), pos.tolist(), length.tolist()):
            p, n = min(p & 0xFF, ty.bits), min(n & 0xFF, ty.bits)
            u = (v % (1 << ty.bits)) >> p & ((1 << n) - 1)
            if ty.kind == "s" and n and u >> (n - 1) & 1:
                u -= 1 << n
            out.append(u)
        return np.array(out, np.int64).astype(a.dtype)
    return bfe


def _bfi(ty):
    def bfi(f, base, pos, length):
        out = []
        for x, y, p, n in zip(f.tolist(), base.tolist(), pos.tolist(), length.tolist()):
            p, n = min(p & 0xFF, ty.bits), min(n & 0xFF, ty.bits)
            mask = ((1 << n) - 1) << p
            out.append((y & ~mask | (x << p) & mask) % (1 << ty.bits))
        return np.array(out, np.uint64).astype(f.dtype)
    return bfi


def _lop3(a, b, c, lut):
    out = np.zeros_like(a)
    for i in range(8):
        term = (a if i & 4 else ~a) & (b if i & 2 else ~b) & (c if i & 1 else ~c)
        out = out | np.where((lut >> np.uint32(i)) & np.uint32(1), term, np.zeros_like(a))
    return out


_BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "and": lambda a, b: a & b,
           "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b}


def _function(op):
    """(numpy function, source types, destination type) of one arithmetic op."""
    ty, key, mode = op.type(0), op.key, op.mods.get("mode")
    if key in _BINARY:
        fn = _BINARY[key]
        if ty.kind == "pred" and key in ("and", "or", "xor"):
            return fn, (ty, ty), ty
        if op.mods.get("sat") and ty.kind == "s":
            lo, hi = np.iinfo(np.int32).min, np.iinfo(np.int32).max
            base = fn
            fn = lambda a, b: np.clip(base(a.astype(np.int64), b.astype(np.int64)), lo, hi).astype(np.int32)  # noqa
        return _on_type(fn, ty), (ty, ty), ty
    if key == "mul":
        fn = _mul(ty, mode) if ty.is_int or ty.kind == "b" else lambda a, b: a * b
        return _on_type(fn, ty), (ty, ty), _widened(ty, mode)
    if key == "mad":
        mul = _mul(ty, mode) if ty.is_int else None
        out = _widened(ty, mode)
        if ty.is_float:
            return (lambda a, b, c: (a.astype(np.float64) * b + c).astype(a.dtype)), (ty, ty, ty), ty
        return (lambda a, b, c: mul(a, b) + c), (ty, ty, out), out
    if key == "fma":
        if ty.bits == 64:
            raise UnsupportedError("fma.f64 is not modelled (no exact fused multiply-add in numpy)")
        return _on_type(lambda a, b, c: (a.astype(np.float64) * b + c).astype(np.float32), ty), (ty,) * 3, ty
    if key in ("min", "max"):
        fn = _minmax(np.minimum if key == "min" else np.maximum, ty, bool(op.mods.get("nan")))
        return _on_type(fn, ty), (ty, ty), ty
    simple = {"div": (_div(ty), 2), "rem": (_rem(ty), 2), "neg": (lambda a: -a, 1), "abs": (np.abs, 1),
              "not": (lambda a: ~a, 1), "shl": (_shift(True, ty), 2), "shr": (_shift(False, ty), 2),
              "rcp": (lambda a: np.float32(1) / a if ty.bits == 32 else 1.0 / a, 1), "sqrt": (np.sqrt, 1),
              "rsqrt": (lambda a: 1 / np.sqrt(a), 1), "ex2": (np.exp2, 1), "lg2": (np.log2, 1),
              "sin": (np.sin, 1), "cos": (np.cos, 1), "tanh": (np.tanh, 1)}
    if key in simple:
        fn, arity = simple[key]
        types = (ty, ptx_type("u32")) if key in ("shl", "shr") else (ty,) * arity
        return _on_type(fn, ty), types, ty
    if key in ("popc", "clz"):
        return (_popc if key == "popc" else _clz(ty)), (ty,), ptx_type("u32")
    if key == "brev":
        return _brev(ty), (ty,), ty
    if key == "bfe":
        return _bfe(ty), (ty, ptx_type("u32"), ptx_type("u32")), ty
    if key == "bfi":
        return _bfi(ty), (ty, ty, ptx_type("u32"), ptx_type("u32")), ty
    if key == "lop3":
        return _lop3, (ty,) * 4, ty
    raise UnsupportedError(f"{op.text} is not modelled")


def arithmetic(op, prog):
    fn, in_types, out_type = _function(op)
    srcs = [reader(o, t) for o, t in zip(op.operands[1:], in_types)]
    write = writer(op.operands[0], out_type)
    if len(srcs) == 1:
        a, = srcs
        return lambda w, mask: write(w, fn(a(w)), mask)
    if len(srcs) == 2:
        a, b = srcs
        return lambda w, mask: write(w, fn(a(w), b(w)), mask)
    return lambda w, mask: write(w, fn(*[s(w) for s in srcs]), mask)


_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
        "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal, "hi": np.greater, "hs": np.greater_equal}


def _compare(cmp: str):
    if cmp in _CMP:
        fn = _CMP[cmp]
        return lambda a, b: fn(a, b)
    if cmp == "num":
        return lambda a, b: ~(np.isnan(a) | np.isnan(b))
    if cmp == "nan":
        return lambda a, b: np.isnan(a) | np.isnan(b)
    ordered = _CMP[{"equ": "eq", "neu": "ne", "ltu": "lt", "leu": "le", "gtu": "gt", "geu": "ge"}[cmp]]
    return lambda a, b: ordered(a, b) | np.isnan(a) | np.isnan(b)


def setp(op, prog):
    ty = op.type(0)
    if ty.kind in ("u", "b") or op.mods["cmp"] in ("lo", "ls", "hi", "hs"):
        ty = ptx_type(f"u{ty.bits}") if ty.kind != "f" else ty
    cmp = _compare(op.mods["cmp"])
    a, b = reader(op.operands[1], ty), reader(op.operands[2], ty)
    write = writer(op.operands[0], "pred")
    combine = op.mods.get("bool")
    if combine is None:
        return lambda w, mask: write(w, cmp(a(w), b(w)), mask)
    c = reader(op.operands[3], "pred")
    join = _BINARY[combine]
    return lambda w, mask: write(w, join(cmp(a(w), b(w)), c(w)), mask)


def selp(op, prog):
    ty = op.type(0)
    a, b, c = reader(op.operands[1], ty), reader(op.operands[2], ty), reader(op.operands[3], "pred")
    write = writer(op.operands[0], ty)
    return lambda w, mask: write(w, np.where(c(w), a(w), b(w)), mask)


_ROUND_INT = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil, None: np.trunc}


def _convert(dst, src, mods):
    """f(values of src) -> values of dst, as PTX cvt does (float -> int saturates; ints wrap or .sat)."""
    rnd = mods.get("rnd")
    ddt = np_dtype(dst)
    if dst.is_float and src.is_float:
        if rnd not in (None, "rn"):
            raise UnsupportedError(f"cvt rounding .{rnd} between floats is not modelled")
        if mods.get("satfinite") or mods.get("relu"):
            raise UnsupportedError("cvt .satfinite/.relu are not modelled")
        return lambda a: a.astype(np.float64 if src.bits == 64 else np.float32).astype(ddt)
    if dst.is_float:
        return lambda a: a.astype(np.float64).astype(ddt) if dst.bits == 64 else \
            a.astype(np.float64).astype(np.float32).astype(ddt)
    if src.is_float:
        info = np.iinfo(ddt)
        fn = _ROUND_INT[rnd]

        def to_int(a):
            x = fn(a.astype(np.float64))
            x = np.where(np.isnan(x), 0, np.clip(x, info.min, info.max))
            return x.astype(ddt)
        return to_int
    if mods.get("sat"):
        info = np.iinfo(ddt)
        return lambda a: np.clip(a.astype(np.int64) if src.kind == "s" else a.astype(np.uint64),
                                 info.min, info.max).astype(ddt)
    if src.kind == "s" and dst.bits > src.bits:
        return lambda a: a.astype(signed(dst.bits)).view(ddt)
    return lambda a: a.astype(ddt)


def cvt(op, prog):
    dst, src = op.type(0), op.type(1)
    write = writer(op.operands[0], dst if dst.bits >= 16 or dst.kind == "f" else ptx_type(f"{dst.kind}16"))
    a = reader(op.operands[1], src)
    if dst.kind == "fx2":
        b = reader(op.operands[2], src)
        half = HALVES[dst.name]
        return lambda w, mask: write(w, join_halves(b(w).astype(np.float32).astype(half),
                                                    a(w).astype(np.float32).astype(half)), mask)
    fn = _convert(dst, src, op.mods)
    if dst.bits < 16:
        wide = np_dtype(ptx_type(f"{dst.kind}16"))
        return lambda w, mask: write(w, fn(a(w)).astype(wide), mask)
    return lambda w, mask: write(w, fn(a(w)), mask)


TABLE = {key: arithmetic for key in ("add", "sub", "mul", "mad", "fma", "div", "rem", "abs", "neg", "min",
                                     "max", "rcp", "sqrt", "rsqrt", "ex2", "lg2", "sin", "cos", "tanh", "popc",
                                     "clz", "brev", "bfe", "bfi", "and", "or", "xor", "not", "shl", "shr",
                                     "lop3")}
TABLE.update(setp=setp, selp=selp, cvt=cvt)
