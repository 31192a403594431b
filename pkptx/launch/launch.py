"""Kernel launches: argument packing derived from the kernel's ``.param`` list, and ``cuLaunchKernelEx``.

The host cost of a launch is what a Python loop of small kernels pays, so the hot path does little:
one struct ``pack_into`` (in a function generated once per parameter list) writes every argument into
a per-thread buffer whose ``void**`` array was built once, that address goes to ``cuLaunchKernelEx``
as ``kernelParams``, and the native ``CUlaunchConfig`` is built once per (config, stream) after
validation.
Argument checking is left to ``struct`` (it range-checks every integer width); only when it fails is
each argument checked again, slowly, to name the one that is wrong.
"""
from __future__ import annotations

import ctypes
import functools
import inspect
import math
import numbers
import os
import struct
import threading
from math import prod

import ml_dtypes
import numpy as np

from ..errors import LaunchError, PkptxError
from ..isa.signature import Kind, Signature
from .array import DeviceArray, device_pointer
from .config import PORTABLE_CLUSTER, LaunchConfig
from .device import Device, stream_handle
from .driver import check, driver, ensure_init
from .module import get_function
from .tensormap import TensorMap

_INT_CODES = {("u", 8): "B", ("u", 16): "H", ("u", 32): "I", ("u", 64): "Q",
              ("s", 8): "b", ("s", 16): "h", ("s", 32): "i", ("s", 64): "q"}
_FLOAT_CODES = {"f16": ("e", np.float16), "f32": ("f", np.float32), "tf32": ("f", np.float32),
                "f64": ("d", np.float64)}
_ML_FLOATS = {"bf16": ml_dtypes.bfloat16}      # the one 16-bit float besides .f16 a parameter can hold


def _pointer(value) -> int:
    kind = type(value)
    if kind is DeviceArray:
        return value.ptr
    return value if kind is int else device_pointer(value)


def _bits_converter(bits: int):
    """Bit-typed params (.b32...) take any int that fits the width, signed or unsigned."""
    lo, mask = -(1 << (bits - 1)), (1 << bits) - 1

    def convert(value):
        if not lo <= value <= mask:
            raise OverflowError
        return value & mask
    return convert


def _small_float_converter(dtype):
    """bf16 scalars go in as their bit pattern (struct has no such formats); a finite value
    that would round to inf or nan, or an inf the format lacks, is out of range as it is for .f16."""
    def convert(value):
        if not isinstance(value, numbers.Real):
            raise TypeError
        encoded = np.array(value, dtype)
        if np.isnan(encoded) != math.isnan(value) or np.isinf(encoded) != math.isinf(value):
            raise OverflowError
        return int.from_bytes(encoded.tobytes(), "little")
    return convert


def _bytes_converter(size: int):
    def convert(value):
        data = value.data if isinstance(value, TensorMap) else bytes(value)
        if len(data) != size:
            raise ValueError
        return data
    return convert


_PACK_ERRORS = (struct.error, OverflowError, TypeError, ValueError, PkptxError)


def _slot(p) -> tuple[str, object]:
    """(struct code, converter or None) for one param."""
    ty = p.type
    if p.count > 1 or ty.name == "b128":
        return f"{p.size}s", _bytes_converter(p.size)
    if p.pointer:
        if ty.kind not in ("u", "s", "b") or ty.bits != 64:
            raise LaunchError(f"param '{p.name}' is a pointer declared .{ty.name}; expected .u64, .s64 or .b64 "
                              "(device addresses are 64-bit)")
        return "Q", _pointer
    if (ty.kind, ty.bits) in _INT_CODES:
        return _INT_CODES[(ty.kind, ty.bits)], None
    if ty.name in _FLOAT_CODES:
        return _FLOAT_CODES[ty.name][0], None
    if ty.name in _ML_FLOATS:
        return ("H" if ty.bits == 16 else "B"), _small_float_converter(_ML_FLOATS[ty.name])
    if ty.kind in ("b", "fx2"):
        return {8: "B", 16: "H", 32: "I", 64: "Q"}[ty.bits], _bits_converter(ty.bits)
    raise LaunchError(f"param '{p.name}' has type .{ty.name}, which cannot be a kernel parameter")


def _expected(p) -> str:
    ty = p.type
    if p.count > 1 or ty.name == "b128":
        return f"a TensorMap or {p.size} bytes"
    if p.pointer:
        what = "" if p.kind is Kind.POINTER else f" ({p.kind}: {p.kind.about})"
        return ("device memory: a DeviceArray, a CUDA array (__cuda_array_interface__ or a CUDA __dlpack__), "
                f"or an int device address{what}")
    if ty.kind in ("u", "s", "b", "fx2"):
        lo = -(1 << (ty.bits - 1)) if ty.kind in ("s", "b", "fx2") else 0
        hi = (1 << (ty.bits - 1)) - 1 if ty.kind == "s" else (1 << ty.bits) - 1
        return f"an int in [{lo}, {hi}]"
    dtype = _ML_FLOATS[ty.name] if ty.name in _ML_FLOATS else _FLOAT_CODES[ty.name][1]
    largest = float(ml_dtypes.finfo(dtype).max)
    return f"a real number representable as .{ty.name} (finite values up to {largest:g} in magnitude)"


