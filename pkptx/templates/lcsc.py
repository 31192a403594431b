"""The Load-Compute-Store-Communicate template (pk-design 4): one persistent kernel shape for every
fused multi-GPU operator.

A kernel author supplies up to four role functions, each called once per task with ``(ctx, task)``,
and the shared-memory layout; the template emits the rest: parameters (world, deadline, PGLs, tensor
maps, the runtime ``num_comm_sms``), shared-memory carving and mbarrier setup, the split of blocks into
compute workers and communicators, the warpgroup specialisation with register rebalancing, and the
task loops (``for task in range(offset, num_tasks, stride)``, as :mod:`.schedule` models; or, with a
task counter, tasks drawn one at a time as blocks free up, see :meth:`Template.build`).

Blocks take their role from their launch ticket (:mod:`.progress`), so the grid may be larger than what
is resident: communicators that wait on compute blocks take the last tickets (the default), and
communicators that never wait take the first (``comm_first=True``, when compute blocks wait on them).
Hosts size the grid with :func:`pkptx.launch.occupancy.persistent_grid`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from ..errors import PTXBuildError
from ..isa import Builder, Kernel, Param, Params, Reg, Scope, Sem, address, b32, u32
from ..primitives import Pipeline, StageRing, wait_parity
from ..primitives.layout import BoundLayout, ParallelLayout, WorldParams
from ..primitives.p2p import BoundTensorMaps, TensorMapTable
from ..primitives.sync import Deadline
from ..primitives.tma import tensor_map_param
from ..toolchain import REGISTER_FILE
from .progress import FLAGS, take_ticket

WARPGROUP = 128
WINDOW_SLACK = 1024
TASK_STAGES = 2                              # drawn tasks the loader may hold ahead of the consumers
TASK_FULL, TASK_EMPTY, TASK_SLOTS = "task_full", "task_empty", "task_slots"
COMM_TASK_SLOT = "comm_task_slot"            # a communicator block's drawn task (:meth:`Template._draw_block`)
Role = Callable[["Ctx", Reg], None]


@dataclass(frozen=True)
class Buffer:
    """A static shared-memory buffer of the kernel."""
    name: str
    nbytes: int
    align: int = 128


@dataclass(frozen=True)
class Ring:
    """``stages`` mbarriers expecting ``arrivals`` arrivals per phase."""
    name: str
    stages: int
    arrivals: int = 1


@dataclass
class Ctx:
    """What the template gives a role function: the builder, the world, the parameters (``p``:
    :class:`pkptx.isa.Params`, checked against the template's at build time), bound
    PGLs and tensor maps, shared buffers (as .u32 shared addresses), mbarrier rings, and the thread's
    index within its role (``role_tid`` of ``role_threads``). With tickets (:mod:`.progress`): ``ticket``,
    the counters the previous launch left (``launch_base``, ``rounds_base``) and ``epoch``, this
    launch's number on the heap (the same on every rank; flags stamped with it need no host-side count,
    so graph replays stay correct). ``launch``: for a kernel that counts its own launches in its flags,
    this launch's number among them, which its prologue sets (:func:`.progress.read_launch_count`) and
    its roles wait on. Registers of a kernel's own (loop counters, a tile's bounds) live in the part
    that makes them, not here."""
    b: Builder
    kernel: Kernel
    rank: Reg
    world: Reg
    deadline: Deadline
    layouts: dict[str, BoundLayout]
    tmaps: dict[str, BoundTensorMaps]
    smem: dict[str, Reg]
    rings: dict[str, StageRing]
    tid: Reg
    ticket: Reg | None = None
    launch_base: Reg | None = None
    rounds_base: Reg | None = None
    epoch: Reg | None = None
    launch: Reg | None = None
    closed: bool = False
    role_tid: Reg | None = None
    role_threads: int = 0

    @property
    def p(self) -> Params:
        return self.b.params


@dataclass(frozen=True)
class Template:
    name: str
    params: tuple = ()
    layouts: tuple[ParallelLayout, ...] = ()
    tensor_maps: tuple[TensorMapTable, ...] = ()
    buffers: tuple[Buffer, ...] = ()            # static .shared (48 KB at most in all)
    dynamic_buffers: tuple[Buffer, ...] = ()    # carved, in order, from the dynamic window
    comm_buffers: tuple[Buffer, ...] = ()       # carved from the window's start too: for communicator blocks
    rings: tuple[Ring, ...] = ()
    consumers: int = 2                   # consumer warpgroups per compute block
    producer_regs: int = 40
    consumer_regs: int | None = None     # with rebalance; None: all the producer leaves (:attr:`consumer_budget`)
    rebalance: bool = False              # emit setmaxnreg (needs sm_90a)
    comm_threads: int | None = None      # threads per block when there is no compute side
    comm_first: bool = False             # communicators take the first tickets (they never wait)
    progress: bool = True                # roles from launch tickets (off only where no block ever waits)
    prefetched: tuple[str, ...] = ()     # by-value tensor-map parameters thread 0 prefetches first of all

    @property
    def dynamic_smem(self) -> int:
        """Bytes of dynamic shared memory the carvings need, with the slack for aligning the window. A
        block is a compute block or a communicator, so the two sides' buffers share the window."""
        ends = [self._carve(side)[-1][0] for side in (self.dynamic_buffers, self.comm_buffers) if side]
        return max(ends) + WINDOW_SLACK if ends else 0

    @staticmethod
    def _carve(buffers) -> list[tuple[int, int]]:
        """(end offset, start offset) of each buffer, in order from the window's start."""
        out, cursor = [], 0
        for buf in buffers:
            start = -(-cursor // buf.align) * buf.align
            cursor = start + buf.nbytes
            out.append((cursor, start))
        return out

    @property
    def all_layouts(self) -> tuple[ParallelLayout, ...]:
        """The kernel's PGLs and the progress flags every launch counts on."""
        return self.layouts + ((FLAGS,) if self.progress and FLAGS not in self.layouts else ())

    @property
    def threads(self) -> int:
        return self.comm_threads or WARPGROUP * (1 + self.consumers)

    @property
    def consumer_budget(self) -> int:
        """Registers per consumer thread after setmaxnreg: ``consumer_regs``, or the most (a multiple
        of 8, at most 256) that the producer warpgroup's ``producer_regs`` leave of the SM's 64K.
        Checked at build: a setmaxnreg.inc the register file cannot satisfy waits forever, and no
        deadline can end it."""
        most = min((REGISTER_FILE - WARPGROUP * self.producer_regs) // (WARPGROUP * self.consumers) // 8 * 8, 256)
        regs = most if self.consumer_regs is None else self.consumer_regs
        if regs > most or regs % 8 or self.producer_regs % 8 or not 24 <= self.producer_regs <= regs:
            raise PTXBuildError(f"{self.name}: setmaxnreg budget {self.producer_regs} producer + "
                                f"{self.consumers} x {regs} consumer registers per thread does not fit "
                                f"{REGISTER_FILE} (multiples of 8; consumers at most {most})")
        return regs

    def kernel_params(self) -> list[Param]:
        out = list(self.params) + WorldParams.params() + Deadline.params() + [Param("num_comm_sms", u32)]
        for lay in self.all_layouts:
            out += lay.params()
        for t in self.tensor_maps:
            out += t.params()
        return out

    def build(self, *, num_tasks: Callable[[Ctx], object] | None = None, loader: Role | None = None,
              consumer: Role | None = None, storer: Role | None = None,
              comm_tasks: Callable[[Ctx], object] | None = None, communicator: Role | None = None,
              rank_major_comm: bool = False, prologue: Callable[[Ctx], None] | None = None,
              epilogue: Callable[[Ctx], None] | None = None, task_counter: Callable[[Ctx], Reg] | None = None,
              comm_joins: bool = False, comm_counter: Callable[[Ctx], Reg] | None = None,
              compute_joins: bool = False) -> Kernel:
        """Emit the kernel. Compute roles need ``num_tasks``; the communicator needs ``comm_tasks``.

        ``task_counter(ctx)``: the global address of a u32 that is 0 when the launch starts (the caller
        resets it between launches: :func:`.progress.close_barrier`'s ``leave``, or without tickets
        :func:`.progress.release_task_counter`). Compute tasks are then drawn from it one at a time, in
        order, by each block's loader as it frees up (``atom.relaxed.gpu.add``: it orders no data, only
        who does what), and handed to the block's other roles through a ring of :data:`TASK_STAGES` shared slots
        (:meth:`_draw`), instead of the fixed stride. ``comm_joins`` (with a counter): communicator
        blocks draw compute tasks too once their own walk is done, so SMs that finish communicating
        early are not left idle; their buffers are the compute side's again after a ``bar.sync``
        (communicators must have waited for their bulk copies' reads by the end of their walk).

        The mirror image, for communicators that wait on the compute side (they reduce what it made):
        ``comm_counter(ctx)`` (the same contract) hands out communicator tasks block by block
        (:meth:`_draw_block`), and ``compute_joins`` (with both counters) sends every compute block to
        the communicators' walk once no compute task is left to draw. Every compute task has then been
        drawn by a block that has started and will finish it without waiting, so a joined block waits
        only on work in progress."""
        has_compute = any((loader, consumer, storer))
        if has_compute and num_tasks is None:
            raise PTXBuildError(f"{self.name}: compute roles need num_tasks")
        if communicator is not None and comm_tasks is None:
            raise PTXBuildError(f"{self.name}: a communicator needs comm_tasks")
        if has_compute and self.comm_threads:
            raise PTXBuildError(f"{self.name}: comm_threads is for kernels without compute roles")
        if task_counter is not None and loader is None:
            raise PTXBuildError(f"{self.name}: drawn tasks need a loader (it draws them)")
        if comm_joins and not self.progress:
            raise PTXBuildError(f"{self.name}: comm_joins needs launch tickets (communicators take the first ones)")
        if comm_joins and task_counter is None:
            raise PTXBuildError(f"{self.name}: comm_joins needs a task_counter (joined blocks draw tasks)")
        if compute_joins and (task_counter is None or comm_counter is None or comm_joins):
            raise PTXBuildError(f"{self.name}: compute_joins needs a task_counter and a comm_counter (every task is "
                                "drawn), and not comm_joins")
        task_rings, task_buffers = (), ()
        if comm_counter is not None:
            task_buffers += (Buffer(COMM_TASK_SLOT, 4, 4),)
        if task_counter is not None:
            readers = WARPGROUP * self.consumers + (32 if storer is not None else 0)
            task_rings = (Ring(TASK_FULL, TASK_STAGES, 1), Ring(TASK_EMPTY, TASK_STAGES, readers))
            task_buffers += (Buffer(TASK_SLOTS, 4 * TASK_STAGES, 4),)
        # .reqntid, not .maxntid: the roles assume every thread is there, so launchers refuse a smaller block
        k = Kernel(self.name, self.kernel_params(), req_threads=self.threads, min_blocks=1,
                   target="sm_90a" if self.rebalance else None, dynamic_smem=self.dynamic_smem)
        b = k.builder()
        ctx = replace(self, rings=self.rings + task_rings, buffers=self.buffers + task_buffers)._context(k, b)
        if prologue:
            prologue(ctx)
        block, nblocks, ncomm = ctx.ticket, b.special("nctaid.x"), ctx.p.num_comm_sms
        workers = b.sub(u32, nblocks, ncomm, name="compute_workers")
        if self.comm_first:
            is_comm = b.setp("lt", u32, block, ncomm, name="is_comm")
            comm_worker, compute_worker = block, b.sub(u32, block, ncomm, name="compute_worker")
        else:
            is_comm = b.setp("ge", u32, block, workers, name="is_comm")
            comm_worker, compute_worker = b.sub(u32, block, workers, name="comm_worker"), block

        def communicate():
            if communicator is None:
                return
            if comm_counter is not None:
                self._draw_block(ctx, comm_counter(ctx), comm_tasks(ctx), communicator)
                return
            worker, stride = comm_worker, ncomm
            if rank_major_comm:
                worker = b.mad(u32, worker, ctx.world, ctx.rank, mode="lo", name="comm_first")
                stride = b.mul(u32, stride, ctx.world, mode="lo", name="comm_stride")
            self._walk(ctx, worker, stride, comm_tasks(ctx), communicator, ctx.tid, self.threads)

        draw = task_counter(ctx) if task_counter is not None else None
        if comm_joins:
            with b.if_then(is_comm, uniform=True):
                communicate()
                b.bar_sync(0)                # the communicators' buffers are the compute side's from here
            self._compute(ctx, None, None, num_tasks(ctx), loader, consumer, storer, draw)
        elif compute_joins:
            with b.if_then(b.not_("pred", is_comm, name="is_compute"), uniform=True):
                self._compute(ctx, None, None, num_tasks(ctx), loader, consumer, storer, draw)
                b.bar_sync(0)                # the whole block is done computing
            communicate()
        else:
            with b.if_else(is_comm, uniform=True) as (comm_arm, compute_arm):
                with comm_arm:
                    communicate()
                with compute_arm:
                    if has_compute:
                        self._compute(ctx, compute_worker, workers, num_tasks(ctx), loader, consumer, storer, draw)
        b.bar_sync(0)
        if epilogue:
            epilogue(ctx)
        if self.progress and not ctx.closed:
            raise PTXBuildError(f"{self.name}: a kernel with tickets must end with progress.close_barrier (it "
                                "leaves the launch counters for the next launch)")
        b.ret()
        return k

    # -------------------------------------------------------------------------------- pieces
    def _context(self, k: Kernel, b: Builder) -> Ctx:
        rank, world = WorldParams.load(b)
        deadline = Deadline.start(b, rank)
        tid = b.special("tid.x")
        if self.prefetched:     # the descriptors' fetch overlaps the barriers' setup, not the first load
            first_thread = b.setp("eq", u32, tid, 0, name="first_thread")
            for name in self.prefetched:
                b.prefetch(tensor_map_param(b, name), level="tensormap", pred=first_thread)
        layouts = {lay.name: lay.bind(b) for lay in self.all_layouts}
        tmaps = {t.name: t.bind(b) for t in self.tensor_maps}
        smem = {buf.name: b.mov(u32, k.shared(buf.name, buf.nbytes, buf.align), name=buf.name)
                for buf in self.buffers}
        if self.dynamic_buffers or self.comm_buffers:
            # The window's start is only 16-byte aligned in practice; round up at run time (the kernel
            # asks for WINDOW_SLACK extra bytes) so 128-byte-swizzled TMA tiles land 1024-aligned.
            raw = b.mov(u32, k.dynamic_shared(align=16), name="dynamic_raw")
            window = b.and_(b32, b.add(u32, raw, WINDOW_SLACK - 1), -WINDOW_SLACK & 0xFFFFFFFF, name="dynamic_smem")
            for side in (self.dynamic_buffers, self.comm_buffers):
                for buf, (_, start) in zip(side, self._carve(side)):
                    if buf.name in smem:
                        raise PTXBuildError(f"{self.name}: shared buffer {buf.name!r} is declared twice")
                    smem[buf.name] = b.add(u32, window, start, name=buf.name)
        rings = {r.name: StageRing(b.mov(u32, k.shared(r.name, 8 * r.stages, 8), name=r.name), r.stages)
                 for r in self.rings}
        if self.progress:
            ticket, launch_base, rounds_base = take_ticket(b, k, rank, layouts[FLAGS.name], tid)
            epoch = b.add(u32, rounds_base, 1, name="epoch")
        else:
            ticket, launch_base, rounds_base, epoch = b.special("ctaid.x"), None, None, None
        if self.rings:
            leader = b.setp("eq", u32, tid, 0, name="ring_leader")
            for spec, ring in zip(self.rings, rings.values()):
                ring.init(b, spec.arrivals, leader=leader)
            b.bar_sync(0)
        return Ctx(b, k, rank, world, deadline, layouts, tmaps, smem, rings, tid, ticket, launch_base, rounds_base,
                   epoch)

    @staticmethod
    def _walk(ctx: Ctx, first, stride, num_tasks, role: Role, role_tid, role_threads: int) -> None:
        """``for task in range(first, num_tasks, stride): role(ctx, task)`` with register bounds."""
        b = ctx.b
        task = b.mov(u32, first, name="task")
        sub = replace(ctx, role_tid=role_tid, role_threads=role_threads)
        with b.loop("tasks") as lp:
            lp.break_if(b.setp("ge", u32, task, num_tasks, name="tasks_done"))
            role(sub, task)
            b.add(u32, task, stride, into=task)

    @staticmethod
    def _draw(ctx: Ctx, counter, num_tasks, role: Role, role_tid, role_threads: int, *, drawer: bool) -> None:
        """``role(ctx, task)`` for each task this block draws from ``counter``, in a loop that ends at the
        first draw past ``num_tasks``.

        The drawer, lane 0 of the loader's warp (its other lanes have no part; a loader's work is its
        lane 0's, and a lane that exits on a timeout leaves no warp-mate waiting for it):
        ``atom.relaxed.gpu.global.add.u32 t, [counter], 1;`` (``min`` with num_tasks: past the end, the
        stop mark), a wait for the slot's empty barrier, ``st.shared.u32 [slots + 4*stage], t;
        mbarrier.arrive.shared::cta.b64 _, [full + 8*stage];`` (arrive's default release at CTA scope
        publishes the slot). Every other walking thread: the wait on the full barrier (acquire at CTA
        scope), ``ld.shared.u32``, ``mbarrier.arrive`` on the empty one. Their wait gives up at the
        deadline (as the k-block waits do, so no ``exit`` lands among the wgmma); a slot not filled by
        then (a drawer that timed out) reads as the stop mark, so the loop still ends.
        """
        b = ctx.b
        pipe = Pipeline((ctx.rings[TASK_FULL],), ctx.rings[TASK_EMPTY]).stepped(b)
        slots = ctx.smem[TASK_SLOTS]
        sub = replace(ctx, role_tid=role_tid, role_threads=role_threads)

        def loop():
            with b.loop("drawn_tasks") as lp:
                slot = pipe.at(b)
                at = address(b.mad(u32, slot.stage, 4, slots, mode="lo", name="task_slot"))
                if drawer:
                    drawn = b.atom("add", u32, address(counter), 1, sem=Sem.RELAXED, scope=Scope.GPU, space="global",
                                   name="drawn")
                    task = b.min(u32, drawn, num_tasks, name="drawn_task")
                    pipe.acquire(b, deadline=ctx.deadline, name="wait_task_slot")
                    b.st(u32, at, task, space="shared")
                    b.mbarrier_arrive(pipe.full_bar(b, slot.stage))
                else:
                    task = b.mov(u32, num_tasks, name="drawn_task")
                    filled = wait_parity(b, pipe.full_bar(b, slot.stage), slot.phase, deadline=ctx.deadline,
                                         abandon=True, name="wait_task")
                    b.ld(u32, at, space="shared", into=task, pred=filled)
                    pipe.release(b, slot)
                pipe.advance(b)
                lp.break_if(b.setp("ge", u32, task, num_tasks, name="tasks_done"))
                role(sub, task)

        if not drawer:
            loop()
            return
        with b.if_then(b.setp("eq", u32, role_tid, 0, name="task_drawer")):
            loop()

    def _draw_block(self, ctx: Ctx, counter, num_tasks, role: Role) -> None:
        """``role(ctx, task)`` with every thread of the block for each task it draws from ``counter``
        until one past ``num_tasks``: thread 0 ``atom.relaxed.gpu.global.add.u32`` and ``st.shared.u32``
        the task, ``bar.sync 0`` (orders the store before the block's loads), every thread
        ``ld.shared.u32``, ``bar.sync 0`` again (every read done before the next draw overwrites it)."""
        b = ctx.b
        slot = address(ctx.smem[COMM_TASK_SLOT])
        sub = replace(ctx, role_tid=ctx.tid, role_threads=self.threads)
        with b.loop("drawn_comm_tasks") as lp:
            with b.if_then(b.setp("eq", u32, ctx.tid, 0, name="comm_drawer")):
                b.st(u32, slot, b.atom("add", u32, address(counter), 1, sem=Sem.RELAXED, scope=Scope.GPU,
                                       space="global", name="drawn_comm"), space="shared")
            b.bar_sync(0)
            task = b.ld(u32, slot, space="shared", name="comm_task")
            b.bar_sync(0)
            lp.break_if(b.setp("ge", u32, task, num_tasks, name="comm_tasks_done"))
            role(sub, task)

    def _compute(self, ctx: Ctx, block, workers, num_tasks, loader, consumer, storer, counter=None) -> None:
        """The producer warpgroup (loader warp 0, storer warp 1) and the consumers, walking the tasks
        from ``block`` by ``workers``, or drawing them from ``counter`` (:meth:`_draw`)."""
        b = ctx.b

        def walk(role, role_tid, role_threads, drawer=False):
            if counter is None:
                self._walk(ctx, block, workers, num_tasks, role, role_tid, role_threads)
            else:
                self._draw(ctx, counter, num_tasks, role, role_tid, role_threads, drawer=drawer)

        warpgroup = b.shr(u32, ctx.tid, 7, name="warpgroup")
        is_producer = b.setp("eq", u32, warpgroup, 0, name="is_producer")
        with b.if_else(is_producer, uniform=True) as (producer_arm, consumer_arm):
            with producer_arm:
                if self.rebalance:
                    b.setmaxnreg("dec", self.producer_regs)
                warp = b.shr(u32, ctx.tid, 5, name="warp")
                lane = b.and_(b32, ctx.tid, 31, name="lane")
                for index, role in ((0, loader), (1, storer)):
                    if role is None:
                        continue
                    with b.if_then(b.setp("eq", u32, warp, index, name="is_role_warp"), uniform=True):
                        walk(role, lane, 32, drawer=index == 0)
            with consumer_arm:
                if self.rebalance:
                    b.setmaxnreg("inc", self.consumer_budget)
                if consumer is not None:
                    role_tid = b.sub(u32, ctx.tid, WARPGROUP, name="consumer_tid")
                    walk(consumer, role_tid, WARPGROUP * self.consumers)
