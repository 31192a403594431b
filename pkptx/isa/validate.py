"""Check one instruction against its spec row and render it, or raise :class:`PTXBuildError`.

Messages give the instruction chain, the bad part, the legal options and (via the builder) the
user's source line.
"""
from __future__ import annotations

import difflib
import math

from ..errors import PTXBuildError
from .spec import SPECS, Spec
from .types import PtxType, compatible, pred, ptx_type
from .values import Addr, Imm, NotPred, Pipe, Reg, Sink, Special, Symbol, TensorRef, Vec, Label

_KIND = {Reg: "R", NotPred: "R", Imm: "I", Addr: "A", Vec: "V", Special: "S", Symbol: "Y", Label: "L",
         TensorRef: "M", Pipe: "K", Sink: "N"}
_KIND_NAMES = {"R": "register", "I": "immediate", "A": "address [..]", "V": "brace vector {..}",
               "S": "special register", "Y": "symbol", "L": "label", "M": "tensor reference [tmap, {..}]",
               "K": "pipe pair d|p", "N": "sink _"}


def lookup(key: str) -> Spec:
    try:
        return SPECS[key]
    except KeyError:
        close = difflib.get_close_matches(key, SPECS, n=4)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise PTXBuildError(f"unknown instruction {key!r}{hint}") from None


def _chain(spec: Spec, mods: dict, types: tuple) -> str:
    try:
        return spec.render_stem(mods, tuple(types) + ("?",) * (len(spec.types) - len(types)))
    except (IndexError, TypeError):
        return spec.key


def _slot_type(spec, types, rule: str) -> PtxType | None:
    if rule == "any":
        return None
    if rule.startswith("T") and rule[1:2].isdigit():
        return ptx_type(types[int(rule[1])])
    return ptx_type(rule)


def _check_typed(value, rule: str, spec, mods, types, no_float: bool = False) -> str | None:
    """Whether one register/immediate/special fits the operand's type rule."""
    slot = _slot_type(spec, types, rule)
    if slot is None:
        return None
    if isinstance(value, Sink):
        return None
    if isinstance(value, Imm):
        if slot.kind == "f" and slot.bits in (32, 64):
            return _float_fits(value.value, slot)
        if slot.name in ("f16", "bf16", "f16x2", "bf16x2"):
            return (f"a .{slot} operand cannot be an immediate ({value.value}); put the bits in a register "
                    f"first, e.g. b.mov({slot}, 0x3C00)")
        if isinstance(value.value, float) and not slot.is_float:
            return f"float immediate {value.value} where .{slot} is expected"
        if slot is pred and value.value not in (0, 1):
            return f"predicate immediate must be 0 or 1, got {value.value}"
        if isinstance(value.value, int) and slot.kind in ("b", "u", "s") and slot.bits <= 64:
            low, high = -(1 << (slot.bits - 1)), (1 << slot.bits) - 1     # signed or unsigned spelling
            if not low <= value.value <= high:
                return (f"immediate {value.value} does not fit .{slot} ({slot.bits} bits: {low} .. {high}); "
                        f"ptxas would truncate it silently")
        return None
    ty = value.type
    if rule.endswith("x2") and mods.get("mode") == "wide":
        want = 2 * slot.bits
        return None if ty.bits == want and ty.kind in ("b", "u", "s") else \
            f"a .wide result needs a {want}-bit integer register, got .{ty}"
    if rule.endswith("w"):
        if slot.bits < 32 and slot.kind in ("b", "u", "s") and ty.kind in ("b", "u", "s"):
            return None if ty.bits >= slot.bits else f"register .{ty} is narrower than .{slot}"
        if slot.kind == "f" and slot.bits == 16 and ty.bits == 16 and ty.kind in ("b", "f"):
            return None
        if slot.kind == "f" and slot.bits == 8 and ty.kind == "b":
            return None
    if no_float and ty.is_float:
        return f"register {value.render()} is .{ty}; this operand takes an integer or bit register (.{slot})"
    if compatible(slot, ty):
        return None
    return f"register {value.render()} is .{ty} but the operand needs .{slot} (or a compatible type)"


_F32_MAX = 3.4028234663852886e38


