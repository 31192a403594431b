"""A kernel decoded once and bound to the semantics tables: ``Program(kernel).ops[i].run(warp, mask)``."""
from __future__ import annotations

from .decode import decode
from .errors import UnsupportedError


def _tables() -> dict:
    from . import multimem, ops_arith, ops_async, ops_control, ops_data, ops_memory, ops_mma, ops_sync
    table = {}
    for module in (multimem, ops_arith, ops_async, ops_control, ops_data, ops_memory, ops_mma, ops_sync):
        table.update(module.TABLE)
    return table


class Program:
    _cache: dict = {}

    def __init__(self, kernel):
        self.kernel = kernel
        self.ops, self.labels = decode(kernel)
        self.registers = kernel.registers
        table = _tables()
        for op in self.ops:
            factory = table.get(op.key)
            if factory is None:
                raise UnsupportedError(f"{op.text} is not modelled by the interpreter", op.origin)
            try:
                op.run = factory(op, self)
            except UnsupportedError as exc:
                raise UnsupportedError(exc.args[0].split("\n")[0], op.origin) from None

    @classmethod
    def of(cls, kernel) -> "Program":
        """Decoded once per kernel object (and body length, so a kernel still being built re-decodes)."""
        key = (id(kernel), len(kernel.body))
        prog = cls._cache.get(key)
        if prog is None or prog.kernel is not kernel:
            prog = cls._cache[key] = cls(kernel)
        return prog

    def label(self, name: str) -> int:
        return self.labels[name]