class Packer:
    """Packs Python arguments into the kernel's parameter layout; one buffer per thread.

    ``pack(args)`` returns the address of a ``void*[n]`` array (``kernelParams``), valid until the
    same thread packs again; the driver copies the values at launch. ``pack`` is a function
    generated for this parameter list (its text is ``source``): one ``struct.pack_into`` call
    with each argument's conversion inlined, which halves the host cost of a loop over the params.
    ``pack_owned(args)`` packs into a buffer of its own, for a launch repeated with the same
    arguments (:class:`PreparedLaunch`).
    """

    def __init__(self, params, entry: str = "kernel"):
        self.params, self.entry = tuple(params), entry
        self.signature = Signature(entry, self.params)
        fmt, offsets, exprs, off = ["<"], [], [], 0
        scope = {"DeviceArray": DeviceArray, "pointer": _pointer}
        for i, p in enumerate(self.params):
            code, conv = _slot(p)
            pad = -off % max(p.alignment, 1)
            if pad:
                fmt.append(f"{pad}x")
            off += pad
            offsets.append(off)
            off += struct.calcsize("<" + code)
            fmt.append(code)
            if conv is _pointer:
                exprs.append(f"a{i}.ptr if type(a{i}) is DeviceArray else pointer(a{i})")
            elif conv is not None:
                scope[f"convert{i}"] = conv
                exprs.append(f"convert{i}(a{i})")
            else:
                exprs.append(f"a{i}")
        self._struct = struct.Struct("".join(fmt))
        self.offsets, self.size = tuple(offsets), off
        self._align = max([p.alignment for p in self.params] + [16])
        self._n = len(self.params)
        self._tls = threading.local()
        self.source = self._source(exprs)
        scope.update(tls=self._tls, new_state=self._state, pack_into=self._struct.pack_into, n=self._n,
                     count_error=self._count_error, explain=self._explain, errors=_PACK_ERRORS)
        exec(compile(self.source, f"<pkptx packer for {entry}>", "exec"), scope)
        self.pack, self._pack_to = scope["pack"], scope["pack_to"]

    def _source(self, exprs: list[str]) -> str:
        if not exprs:
            return ("def pack(args):\n    if args:\n        raise count_error(args)\n    return 0\n"
                    "def pack_to(state, args):\n    return pack(args)\n")
        names = ", ".join(f"a{i}" for i in range(len(exprs)))
        values = ",\n                  ".join(exprs)
        body = f"""    try:
        pack_into(state[0], state[1],
                  {values})
    except errors as exc:
        raise explain(args, exc) from None
    return state[2]
"""
        return f"""def pack(args):
    if len(args) != n:
        raise count_error(args)
    {names}, = args
    try:
        state = tls.state
    except AttributeError:
        state = new_state()
{body}
def pack_to(state, args):
    if len(args) != n:
        raise count_error(args)
    {names}, = args
{body}"""

    def pack_owned(self, args) -> tuple:
        """Pack ``args`` into a new buffer: (the ``void**`` address, the buffer that keeps it valid)."""
        state = self._state(thread_local=False)
        return self._pack_to(state, args), state

    def _state(self, thread_local: bool = True):
        buf = ctypes.create_string_buffer(self.size + self._align)
        base = ctypes.addressof(buf)
        start = -base % self._align
        ptrs = (ctypes.c_void_p * max(self._n, 1))(*(base + start + o for o in self.offsets))
        state = (buf, start, ctypes.addressof(ptrs) if self._n else 0, ptrs)
        if thread_local:
            self._tls.state = state
        return state

    def _count_error(self, args) -> LaunchError:
        names = ", ".join(p.name for p in self.params)
        return LaunchError(f"kernel '{self.entry}': got {len(args)} arguments; expected {self._n} ({names})")

    def _explain(self, args, exc: Exception) -> LaunchError:
        """The labelled error for the first argument that does not pack on its own."""
        for i, (p, value) in enumerate(zip(self.params, args)):
            code, conv = _slot(p)
            try:
                struct.pack("<" + code, conv(value) if conv is not None else value)
            except _PACK_ERRORS as why:
                detail = f" ({why})" if isinstance(why, PkptxError) else ""
                return LaunchError(f"kernel '{self.entry}': argument {i} '{p.name}' (.{p.type.name}"
                                   f"{f'[{p.count}]' if p.count > 1 else ''}) got {value!r:.80}; expected "
                                   f"{_expected(p)}{detail}")
        return LaunchError(f"kernel '{self.entry}': arguments do not pack: {exc}")


