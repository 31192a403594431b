"""``python -m pkptx doctor [--json]``: does pkptx work on this machine? One line per check, with the fix.

Checks, in order: Python and the packages pkptx needs (and the MPI library mpi4py runs on, and the
launcher ``--ranks`` would use), a test assembly through nvJitLink (no GPU needed), the CUDA driver
and the newest PTX ISA it loads, every GPU, peer access between each pair of GPUs, multicast
support and the state of pkptx's multicast gate (which never creates a multicast object here), CUDA
IPC and VMM fd sharing with a child process, the MPS daemon, and the kernel cache. On a machine
without a GPU the GPU checks say "no GPU" and the rest still run.

Statuses: ok; warn (works, but something is off or missing); fail (pkptx cannot work until fixed);
skip (not checked, because what it needs is missing: see the line that says why). Exit status 0
when all is ok (or skipped), 1 with warnings, 2 with failures. Every driver call goes through
:mod:`pkptx.launch.driver`, which turns errors into :class:`~pkptx.errors.CudaError`.
"""
from __future__ import annotations

import argparse
import functools
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import CudaError, DriverUnavailableError, PkptxError

STATUSES = ("ok", "warn", "fail", "skip")
PACKAGES = (("pkptx", "pkptx"), ("cuda-bindings", "cuda-bindings"), ("nvidia-nvjitlink", "nvidia-nvjitlink"),
            ("numpy", "numpy"), ("ml_dtypes", "ml_dtypes"), ("mpi4py", "mpi4py"))
OPTIONAL = (("matplotlib", "pkptx[plot]", "PNG plots of `pkptx bench`"),
            ("torch", "torch", "the cuBLAS and NCCL columns of `pkptx bench`"))
NO_GPU_FIX = ("GPU work needs an NVIDIA Hopper GPU (sm_90a) and its driver; `python -m pkptx build` "
              "assembles every kernel without one")
COMPUTE_MODE_DEFAULT = 0
COMPUTE_MODES = {1: "exclusive-thread", 2: "prohibited", 3: "exclusive-process"}      # CUcomputemode
MPI_VERSION_CODE = ("import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; "
                    "print(MPI.Get_library_version())")


@dataclass(frozen=True)
class Check:
    """One line of the report: what was checked, ok/warn/fail/skip, what was found, how to fix it."""
    name: str
    status: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        return f"{self.status:<4}  {self.name:<16}  {self.detail}" + (f"  [fix: {self.fix}]" if self.fix else "")


@dataclass(frozen=True)
class Machine:
    """What the GPU checks share: how many GPUs answer, or why none does, and whether libcuda loads."""
    gpus: int
    no_gpu: str | None
    driver_loads: bool = True


def exit_status(checks: list[Check]) -> int:
    statuses = {c.status for c in checks}
    return 2 if "fail" in statuses else 1 if "warn" in statuses else 0


def probe() -> Machine:
    """How many GPUs the driver reports, or the reason there are none (no driver library, cuInit, 0)."""
    from .launch import driver
    try:
        count = driver.call("cuDeviceGetCount")
    except DriverUnavailableError as exc:      # cuda.bindings finds no libcuda
        cause = type(exc.__cause__).__name__ if exc.__cause__ else exc.name
        return Machine(0, f"the CUDA driver library (libcuda) does not load ({cause})", False)
    except CudaError as exc:
        return Machine(0, f"{exc.call} -> {exc.name}")
    return Machine(count, None if count else "cuDeviceGetCount() == 0")


