"""Builder methods for synchronization: barriers, fences, atomics, warp votes and shuffles, mbarriers
(PTX ISA 9.7.12). Memory-ordering arguments are passed through exactly as given."""
from __future__ import annotations

from .types import b32, b64, pred as PRED, ptx_type, u32
from .ops_data import address
from .values import Pipe, Reg, Sink


class SyncOps:
    # -------------------------------------------------------------- CTA and cluster barriers
    def bar_sync(self, barrier_id=0, count=None, *, pred=None) -> None:
        """``bar.sync id{, count}``: wait until ``count`` threads (default: the whole CTA) arrive at ``id``."""
        self.emit("bar.sync", barrier_id, count, pred=pred)

    def bar_arrive(self, barrier_id, count, *, pred=None) -> None:
        """``bar.arrive id, count``: arrive at named barrier ``id`` without waiting."""
        self.emit("bar.arrive", barrier_id, count, pred=pred)

    def barrier_sync(self, barrier_id=0, count=None, *, aligned: bool = True) -> None:
        """``barrier.sync{.aligned} id{, count}``."""
        self.emit("barrier.sync", barrier_id, count, aligned=aligned)

    def barrier_arrive(self, barrier_id, count, *, aligned: bool = True) -> None:
        """``barrier.arrive{.aligned} id, count``."""
        self.emit("barrier.arrive", barrier_id, count, aligned=aligned)

    def cluster_arrive(self, *, sem=None, aligned: bool = True) -> None:
        """``barrier.cluster.arrive{.release|.relaxed}{.aligned}``."""
        self.emit("barrier.cluster.arrive", sem=sem, aligned=aligned)

    def cluster_wait(self, *, acquire: bool = True, aligned: bool = True) -> None:
        """``barrier.cluster.wait{.acquire}{.aligned}``."""
        self.emit("barrier.cluster.wait", sem="acquire" if acquire else None, aligned=aligned)

    # -------------------------------------------------------------- fences
    def membar(self, level) -> None:
        """``membar.{cta,gl,sys}`` (equivalent to fence.sc at that scope)."""
        self.emit("membar", level=level)

    def fence(self, sem, scope) -> None:
        """``fence.{sc|acq_rel}.<scope>``."""
        self.emit("fence", sem=sem, scope=scope)

    def fence_proxy_async(self, space=None) -> None:
        """``fence.proxy.async{.shared::cta|.shared::cluster|.global}``: orders generic-proxy accesses
        against async-proxy ones (TMA, bulk copies, wgmma operand reads)."""
        self.emit("fence.proxy.async", space=space)

    def fence_proxy_alias(self) -> None:
        """``fence.proxy.alias``: between accesses to one buffer through two virtual addresses."""
        self.emit("fence.proxy.alias")

    def fence_proxy_tensormap_release(self, scope) -> None:
        """``fence.proxy.tensormap::generic.release.<scope>``: after writing a tensor map in memory."""
        self.emit("fence.proxy.tensormap.release", scope=scope)

    def fence_proxy_tensormap_acquire(self, addr, scope, size: int = 128) -> None:
        """``fence.proxy.tensormap::generic.acquire.<scope> [addr], 128``: before using it."""
        self.emit("fence.proxy.tensormap.acquire", address(addr), size, scope=scope)

    def fence_mbarrier_init(self) -> None:
        """``fence.mbarrier_init.release.cluster``: publish mbarrier.init to the cluster."""
        self.emit("fence.mbarrier_init")

    # -------------------------------------------------------------- atomics and reductions
    def atom(self, op, ty, addr, value, swap=None, *, sem=None, scope=None, space=None, policy=None,
             into=None, name=None, pred=None):
        """``atom{.sem}{.scope}{.space}.<op>{.noftz}.<ty> d, [addr], value{, swap}``; returns the old value.
        For ``op='cas'``, ``value`` is the expected value and ``swap`` the new one."""
        ty = ptx_type(ty)
        d = self._dest(ty, into, name)
        self.emit("atom", d, address(addr), value, swap, policy, types=(ty,), pred=pred, sem=sem,
                  scope=scope, space=space, op=op, noftz=(ty.bits == 16 or ty.kind == "fx2") and op == "add",
                  hint=policy is not None)
        return d

    def red(self, op, ty, addr, value, *, sem=None, scope=None, space=None, policy=None, pred=None) -> None:
        """``red{.sem}{.scope}{.space}.<op>{.noftz}.<ty> [addr], value``: an atomic without a result."""
        ty = ptx_type(ty)
        self.emit("red", address(addr), value, policy, types=(ty,), pred=pred, sem=sem, scope=scope,
                  space=space, op=op, noftz=(ty.bits == 16 or ty.kind == "fx2") and op == "add",
                  hint=policy is not None)

    # -------------------------------------------------------------- warp-level
    def shfl(self, mode, value, lane_or_delta, clamp, mask=0xFFFFFFFF, *, name=None) -> Reg:
        """``shfl.sync.<mode>.b32 d, value, b, c, mask``."""
        d = self.reg(b32, name or "shfl")
        self.emit("shfl.sync", d, value, lane_or_delta, clamp, mask, mode=mode)
        return d

    def vote(self, mode, cond, mask=0xFFFFFFFF, *, name=None):
        """``vote.sync.<mode>.{pred|b32} d, cond, mask`` (``ballot`` returns a .b32 mask)."""
        ty = b32 if str(mode) == "ballot" else PRED
        d = self.reg(ty, name or "vote")
        self.emit("vote.sync", d, cond, mask, types=(ty,), mode=mode)
        return d

    def redux(self, op, ty, value, mask=0xFFFFFFFF, *, name=None):
        """``redux.sync.<op>.<ty> d, value, mask``: warp-wide integer reduction."""
        ty = ptx_type(ty)
        d = self.reg(ty, name or "redux")
        self.emit("redux.sync", d, value, mask, types=(ty,), op=op)
        return d

    def elect(self, mask=0xFFFFFFFF, *, name=None):
        """``elect.sync _|p, mask``: true in exactly one active lane of ``mask``."""
        p = self.reg(PRED, name or "elected")
        self.emit("elect.sync", Pipe(Sink(b32), p), mask)
        return p

    def activemask(self, *, name=None):
        """``activemask.b32 d``."""
        d = self.reg(b32, name or "active")
        self.emit("activemask", d)
        return d

    def nanosleep(self, ns) -> None:
        """``nanosleep.u32 ns``: a hint to back off, up to about ``ns`` nanoseconds."""
        self.emit("nanosleep", ns)

    def trap(self, *, pred=None) -> None:
        self.emit("trap", pred=pred)

    def exit(self, *, pred=None) -> None:
        self.emit("exit", pred=pred)

    def ret(self, *, pred=None) -> None:
        self.emit("ret", pred=pred)

    def griddepcontrol(self, action) -> None:
        """``griddepcontrol.{launch_dependents|wait}`` (programmatic dependent launch)."""
        self.emit("griddepcontrol", action=action)

    # -------------------------------------------------------------- mbarrier (shared-memory barriers)
    def mbarrier_init(self, addr, count, *, space="shared::cta") -> None:
        """``mbarrier.init.shared::cta.b64 [addr], count``."""
        self.emit("mbarrier.init", address(addr), count, space=space)

    def mbarrier_inval(self, addr, *, space="shared::cta") -> None:
        self.emit("mbarrier.inval", address(addr), space=space)

    def mbarrier_arrive(self, addr, count=None, *, sem=None, scope=None, space="shared::cta", drop=False,
                        pred=None):
        """``mbarrier.arrive{_drop}{.sem.scope}.<space>.b64 state, [addr]{, count}``; returns the state
        register (a sink for ``space='shared::cluster'``, where no state comes back)."""
        state = Sink(b64) if space == "shared::cluster" else self.reg(b64, "mbstate")
        self.emit("mbarrier.arrive_drop" if drop else "mbarrier.arrive", state, address(addr), count,
                  pred=pred, sem=sem, scope=scope, space=space)
        return state

    def mbarrier_arrive_expect_tx(self, addr, tx_bytes, *, sem=None, scope=None, space="shared::cta",
                                  pred=None):
        """``mbarrier.arrive.expect_tx{.sem.scope}.<space>.b64 state, [addr], tx``."""
        state = Sink(b64) if space == "shared::cluster" else self.reg(b64, "mbstate")
        self.emit("mbarrier.arrive.expect_tx", state, address(addr), tx_bytes, pred=pred, sem=sem,
                  scope=scope, space=space)
        return state

    def mbarrier_expect_tx(self, addr, tx_bytes, *, sem=None, scope=None, space="shared::cta",
                           pred=None) -> None:
        """``mbarrier.expect_tx{.sem.scope}.<space>.b64 [addr], tx``."""
        self.emit("mbarrier.expect_tx", address(addr), tx_bytes, pred=pred, sem=sem, scope=scope, space=space)

    def mbarrier_complete_tx(self, addr, tx_bytes, *, sem=None, scope=None, space="shared::cta") -> None:
        self.emit("mbarrier.complete_tx", address(addr), tx_bytes, sem=sem, scope=scope, space=space)

    def mbarrier_test_wait(self, addr, state_or_parity, *, parity: bool, sem=None, scope=None,
                           space="shared::cta", name=None):
        """``mbarrier.test_wait{.parity}{.sem.scope}.<space>.b64 p, [addr], state``: non-blocking test."""
        p = self.reg(PRED, name or "mbdone")
        self.emit("mbarrier.test_wait.parity" if parity else "mbarrier.test_wait", p, address(addr),
                  state_or_parity, sem=sem, scope=scope, space=space)
        return p

    def mbarrier_try_wait(self, addr, state_or_parity, *, parity: bool, sem=None, scope=None,
                          space="shared::cta", suspend_hint=None, name=None):
        """``mbarrier.try_wait{.parity}{.sem.scope}.<space>.b64 p, [addr], state{, hint}``: waits a
        bounded, hardware-chosen time; p says whether the phase completed."""
        p = self.reg(PRED, name or "mbdone")
        self.emit("mbarrier.try_wait.parity" if parity else "mbarrier.try_wait", p, address(addr),
                  state_or_parity, suspend_hint, sem=sem, scope=scope, space=space)
        return p

    def mbarrier_pending_count(self, state, *, name=None):
        d = self.reg(u32, name or "pending")
        self.emit("mbarrier.pending_count", d, state)
        return d