class LoadedKernel:
    """A CompiledKernel loaded on a device, ready to launch.

    ``k.launch(config, *args, stream=None)``, or ``k[grid, block](*args, stream=None)`` /
    ``k[grid, block, smem](...)`` / ``k[config](...)``. ``grid`` counts blocks. ``k.signature`` is its
    parameters with their kinds; ``k.prepare(config, **values)`` binds arguments to them by name.
    """

    def __init__(self, compiled, device: Device | None = None):
        self.compiled = compiled
        self.device = (device or Device.current()).set_current()
        self.function = get_function(compiled, self.device)
        self.packer = Packer(compiled.params, compiled.entry)
        self.signature = self.packer.signature
        cu = driver()
        self._pack, self._handle = self.packer.pack, self.function.handle
        self._launch_ex, self._success = cu.cuLaunchKernelEx, cu.CUresult.CUDA_SUCCESS
        self._natives: dict[tuple[LaunchConfig, int], object] = {}
        self._last: tuple = (None, None, None)
        self._bound: dict = {}

    @classmethod
    def load(cls, compiled, device: Device | None = None) -> "LoadedKernel":
        return cls(compiled, device)

    @property
    def threads(self) -> int:
        """Threads per block the kernel declares (``.reqntid``), so hosts never recompute them."""
        if not self.compiled.block_exact:
            raise LaunchError(f"{self.compiled.entry} declares no exact block (.reqntid): give the block")
        return prod(self.compiled.block)

    def launch(self, config: LaunchConfig, *args, stream=None) -> None:
        """Launch with ``config`` on ``stream`` (None: the default stream)."""
        h = stream_handle(stream)
        last = self._last
        if last[0] is config and last[1] == h:
            native = last[2]
        else:
            native = self.native(config, h)
            self._last = (config, h, native)
        params = self._pack(args)
        err = self._launch_ex(native, self._handle, params, 0)[0]
        if err is not self._success:        # identity is the fast test; check() decides for real
            self._failed(err, native, params)

    def native(self, config: LaunchConfig, h: int):
        """The validated native ``CUlaunchConfig`` of ``config`` on stream handle ``h`` (built once)."""
        native = self._natives.get((config, h)) if isinstance(config, LaunchConfig) else None
        return native if native is not None else self._prepare(config, h)

    def prepare(self, config: LaunchConfig, *args, **values) -> "PreparedLaunch":
        """The launch of ``config`` with ``args`` (in parameter order) or ``values`` (by parameter name,
        bound by the kernel's :attr:`signature`), checked and packed once: ``.launch(stream)`` then costs
        a dict lookup and ``cuLaunchKernelEx``. What the host ops' plans (and graphs) repeat. A missing,
        misspelt or extra name raises ArgumentError naming it and the kind expected."""
        if values:
            if args:
                raise LaunchError(f"kernel '{self.compiled.entry}': prepare() takes arguments by position or by "
                                  f"name, not both ({len(args)} by position, {', '.join(values)} by name)")
            args = self.signature.bind(values)
        return PreparedLaunch(self, config, args)

    def _failed(self, err, native, params) -> None:
        cu = driver()
        if err == cu.CUresult.CUDA_ERROR_INVALID_CONTEXT:   # a thread that never made the context current
            self.device.set_current()
            err = self._launch_ex(native, self._handle, params, 0)[0]
        check((err,), f"cuLaunchKernelEx({self.compiled.entry})")

    def _prepare(self, config, h: int):
        """Validate ``config`` for this kernel and build its native CUlaunchConfig (once)."""
        if not isinstance(config, LaunchConfig):
            raise LaunchError(f"config={config!r}: expected a LaunchConfig")
        fn = self.function
        config.validate(self.device.limits, self.compiled, max_threads=fn.max_threads, static_smem=fn.static_smem)
        smem = config.smem_for(self.compiled)
        fn.ensure_dynamic_smem(smem)
        cluster = config.effective_cluster(self.compiled)
        if cluster is not None and prod(cluster) > PORTABLE_CLUSTER:
            fn.allow_non_portable_cluster()
        cu = driver()
        native = cu.CUlaunchConfig()
        native.gridDimX, native.gridDimY, native.gridDimZ = config.grid
        native.blockDimX, native.blockDimY, native.blockDimZ = config.block
        native.sharedMemBytes = smem
        native.hStream = cu.CUstream(h)
        if config.cluster is not None:
            attr = cu.CUlaunchAttribute()
            attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = config.cluster
            native.attrs, native.numAttrs = [attr], 1
        else:
            native.numAttrs = 0
        self._natives[(config, h)] = native
        return native

    def __getitem__(self, key) -> Bound:
        try:
            bound = self._bound.get(key)
        except TypeError:
            raise LaunchError(f"kernel[{key!r}]: expected ints or tuples of ints, or a LaunchConfig") from None
        if bound is None:
            if isinstance(key, LaunchConfig):
                config = key
            elif isinstance(key, tuple) and len(key) in (2, 3):
                config = LaunchConfig(key[0], key[1], dynamic_smem=key[2] if len(key) == 3 else None)
            else:
                raise LaunchError(f"kernel[{key!r}]: expected kernel[grid, block], kernel[grid, block, smem] "
                                  "or kernel[LaunchConfig]")
            bound = self._bound[key] = Bound(self.launch, config)
        return bound

    def __repr__(self) -> str:
        return f"LoadedKernel('{self.compiled.entry}', {self.device})"


