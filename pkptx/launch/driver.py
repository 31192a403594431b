"""The one place where CUDA driver results become values or :class:`CudaError`.

Every driver call in pkptx goes through :func:`call`, so no return code is ever dropped; :func:`driver`
is the one choice between the CUDA driver and the CPU interpreter's (``PKPTX_INTERPRET=1``).
"""
from __future__ import annotations

import os
import threading
import types

from ..errors import CudaError, DriverUnavailableError, SettingError

_HINTS = {
    "CUDA_ERROR_NO_DEVICE": "no GPU is visible; GPU work needs a machine with one (check CUDA_VISIBLE_DEVICES)",
    "CUDA_ERROR_NOT_INITIALIZED": "cuInit was not called; use pkptx.launch.Device(...) first",
    "CUDA_ERROR_INVALID_PTX": "the PTX uses a .version above what this driver JITs; pkptx loads cubins to avoid this",
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION": "the driver is older than the PTX ISA version; emit .version <= 9.0",
    "CUDA_ERROR_NO_BINARY_FOR_GPU": "the cubin was assembled for another architecture than this GPU",
    "CUDA_ERROR_OUT_OF_MEMORY": "the device is out of memory; free arrays or allocate less",
    "CUDA_ERROR_ILLEGAL_ADDRESS": "a kernel accessed memory it does not own; the context is now unusable",
    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES": "too many registers or threads per block for this kernel",
    "CUDA_ERROR_INVALID_VALUE": "an argument to the driver call is out of range",
    "CUDA_ERROR_NOT_SUPPORTED": "the device or driver lacks this feature",
    "CUDA_ERROR_INVALID_CONTEXT": "no CUDA context is current on this thread; call pkptx.launch.Device(n).set_current()",
    "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED": "a synchronous call (or the legacy default stream) was used while "
                                             "a stream was being captured into a graph",
    "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED": "an earlier error or unsupported call broke the stream capture",
}

INTERPRET_ENV = "PKPTX_INTERPRET"

_init_lock = threading.Lock()
_initialised = False
_select_lock = threading.Lock()
_selected = None


def driver():
    """The driver: the ``cuda.bindings.driver`` module, or, when ``PKPTX_INTERPRET=1`` is in the
    environment at the first call, the CPU interpreter's stand-in (:mod:`pkptx.launch.interpreted`).
    Chosen once per process and imported lazily, so CPU-only code never needs a driver."""
    return _selected or _select()


def _select():
    global _selected
    with _select_lock:
        if _selected is None:
            text = os.environ.get(INTERPRET_ENV, "").strip()
            if text not in ("", "0", "1"):
                raise SettingError(f"{INTERPRET_ENV}={text!r} (environment): expected 1 (run kernels on the "
                                   "CPU interpreter) or 0 (the CUDA driver)")
            if text == "1":
                from .interpreted import InterpretedDriver
                _selected = InterpretedDriver()
            else:
                from cuda.bindings import driver as cu
                _selected = cu
    return _selected


def interpreted() -> bool:
    """Whether :func:`driver` is the CPU interpreter's: asked where the two differ by more than the
    driver's answers (what a module is loaded from, how a tensor map is encoded)."""
    return not isinstance(driver(), types.ModuleType)


def _error_text(cu, code) -> tuple[str, str]:
    err_name, name = cu.cuGetErrorName(code)
    err_desc, desc = cu.cuGetErrorString(code)
    name = name.decode() if err_name == cu.CUresult.CUDA_SUCCESS and name else str(code)
    desc = desc.decode() if err_desc == cu.CUresult.CUDA_SUCCESS and desc else "no description"
    return name, desc


def check(result, call: str = "CUDA driver call"):
    """Turn a cuda.bindings result tuple ``(CUresult, *values)`` into its values.

    Returns ``None`` for no values, the value itself for one, a tuple for several.
    Raises :class:`CudaError` naming ``call`` for any other result than CUDA_SUCCESS.
    """
    cu = driver()
    if isinstance(result, tuple):
        code, values = result[0], result[1:]
    else:
        code, values = result, ()
    if code != cu.CUresult.CUDA_SUCCESS:
        name, desc = _error_text(cu, code)
        raise CudaError(call, int(code), name, desc, _HINTS.get(name, ""))
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def call(fn_name: str, *args):
    """Call ``cuda.bindings.driver.<fn_name>(*args)`` and check its result."""
    ensure_init()
    return check(getattr(driver(), fn_name)(*args), fn_name)


def ensure_init() -> None:
    """cuInit(0), once per process, after the rank's MPS share (``PKPTX_MPS_SHARES``), which must be in
    the environment before the context exists. Without a loadable driver library (cuda.bindings raises a
    RuntimeError such as cuda.pathfinder's DynamicLibNotFoundError while loading it) this raises
    :class:`DriverUnavailableError`, a CudaError, like every other driver failure."""
    global _initialised
    if _initialised:
        return
    with _init_lock:
        if not _initialised:
            from .mps import apply_share
            apply_share()
            try:
                result = driver().cuInit(0)
            except RuntimeError as exc:
                raise DriverUnavailableError("cuInit", str(exc).splitlines()[0]) from exc
            check(result, "cuInit")
            _initialised = True
