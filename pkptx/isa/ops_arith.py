"""Builder methods for integer, floating-point, logic and comparison instructions (PTX ISA 9.7.1-9.7.8).

Each method comes from a small factory over the spec table; flag modifiers are keyword arguments
(``ftz=True``, ``sat=True``, ``rnd="rn"``, ``approx=True``); ``mode=`` is only .hi/.lo/.wide.
"""
from __future__ import annotations

from .types import pred as PRED, ptx_type


def _wide(ty, mods):
    if mods.get("mode") == "wide":
        return ptx_type(f"{ty.name[0]}{2 * ty.bits}")
    return ty


def _nary(key: str, arity: int, doc: str, dest_type=None):
    """A method ``name(ty, *sources, into=None, name=None, pred=None, **modifiers) -> Reg``."""
    def method(self, ty, *sources, into=None, name=None, pred=None, **mods):
        ty = ptx_type(ty)
        if len(sources) != arity:
            from ..errors import PTXBuildError
            raise PTXBuildError(f"{key}: takes {arity} source operand(s) after the type, got {len(sources)}")
        out_ty = ptx_type(dest_type) if dest_type else _wide(ty, mods)
        d = self._dest(out_ty, into, name)
        self.emit(key, d, *sources, types=(ty,), pred=pred, **mods)
        return d
    method.__name__ = key.replace(".", "_")
    method.__doc__ = doc
    return method


class ArithOps:
    add = _nary("add", 2, "``add{.rnd}{.ftz}{.sat}{.cc}.<ty> d, a, b``")
    sub = _nary("sub", 2, "``sub{.rnd}{.ftz}{.sat}{.cc}.<ty> d, a, b``")
    addc = _nary("addc", 2, "``addc{.cc}.<ty> d, a, b``: add with carry-in")
    subc = _nary("subc", 2, "``subc{.cc}.<ty> d, a, b``: subtract with borrow-in")
    mul = _nary("mul", 2, "``mul{.hi|.lo|.wide}{.rnd}.<ty> d, a, b`` (``mode='wide'`` gives a double-width d)")
    mad = _nary("mad", 3, "``mad{.hi|.lo|.wide}{.rnd}.<ty> d, a, b, c``")
    fma = _nary("fma", 3, "``fma.rnd{.ftz}{.sat}.<ty> d, a, b, c``")
    div = _nary("div", 2, "``div{.approx|.full|.rnd}{.ftz}.<ty> d, a, b`` (``approx=True``, ``full=True``, "
                          "``rnd='rn'``)")
    rem = _nary("rem", 2, "``rem.<ty> d, a, b``")
    abs = _nary("abs", 1, "``abs{.ftz}.<ty> d, a``")
    neg = _nary("neg", 1, "``neg{.ftz}.<ty> d, a``")
    min = _nary("min", 2, "``min{.ftz}{.NaN}.<ty> d, a, b``")
    max = _nary("max", 2, "``max{.ftz}{.NaN}.<ty> d, a, b``")
    rcp = _nary("rcp", 1, "``rcp{.approx|.rnd}{.ftz}.<ty> d, a`` (``approx=True`` or ``rnd='rn'``)")
    sqrt = _nary("sqrt", 1, "``sqrt{.approx|.rnd}{.ftz}.<ty> d, a`` (``approx=True`` or ``rnd='rn'``)")
    rsqrt = _nary("rsqrt", 1, "``rsqrt.approx{.ftz}.<ty> d, a``")
    ex2 = _nary("ex2", 1, "``ex2.approx{.ftz}.f32 d, a``")
    lg2 = _nary("lg2", 1, "``lg2.approx{.ftz}.f32 d, a``")
    sin = _nary("sin", 1, "``sin.approx{.ftz}.f32 d, a``")
    cos = _nary("cos", 1, "``cos.approx{.ftz}.f32 d, a``")
    tanh = _nary("tanh", 1, "``tanh.approx.f32 d, a``")
    popc = _nary("popc", 1, "``popc.<ty> d, a`` (d is .u32)", dest_type="u32")
    clz = _nary("clz", 1, "``clz.<ty> d, a`` (d is .u32)", dest_type="u32")
    brev = _nary("brev", 1, "``brev.<ty> d, a``")
    bfe = _nary("bfe", 3, "``bfe.<ty> d, a, start, len``")
    bfi = _nary("bfi", 4, "``bfi.<ty> d, insert, base, start, len``")
    and_ = _nary("and", 2, "``and.<ty> d, a, b``")
    or_ = _nary("or", 2, "``or.<ty> d, a, b``")
    xor = _nary("xor", 2, "``xor.<ty> d, a, b``")
    not_ = _nary("not", 1, "``not.<ty> d, a``")
    shl = _nary("shl", 2, "``shl.<ty> d, a, b`` (b is .u32)")
    shr = _nary("shr", 2, "``shr.<ty> d, a, b`` (arithmetic for .s types)")
    lop3 = _nary("lop3", 4, "``lop3.b32 d, a, b, c, lut``")

    def setp(self, cmp, ty, a, b, *, combine=None, c=None, ftz=False, into=None, name=None, pred=None):
        """``setp.<cmp>{.and|.or|.xor}{.ftz}.<ty> p, a, b{, c}`` -> a .pred register."""
        ty = ptx_type(ty)
        p = self._dest(PRED, into, name or "p")
        self.emit("setp", p, a, b, c, types=(ty,), pred=pred, cmp=cmp, bool=combine, ftz=ftz)
        return p

    def selp(self, ty, a, b, cond, *, into=None, name=None):
        """``selp.<ty> d, a, b, cond``: d = cond ? a : b."""
        ty = ptx_type(ty)
        d = self._dest(ty, into, name)
        self.emit("selp", d, a, b, cond, types=(ty,))
        return d