class PreparedLaunch:
    """A kernel, a LaunchConfig and arguments packed into a buffer of its own (:meth:`LoadedKernel.prepare`).

    The arguments are fixed: their values were packed at prepare time, and the argument objects are
    kept (so arrays passed in stay allocated while the launch exists). Native configs are kept per
    stream. A launch calls the driver's ``cuLaunchKernelEx`` through ctypes on the addresses of the
    native config and the packed arguments (:func:`direct_launch`), which skips the bindings' argument
    conversion, most of a launch's host cost; where that is not available (or the driver is Python: the
    fake driver of the CPU tests, the interpreter's) it goes through :func:`driver`'s function.
    """
    __slots__ = ("kernel", "config", "args", "_params", "_buffer", "_natives", "_launch_ex", "_handle", "_success",
                 "_direct", "_function", "_c_params")

    def __init__(self, kernel: LoadedKernel, config: LaunchConfig, args: tuple):
        if not isinstance(config, LaunchConfig):
            raise LaunchError(f"prepare(config={config!r}): expected a LaunchConfig")
        self.kernel, self.config, self.args = kernel, config, tuple(args)
        self._params, self._buffer = kernel.packer.pack_owned(self.args)
        self._natives: dict[int, tuple] = {}
        self._launch_ex, self._handle, self._success = kernel._launch_ex, kernel._handle, kernel._success
        python = inspect.isfunction(kernel._launch_ex) or inspect.ismethod(kernel._launch_ex)
        self._direct = None if python else direct_launch()
        # ctypes values made once: converting Python ints at each call costs more than the call
        self._function, self._c_params = ctypes.c_void_p(int(self._handle)), ctypes.c_void_p(self._params)

    def launch(self, stream=None) -> None:
        """Queue the launch on ``stream`` (None: the default stream; anything :func:`stream_handle` takes)."""
        h = stream_handle(stream)
        entry = self._natives.get(h)
        if entry is None:
            native = self.kernel.native(self.config, h)
            entry = self._natives[h] = (native, ctypes.c_void_p(native.getPtr()))
        if self._direct is not None:
            code = self._direct(entry[1], self._function, self._c_params, None)
            if code:
                self.kernel._failed(driver().CUresult(code), entry[0], self._params)
            return
        err = self._launch_ex(entry[0], self._handle, self._params, 0)[0]
        if err is not self._success:
            self.kernel._failed(err, entry[0], self._params)


_direct: list = []


def direct_launch():
    """``cuLaunchKernelEx`` of the libcuda that cuda.bindings already loaded (``RTLD_NOLOAD``: never a
    second copy), as a ctypes function of four c_void_p values, or None when it cannot be had."""
    if not _direct:
        ensure_init()
        try:
            fn = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD).cuLaunchKernelEx
            fn.restype = ctypes.c_int          # no argtypes: callers pass c_void_p values (or None)
        except (OSError, AttributeError):
            fn = None
        _direct.append(fn)
    return _direct[0]


class Bound(functools.partial):
    """``kernel[grid, block]``: the kernel's ``launch`` with the config bound; call it with the
    kernel's arguments (and ``stream=``). A partial, so the extra call layer costs nothing."""

    @property
    def config(self) -> LaunchConfig:
        return self.args[0]


_loaded: dict[tuple[str, str, int], LoadedKernel] = {}


def launch(stream, config: LaunchConfig, kernel, *args) -> None:
    """Launch ``kernel`` (a :class:`LoadedKernel`, or a CompiledKernel loaded on first use on the
    current device) with ``config`` on ``stream`` (None: the default stream)."""
    if not isinstance(kernel, LoadedKernel):
        device = Device.current()
        key = (kernel.cubin.key, kernel.entry, device.ordinal)
        loaded = _loaded.get(key)
        if loaded is None:
            loaded = _loaded[key] = LoadedKernel(kernel, device)
        kernel = loaded
    kernel.launch(config, *args, stream=stream)