def _float_fits(value, slot: PtxType) -> str | None:
    try:
        as_float = float(value)
    except OverflowError:
        return f"immediate {value} does not fit .{slot}"
    if slot.bits == 32 and math.isfinite(as_float) and abs(as_float) > _F32_MAX:
        return f"immediate {value} does not fit .f32 (largest finite value {_F32_MAX:.7g}); use .f64 or inf"
    return None


def _space(spec, op, mods) -> str | None:
    """The state space of an address or symbol operand: fixed by the stem (``@space`` in the table),
    else the row's ``space`` modifier; None is a generic address."""
    return op.space or (mods.get("space") if "space" in spec.groups else None)


def _check_symbol_space(sym: Symbol, space: str | None) -> str | None:
    fits = space == "param" if sym.space == "param" else \
        (space is None or space.startswith("shared")) if sym.space == "shared" else True
    if fits:
        return None
    want = ".param" if sym.space == "param" else "a .shared space (or none, generic)"
    return (f"[{sym.name}] is a .{sym.space} variable, so the instruction needs {want}, "
            f"not {'.' + space if space else 'a generic access'}")


def _check_address(value: Addr, op, spec, mods) -> str | None:
    space, base = _space(spec, op, mods), value.base
    if base is None and space != "local":
        return (f"operand '{op.name}': an absolute address [{value.offset}] is only legal in .local (ptxas "
                f"allows immediate addresses in no other state space); use a register or symbol base")
    if isinstance(base, Reg):
        if base.type.bits not in (32, 64) or base.type.is_float:
            return f"address base {base.name} must be a 32- or 64-bit integer register, not .{base.type}"
        if base.type.bits == 32 and space in (None, "global"):
            where = "a generic" if space is None else "a .global"
            return (f"{where} address needs a 64-bit register; {base.name} is .{base.type} "
                    f"(name a state space such as .shared::cta, or convert it with cvta)")
    if isinstance(base, Symbol):
        err = _check_symbol_space(base, space)
        return f"operand '{op.name}': address {err}" if err else None
    return None


def _check_limits(value, op) -> str | None:
    lo, hi, multiple = op.limits
    v = value.value
    if isinstance(v, int) and v >= lo and (hi is None or v <= hi) and v % multiple == 0:
        return None
    span = f"{lo}..{hi}" if hi is not None else f"{lo} or more"
    step = f", a multiple of {multiple}" if multiple > 1 else ""
    return f"operand '{op.name}' must be an integer in {span}{step}, got {v!r}"


def _flatten(value):
    """Registers and immediates inside an operand, for type checks and def/use tracking."""
    if isinstance(value, Vec):
        return list(value.items)
    if isinstance(value, Pipe):
        return [value.first, value.second]
    return [value]


def _regs_read(value) -> list[Reg]:
    if isinstance(value, Reg):
        return [value]
    if isinstance(value, NotPred):
        return [value.reg]
    if isinstance(value, Addr):
        return [value.base] if isinstance(value.base, Reg) else []
    if isinstance(value, Vec):
        return [r for item in value.items for r in _regs_read(item)]
    if isinstance(value, TensorRef):
        regs = [value.tmap] if isinstance(value.tmap, Reg) else []
        return regs + [c for c in value.coords if isinstance(c, Reg)]
    return []


