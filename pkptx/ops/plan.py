"""Plans: what a host op builds once and then only launches.

A plan is made on an op's first call with a given (op, buffers, shapes, dtypes, layout, world, options)
and holds everything the call needs: the loaded kernel, its grid, tensor maps, the flag arrays and
scratch buffers it owns, and its launches with their arguments packed once
(:class:`pkptx.launch.PreparedLaunch`). A later call is a dict lookup and the launches, and the same
launches are what a CUDA graph captures: nothing a kernel needs from earlier calls is an argument
(:mod:`pkptx.templates.progress` keeps it in device memory), so a captured plan replays correctly.

Plans live per symmetric heap (:class:`HeapOps`, which also holds the heap's progress flags) in a cache
of at most :data:`MAX_PLANS`, least recently used out; an evicted plan frees what it owns, and the heap
frees everything when it closes. Keys are the same on every rank (heap offsets, shapes, options; never
local addresses), because making a plan may allocate from the heap, which is collective. What depends
on local arrays (tensor maps of the operands) lives inside the plan, keyed by address, and costs no
collective work. A plan is never made while its stream is being captured (allocation and module
loading invalidate a capture): call the op once before capturing; plans used during a capture are
pinned for the heap's life, since the graph keeps their memory in use.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable

from ..errors import CaptureError, DeviceTimeoutError
from ..launch import Device, LaunchConfig
from ..launch.capture_state import capturing
from ..launch.device import as_stream
from ..launch.driver import call
from ..launch.flags import FlagArray
from ..launch.occupancy import persistent_grid
from ..launch.status import device_status
from ..launch.symmetric import SymmetricBuffer, SymmetricHeap
from ..templates.progress import flag_words
from .common import ArgumentError

MAX_PLANS = 64          # per heap
MAX_LOCAL = 8           # local-operand variants per plan (tensor maps of different arrays)
MAX_CALLS = 64          # operand variants kept per op and heap by run_kept (a model's layers each have their own)


class Plan:
    """``steps`` (callables taking the stream) and what the plan owns (SymmetricBuffers, FlagArrays),
    plus the launches that depend on local operands, made on demand by :meth:`local` (at most
    ``max_local`` of them, the oldest out)."""

    def __init__(self, steps=(), owned=(), *, max_local: int = MAX_LOCAL):
        self.steps, self.owned = tuple(steps), list(owned)
        self.pinned = False
        self.max_local = max_local
        self._local: OrderedDict = OrderedDict()

    def local(self, key, make: Callable[[], tuple] | None = None) -> tuple | None:
        """The steps for local operands identified by ``key``; on a miss ``make()``'s (host-only work),
        kept, or None when no ``make`` is given."""
        steps = self._local.get(key)
        if steps is None and make is not None:
            steps = self._local[key] = tuple(make())
            if len(self._local) > self.max_local:
                self._local.popitem(last=False)
        return steps

    def release(self) -> None:
        """Free what the plan owns (once no kernel uses it: the caller synchronised)."""
        owned, self.owned = self.owned, []
        for thing in owned:
            thing.free()


_unchecked: set = set()         # HeapOps with launches since the last status check
_states: dict = {}              # SymmetricHeap -> HeapOps


class HeapOps:
    """Per heap: its progress flags (what every persistent kernel counts on) and its plans."""

    def __init__(self, heap: SymmetricHeap):
        self.heap = heap
        self.flags = FlagArray(heap, flag_words(heap.world.size))
        with heap.current_context():
            self.device = Device.current()
            self.status = device_status(self.device)      # made now, never inside a capture
        self.plans: OrderedDict = OrderedDict()
        self._kept: dict = {}
        heap.on_reset(self._reset)
        heap.on_close(self._close)

    # -------------------------------------------------------------------------- plans
    def get(self, key):
        """The plan for ``key``, or None (a hit also marks it recently used)."""
        plan = self.plans.get(key)
        if plan is not None:
            self.plans.move_to_end(key)
        return plan

    def make(self, what: str, key, stream, build: Callable[[], Plan]) -> Plan:
        """Build, cache and return the plan for ``key`` (every rank in the same order: it may allocate
        from the heap); CaptureError while ``stream`` is being captured."""
        refuse_capture(what, stream)
        plan = build()
        self.plans[key] = plan
        if len(self.plans) > MAX_PLANS:
            self._evict()
        return plan

    def kept(self, key, make: Callable[[], object]):
        """What the heap's ops share across plans (an op's receive buffers and flag arrays, a table of
        tensor maps over its buffers): ``make()`` on first use of ``key`` (every rank in the same order:
        it may allocate from the heap), then the same object until the heap closes. A FlagArray kept
        here is zeroed by ``heap.reset()`` with the heap's own flags."""
        thing = self._kept.get(key)
        if thing is None:
            thing = self._kept[key] = make()
        return thing

    def _evict(self) -> None:
        victim = next((k for k, p in self.plans.items() if not p.pinned), None)
        if victim is None:
            return
        plan = self.plans.pop(victim)
        if plan.owned:
            with self.heap.current_context():
                call("cuCtxSynchronize")         # its kernels are done before its memory is reused
            plan.release()

    def run(self, plan: Plan, steps, stream) -> None:
        """Queue ``steps`` (a plan's) on ``stream``; a plan that owns memory is pinned when the stream is
        capturing (a plan that owns none may go: the graph holds copies of its arguments)."""
        _unchecked.add(self)
        if plan.owned and not plan.pinned and capturing(as_stream(stream).cu):
            plan.pinned = True
        for step in steps:
            step(stream)

    # ---------------------------------------------------------------------- launches
    @staticmethod
    def layout_args(name: str, buf: SymmetricBuffer) -> dict:
        return {f"{name}_peers": buf.peer_table_ptr, f"{name}_mc": buf.multicast_ptr or 0}

    def prepare(self, kernel, timeout_ns: int, *, work: int | None = None, num_comm_sms: int | None = None,
                **values):
        """The prepared launch of a persistent kernel on this heap's progress flags, at the block and
        shared memory the kernel declares. The grid is what can be resident in this context, capped at
        ``work`` blocks; ``num_comm_sms`` (default: every block) must leave a compute block."""
        nblocks = persistent_grid(kernel, work=work)
        if num_comm_sms is not None and num_comm_sms >= nblocks:
            raise ArgumentError(f"{kernel.compiled.entry}: num_comm_sms={num_comm_sms} leaves no compute block of "
                                f"the {nblocks} this context can hold at once")
        args = dict(values, rank=self.heap.world.rank, world=self.heap.world.size, status=self.status.ptr,
                    timeout_ns=timeout_ns, num_comm_sms=nblocks if num_comm_sms is None else num_comm_sms,
                    **self.layout_args("flags", self.flags.buffer))
        config = LaunchConfig(nblocks, kernel.threads)
        return kernel.prepare(config, **args)

    def launch(self, kernel, stream, timeout_ns: int, **options) -> None:
        """Prepare and queue one launch now (for ops without a plan of their own)."""
        _unchecked.add(self)
        self.prepare(kernel, timeout_ns, **options).launch(stream)

    # ------------------------------------------------------------------- heap events
    def _reset(self) -> None:
        """Inside SymmetricHeap.reset: every counter this heap's kernels keep back to 0 on this rank: the
        heap's flags, and the flag arrays its plans own and its ops keep."""
        self.flags.zero()
        owned = [thing for plan in self.plans.values() for thing in plan.owned]
        for thing in owned + list(self._kept.values()):
            if isinstance(thing, FlagArray):
                thing.zero()
        self.status.clear()
        _unchecked.discard(self)

    def _close(self) -> None:
        _states.pop(self.heap, None)
        _unchecked.discard(self)
        self.plans.clear()          # the heap's memory goes with it: nothing to free one by one
        self._kept.clear()


