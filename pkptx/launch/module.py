"""Load a CompiledKernel into a context and find its entry, once per (context, cubin).

Loading a cubin means the driver never JITs, so load errors are about the binary itself. A kernel
that uses setmaxnreg is loaded from its PTX instead (``CompiledKernel.jit``): only the driver's
whole-program JIT keeps setmaxnreg (and caches the result in its compute cache); its PTX version is
within the driver's limit (``pkptx.isa.MAX_PTX``).
"""
from __future__ import annotations

import threading

from ..errors import LaunchError
from .config import DEFAULT_SMEM
from .device import Device
from .driver import call, check, driver, interpreted

_modules: dict[tuple[int, str], object] = {}
_functions: dict[tuple[int, str, str], "Function"] = {}
_lock = threading.Lock()


class Function:
    """A kernel entry in one context, with what the driver says about it.

    ``max_threads`` accounts for the kernel's register use, ``static_smem`` for its ``.shared``
    declarations. The dynamic shared memory limit is raised on demand (above 48 KB the driver
    needs ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`` first).
    """

    def __init__(self, handle, entry: str, device: Device):
        attr = driver().CUfunction_attribute
        self.handle, self.entry, self.device = handle, entry, device
        _load_now(handle, entry)
        self.max_threads = call("cuFuncGetAttribute", attr.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, handle)
        self.static_smem = call("cuFuncGetAttribute", attr.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, handle)
        self.num_regs = call("cuFuncGetAttribute", attr.CU_FUNC_ATTRIBUTE_NUM_REGS, handle)
        self.local_bytes = call("cuFuncGetAttribute", attr.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, handle)
        self.dynamic_smem_limit = max(DEFAULT_SMEM - self.static_smem, 0)
        self.non_portable_cluster = False
        self._lock = threading.Lock()

    def ensure_dynamic_smem(self, nbytes: int) -> None:
        """Allow launches with ``nbytes`` of dynamic shared memory."""
        if nbytes <= self.dynamic_smem_limit:
            return
        with self._lock:
            if nbytes > self.dynamic_smem_limit:
                attr = driver().CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                call("cuFuncSetAttribute", self.handle, attr, nbytes)
                self.dynamic_smem_limit = nbytes

    def allow_non_portable_cluster(self) -> None:
        """Allow clusters above 8 blocks (where the part supports them)."""
        if not self.non_portable_cluster:
            attr = driver().CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
            call("cuFuncSetAttribute", self.handle, attr, 1)
            self.non_portable_cluster = True


def _load_now(handle, entry: str) -> None:
    """Load the function's code now (``cuFuncLoad``), not at its first launch: under lazy loading (the
    default since CUDA 12.2) that first launch may be inside a stream capture, which the load would
    invalidate. Drivers without cuFuncLoad load eagerly anyway."""
    fn = getattr(driver(), "cuFuncLoad", None)
    if fn is None:
        return
    try:
        result = fn(handle)
    except RuntimeError:            # the bindings know it, the driver library does not export it
        return
    if result[0] != driver().CUresult.CUDA_ERROR_NOT_SUPPORTED:
        check(result, f"cuFuncLoad({entry})")


def _image(compiled):
    """What ``cuModuleLoadData`` takes: the cubin, the PTX of a ``jit`` kernel, or under the interpreter
    the CompiledKernel (it runs the builder's instruction list, not a binary)."""
    if interpreted():
        return compiled
    return compiled.ptx.encode() + b"\0" if compiled.jit else compiled.cubin.data


def load_module(compiled, device: Device):
    """The ``CUmodule`` of ``compiled.cubin`` in ``device``'s primary context (loaded once)."""
    device.set_current()
    key = (int(device.context), compiled.cubin.key)
    module = _modules.get(key)
    if module is None:
        with _lock:
            module = _modules.get(key)
            if module is None:
                module = _modules[key] = call("cuModuleLoadData", _image(compiled))
    return module


def _check_arch(compiled, device: Device) -> None:
    """A cubin runs on its own major version at an equal or newer minor; an ``a`` cubin on its own only."""
    digits = compiled.arch.removeprefix("sm_").rstrip("af")
    if not digits.isdigit():
        return
    want, cc = (int(digits) // 10, int(digits) % 10), device.cc
    exact = compiled.arch.endswith("a")
    if (cc != want) if exact else (cc[0] != want[0] or cc[1] < want[1]):
        raise LaunchError(f"kernel '{compiled.entry}' was assembled for {compiled.arch}, which cannot run on "
                          f"{device.name} (compute capability {cc[0]}.{cc[1]}); expected a cubin for "
                          f"sm_{cc[0]}{cc[1]}")


def get_function(compiled, device: Device | None = None) -> Function:
    """The loaded entry ``compiled.entry`` on ``device`` (default: the current one)."""
    device = device or Device.current()
    _check_arch(compiled, device)
    key = (int(device.context), compiled.cubin.key, compiled.entry)
    fn = _functions.get(key)
    if fn is None:
        module = load_module(compiled, device)
        handle = call("cuModuleGetFunction", module, compiled.entry.encode())
        with _lock:
            fn = _functions.setdefault(key, Function(handle, compiled.entry, device))
    return fn
