"""The Builder: one method call emits one instruction into one kernel, passed explicitly.

Control flow is structured with context managers (``if_then``, ``if_else``, ``loop``, ``while_``)
and the ``range`` generator; every instruction method also takes ``pred=`` to guard it.
"""
from __future__ import annotations

import functools
import inspect
from contextlib import contextmanager

from ..errors import PTXBuildError
from .enums import spell
from .instruction import Instruction, capture_origin, locate
from .ops_arith import ArithOps
from .ops_async import AsyncOps
from .ops_data import DataOps
from .ops_mma import MmaOps
from .ops_sync import SyncOps
from .types import PtxType, pred, ptx_type, u32
from .validate import lookup, validate
from .values import Imm, Label, NotPred, Reg, Vec


def as_operand(value):
    """Python ints and floats become immediates, lists and tuples brace vectors; the rest passes."""
    if isinstance(value, bool):
        return Imm(int(value))
    if isinstance(value, (int, float)):
        return Imm(value)
    if isinstance(value, (list, tuple)):
        return Vec(tuple(as_operand(v) for v in value))
    return value


def _flag(spec, group: str) -> str:
    """``group=True`` selects a flag group's only option (``hint=True`` -> ``L2::cache_hint``)."""
    options = spec.groups.get(group, ())
    return options[0] if len(options) == 1 else group


def negate(cond):
    if isinstance(cond, NotPred):
        return cond.reg
    if isinstance(cond, Reg) and cond.type is pred:
        return NotPred(cond)
    raise PTXBuildError(f"a branch condition must be a .pred register, got {cond!r}", _origin_text())


def _origin_text():
    origin = capture_origin()
    return str(origin) if origin else None