def refuse_capture(what: str, stream) -> None:
    """CaptureError when ``stream`` is being captured: what follows would invalidate the capture."""
    if capturing(as_stream(stream).cu):
        raise CaptureError(f"{what}: first call with these arguments inside a stream capture; call it once "
                           "before capturing (its plan loads kernels and allocates flags and scratch, which "
                           "would invalidate the capture)")


def lookup(what: str, owner, world, key) -> tuple[HeapOps | None, Plan | None]:
    """The hot path: the HeapOps of ``owner`` (a SymmetricBuffer, or a SymmetricHeap) and the plan for
    ``key``, or (None, None) when either is still to be made (the caller then checks its arguments,
    without a GPU, before :func:`heap_ops`)."""
    kind = type(owner)
    state = _states.get(owner.heap if kind is SymmetricBuffer else owner if kind is SymmetricHeap else None)
    if state is None:
        return None, None
    heap = state.heap
    if heap.world is not world:
        raise ArgumentError(f"{what}: buf belongs to another World than the one passed")
    if heap.poisoned is not None or heap.closed:
        heap.check_usable(what)
    return state, state.get(key)


def heap_ops(what: str, buf, world, stream=None) -> HeapOps:
    """The HeapOps of ``buf``'s heap (``buf`` a SymmetricBuffer, or the SymmetricHeap itself; made on first
    use, collectively, never while ``stream`` captures), after checking that the heap is ``world``'s and
    usable."""
    if isinstance(buf, SymmetricHeap):
        heap = buf
    elif isinstance(buf, SymmetricBuffer):
        heap = buf.heap
    else:
        raise ArgumentError(f"{what}: buf must be a SymmetricBuffer (SymmetricHeap.alloc), got {type(buf).__name__}")
    if heap.world is not world:
        raise ArgumentError(f"{what}: buf belongs to another World than the one passed")
    if heap.poisoned is not None or heap.closed:
        heap.check_usable(what)
    state = _states.get(heap)
    if state is None:
        refuse_capture(what, stream)
        state = _states[heap] = HeapOps(heap)
    return state


