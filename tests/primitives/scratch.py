"""A scratch kernel for primitive tests: every parameter a primitive may need (world, deadline, two
parallel layouts, a tensor-map table, a by-value tensor map), a shared tile and mbarriers, and a way to
see exactly the lines one primitive call emitted.

    sc = Scratch(target="sm_90a")
    lines = sc.emit(lambda b: signal(b, sc.flag(1, 0), 1, sem=Sem.RELEASE, scope="sys"))
    sc.assemble()          # nvJitLink, for the kernel's target, bypassing the cache
"""
from __future__ import annotations

from pkptx.isa import Kernel, Param, b8, s32, u32, u64
from pkptx.primitives.layout import ParallelLayout, WorldParams
from pkptx.primitives.p2p import TensorMapTable
from pkptx.primitives.sync import Deadline, flag_address

import ptxscan

TARGETS = ("sm_90", "sm_90a")


class Scratch:
    def __init__(self, name: str = "scratch", *, target: str = "sm_90", threads: int = 128):
        self.layouts = {n: ParallelLayout(n) for n in ("flags", "x", "y")}
        self.tables = {n: TensorMapTable(n) for n in ("t",)}
        params = WorldParams.params() + Deadline.params()
        for lay in self.layouts.values():
            params += lay.params()
        for t in self.tables.values():
            params += t.params()
        params += [Param("tm", b8, count=128, align=64), Param("n", u32), Param("idx", u32)]
        self.k = Kernel(name, params, max_threads=threads, target=target)
        b = self.b = self.k.builder()
        self.rank, self.world = WorldParams.load(b)
        self.deadline = Deadline.start(b, self.rank)
        self.bound = {n: lay.bind(b) for n, lay in self.layouts.items()}
        self.maps = {n: t.bind(b) for n, t in self.tables.items()}
        self.n = b.load_param("n")
        self.idx = b.load_param("idx")
        self.smem = b.mov(u32, self.k.shared("tile", 4096, 128), name="tile")
        self.bars = b.mov(u32, self.k.shared("bars", 64, 8), name="bars")
        self.tid = b.special("tid.x")

    @property
    def flags(self):
        return self.bound["flags"]

    def flag(self, rank, index):
        """The address register of counter ``index`` on ``rank``'s flag array."""
        return flag_address(self.b, self.flags, rank, index)

    def coords(self, spec):
        """Coordinates from a list of ints (immediates) and 'r' (a fresh .s32 register each)."""
        return [self.b.mov(s32, 3 * i + 1, name="coord") if c == "r" else c for i, c in enumerate(spec)]

    def u64reg(self, value: int = 0, name: str = "off"):
        return self.b.mov(u64, value, name=name)

    def emit(self, fn) -> list[str]:
        """Run ``fn(b)`` and return the shapes of exactly the lines it emitted (labels included)."""
        start = len(self.k.body)
        fn(self.b)
        return [ptxscan.shape(ins.render().strip()) for ins in self.k.body[start:] if ins.kind != "comment"]

    def raw(self, fn) -> list[str]:
        """Like :meth:`emit`, with register names kept."""
        start = len(self.k.body)
        fn(self.b)
        return [ins.render().strip() for ins in self.k.body[start:] if ins.kind != "comment"]

    def ptx(self) -> str:
        return self.k.render()

    def assemble(self):
        """Close the kernel (``ret``) and assemble it for its target; returns the PTX text."""
        self.b.ret()
        self.k.compile(use_cache=False)
        return self.k.render()