def check_python(machine: Machine) -> list[Check]:
    version = ".".join(map(str, sys.version_info[:3]))
    if sys.version_info < (3, 10):
        return [Check("python", "fail", f"{version}: pkptx needs 3.10 or newer", "use Python >= 3.10")]
    return [Check("python", "ok", f"{version} ({sys.executable})")]


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=None)
def mpi_library() -> tuple[bool, str]:
    """(loads, first line of MPI_Get_library_version) from a child process, so a broken MPI cannot
    take the doctor down with it, and without initialising MPI."""
    try:
        proc = subprocess.run([sys.executable, "-c", MPI_VERSION_CODE], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return False, "importing mpi4py.MPI did not finish in 60 s"
    text = (proc.stdout if proc.returncode == 0 else proc.stderr).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return False, "no output"
    if proc.returncode:
        return False, lines[-1]
    return True, re.sub(r"\s+", " ", lines[0].split(",")[0])      # "MPICH Version: 5.0.2", "Open MPI v5.0.3"


def check_packages(machine: Machine) -> list[Check]:
    checks = []
    for dist, install in PACKAGES:
        version = _version(dist)
        if version is None and dist == "pkptx":      # imported from a checkout on PYTHONPATH: it runs
            from . import __version__
            checks.append(Check(dist, "ok", f"{__version__} from {Path(__file__).resolve().parent} (not pip-installed)"))
            continue
        if version is None:
            checks.append(Check(dist, "fail", "not installed", f"pip install '{install}'"))
            continue
        detail = version
        if dist == "nvidia-nvjitlink":
            from .toolchain import nvjitlink_version
            try:
                detail += f" (library {nvjitlink_version()})"
            except (ImportError, RuntimeError, OSError) as exc:
                checks.append(Check(dist, "fail", f"{version}, but its library does not load: {exc}".splitlines()[0],
                                    "pip install --force-reinstall 'nvidia-nvjitlink>=12.8,<14'"))
                continue
        if dist == "mpi4py":
            loads, library = mpi_library()
            if not loads:
                checks.append(Check(dist, "warn", f"{version}, but no MPI library loads: {library}",
                                    "pip install mpich (or install Open MPI); one rank still runs without MPI"))
                continue
            detail += f" on {library}"
        checks.append(Check(dist, "ok", detail))
    for dist, install, purpose in OPTIONAL:
        version = _version(dist)
        checks.append(Check(dist, "ok", version if version else f"not installed (optional: {purpose}; "
                                                                 f"pip install '{install}')"))
    return checks


def check_launcher(machine: Machine) -> list[Check]:
    """The MPI launcher ``pkptx bench --ranks`` would start, and whether it matches mpi4py's library."""
    from .bench import mpirun
    try:
        launcher = mpirun.find()
    except PkptxError:
        return [Check("mpirun", "warn", "no mpiexec or mpirun next to this Python or on PATH",
                      "pip install mpich (or install Open MPI) to run several ranks")]
    loads, library = mpi_library()
    library_flavor = mpirun.flavor_of(library) if loads else "unknown"
    if "unknown" not in (launcher.flavor, library_flavor) and launcher.flavor != library_flavor:
        return [Check("mpirun", "warn", f"{launcher.path} is {launcher.flavor}'s, but mpi4py runs on "
                      f"{library_flavor}: each rank would start as a world of one",
                      f"use the {library_flavor} launcher (or point mpi4py at the matching library)")]
    return [Check("mpirun", "ok", f"{launcher.path} ({launcher.flavor})")]


def check_assembly(machine: Machine) -> list[Check]:
    """A tiny kernel through nvJitLink, uncached: the assembler works without a GPU."""
    from .isa import Kernel, Param, address, u32, u64
    k = Kernel("pkptx_doctor", [Param("x", u64, pointer=True)], target="sm_90a", max_threads=32)
    b = k.builder()
    b.st(u32, address(b.load_param("x")), b.special("tid.x"), space="global")
    b.ret()
    t0 = time.perf_counter()
    try:
        compiled = k.compile(use_cache=False)
    except PkptxError as exc:
        return [Check("assembly", "fail", f"nvJitLink failed on a test kernel: {exc}".splitlines()[0],
                      "pip install --force-reinstall 'nvidia-nvjitlink>=12.8,<14'")]
    return [Check("assembly", "ok", f"a test kernel for {compiled.arch} in {(time.perf_counter() - t0) * 1e3:.0f} ms "
                                    f"({compiled.resources.registers} registers), no GPU needed")]


def newest_ptx(cuda: tuple[int, int]) -> tuple[int, int]:
    """The newest PTX ISA a driver of CUDA version ``cuda`` loads (PTX ISA release history: CUDA 11.x
    and 13.x take PTX (major - 4).x; 12.6 stayed at 8.5, so 12.x from 12.7 on takes 8.(x - 1))."""
    major, minor = cuda
    if major == 12 and minor >= 6:
        return (8, minor - 1)
    return (major - 4, minor)


def kernel_module_version() -> str | None:
    """The NVIDIA kernel module's version (e.g. 580.65.06) from /proc, where Linux shows it."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    found = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]+)", text)
    return found.group(1) if found else None


def check_driver(machine: Machine) -> list[Check]:
    from .isa import MAX_PTX
    from .launch import driver
    if not machine.driver_loads:
        return [Check("driver", "warn", f"no GPU: {machine.no_gpu}", NO_GPU_FIX)]
    raw = driver.check(driver.driver().cuDriverGetVersion(), "cuDriverGetVersion")
    cuda = (raw // 1000, raw % 1000 // 10)
    ptx = newest_ptx(cuda)
    module = kernel_module_version()
    detail = (f"{'NVIDIA ' + module + ', ' if module else ''}CUDA {cuda[0]}.{cuda[1]}, loads PTX up to "
              f"{ptx[0]}.{ptx[1]}; pkptx emits at most {MAX_PTX[0]}.{MAX_PTX[1]}")
    checks = []
    if ptx < MAX_PTX:
        checks.append(Check("driver", "warn", detail + ": kernels that need a newer PTX ISA than it loads fail "
                            "with CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "update the NVIDIA driver"))
    else:
        checks.append(Check("driver", "ok", detail))
    for dist in ("cuda-bindings", "nvidia-nvjitlink"):
        version = _version(dist)
        if version and int(version.split(".")[0]) > cuda[0]:
            checks.append(Check(dist, "fail", f"{version} is for CUDA {version.split('.')[0]}, the driver is CUDA "
                                f"{cuda[0]}.{cuda[1]}", f"pip install '{dist}<{cuda[0] + 1}' (or update the driver)"))
    return checks


def check_gpus(machine: Machine) -> list[Check]:
    if not machine.driver_loads:
        return [Check("gpus", "skip", "no GPU: no CUDA driver (the driver line says so)")]
    if not machine.gpus:
        return [Check("gpus", "warn", f"no GPU: {machine.no_gpu}", NO_GPU_FIX)]
    from .launch import Device, driver
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    checks = []
    for ordinal in range(machine.gpus):
        dev = Device(ordinal)
        memory = driver.call("cuDeviceTotalMem", dev.handle) / 2 ** 30
        arch = f"sm_{dev.cc[0]}{dev.cc[1]}"
        detail = (f"GPU {ordinal}{f' (CUDA_VISIBLE_DEVICES={visible})' if visible and not ordinal else ''}: "
                  f"{dev.name}, {arch}, {dev.sm_count} SMs, {memory:.1f} GiB")
        mode = dev.attribute("COMPUTE_MODE")
        if dev.cc != (9, 0):
            checks.append(Check("gpu", "fail", detail + ": pkptx's kernels are assembled for sm_90a (Hopper) and "
                                "do not load here", "run on an H100/H200 (compute capability 9.0)"))
        elif mode != COMPUTE_MODE_DEFAULT:
            checks.append(Check("gpu", "warn", detail + f", compute mode {COMPUTE_MODES.get(mode, mode)}: "
                                "one process at a time, so ranks cannot share it (MPS aside)",
                                f"nvidia-smi -i {ordinal} -c DEFAULT, or share it through MPS"))
        else:
            checks.append(Check("gpu", "ok", detail + " (sm_90a kernels run)"))
    return checks


def _p2p(a: int, b: int) -> tuple:
    """(access a->b, access b->a, native atomics a->b, performance rank a->b) of GPUs ``a`` and ``b``."""
    from .launch import Device, driver
    attr = driver.driver().CUdevice_P2PAttribute
    da, db = Device(a).handle, Device(b).handle
    get = lambda name: driver.call("cuDeviceGetP2PAttribute", getattr(attr, name), da, db)  # noqa: E731
    return (bool(driver.call("cuDeviceCanAccessPeer", da, db)), bool(driver.call("cuDeviceCanAccessPeer", db, da)),
            bool(get("CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED")),
            int(get("CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK")))


def check_p2p(machine: Machine) -> list[Check]:
    """Peer access and link properties of every pair of GPUs, one line per kind of pair."""
    if machine.gpus < 2:
        why = f"no GPU: {machine.no_gpu}" if not machine.gpus else "one GPU: no pairs (ranks on it share memory " \
                                                                    "through CUDA IPC, checked below)"
        return [Check("p2p", "skip", why)]
    kinds: dict[tuple, list[str]] = {}
    for a in range(machine.gpus):
        for b in range(a + 1, machine.gpus):
            kinds.setdefault(_p2p(a, b), []).append(f"{a}-{b}")
    checks = []
    for (there, back, atomics, rank), pairs in kinds.items():
        detail = (f"GPU pairs {', '.join(pairs)}: peer access {'both ways' if there and back else 'MISSING'}, "
                  f"native atomics {'yes' if atomics else 'no'}, performance rank {rank}")
        if not (there and back):
            checks.append(Check("p2p", "fail", detail, "every pair of GPUs needs peer access (NVLink or PCIe P2P); "
                                "see `nvidia-smi topo -m`, and the IOMMU/ACS settings"))
        elif not atomics:
            checks.append(Check("p2p", "warn", detail + ": signals (red.release.sys into peer memory) need them",
                                "GPUs linked by NVLink have native peer atomics"))
        else:
            checks.append(Check("p2p", "ok", detail))
    return checks


def check_multicast(machine: Machine) -> list[Check]:
    """Multicast support and the gate's state; reads attributes and the environment, creates nothing."""
    from .launch import multicast
    closed_by = [f"{name}={value}" for name, value in multicast.DISABLING_ENV
                 if os.environ.get(name, "").strip() == value]
    gate = f"gate closed by {', '.join(closed_by)}" if closed_by else \
        f"gate open (no {' / '.join(f'{n}={v}' for n, v in multicast.DISABLING_ENV)} set)"
    if not machine.gpus:
        return [Check("multicast", "skip", f"no GPU: support not checked; {gate}")]
    from .launch import Device
    supported = [o for o in range(machine.gpus) if Device(o).attribute("MULTICAST_SUPPORTED")]
    allowed, reason = multicast.multicast_policy(0)
    support = (f"supported on GPUs {', '.join(map(str, supported))}" if supported else
               "not supported (CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED reads 0)")
    use = "multicast paths in use" if allowed else f"unicast fallbacks in use ({reason})"
    return [Check("multicast", "ok", f"{support}; {gate}; {use}; doctor creates no multicast object")]


def check_sharing(machine: Machine) -> list[Check]:
    if not machine.gpus:
        return [Check("ipc", "skip", "no GPU: CUDA IPC and VMM fd sharing not checked")]
    from .doctor_sharing import check_sharing as run
    return [Check(name, "ok" if ok else "fail", detail, "" if ok else fix) for name, ok, detail, fix in run()]


def check_mps(machine: Machine) -> list[Check]:
    from .bench.mpirun import mps_module
    mps = mps_module()
    if mps is None:
        return [Check("mps", "skip", "pkptx.launch.mps is not in this version")]
    status = mps.status()
    if status.running:
        return [Check("mps", "ok", f"an MPS daemon is up (pipe directory {status.pipe_dir}): {status.detail}")]
    return [Check("mps", "ok", f"no MPS daemon: {status.detail} (ranks sharing a GPU are time-sliced; "
                               "`python -m pkptx mps start`, or `pkptx bench --ranks N --mps`)")]


def check_cache(machine: Machine) -> list[Check]:
    from .toolchain import cache_dir
    root = cache_dir()
    if root is None:
        return [Check("cache", "ok", "disabled (PKPTX_CACHE=0): every build assembles again")]
    if not root.exists():
        return [Check("cache", "ok", f"{root} (empty: created by the first build)")]
    files = [p for p in root.iterdir() if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    detail = f"{root}: {len(files)} files, {size / 2 ** 20:.1f} MiB"
    if not os.access(root, os.W_OK):
        return [Check("cache", "warn", detail + ", not writable: every build assembles again",
                      "set PKPTX_CACHE_DIR to a writable folder")]
    return [Check("cache", "ok", detail + " (delete the folder to empty it)")]


CHECKS = (check_python, check_packages, check_launcher, check_assembly, check_driver, check_gpus, check_p2p, check_multicast,
          check_sharing, check_mps, check_cache)


def run_checks() -> list[Check]:
    """Every check in order; one that raises reports a failure instead of ending the doctor."""
    machine = probe()
    checks = []
    for check in CHECKS:
        try:
            checks += check(machine)
        except Exception as exc:
            name = check.__name__.removeprefix("check_")
            checks.append(Check(name, "fail", f"the check itself failed: {type(exc).__name__}: {exc}".splitlines()[0],
                                "report it with the output of `python -m pkptx doctor --json`"))
    return checks


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="pkptx doctor", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    args = ap.parse_args(argv)
    checks = run_checks()
    code = exit_status(checks)
    if args.json:
        print(json.dumps({"exit_status": code, "checks": [asdict(c) for c in checks]}, indent=1))
        return code
    for check in checks:
        print(check.line())
    counts = ", ".join(f"{sum(c.status == s for c in checks)} {s}" for s in STATUSES)
    print(f"pkptx doctor: {len(checks)} checks: {counts}; exit status {code}")
    return code