class Kept:
    """A kept call of an op that launches on a heap: its prepared launches (every argument packed once:
    nothing a kernel needs from earlier calls is an argument) and what the call returns."""
    __slots__ = ("launches", "result")

    def __init__(self, launches, result=None):
        self.launches, self.result = tuple(launch.launch for launch in launches), result

    def __call__(self, stream) -> None:
        for launch in self.launches:
            launch(stream)


def run_kept(op: str, heap, world, key, stream, make: Callable[[], tuple]) -> Kept:
    """Queue one call of ``op`` on ``heap``: the Kept for ``key`` (the call's operands and options, as
    :func:`.launches.launch_key` makes it; None: never kept) in the op's plan on the heap, else
    ``make()``'s, which returns (the HeapOps of the heap the launches use, the Kept) after every check.
    The plan (one per op and heap, a key every rank shares) owns nothing; the heap's close drops it and
    what it keeps (MAX_CALLS, the oldest out). A miss on one rank and a hit on another are both safe:
    what ``make`` allocates collectively is keyed by shapes, which every rank shares."""
    state, plan = lookup(op, heap, world, op)
    steps = plan.local(key) if plan is not None and key is not None else None
    if steps is None:
        refuse_capture(op, stream)             # a first call allocates and loads
        state, step = make()
        plan = state.get(op) or state.make(op, op, stream, lambda: Plan(max_local=MAX_CALLS))
        steps = (step,) if key is None else plan.local(key, lambda: (step,))
    state.run(plan, steps, stream)
    return steps[0]


def heap_state(buf: SymmetricBuffer) -> HeapOps:
    """The HeapOps of ``buf``'s heap (for ops that launch without a plan of their own)."""
    return heap_ops("launch", buf, buf.heap.world)


def buffer_key(buf) -> tuple | None:
    """What identifies a buffer in a plan key: the same on every rank (heap and offset), and its shape and
    dtype (anything else passed as a buffer gets a key that no plan has, and is refused by the checks)."""
    if buf is None:
        return None
    if type(buf) is SymmetricBuffer:
        return (id(buf.heap), buf.offset, buf.shape, buf.dtype)
    return (id(buf),)


def check_status(device, what: str) -> None:
    """Raise the DeviceTimeoutError a kernel recorded, after marking every heap launched on since the
    last check as out of step (it refuses ops until ``heap.reset()``)."""
    try:
        device_status(device).check(what)
    except DeviceTimeoutError as exc:
        for state in list(_unchecked):
            state.heap.poison(str(exc).splitlines()[0])
        _unchecked.clear()
        raise
    _unchecked.clear()
