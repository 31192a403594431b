"""Builder methods for warpgroup matrix multiply-accumulate and register reallocation (sm_90a only)."""
from __future__ import annotations

from ..errors import PTXBuildError
from .types import ptx_type
from .values import Vec


class MmaOps:
    def wgmma_fence(self) -> None:
        """``wgmma.fence.sync.aligned``: before the first wgmma that reads registers written since."""
        self.emit("wgmma.fence")

    def wgmma_commit_group(self) -> None:
        """``wgmma.commit_group.sync.aligned``."""
        self.emit("wgmma.commit_group")

    def wgmma_wait_group(self, pending: int) -> None:
        """``wgmma.wait_group.sync.aligned N``: wait until at most N wgmma groups are pending."""
        self.emit("wgmma.wait_group", pending)

    def wgmma(self, acc: Vec, a, b_desc, *, n: int, dtype, atype, btype=None, scale_d=1, scale_a: int = 1,
              scale_b: int = 1, trans_a: int | None = 0, trans_b: int | None = 0) -> None:
        """``wgmma.mma_async.sync.aligned.m64n<n>k<k>.<dtype>.<atype>.<btype> {acc}, a, b_desc, scale_d,
        scale_a, scale_b{, trans_a}{, trans_b}``.

        ``a`` is a 64-bit shared-memory descriptor register, or a Vec of 4 .b32 registers (A from
        registers). ``scale_d`` is a predicate (or 0/1): 0 overwrites ``acc``, 1 accumulates.
        Transpose immediates apply to 16-bit inputs only and are dropped for other types; .s8/.u8
        inputs (with .s32 accumulators) take no scale-a/scale-b immediates, so those are dropped too.
        """
        atype = ptx_type(atype)
        btype = ptx_type(btype or atype)
        k = {"f16": 16, "bf16": 16, "tf32": 8, "e4m3": 32, "e5m2": 32, "s8": 32, "u8": 32}.get(atype.name)
        if k is None:
            raise PTXBuildError(f"wgmma: unsupported A type .{atype}")
        register_a = isinstance(a, Vec)
        if register_a and trans_a not in (0, None):
            raise PTXBuildError("wgmma with A in registers has no transpose-A operand (A's fragment layout is "
                                "fixed); transpose A when writing its registers, or use a descriptor")
        if atype.bits != 16:
            trans_a = trans_b = None
        if atype.name in ("s8", "u8"):           # integer wgmma has no scale-a/scale-b immediates
            scale_a = scale_b = None
        operands = [acc, a, b_desc, scale_d, scale_a, scale_b]
        operands += [trans_b] if register_a else [trans_a, trans_b]
        self.emit("wgmma.mma_async.rs" if register_a else "wgmma.mma_async.ss", *operands,
                  types=(dtype, atype, btype), shape=f"m64n{n}k{k}")

    def setmaxnreg(self, action: str, count: int) -> None:
        """``setmaxnreg.{inc|dec}.sync.aligned.u32 count``: move registers between warpgroups. Takes effect
        only when the kernel declares a thread-count bound (Kernel(max_threads=...))."""
        self.emit("setmaxnreg", count, action=action)
