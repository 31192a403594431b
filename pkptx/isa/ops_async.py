"""Builder methods for the async proxy: bulk and tensor copies, bulk groups, and multimem accesses
(PTX ISA 9.7.9.25 and 9.7.12.14). Completion is always explicit: an mbarrier for copies into shared
memory, a bulk group (commit + wait) for copies out of it."""
from __future__ import annotations

from ..errors import PTXBuildError
from .ops_data import address
from .types import ptx_type
from .values import Imm, Reg, TensorRef, Vec

_VEC = {1: None, 2: "v2", 4: "v4", 8: "v8"}


def tensor_ref(tmap, coords) -> TensorRef:
    """``[tmap, {c0, ...}]`` from a 64-bit register holding the tensor map's address and coordinates."""
    if not isinstance(tmap, Reg):
        raise PTXBuildError(f"a tensor map must be a 64-bit register with its address (b.param_address(...)), "
                            f"got {tmap!r}")
    coords = tuple(Imm(c) if isinstance(c, int) else c for c in coords)
    return TensorRef(tmap, coords)


def _offsets(values):
    """im2col offsets as a brace vector (16-bit registers or immediates), or None."""
    if values is None:
        return None
    return Vec(tuple(Imm(v) if isinstance(v, int) else v for v in values))


def _dim(coords) -> str:
    n = len(coords)
    if not 1 <= n <= 5:
        raise PTXBuildError(f"a tensor copy takes 1 to 5 coordinates, got {n}")
    return f"{n}d"


