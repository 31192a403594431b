"""Every kernel pkptx ships, at representative configurations, for ``python -m pkptx build``.

Each module of ``pkptx/templates/kernels/`` holds one operator and a ``catalog()`` returning built (not
yet assembled) Kernel objects. The modules are found in that folder, not listed, so a new kernel module
is built, assembled and tested without editing this file.
"""
from __future__ import annotations

import pkgutil
from importlib import import_module

from .errors import PkptxError
from .templates import kernels as _kernels


def _discover() -> tuple[str, ...]:
    return tuple(sorted(f"{_kernels.__name__}.{m.name}" for m in pkgutil.iter_modules(_kernels.__path__)
                        if not m.ispkg))


KERNEL_MODULES = _discover()


def kernels():
    """Yield every catalogued Kernel, module by module (in module-name order)."""
    for name in KERNEL_MODULES:
        module = import_module(name)
        if not callable(getattr(module, "catalog", None)):
            raise PkptxError(f"{name} has no catalog(): every module in pkptx/templates/kernels/ is one "
                             "operator and yields the kernels `pkptx build` assembles")
        yield from module.catalog()