def _check_operand(value, op, spec, mods, types) -> str | None:
    kind = _KIND.get(type(value))
    if kind is None or kind not in op.kinds:
        legal = " or ".join(_KIND_NAMES[k] for k in op.kinds)
        return f"operand '{op.name}' must be a {legal}, got {type(value).__name__} {value!r}"
    if kind == "A":
        return _check_address(value, op, spec, mods)
    if kind == "M":
        tmap = value.tmap
        if not isinstance(tmap, Reg) or tmap.type.bits != 64:
            return (f"the tensor map must be a 64-bit register holding its address (b.param_address(...)), "
                    f"got {tmap!r}")
        for c in value.coords:
            if not isinstance(c, (Reg, Imm)) or (isinstance(c, Reg) and c.type.bits != 32):
                return f"tensor coordinates must be 32-bit registers or immediates, got {c!r}"
        return None
    if kind == "Y" and (op.space or "space" in spec.groups):
        err = _check_symbol_space(value, _space(spec, op, mods))
        return f"operand '{op.name}': symbol {err}" if err else None
    if kind in ("L", "Y"):
        return None
    if kind == "I" and op.limits:
        err = _check_limits(value, op)
        if err:
            return err
    if kind == "K":
        if value.second.type is not pred:
            return "the second half of d|p must be a predicate"
        return None
    if kind == "V" and op.rule.endswith("v"):
        slot = _slot_type(spec, types, op.rule)
        widths = [item.type.bits if isinstance(item, (Reg, Sink)) else None for item in value.items]
        if None in widths or sum(widths) != slot.bits:
            return (f"operand '{op.name}': the registers of {value.render()} must together be "
                    f"{slot.bits} bits wide to pack into / unpack from .{slot}")
        return None
    for item in _flatten(value):
        if isinstance(item, (Reg, NotPred, Imm, Special, Sink)):
            err = _check_typed(item, op.rule, spec, mods, types, op.no_float)
            if err:
                return f"operand '{op.name}': {err}"
        else:
            return f"operand '{op.name}': {item!r} cannot appear inside a vector"
    return None


def validate(spec: Spec, mods: dict, types: tuple, operands: list):
    """Return (mnemonic, rendered operands, registers written, registers read, PTX version needed)."""
    chain = _chain(spec, mods, types)
    for name, value in mods.items():
        if name not in spec.groups:
            legal = ", ".join(spec.groups) or "none"
            raise PTXBuildError(f"{chain}: no modifier group '{name}' (legal groups: {legal})")
        if value not in spec.groups[name]:
            opts = " ".join("." + o for o in spec.groups[name])
            raise PTXBuildError(f"{chain}: '.{value}' is not a legal {name}; legal: {opts}")
    missing = [g for g in spec.required if not mods.get(g)]
    if missing:
        opts = "; ".join(f"{g}: " + " ".join("." + o for o in spec.groups[g]) for g in missing)
        raise PTXBuildError(f"{chain}: missing required modifier(s) {', '.join(missing)} ({opts})")
    if len(types) != len(spec.types):
        raise PTXBuildError(f"{spec.key}: takes {len(spec.types)} type suffix(es), got {len(types)}: {types}")
    for i, ty in enumerate(types):
        if ty not in spec.types[i]:
            raise PTXBuildError(f"{chain}: type .{ty} is not legal here; legal: "
                                + " ".join("." + t for t in spec.types[i]))
    required = [op for op in spec.operands if not op.optional]
    if not len(required) <= len(operands) <= len(spec.operands):
        sig = ", ".join(op.name + ("?" if op.optional else "") for op in spec.operands)
        raise PTXBuildError(f"{chain}: takes operands ({sig}), got {len(operands)}")
    named = {}
    for value, op in zip(operands, spec.operands):
        if value is None:
            if not op.optional:
                raise PTXBuildError(f"{chain}: operand '{op.name}' is required")
            continue
        err = _check_operand(value, op, spec, mods, types)
        if err:
            raise PTXBuildError(f"{chain}: {err}")
        named[op.name] = value
    if spec.check:
        err = spec.check(mods, types, named)
        if err:
            raise PTXBuildError(f"{chain}: {err}")
    rendered, defs, uses = [], [], []
    for value, op in zip(operands, spec.operands):
        if value is None:
            continue
        rendered.append(_render(value, op, spec, types))
        if op.dest:
            defs += [r for r in _flatten(value) if isinstance(r, Reg)]
        else:
            uses += _regs_read(value)
    version = spec.min_ptx
    for trigger, need in spec.version_rules:
        fires = trigger(mods, types) if callable(trigger) else (trigger in types or trigger in mods.values())
        if fires:
            version = max(version, need)
    return chain, tuple(rendered), defs, uses, version


def _render(value, op, spec, types) -> str:
    slot = None
    if op.rule.startswith("T") and op.rule[1:2].isdigit():
        slot = ptx_type(types[int(op.rule[1])])
    elif op.rule not in ("any",):
        slot = ptx_type(op.rule)
    if isinstance(value, Imm):
        return value.render(slot)
    if isinstance(value, Vec):
        return "{" + ", ".join(x.render(slot) if isinstance(x, Imm) else x.render() for x in value.items) + "}"
    return value.render()