def _located(method):
    """Wrap a Builder method so a PTXBuildError raised before ``emit`` (a bad type name, a wrong
    operand count, an unknown parameter...) also names the user's file:line."""
    @functools.wraps(method)
    def located(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except PTXBuildError as exc:
            if exc.origin is not None:
                raise
            raise locate(exc) from None
    return located


def _locate_methods(cls):
    for name in dir(cls):
        method = getattr(cls, name)
        if not name.startswith("_") and inspect.isfunction(method) and not inspect.isgeneratorfunction(method):
            setattr(cls, name, _located(method))
    return cls


class Loop:
    """Handle for ``with b.loop() as lp``: ``lp.break_if(p)`` / ``lp.continue_if(p)``."""

    def __init__(self, builder: "Builder", head: Label, end: Label):
        self.builder, self.head, self.end = builder, head, end

    def break_if(self, cond) -> None:
        self.builder.bra(self.end, pred=cond)

    def continue_if(self, cond) -> None:
        self.builder.bra(self.head, pred=cond)


class _Arm:
    def __init__(self, enter, leave):
        self._enter, self._leave = enter, leave

    def __enter__(self):
        self._enter()
        return self

    def __exit__(self, exc_type, *_):
        if exc_type is None:
            self._leave()
        return False


class Params:
    """A kernel's scalar parameters by attribute (``b.params.n``; ``b.params[name]`` for a computed name):
    each is :meth:`Builder.load_param`'s register, loaded once at the kernel's entry, so it may be read on
    any path. A name the kernel does not declare fails at build time, naming the ones it has."""
    __slots__ = ("_builder",)

    def __init__(self, builder: "Builder"):
        self._builder = builder

    def __getattr__(self, name: str) -> Reg:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._builder.load_param(name)

    __getitem__ = __getattr__


@_locate_methods
class Builder(DataOps, ArithOps, SyncOps, AsyncOps, MmaOps):
    """Emits into ``kernel``. Obtain one with ``Kernel.builder()``."""

    def __init__(self, kernel):
        self.kernel = kernel
        self._depth = 0
        self.params = Params(self)

    # ---------------------------------------------------------------- registers
    def reg(self, ty: PtxType | str, name: str | None = None) -> Reg:
        """Declare a fresh virtual register (declarations are computed when the kernel renders)."""
        ty = ptx_type(ty)
        reg = Reg(self.kernel.names.fresh(name or ty.reg_prefix, "%"), ty)
        self.kernel.declare(reg)
        return reg

    def carried(self, ty: PtxType | str, value: int | float, name: str | None = None) -> Reg:
        """A register set to the constant ``value`` at the kernel's entry, wherever this is called: a count
        a role carries across its tasks (the role's code is emitted once, inside its task loop; the entry
        runs once per thread). Each call is a new register: make a count once, where its users see it."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PTXBuildError(f"carried: value must be a Python int or float, got {value!r}", _origin_text())
        with self.kernel.at_entry():
            return self.mov(ty, value, name=name)

    def regs(self, ty: PtxType | str, count: int, name: str | None = None) -> Vec:
        return Vec(tuple(self.reg(ty, name) for _ in range(count)))

    def _dest(self, ty, into, name):
        if into is None:
            return self.reg(ty, name)
        return into

    # ---------------------------------------------------------------- emission
    def emit(self, key: str, *operands, types=(), pred=None, **mods) -> Instruction:
        """Emit the instruction ``key`` of the spec table; the low-level path all methods share.

        ``mods`` maps modifier-group names to options (enums, strings, or True for a flag group);
        None and False mean absent.
        """
        origin = capture_origin()
        try:
            spec = lookup(key)
            mods = {k: (_flag(spec, k) if v is True else spell(v)) for k, v in mods.items()
                    if v is not None and v is not False and v != ""}
            types = tuple(ptx_type(t).name for t in types)
            ops = [None if v is None else as_operand(v) for v in operands]
            while ops and ops[-1] is None:
                ops.pop()
            text, rendered, defs, uses, version = validate(spec, mods, types, ops)
            guard = self._guard(pred)
            if pred is not None:
                uses = uses + [pred.reg if isinstance(pred, NotPred) else pred]
            self.kernel.require(spec, version, text)
            self.kernel.track(defs, uses, text)
        except PTXBuildError as exc:
            raise type(exc)(exc.args[0].split("\n  at ")[0], str(origin) if origin else None) from None
        ins = Instruction("ins", text, rendered, guard, origin, key)
        self.kernel.append(ins)
        return ins

    @staticmethod
    def _guard(pred_value) -> str:
        if pred_value is None:
            return ""
        if isinstance(pred_value, NotPred):
            return f"@!{pred_value.reg.name}"
        if isinstance(pred_value, Reg) and pred_value.type is pred:
            return f"@{pred_value.name}"
        raise PTXBuildError(f"pred= must be a .pred register or its negation, got {pred_value!r}")

    def raw_ptx(self, line: str, *, defines=(), uses=()) -> None:
        """Escape hatch: one raw PTX line for a form the spec table lacks. It is not validated;
        name the registers it writes (``defines``) and reads (``uses``) so tracking stays right."""
        origin = capture_origin()
        try:
            self.kernel.track(list(defines), list(uses), line)
        except PTXBuildError as exc:
            raise PTXBuildError(exc.args[0], str(origin) if origin else None) from None
        self.kernel.append(Instruction("raw", line.strip(), origin=origin))

    def comment(self, text: str) -> None:
        for line in str(text).splitlines() or [""]:
            self.kernel.append(Instruction("comment", line))

    # ---------------------------------------------------------------- labels and branches
    def new_label(self, hint: str = "L") -> Label:
        return Label(self.kernel.names.fresh(f"L_{hint}", "$"))

    def place(self, label: Label) -> None:
        self.kernel.place_label(label, capture_origin())
        self.kernel.append(Instruction("label", label.name))

    def bra(self, target: Label, *, uniform: bool = False, pred=None) -> None:
        """``bra{.uni} target``; ``uniform`` promises every thread of the warp takes the same path."""
        self.kernel.branch_to(target, capture_origin())
        self.emit("bra", target, pred=pred, uni=uniform)

    # ---------------------------------------------------------------- structured control flow
    @contextmanager
    def if_then(self, cond, *, uniform: bool = False):
        """``@!cond bra skip; <body>; skip:``. Registers first written in the body stay local to it."""
        skip = self.new_label("endif")
        self.bra(skip, pred=negate(cond), uniform=uniform)
        before = self.kernel.defined_snapshot()
        self._depth += 1
        yield
        self._depth -= 1
        self.kernel.restore_defined(before)
        self.place(skip)

    @contextmanager
    def if_else(self, cond, *, uniform: bool = False):
        """``with b.if_else(p) as (then, otherwise): with then: ...; with otherwise: ...``.
        Past the construct, a register counts as written only if it was before or both arms write it."""
        else_label, end_label = self.new_label("else"), self.new_label("endif")
        order = []
        self.bra(else_label, pred=negate(cond), uniform=uniform)
        before = self.kernel.defined_snapshot()
        then_defined = []

        def enter_then():
            if order:
                raise PTXBuildError("if_else: enter the 'then' arm first, once", _origin_text())
            order.append("then")

        def leave_then():
            self.bra(end_label, uniform=uniform)
            then_defined.append(self.kernel.defined_snapshot())
            self.kernel.restore_defined(before)
            self.place(else_label)

        def enter_else():
            if order != ["then"]:
                raise PTXBuildError("if_else: the 'otherwise' arm comes after the 'then' arm, once",
                                    _origin_text())
            order.append("else")

        then, otherwise = _Arm(enter_then, leave_then), _Arm(enter_else, lambda: None)
        self._depth += 1
        yield then, otherwise
        self._depth -= 1
        if not order:
            raise PTXBuildError("if_else: the 'then' arm was never entered", _origin_text())
        both = then_defined[0] & self.kernel.defined_snapshot() if order == ["then", "else"] else frozenset()
        self.kernel.restore_defined(before | both)
        self.place(end_label)

    @contextmanager
    def loop(self, name: str = "loop"):
        """An unconditional loop: ``head: <body>; bra head; end:``; leave with ``lp.break_if``."""
        lp = Loop(self, self.new_label(name), self.new_label(f"{name}_end"))
        self.place(lp.head)
        self._depth += 1
        yield lp
        self._depth -= 1
        self.bra(lp.head)
        self.place(lp.end)

    @contextmanager
    def while_(self, condition, name: str = "while"):
        """``head: p = condition(b); @!p bra end; <body>; bra head; end:``."""
        lp = Loop(self, self.new_label(name), self.new_label(f"{name}_end"))
        self.place(lp.head)
        self.bra(lp.end, pred=negate(condition(self)))
        self._depth += 1
        yield lp
        self._depth -= 1
        self.bra(lp.head)
        self.place(lp.end)

    def range(self, start, stop, step: int = 1, *, ty: PtxType | str = u32, unroll: bool | int = False,
              name: str = "i"):
        """Counted loop: ``for i in b.range(0, n): ...``.

        ``unroll=True`` with Python-int bounds unrolls fully and yields ints. ``unroll=k`` emits the
        body k times per trip, each copy guarded, so any trip count is handled. Otherwise one body
        with a register induction variable. ``step`` must be a non-zero Python int.
        """
        if not isinstance(step, int) or step == 0:
            raise PTXBuildError(f"range: step must be a non-zero Python int, got {step!r}", _origin_text())
        if unroll is True:
            if not all(isinstance(v, int) for v in (start, stop)):
                raise PTXBuildError("range(unroll=True) needs Python-int bounds; use unroll=<k> for "
                                    "register bounds", _origin_text())
            yield from range(start, stop, step)
            return
        copies = int(unroll) if unroll else 1
        if copies < 1:
            raise PTXBuildError(f"range: unroll must be True, False or a positive int, got {unroll!r}",
                                _origin_text())
        ty = ptx_type(ty)
        i = self.mov(ty, start, name=name)
        cmp = "lt" if step > 0 else "gt"
        head, end = self.new_label("for"), self.new_label("for_end")
        self.place(head)
        self._depth += 1
        for copy in range(copies):
            if copy:
                self.add(ty, i, step, into=i)
            self.bra(end, pred=negate(self.setp(cmp, ty, i, stop)))
            yield i
        self._depth -= 1
        self.add(ty, i, step, into=i)
        self.bra(head)
        self.place(end)
