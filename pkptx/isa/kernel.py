"""A kernel: its entry parameters, shared memory, body and the facts derived from it
(PTX version and target from the instructions used, register declarations, PTX-line origins)."""
from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager

from ..errors import PTXBuildError, TargetError
from .instruction import Instruction, locate
from . import declare
from .names import NameScope
from .types import REGISTER_TYPES
from .values import Param, Reg, Symbol

MAX_PTX = (9, 0)          # the newest PTX ISA the GPU machine's driver accepts
SM90_FLOOR = (7, 8)
SM90A_FLOOR = (8, 0)


class Kernel:
    """``Kernel(name, params, ...)``: build with ``b = k.builder()``, then ``k.render()`` / ``k.compile()``.

    ``params``: Param objects or ``(name, type)`` pairs. ``max_threads``/``req_threads`` become
    ``.maxntid``/``.reqntid`` (one is needed for setmaxnreg), ``min_blocks`` ``.minnctapersm``,
    ``max_regs`` ``.maxnreg``, ``cluster`` ``.reqnctapercluster``. ``target`` pins "sm_90" or
    "sm_90a" (default: derived, sm_90a only when wgmma/setmaxnreg are used); ``ptx_version``
    pins ``.version`` (default: the lowest the instructions allow).

    ``barrier_rounds``: the rounds of the cross-rank barrier one launch advances on the heap's
    progress flags, set by the template that emits the barrier (:func:`pkptx.templates.progress.close_barrier`),
    None for a kernel without one. Like the params' kinds it is part of the contract with the host
    (:attr:`pkptx.toolchain.CompiledKernel.signature`), never of the PTX.
    """

    def __init__(self, name: str, params=(), *, target: str | None = None, ptx_version=None,
                 max_threads=None, req_threads=None, min_blocks: int | None = None, max_regs: int | None = None,
                 cluster=None, dynamic_smem: int = 0):
        self.name = declare.identifier(name, "kernel name")
        if target not in (None, "sm_90", "sm_90a"):
            raise locate(TargetError(f"target must be 'sm_90' or 'sm_90a', got {target!r}"))
        if not isinstance(params, (tuple, list)):
            declare.fail(f"kernel {name}: params must be a list of Param or (name, type) pairs, got {params!r}")
        self.params = tuple(_param(p) for p in params)
        seen = set()
        for p in self.params:
            if p.name in seen:
                declare.fail(f"kernel {name}: parameter name {p.name!r} is repeated")
            seen.add(p.name)
        self.pinned_target = target
        self.pinned_version = declare.version(ptx_version)
        if self.pinned_version and self.pinned_version > MAX_PTX:
            raise locate(TargetError(f"ptx_version {self.pinned_version} is above {MAX_PTX}, the newest the "
                                     f"driver takes"))
        floor = SM90A_FLOOR if target == "sm_90a" else SM90_FLOOR
        if self.pinned_version and self.pinned_version < floor:
            raise locate(TargetError(f"ptx_version {self.pinned_version} cannot target {target or 'sm_90'}: "
                                     f"sm_90 needs PTX 7.8 or later, sm_90a 8.0 or later"))
        self.max_threads = declare.dims(max_threads, "max_threads", most=declare.MAX_BLOCK_THREADS)
        self.req_threads = declare.dims(req_threads, "req_threads", most=declare.MAX_BLOCK_THREADS)
        self.cluster = declare.dims(cluster, "cluster", most=declare.MAX_CLUSTER, per_dim=(16, 16, 16))
        if self.max_threads and self.req_threads and self.req_threads != self.max_threads:
            declare.fail(f"req_threads={req_threads!r} and max_threads={max_threads!r} disagree; give one (an "
                         f"exact block is also the most threads)")
        self.min_blocks = None if min_blocks is None else declare.integer(min_blocks, "min_blocks", 1, 32)
        self.max_regs = None if max_regs is None else declare.integer(max_regs, "max_regs", 1, 255)
        self.dynamic_smem = declare.integer(dynamic_smem, "dynamic_smem", 0, declare.MAX_DYNAMIC_SMEM)
        self.names = NameScope()
        self.body: list[Instruction] = []
        self._instructions = 0
        self._regs: dict[str, Reg] = {}
        self._defined: set[str] = set()
        self._always: set[str] = set()          # written at the entry, so on every path
        self.hoisted: dict[str, Reg] = {}       # parameter name -> its register, loaded at the entry
        self._entry_end: int | None = None      # while hoisting: where the entry's loads end in the body
        self._entry_len = 0
        self._labels_placed: dict[str, object] = {}
        self._labels_used: dict[str, object] = {}
        self._shared: list[tuple[Symbol, int, int]] = []
        self._dynamic: tuple[Symbol, int] | None = None
        self.version = SM90_FLOOR
        self.needs_sm90a = False
        self.barrier_rounds: int | None = None
        self._builder = None

    # ------------------------------------------------------------ construction
    def builder(self):
        """The kernel's one builder."""
        if self._builder is None:
            from .builder import Builder
            self._builder = Builder(self)
        return self._builder

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise locate(PTXBuildError(f"kernel {self.name} has no parameter {name!r}; it has "
                                   f"{', '.join(p.name for p in self.params) or 'none'}"))

    def _new_symbol(self, name: str, what: str) -> None:
        taken = {p.name for p in self.params} | {sym.name for sym, _, _ in self._shared}
        taken |= {self._dynamic[0].name} if self._dynamic else set()
        declare.identifier(name, what)
        if name in taken:
            raise locate(PTXBuildError(f"{what} {name!r} must be an identifier not already used by a parameter "
                                       f"or shared variable ({', '.join(sorted(taken)) or 'none yet'})"))

    def shared(self, name: str, nbytes: int, align: int = 16) -> Symbol:
        """A static ``.shared .align <align> .b8 name[nbytes]``; use it as an address base."""
        self._new_symbol(name, "shared variable")
        if nbytes <= 0 or align <= 0 or align & (align - 1):
            raise locate(PTXBuildError(f"shared {name!r}: nbytes must be > 0 and align a power of two"))
        sym = Symbol(f"{name}", "shared")
        self._shared.append((sym, nbytes, align))
        return sym

    def dynamic_shared(self, name: str = "dsmem", align: int = 1024) -> Symbol:
        """The dynamic shared-memory window ``.extern .shared .align <align> .b8 name[]``."""
        if self._dynamic is not None:
            raise locate(PTXBuildError("a kernel has one dynamic shared-memory window"))
        self._new_symbol(name, "dynamic shared window")
        if align <= 0 or align & (align - 1):
            raise locate(PTXBuildError(f"dynamic shared {name!r}: align must be a power of two, got {align}"))
        sym = Symbol(name, "shared")
        self._dynamic = (sym, align)
        return sym

    # ------------------------------------------------------------ bookkeeping used by the builder
    def declare(self, reg: Reg) -> None:
        self._regs[reg.name] = reg

    def append(self, ins: Instruction) -> None:
        if self._entry_end is None:
            self.body.append(ins)
        else:
            self.body.insert(self._entry_end, ins)
            self._entry_end += 1
        if ins.kind in ("ins", "raw"):
            self._instructions += 1

    @contextmanager
    def at_entry(self):
        """Emit into the kernel's entry (before every instruction so far): what is written there is
        written on every path, wherever the builder stands."""
        self._entry_end, defined = self._entry_len, set(self._defined)
        try:
            yield
        finally:
            self._entry_len, self._entry_end = self._entry_end, None
            self._always |= self._defined - defined

    def require(self, spec, version, text: str) -> None:
        """Check the instruction against the kernel's target and version pins, then record what it needs
        (nothing is recorded when a check fails)."""
        if spec.target == "sm_90a":
            if self.pinned_target == "sm_90":
                raise TargetError(f"{text} needs target sm_90a, but the kernel is pinned to sm_90")
            if self.pinned_version and self.pinned_version < SM90A_FLOOR:
                raise TargetError(f"{text} needs target sm_90a, which needs PTX 8.0, but the kernel is pinned "
                                  f"to {self.pinned_version[0]}.{self.pinned_version[1]}")
        if version > MAX_PTX:
            raise TargetError(f"{text} needs PTX ISA {version[0]}.{version[1]}, above the {MAX_PTX[0]}."
                              f"{MAX_PTX[1]} the driver accepts")
        if self.pinned_version and version > self.pinned_version:
            raise TargetError(f"{text} needs PTX ISA {version[0]}.{version[1]}, but the kernel is pinned to "
                              f"{self.pinned_version[0]}.{self.pinned_version[1]}")
        self.needs_sm90a = self.needs_sm90a or spec.target == "sm_90a"
        self.version = max(self.version, version)

    def track(self, defs, uses, text: str) -> None:
        for r in list(uses) + list(defs):
            if self._regs.get(r.name) is not r:
                raise PTXBuildError(f"{text}: register {r.name} was not declared by this kernel's builder "
                                    f"(.{r.type}: a register of another kernel, or made by hand?)")
        for r in uses:
            if r.name not in self._defined:
                raise PTXBuildError(f"{text}: register {r.name} (.{r.type}) is read before any instruction "
                                    f"writes it")
        self._defined.update(r.name for r in defs)

    def defined_snapshot(self) -> frozenset:
        """The registers written so far on the current path (see :meth:`restore_defined`)."""
        return frozenset(self._defined)

    def restore_defined(self, names) -> None:
        """Leave a conditional arm: registers first written inside it are not written on every path
        past it, so a later read of them is a read before write."""
        self._defined = set(names) | self._always

    def place_label(self, label, origin) -> None:
        if label.name in self._labels_placed:
            raise PTXBuildError(f"label {label.name} placed twice", str(origin) if origin else None)
        self._labels_placed[label.name] = origin

    def branch_to(self, label, origin) -> None:
        self._labels_used.setdefault(label.name, origin)

    # ------------------------------------------------------------ derived facts
    @property
    def target(self) -> str:
        return self.pinned_target or ("sm_90a" if self.needs_sm90a else "sm_90")

    @property
    def ptx_version(self) -> tuple[int, int]:
        floor = SM90A_FLOOR if self.target == "sm_90a" else SM90_FLOOR
        return self.pinned_version or max(self.version, floor)

    def finish_checks(self) -> None:
        """Whole-kernel rules: every branch target is placed; no setmaxnreg.dec asks for more registers
        than the largest setmaxnreg.inc (ptxas: "larger than the largest temporal register count")."""
        for name, origin in self._labels_used.items():
            if name not in self._labels_placed:
                raise PTXBuildError(f"branch to label {name}, which is never placed (a loop or if left "
                                    f"open, or a b.range() loop exited with break?)",
                                    str(origin) if origin else None)
        counts = [(ins, int(ins.operands[0])) for ins in self.body if ins.key == "setmaxnreg"]
        most = max((n for ins, n in counts if ".inc." in ins.text), default=None)
        for ins, n in counts:
            if most is not None and ".dec." in ins.text and n > most:
                raise PTXBuildError(f"{ins.text} {n}: a decrease to more registers than the kernel's largest "
                                    f"setmaxnreg.inc ({most}); ptxas refuses it",
                                    str(ins.origin) if ins.origin else None)

    def render(self) -> str:
        return self._render()[0]

    @property
    def origins(self) -> dict[int, str]:
        """PTX line number (1-based) -> the Python ``file:line`` that emitted it."""
        return self._render()[1]

    def _render(self):
        self.finish_checks()
        v = self.ptx_version
        lines = [f"// pkptx kernel {self.name}", f".version {v[0]}.{v[1]}", f".target {self.target}",
                 ".address_size 64", ""]
        for sym, nbytes, align in self._shared:
            lines.append(f".shared .align {align} .b8 {sym.name}[{nbytes}];")
        if self._dynamic:
            lines.append(f".extern .shared .align {self._dynamic[1]} .b8 {self._dynamic[0].name}[];")
        if self._shared or self._dynamic:
            lines.append("")
        params = [f"\t{p.decl()}" for p in self.params]
        lines.append(f".visible .entry {self.name}(")
        lines.extend(p + ("," if i < len(params) - 1 else "") for i, p in enumerate(params))
        lines.append(")")
        lines.extend(self._directives())
        lines.append("{")
        by_type = defaultdict(list)
        for reg in self._regs.values():
            by_type[reg.type.reg_decl].append(reg.name)
        for decl in sorted(by_type, key=lambda d: [t.reg_decl for t in REGISTER_TYPES].index(d)):
            names = by_type[decl]
            for i in range(0, len(names), 16):
                lines.append(f"\t.reg .{decl} {', '.join(names[i:i + 16])};")
        lines.append("")
        origins = {}
        for ins in self.body:
            lines.append(ins.render())
            if ins.origin is not None:
                origins[len(lines)] = str(ins.origin)
        lines.append("}")
        return "\n".join(lines) + "\n", origins

    def _directives(self) -> list[str]:
        out = []
        if self.max_threads:
            out.append(".maxntid " + ", ".join(map(str, self.max_threads)))
        if self.req_threads:
            out.append(".reqntid " + ", ".join(map(str, self.req_threads)))
        if self.min_blocks:
            out.append(f".minnctapersm {self.min_blocks}")
        if self.max_regs:
            out.append(f".maxnreg {self.max_regs}")
        if self.cluster:
            out.append(".reqnctapercluster " + ", ".join(map(str, self.cluster)))
        return out

    # ------------------------------------------------------------ assembly
    def compile(self, *, use_cache: bool = True):
        """Assemble with nvJitLink; returns a :class:`pkptx.toolchain.CompiledKernel`. A kernel that moves
        registers between warpgroups (setmaxnreg) is still assembled here, which checks it, but is
        loaded from its PTX (``jit``): nvJitLink compiles relocatable code and drops setmaxnreg (ptxas
        info C7504), while the driver's JIT compiles the whole program and keeps it."""
        from ..toolchain import CompiledKernel, assemble
        ptx, origins = self._render()
        # Without setmaxnreg every warpgroup gets the entry cap (64K / .reqntid threads), where the
        # consumers' accumulators need not fit (C7600): the check assembles without the cap
        checked = ptx if not self.rebalances else "\n".join(
            "// " + line if line.startswith((".reqntid", ".minnctapersm")) else line for line in ptx.split("\n"))
        cubin = assemble(checked, self.target, origins=origins, use_cache=use_cache)
        block = self.req_threads or self.max_threads
        return CompiledKernel(self.name, self.params, ptx, cubin, self.target, block,
                              self.req_threads is not None, self.cluster, self.dynamic_smem, self.ptx_version,
                              jit=self.rebalances, barrier_rounds=self.barrier_rounds, source=self)

    @property
    def rebalances(self) -> bool:
        """Whether the kernel uses setmaxnreg."""
        return any(ins.key == "setmaxnreg" for ins in self.body)

    @property
    def instruction_count(self) -> int:
        return self._instructions

    # ------------------------------------------------------------ read-only views (for pkptx.interp)
    @property
    def registers(self) -> dict[str, Reg]:
        """Every declared register by name."""
        return dict(self._regs)

    @property
    def shared_symbols(self) -> tuple:
        """The static shared variables as (Symbol, nbytes, align), in declaration order."""
        return tuple(self._shared)

    @property
    def dynamic_symbol(self) -> tuple | None:
        """The dynamic shared window as (Symbol, align), or None."""
        return self._dynamic

    def interpret(self, grid, block, *args, smem: int | None = None, cluster=None, **options):
        """Run the kernel on the CPU (:func:`pkptx.interp.run`); returns the interpreter's Run."""
        from ..interp import run
        return run(self, grid, block, *args, smem=smem, cluster=cluster, **options)


def _param(p) -> Param:
    if isinstance(p, Param):
        return p
    if isinstance(p, tuple) and len(p) == 2:
        return Param(*p)
    declare.fail(f"a kernel parameter is a Param or a (name, type) pair, got {p!r}")
