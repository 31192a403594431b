"""Builder methods for data movement and conversion (PTX ISA 9.7.9): one call, one instruction."""
from __future__ import annotations

from ..errors import PTXBuildError
from .types import PtxType, b32, b64, ptx_type, u32, u64
from .values import SPECIALS, Addr, Reg, Sink, Symbol, Vec, Param

_VEC = {1: None, 2: "v2", 4: "v4"}


def address(base, offset: int = 0) -> Addr:
    """``[base + offset]`` from a register, a symbol, a parameter or an existing address."""
    if isinstance(base, Addr):
        return base + offset
    if isinstance(base, Param):
        return Addr(base.symbol, offset)
    if isinstance(base, (Reg, Symbol)) or base is None:
        return Addr(base, offset)
    raise PTXBuildError(f"an address needs a register, symbol or parameter base, got {base!r}")


def storage_type(ty: PtxType) -> PtxType:
    """The bit type that moves a 16-bit float or packed pair: ``mov``/``ld``/``st`` have no .f16/.bf16/
    .f16x2/.bf16x2 forms, so those values travel as .b16/.b32 while the register keeps its float type."""
    if ty.name in ("f16", "bf16", "f16x2", "bf16x2"):
        return ptx_type(f"b{ty.bits}")
    return ty


class DataOps:
    def mov(self, ty, src, *, into=None, name=None, pred=None) -> Reg:
        """``mov.<ty> d, src`` (src: register, immediate, special register, symbol, or brace vector to pack).
        A 16-bit float or packed-pair ``ty`` is moved as .b16/.b32 into a register of type ``ty``."""
        ty = ptx_type(ty)
        d = self._dest(ty, into, name)
        self.emit("mov", d, src, types=(storage_type(ty),), pred=pred)
        return d

    def unpack(self, ty, src: Reg, parts: int, *, name=None) -> Vec:
        """``mov.<src type> {a, b, ...}, src``: split a wide register into ``parts`` registers of ``ty``."""
        ty = ptx_type(ty)
        dst = self.regs(ty, parts, name)
        self.emit("mov", dst, src, types=(ptx_type(f"b{src.type.bits}"),))
        return dst

    def special(self, name: str, *, into=None) -> Reg:
        """Read a special register (``tid.x``, ``%smid``, ``globaltimer``...) into a fresh register."""
        key = name if name.startswith("%") else "%" + name
        if key not in SPECIALS:
            raise PTXBuildError(f"unknown special register {name!r}; known: {', '.join(sorted(SPECIALS))}")
        sreg = SPECIALS[key]
        return self.mov(sreg.type, sreg, into=into, name=key[1:].replace(".", "_"))

    def load_param(self, param, *, name=None) -> Reg:
        """A scalar kernel parameter (by name or Param) in a register: ``ld.param.<type> d, [param]``
        emitted once, at the kernel's entry, whichever path asks first, so the register holds the value
        on every path and a role never loads it twice. The register is the parameter's: do not write it."""
        p = self.kernel.param(param) if isinstance(param, str) else param
        if p.is_bytes:
            raise PTXBuildError(f"parameter {p.name} is a byte array; take its address with "
                                f"b.param_address('{p.name}') (a tensor map) instead of loading it")
        reg = self.kernel.hoisted.get(p.name)
        if reg is None:
            with self.kernel.at_entry():
                reg = self.ld(p.type, address(p), space="param", name=name or p.name)
            self.kernel.hoisted[p.name] = reg
        return reg

    def param_address(self, param, *, name=None) -> Reg:
        """``mov.u64 d, param``: the param-space address of a by-value parameter. TMA wants a generic
        address: convert with ``cvta.param`` (``primitives.tma.tensor_map_param`` does both)."""
        p = self.kernel.param(param) if isinstance(param, str) else param
        return self.mov(u64, p.symbol, name=name or f"{p.name}_addr")

    def cvt(self, dst_ty, src_ty, a, b=None, *, rnd=None, ftz=False, sat=False, relu=False,
            satfinite=False, into=None, name=None, pred=None) -> Reg:
        """``cvt{.rnd}{.ftz}{.sat}.<dst>.<src> d, a{, b}`` (two sources pack into .f16x2/.bf16x2)."""
        dst_ty = ptx_type(dst_ty)
        reg_ty = dst_ty if dst_ty.bits >= 16 or dst_ty.kind == "f" else ptx_type(f"{dst_ty.kind}16")
        d = self._dest(reg_ty, into, name)
        self.emit("cvt", d, a, b, types=(dst_ty, src_ty), pred=pred, rnd=rnd, ftz=ftz, sat=sat,
                  relu=relu, satfinite=satfinite)
        return d

    def cvta(self, ty, space, a, *, to: bool = False, into=None, name=None) -> Reg:
        """``cvta{.to}.<space>.<ty>``: generic <-> state-space address conversion."""
        ty = ptx_type(ty)
        d = self._dest(ty, into, name)
        self.emit("cvta", d, a, types=(ty,), to=to, space=space)
        return d

    def ld(self, ty, addr, *, space=None, sem=None, scope=None, vec: int = 1, cache=None, evict=None,
           prefetch=None, nc: bool = False, policy=None, into=None, name=None, pred=None):
        """``ld{.sem.scope}{.space}{.nc}{.cache}{.evict}{.prefetch}{.L2::cache_hint}{.vN}.<ty>``.

        Returns a register, or a Vec of ``vec`` registers. 8-bit integers load into 32-bit registers;
        16-bit floats and packed pairs load as .b16/.b32 into registers of their own type.
        """
        ty = ptx_type(ty)
        reg_ty = ty if ty.bits >= 16 or ty.kind == "f" else ptx_type(f"{'b' if ty.kind == 'b' else ty.kind}32")
        if vec not in _VEC:
            raise PTXBuildError(f"ld: vec must be 1, 2 or 4, got {vec}")
        d = into if into is not None else (self.reg(reg_ty, name) if vec == 1 else self.regs(reg_ty, vec, name))
        self.emit("ld", d, address(addr), policy, types=(storage_type(ty),), pred=pred, sem=sem, scope=scope,
                  space=space, nc=nc, cache=cache, evict=evict, prefetch=prefetch, hint=policy is not None,
                  vec=_VEC[vec])
        return d

    def st(self, ty, addr, value, *, space=None, sem=None, scope=None, cache=None, evict=None, policy=None,
           pred=None) -> None:
        """``st{.sem.scope}{.space}{.cache}{.evict}{.L2::cache_hint}{.vN}.<ty> [addr], value``."""
        n = len(value) if isinstance(value, (Vec, list, tuple)) else 1
        if n not in _VEC:
            raise PTXBuildError(f"st: a vector store takes 2 or 4 values, got {n}")
        self.emit("st", address(addr), value, policy, types=(storage_type(ptx_type(ty)),), pred=pred, sem=sem,
                  scope=scope, space=space, cache=cache, evict=evict, hint=policy is not None, vec=_VEC[n])

    def prefetch(self, addr, *, space=None, level=None, pred=None) -> None:
        """``prefetch{.space}.<level> [addr]``: level L1, L2, L2::evict_last, L2::evict_normal, or
        ``level='tensormap'`` to prefetch a tensor map (generic, .const or .param address)."""
        self.emit("prefetch", address(addr), pred=pred, space=space, level=level)

    def mapa(self, ty, a, rank, *, shared_cluster: bool = True, name=None) -> Reg:
        """``mapa{.shared::cluster}.<ty> d, a, rank``: the same shared variable in another CTA of the cluster."""
        ty = ptx_type(ty)
        d = self.reg(ty, name or "mapa")
        self.emit("mapa", d, a, rank, types=(ty,), space="shared::cluster" if shared_cluster else None)
        return d

    def getctarank(self, ty, a, *, name=None) -> Reg:
        """``getctarank.shared::cluster.<ty> d, a``: which CTA of the cluster owns an address."""
        d = self.reg(u32, name or "ctarank")
        self.emit("getctarank", d, a, types=(ty,), space="shared::cluster")
        return d

    def createpolicy(self, primary, secondary=None, fraction: float | None = None, *, name=None) -> Reg:
        """``createpolicy.fractional.<primary>{.<secondary>}.b64 policy{, fraction}``."""
        d = self.reg(b64, name or "policy")
        self.emit("createpolicy", d, fraction, primary=primary, secondary=secondary)
        return d

    def ldmatrix(self, addr, num: int, *, trans: bool = False, name=None) -> Vec:
        """``ldmatrix.sync.aligned.m8n8.x<num>{.trans}.shared.b16``: ``num`` 8x8 matrices into a Vec."""
        d = self.regs(b32, num, name or "lm")
        self.emit("ldmatrix", d, address(addr), types=("b16",), shape="m8n8", num=f"x{num}", trans=trans,
                  space="shared")
        return d

    def stmatrix(self, addr, values, *, trans: bool = False) -> None:
        """``stmatrix.sync.aligned.m8n8.x<n>{.trans}.shared.b16 [addr], {values}``."""
        values = values if isinstance(values, Vec) else Vec(tuple(values))
        self.emit("stmatrix", address(addr), values, types=("b16",), shape="m8n8", num=f"x{len(values)}",
                  trans=trans, space="shared")

    def prmt(self, a, b, c, *, mode=None, into=None, name=None) -> Reg:
        """``prmt.b32{.mode} d, a, b, c``: byte permute."""
        d = self._dest(b32, into, name)
        self.emit("prmt", d, a, b, c, types=(b32,), mode=mode)
        return d

    def sink(self, ty: PtxType | str = b64) -> Sink:
        """The ``_`` destination."""
        return Sink(ptx_type(ty))
