"""Every exception pkptx raises derives from PkptxError, so callers can catch one type."""
from __future__ import annotations


class PkptxError(Exception):
    """Base of all pkptx errors."""


class PTXBuildError(PkptxError):
    """An instruction or kernel that cannot be valid PTX, caught while the kernel is being built.

    ``origin`` is the ``file:line`` of the user's Python code that emitted it, when known.
    """

    def __init__(self, message: str, origin: str | None = None):
        self.origin = origin
        super().__init__(f"{message}\n  at {origin}" if origin else message)


class TargetError(PTXBuildError):
    """The instruction needs a newer PTX ISA or a different target than the kernel allows."""


class AssemblyError(PkptxError):
    """The assembler (ptxas inside nvJitLink) rejected the PTX.

    ``log`` is the raw assembler log; ``origins`` maps PTX line numbers mentioned in it to the
    Python lines that emitted them.
    """

    def __init__(self, message: str, log: str = "", origins: dict[int, str] | None = None):
        self.log = log
        self.origins = origins or {}
        super().__init__(message)


class CudaError(PkptxError):
    """A CUDA driver call returned something other than CUDA_SUCCESS."""

    def __init__(self, call: str, code: int, name: str, description: str, hint: str = ""):
        self.call, self.code, self.name, self.description = call, code, name, description
        text = f"{call} failed: {name} ({code}): {description}"
        super().__init__(text + (f"\n  hint: {hint}" if hint else ""))


class DriverUnavailableError(CudaError):
    """The CUDA driver library (libcuda) cannot be loaded: no NVIDIA driver on this machine."""

    def __init__(self, call: str, description: str):
        super().__init__(call, -1, "CUDA_DRIVER_NOT_LOADABLE", description,
                         "GPU work needs a machine with the NVIDIA driver installed; building and assembling "
                         "kernels (Kernel.compile, python -m pkptx build) works without one")


class SettingError(PkptxError, ValueError):
    """A setting (an argument, or an environment variable such as PKPTX_TIMEOUT_S) holds a value pkptx
    cannot use; the message names it, its value and what is accepted."""


class ArgumentError(PkptxError, ValueError):
    """A host API argument that cannot work (raised before any GPU work): a host op's operand, or a kernel
    argument bound by name that is missing, misspelt or extra (:class:`pkptx.isa.signature.Signature`)."""


class LaunchError(PkptxError):
    """A launch request that the device cannot run (checked before calling the driver)."""


class WorldError(PkptxError):
    """Something went wrong among the ranks: mismatched arguments, a rank that never arrived."""


class DeviceTimeoutError(WorldError):
    """A bounded device-side wait expired; names the rank that waited and, where the wait can tell
    (barriers, per-peer flags), the ranks whose signal is missing (``.rank``, ``.missing``)."""
    rank: int | None = None
    missing: list[int] = []


class CaptureError(LaunchError):
    """A call that cannot happen while its stream is being captured into a CUDA graph."""


class HeapStateError(WorldError):
    """A symmetric heap whose device counters may be out of step between ranks (after a device timeout):
    every rank must call ``heap.reset()`` before the next op on it."""


class BenchError(PkptxError):
    """A benchmark that cannot run or a result file that cannot be read or plotted (``python -m pkptx bench``)."""
