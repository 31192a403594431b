"""PTX -> cubin through nvJitLink (no GPU, no driver), with an on-disk cache.

The cache key is the PTX text, the architecture, the options and the nvJitLink version; entries are
written to a temporary name and renamed into place, so several MPI ranks compiling the same kernel at
once never see a half-written file. ``PKPTX_CACHE_DIR`` moves the cache; ``PKPTX_CACHE=0`` disables it.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import AssemblyError
from .isa.signature import Signature

CACHE_FORMAT = 1
REGISTER_FILE = 65536       # 32-bit registers per SM (and the most one block may hold)
_LINE_RE = re.compile(r"line (\d+)")


@dataclass(frozen=True)
class Resources:
    """What ptxas reports for one entry (``-v``)."""
    registers: int = 0
    shared_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack_bytes: int = 0
    barriers: int = 0

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads


@dataclass(frozen=True)
class Cubin:
    data: bytes = field(repr=False)
    arch: str
    resources: Resources
    log: str = field(repr=False)
    key: str
    from_cache: bool = False
    seconds: float = 0.0
    warnings: tuple[str, ...] = field(default=())


def nvjitlink_version() -> str:
    from cuda.bindings import nvjitlink
    major, minor = nvjitlink.version()
    return f"{major}.{minor}"


def cache_dir() -> Path | None:
    if os.environ.get("PKPTX_CACHE", "1") == "0":
        return None
    root = os.environ.get("PKPTX_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "pkptx")
    return Path(root)


def parse_resources(log: str) -> Resources:
    """Read an nvJitLink info log: ptxas' ``-v`` lines (spills, stack, named barriers) and the linker's
    final ``Function properties`` line (registers, shared memory after linking, which includes the
    1 KB the system reserves on sm_90)."""
    def grab(pattern: str) -> int:
        found = re.findall(pattern, log, flags=re.IGNORECASE)
        return int(found[-1]) if found else 0
    return Resources(
        registers=grab(r"used (\d+) registers"),
        shared_bytes=grab(r"(\d+) bytes smem"),
        spill_stores=grab(r"(\d+) bytes spill stores"),
        spill_loads=grab(r"(\d+) bytes spill loads"),
        stack_bytes=grab(r"(\d+) bytes stack frame"),
        barriers=int(m.group(1)) if (m := re.search(r"Used \d+ registers, used (\d+) barriers", log)) else 0,
    )


def _link(ptx: bytes, options: list[str], origins: dict[int, str] | None) -> tuple[bytes, str]:
    from cuda.bindings import nvjitlink
    handle = nvjitlink.create(len(options), options)
    try:
        try:
            nvjitlink.add_data(handle, nvjitlink.InputType.PTX, ptx, len(ptx), "pkptx.ptx")
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as exc:
            size = nvjitlink.get_error_log_size(handle)
            buf = bytearray(size)
            if size:
                nvjitlink.get_error_log(handle, buf)
            raise _assembly_error(buf.decode(errors="replace").rstrip("\x00"), origins, ptx) from exc
        size = nvjitlink.get_linked_cubin_size(handle)
        cubin = bytearray(size)
        nvjitlink.get_linked_cubin(handle, cubin)
        size = nvjitlink.get_info_log_size(handle)
        info = bytearray(size)
        if size:
            nvjitlink.get_info_log(handle, info)
        return bytes(cubin), info.decode(errors="replace").rstrip("\x00")
    finally:
        nvjitlink.destroy(handle)


def _assembly_error(log: str, origins: dict[int, str] | None, ptx: bytes) -> AssemblyError:
    lines = ptx.decode(errors="replace").splitlines()
    where = []
    for m in _LINE_RE.finditer(log):
        n = int(m.group(1))
        src = lines[n - 1].strip() if 0 < n <= len(lines) else "?"
        py = (origins or {}).get(n)
        where.append(f"  PTX line {n}: {src}" + (f"\n    emitted at {py}" if py else ""))
    msg = "ptxas rejected the PTX:\n" + log.strip()
    if where:
        msg += "\n" + "\n".join(dict.fromkeys(where))
    return AssemblyError(msg, log, {int(m.group(1)): (origins or {}).get(int(m.group(1)), "")
                                   for m in _LINE_RE.finditer(log)})


def _key(ptx: bytes, arch: str, options: list[str]) -> str:
    h = hashlib.sha256()
    for part in (str(CACHE_FORMAT), nvjitlink_version(), arch, "\0".join(options)):
        h.update(part.encode())
        h.update(b"\0")
    h.update(ptx)
    return h.hexdigest()


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def assemble(ptx: str | bytes, arch: str = "sm_90a", *, options: tuple[str, ...] = (),
             origins: dict[int, str] | None = None, use_cache: bool = True) -> Cubin:
    """Assemble ``ptx`` for ``arch`` and return the cubin with its resource report.

    ``origins`` maps PTX line numbers to ``file:line`` of the Python that emitted them, so an
    :class:`AssemblyError` can point at the user's code.
    """
    t0 = time.perf_counter()
    data = ptx.encode() if isinstance(ptx, str) else bytes(ptx)
    opts = [f"-arch={arch}", "-verbose", "-Xptxas=-v", *options]
    key = _key(data, arch, opts)
    root = cache_dir() if use_cache else None
    if root is not None:
        bin_path, meta_path = root / f"{key}.cubin", root / f"{key}.json"
        try:
            meta = json.loads(meta_path.read_text())
            cubin = bin_path.read_bytes()
            if hashlib.sha256(cubin).hexdigest() == meta["cubin_sha256"]:
                return Cubin(cubin, arch, Resources(**meta["resources"]), meta["log"], key, True,
                             time.perf_counter() - t0, tuple(meta.get("warnings", ())))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    cubin, log = _link(data, opts, origins)
    resources = parse_resources(log)
    warnings = tuple(line.strip() for line in log.splitlines() if "warning" in line.lower()
                     or "Performance Loss" in line)
    if root is not None:
        try:
            root.mkdir(parents=True, exist_ok=True)
            _write_atomic(root / f"{key}.cubin", cubin)
            meta = {"cubin_sha256": hashlib.sha256(cubin).hexdigest(), "resources": asdict(resources),
                    "log": log, "arch": arch, "warnings": list(warnings)}
            _write_atomic(root / f"{key}.json", json.dumps(meta).encode())
        except OSError:
            pass   # a read-only or full cache never stops a build
    return Cubin(cubin, arch, resources, log, key, False, time.perf_counter() - t0, warnings)


@dataclass(frozen=True)
class CompiledKernel:
    """A kernel ready to load: its cubin plus everything a launcher needs to know about it.

    ``signature`` is its parameters with their kinds (what the host binds by name), ``block`` the
    required or maximum block shape the kernel declares (or None; ``required_block`` is it when exact),
    ``cluster`` its required cluster shape, ``dynamic_smem`` the dynamic shared memory in bytes it needs
    by default, ``barrier_rounds`` the rounds of the heap's cross-rank barrier one launch advances (None
    without one; see :class:`pkptx.isa.Kernel`).
    """
    entry: str
    params: tuple = field(repr=False)
    ptx: str = field(repr=False)
    cubin: Cubin
    arch: str
    block: tuple[int, int, int] | None = None
    block_exact: bool = False
    cluster: tuple[int, int, int] | None = None
    dynamic_smem: int = 0
    ptx_version: tuple[int, int] = (8, 0)
    jit: bool = False           # load the PTX through the driver's JIT (see Kernel.compile), not the cubin
    barrier_rounds: int | None = None
    source: object = field(default=None, compare=False, repr=False)    # see builder_kernel

    def builder_kernel(self):
        """The builder's :class:`pkptx.isa.Kernel` this was compiled from, which the CPU interpreter runs
        (``PKPTX_INTERPRET=1``); a build-cache hit holds only its factory and builds it on first ask.
        None for a kernel pkptx did not build in this process."""
        source = self.source
        if callable(source):
            source = source()
            object.__setattr__(self, "source", source)
        return source

    @functools.cached_property
    def signature(self) -> Signature:
        return Signature(self.entry, self.params)

    @property
    def resources(self) -> Resources:
        """nvJitLink's figures; for a ``jit`` kernel they are without setmaxnreg (the loaded
        function's own are on :class:`pkptx.launch.module.Function`)."""
        return self.cubin.resources

    @property
    def entry_registers(self) -> int:
        """Registers a thread starts with: nvJitLink's count, or for a ``jit`` kernel (its check assembly
        has no entry cap) the cap its exact block sets, which the driver's JIT gives it; setmaxnreg then
        moves them between warpgroups."""
        if not self.jit or not self.block_exact:
            return self.resources.registers
        return min(self.resources.registers, REGISTER_FILE // math.prod(self.block) // 8 * 8)

    @property
    def required_block(self) -> tuple[int, int, int] | None:
        """The exact block shape the kernel assumes (``Kernel(req_threads=...)``, PTX ``.reqntid``), or
        None when any block up to ``block`` will do: a launcher must refuse any other block."""
        return self.block if self.block_exact else None

    def manifest(self) -> dict:
        """A JSON-ready description, so another runtime can load and launch the cubin without pkptx."""
        return {
            "entry": self.entry,
            "arch": self.arch,
            "ptx_version": ".".join(map(str, self.ptx_version)),
            "params": self.signature.describe(),
            "block": list(self.block) if self.block else None,
            "block_exact": self.block_exact,
            "required_block": list(self.required_block) if self.required_block else None,
            "cluster": list(self.cluster) if self.cluster else None,
            "dynamic_smem_bytes": self.dynamic_smem,
            "barrier_rounds": self.barrier_rounds,
            "static_smem_bytes": self.resources.shared_bytes,
            "registers": self.entry_registers,
            "spill_bytes": self.resources.spills,
            "load": "ptx" if self.jit else "cubin",
        }


_SOURCE_DIGEST: str | None = None


def source_digest() -> str:
    """A hash of pkptx's own source, so cached kernel builds are dropped when the code changes."""
    global _SOURCE_DIGEST
    if _SOURCE_DIGEST is None:
        h = hashlib.sha256()
        root = Path(__file__).resolve().parent
        for path in sorted(root.rglob("*.py")):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
        _SOURCE_DIGEST = h.hexdigest()
    return _SOURCE_DIGEST


def build_cached(factory, *args, **kwargs) -> CompiledKernel:
    """``factory(*args, **kwargs).compile()``, skipping both the Python build and the assembler when the
    same factory and arguments were built before by the same pkptx source (arguments must have a
    deterministic ``repr``, as frozen dataclass Configs do)."""
    from .isa.values import Param
    root = cache_dir()
    if root is None:
        return factory(*args, **kwargs).compile()
    t0 = time.perf_counter()
    ident = f"{factory.__module__}.{factory.__qualname__}({args!r}, {sorted(kwargs.items())!r})"
    key = hashlib.sha256(f"{CACHE_FORMAT}\0{nvjitlink_version()}\0{source_digest()}\0{ident}".encode()).hexdigest()
    meta_path = root / f"build-{key}.json"
    try:
        meta = json.loads(meta_path.read_text())
        cubin = (root / f"{meta['cubin_key']}.cubin").read_bytes()
        if hashlib.sha256(cubin).hexdigest() == meta["cubin_sha256"]:
            params = tuple(Param(p["name"], p["type"], p["count"], p["align"], p["pointer"], p["kind"])
                           for p in meta["params"])
            blob = Cubin(cubin, meta["arch"], Resources(**meta["resources"]), meta["log"], meta["cubin_key"],
                         True, time.perf_counter() - t0, tuple(meta["warnings"]))
            return CompiledKernel(meta["entry"], params, meta["ptx"], blob, meta["arch"], _tuple(meta["block"]),
                                  meta["block_exact"], _tuple(meta["cluster"]), meta["dynamic_smem"],
                                  tuple(meta["ptx_version"]), jit=meta["jit"], barrier_rounds=meta["barrier_rounds"],
                                  source=functools.partial(factory, *args, **kwargs))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    compiled = factory(*args, **kwargs).compile()
    meta = {
        "entry": compiled.entry, "arch": compiled.arch, "ptx": compiled.ptx, "cubin_key": compiled.cubin.key,
        "cubin_sha256": hashlib.sha256(compiled.cubin.data).hexdigest(), "log": compiled.cubin.log,
        "resources": asdict(compiled.resources), "warnings": list(compiled.cubin.warnings),
        "params": [{"name": p.name, "type": p.type.name, "count": p.count, "align": p.align,
                    "pointer": p.pointer, "kind": p.kind.value} for p in compiled.params],
        "block": compiled.block, "block_exact": compiled.block_exact, "cluster": compiled.cluster,
        "dynamic_smem": compiled.dynamic_smem, "ptx_version": compiled.ptx_version, "jit": compiled.jit,
        "barrier_rounds": compiled.barrier_rounds,
    }
    try:
        root.mkdir(parents=True, exist_ok=True)
        if not (root / f"{compiled.cubin.key}.cubin").exists():
            _write_atomic(root / f"{compiled.cubin.key}.cubin", compiled.cubin.data)
        _write_atomic(meta_path, json.dumps(meta).encode())
    except OSError:
        pass
    return compiled


def _tuple(value):
    return tuple(value) if value is not None else None
