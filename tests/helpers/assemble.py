"""Assemble kernels with the real assembler (nvJitLink) and give tests a ready-made scratch kernel.

``Sandbox`` builds a kernel whose prologue defines one register of every PTX register type plus the
addresses most instructions need (a global pointer, a multicast pointer, shared-memory buffers, an
mbarrier, a tensor map, a cache policy), so a test can emit any single instruction form into it.
"""
from __future__ import annotations

from pkptx.isa import (Kernel, Param, address, tensor_ref, b8, b16, b32, b64, bf16, bf16x2, f16, f16x2, f32, f64,
                       pred, s16, s32, s64, u16, u32, u64)

ARCHS = ("sm_90", "sm_90a")

# The value each register type starts with in the prologue (16-bit floats and pairs as raw bits).
_SEED = {"f16": 0x3C00, "bf16": 0x3F80, "f16x2": 0x3C003C00, "bf16x2": 0x3F803F80, "f32": 1.5, "f64": 2.5}


def assert_assembles(kernel: Kernel, arch: str | None = None):
    """Assemble ``kernel`` for ``arch`` (default: its own target), bypassing the cache so the
    assembler really runs; returns the CompiledKernel. An AssemblyError names the Python line."""
    if arch is not None and arch != kernel.target:
        raise ValueError(f"kernel {kernel.name} targets {kernel.target}; build it with target={arch!r}")
    return kernel.compile(use_cache=False)


def sandbox_params():
    return [Param("ptr", u64, pointer=True), Param("mc", u64, pointer=True), ("n", u32),
            Param("tmap", b8, count=128, align=64)]


class Sandbox:
    """A scratch kernel with one defined register per type: ``sb.r(u32)``, ``sb.r(f16x2)``...

    Attributes: ``k`` the kernel, ``b`` its builder, ``gptr`` a 64-bit global address register,
    ``mc`` a 64-bit multicast address register, ``smem`` a 32-bit shared address register of a
    4 KiB buffer, ``smem_sym`` the buffer's symbol, ``bar`` a 32-bit mbarrier address register,
    ``tmap`` the tensor map's generic address, ``policy`` a ``createpolicy`` cache policy.
    """

    def __init__(self, name: str = "sandbox", *, target: str | None = None, ptx_version=None,
                 max_threads=(128,), cluster=None, extra_params=()):
        self.k = Kernel(name, sandbox_params() + list(extra_params), target=target, ptx_version=ptx_version,
                        max_threads=max_threads, cluster=cluster)
        b = self.b = self.k.builder()
        self._regs = {}
        self.gptr = b.load_param("ptr")
        self.mc = b.load_param("mc")
        n = self._regs["u32"] = b.load_param("n")
        self.smem_sym = self.k.shared("buf", 4096, align=128)
        self.bar_sym = self.k.shared("bars", 64, align=8)
        self.smem = b.mov(u32, self.smem_sym, name="smem")
        self.bar = b.mov(u32, self.bar_sym, name="bar")
        self.smem64 = b.cvta(u64, "shared", self.bar_sym, name="smem_generic")
        self.tmap = b.cvta(u64, "param", b.param_address("tmap"), name="tmap")   # TMA wants it generic
        self.policy = b.createpolicy("L2::evict_last", fraction=1.0)
        for ty in ALL_REG:
            if ty.name not in self._regs:
                self._regs[ty.name] = self._seed(ty, n)

    def _seed(self, ty, n):
        if ty is pred:
            return self.b.setp("lt", u32, n, 7, name="p_seed")
        return self.b.mov(ty, _SEED.get(ty.name, 3), name=f"{ty.name}_seed")

    def r(self, ty):
        """The prologue's defined register of type ``ty``."""
        return self._regs[str(ty)]

    def fresh(self, ty, name=None):
        """A new register of ``ty`` with a value (a copy of the prologue's)."""
        return self.b.mov(ty, self.r(ty), name=name)

    def vec(self, ty, count):
        """A brace vector of ``count`` fresh defined registers of ``ty``."""
        from pkptx.isa import Vec
        return Vec(tuple(self.fresh(ty) for _ in range(count)))

    def g(self, offset: int = 0):
        """``[gptr + offset]``."""
        return address(self.gptr, offset)

    def s(self, offset: int = 0):
        """``[smem + offset]`` (a 32-bit shared::cta address)."""
        return address(self.smem, offset)

    def tensor(self, dims: int):
        """``[tmap, {s32_seed, 1, 2, ...}]`` with ``dims`` coordinates."""
        return tensor_ref(self.tmap, [self.r(s32)] + list(range(1, dims)))

    def finish(self):
        self.b.ret()
        return self.k


ALL_REG = (b16, b32, b64, u16, u32, u64, s16, s32, s64, f16, bf16, f32, f64, pred, f16x2, bf16x2)


def consumer_budget_log(kernel: Kernel, slack: int = 0):
    """Assemble a kernel that uses setmaxnreg as the driver's whole-program JIT sees its consumers:
    nvJitLink drops setmaxnreg (info C7504), so the setmaxnreg lines go and the thread-count bound
    (.reqntid or .maxntid) becomes ``.maxnreg <the setmaxnreg.inc count + slack>``. Returns the Cubin; its
    spills and log are the consumers' (the producer, at fewer registers, is not checked this way). One
    cap for the whole program can need a granule (8) more than the consumer branch under setmaxnreg:
    the D=128 attention with 3 consumer warpgroups needs 167 here and spills at 160, where the
    whole-program ptxas with setmaxnreg and the driver's JIT fit it in 160 without local memory (the
    GPU test checks the loaded function's local bytes)."""
    from pkptx.toolchain import assemble
    lines = kernel.render().splitlines()
    counts = [int(line.split()[-1].rstrip(";")) for line in lines if "setmaxnreg.inc" in line]
    assert counts, f"{kernel.name} has no setmaxnreg.inc"
    bound = [line for line in lines if line.startswith((".maxntid", ".reqntid"))]
    assert len(bound) == 1, f"{kernel.name}: expected one thread-count bound"
    ptx = "\n".join(f".maxnreg {max(counts) + slack}" if line == bound[0] else line
                    for line in lines if "setmaxnreg" not in line)
    return assemble(ptx, kernel.target, use_cache=False)