class AsyncOps:
    # -------------------------------------------------------------- 1-D bulk copies
    def bulk_load(self, dst_smem, src_global, size, mbar, *, multicast_mask=None, policy=None, pred=None):
        """``cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes{.multicast::cluster}
        [dst], [src], size, [mbar]{, mask}{, policy}``: ``size`` bytes (multiple of 16) global -> shared;
        completes as transaction bytes on ``mbar``."""
        self.emit("cp.async.bulk.shared::cluster.global", address(dst_smem), address(src_global), size,
                  address(mbar), multicast_mask, policy, pred=pred,
                  multicast=multicast_mask is not None, hint=policy is not None)

    def bulk_copy_cluster(self, dst_smem, src_smem, size, mbar, *, pred=None):
        """``cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [dst], [src], size, [mbar]``."""
        self.emit("cp.async.bulk.shared::cluster.shared::cta", address(dst_smem), address(src_smem), size,
                  address(mbar), pred=pred)

    def bulk_store(self, dst_global, src_smem, size, *, policy=None, pred=None):
        """``cp.async.bulk.global.shared::cta.bulk_group [dst], [src], size``: shared -> global; tracked by
        the thread's bulk group (``bulk_commit_group`` / ``bulk_wait_group``)."""
        self.emit("cp.async.bulk.global.shared::cta", address(dst_global), address(src_smem), size, policy,
                  pred=pred, hint=policy is not None)

    def bulk_reduce(self, op, ty, dst_global, src_smem, size, *, policy=None, pred=None):
        """``cp.reduce.async.bulk.global.shared::cta.bulk_group.<op>{.noftz}.<ty> [dst], [src], size``:
        element-wise atomic reduction of shared memory into global memory."""
        ty = ptx_type(ty)
        self.emit("cp.reduce.async.bulk.global.shared::cta", address(dst_global), address(src_smem), size,
                  policy, types=(ty,), pred=pred, op=op, noftz=ty.bits == 16 and str(op) == "add",
                  hint=policy is not None)

    def bulk_reduce_cluster(self, op, ty, dst_smem, src_smem, size, mbar, *, pred=None):
        """``cp.reduce.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes.<op>.<ty>``."""
        self.emit("cp.reduce.async.bulk.shared::cluster.shared::cta", address(dst_smem), address(src_smem),
                  size, address(mbar), types=(ty,), pred=pred, op=op)

    def bulk_prefetch(self, src_global, size, *, policy=None):
        """``cp.async.bulk.prefetch.L2.global [src], size``."""
        self.emit("cp.async.bulk.prefetch.L2.global", address(src_global), size, policy, hint=policy is not None)

    # -------------------------------------------------------------- tensor (TMA) copies
    def tensor_load(self, dst_smem, tmap, coords, mbar, *, multicast_mask=None, policy=None, im2col_offsets=None,
                    pred=None):
        """``cp.async.bulk.tensor.<n>d.shared::cluster.global.{tile|im2col}.mbarrier::complete_tx::bytes
        {.multicast::cluster} [dst], [tmap, {coords}], [mbar]{, {offsets}}{, mask}{, policy}``.
        ``im2col_offsets`` (n-2 16-bit values) selects the .im2col mode."""
        self.emit("cp.async.bulk.tensor.shared::cluster.global", address(dst_smem), tensor_ref(tmap, coords),
                  address(mbar), _offsets(im2col_offsets), multicast_mask, policy, pred=pred, dim=_dim(coords),
                  load_mode="tile" if im2col_offsets is None else "im2col", multicast=multicast_mask is not None,
                  hint=policy is not None)

    def tensor_store(self, tmap, coords, src_smem, *, policy=None, pred=None):
        """``cp.async.bulk.tensor.<n>d.global.shared::cta.tile.bulk_group [tmap, {coords}], [src]``."""
        self.emit("cp.async.bulk.tensor.global.shared::cta", tensor_ref(tmap, coords), address(src_smem), policy,
                  pred=pred, dim=_dim(coords), load_mode="tile", hint=policy is not None)

    def tensor_reduce(self, op, tmap, coords, src_smem, *, policy=None, pred=None):
        """``cp.reduce.async.bulk.tensor.<n>d.global.shared::cta.<op>.tile.bulk_group [tmap, {coords}], [src]``:
        atomically reduce a shared-memory tile into the tensor (element type from the tensor map)."""
        self.emit("cp.reduce.async.bulk.tensor", tensor_ref(tmap, coords), address(src_smem), policy, pred=pred,
                  dim=_dim(coords), op=op, load_mode="tile", hint=policy is not None)

    def tensor_prefetch(self, tmap, coords, *, policy=None, im2col_offsets=None, pred=None):
        """``cp.async.bulk.prefetch.tensor.<n>d.L2.global.{tile|im2col} [tmap, {coords}]{, {offsets}}``."""
        self.emit("cp.async.bulk.prefetch.tensor", tensor_ref(tmap, coords), _offsets(im2col_offsets), policy,
                  pred=pred, dim=_dim(coords), load_mode="tile" if im2col_offsets is None else "im2col",
                  hint=policy is not None)

    def bulk_commit_group(self, *, pred=None):
        """``cp.async.bulk.commit_group``: close the thread's current bulk group."""
        self.emit("cp.async.bulk.commit_group", pred=pred)

    def bulk_wait_group(self, pending: int, *, read: bool = False, pred=None):
        """``cp.async.bulk.wait_group{.read} N``: wait until at most N bulk groups are pending.
        ``read=True`` only waits until the shared-memory sources may be reused, not until the
        writes are visible (pk-design 5: signal only after the full wait)."""
        self.emit("cp.async.bulk.wait_group", pending, pred=pred, read=read)

    # -------------------------------------------------------------- multimem (multicast addresses)
    def multimem_ld_reduce(self, op, ty, addr, *, sem, scope, vec: int = 1, acc_f32: bool = False, name=None):
        """``multimem.ld_reduce.<sem>.<scope>.global.<op>{.acc::f32}{.vN}.<ty> d, [mc_addr]``: load the
        reduction over every rank's copy through a multicast address."""
        ty = ptx_type(ty)
        d = self.reg(ty, name or "mm") if vec == 1 else self.regs(ty, vec, name or "mm")
        self.emit("multimem.ld_reduce", d, address(addr), types=(ty,), sem=sem, scope=scope, space="global",
                  op=op, acc="acc::f32" if acc_f32 else None, vec=_VEC.get(vec, f"v{vec}"))
        return d

    def multimem_st(self, ty, addr, value, *, sem, scope):
        """``multimem.st.<sem>.<scope>.global{.vN}.<ty> [mc_addr], value``: store to every rank's copy."""
        n = len(value) if isinstance(value, (Vec, list, tuple)) else 1
        self.emit("multimem.st", address(addr), value, types=(ty,), sem=sem, scope=scope, space="global",
                  vec=_VEC.get(n, f"v{n}"))

    def multimem_red(self, op, ty, addr, value, *, sem, scope):
        """``multimem.red.<sem>.<scope>.global.<op>{.vN}.<ty> [mc_addr], value``: reduce into every copy."""
        n = len(value) if isinstance(value, (Vec, list, tuple)) else 1
        self.emit("multimem.red", address(addr), value, types=(ty,), sem=sem, scope=scope, space="global",
                  op=op, vec=_VEC.get(n, f"v{n}"))
