"""Hypothesis strategies: random well-typed programs (as data, then emitted) and corruptions of valid
instruction forms.

A program is a list of statements. Operands are drawn as small integers and resolved at emission time
against the registers defined so far on every path (``Pool``; what an if arm writes stays in the arm),
so every drawn program is well typed and reads only registers that some earlier instruction wrote.
"""
from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from pkptx.isa import (SPECS, ALL_TYPES, Label, Reg, b16, b32, b64, bf16, bf16x2, f16, f16x2, f32, f64, pred,
                       ptx_type, s16, s32, s64, u16, u32, u64)
from pkptx.isa.types import PtxType

REGISTER_TYPES = (b16, b32, b64, u16, u32, u64, s16, s32, s64, f16, bf16, f32, f64, pred, f16x2, bf16x2)
BITS, UINTS, SINTS = (b16, b32, b64), (u16, u32, u64), (s16, s32, s64)
HALVES = (f16, bf16, f16x2, bf16x2)


# ============================================================================ the typed operation table
class Pool:
    """Registers written so far, by type; ``pick(ty, i)`` chooses one deterministically from an int."""

    def __init__(self, sandbox):
        self.sb = sandbox
        self.regs: dict[str, list[Reg]] = {t.name: [sandbox.r(t)] for t in REGISTER_TYPES}

    def pick(self, ty: PtxType, i: int) -> Reg:
        regs = self.regs[ty.name]
        return regs[i % len(regs)]

    def add(self, reg):
        if isinstance(reg, Reg):
            self.regs[reg.type.name].append(reg)


def _src(pool, ty, choice):
    """A source operand: a register of ``ty`` or (for ints and f32/f64) a small immediate."""
    kind, i = choice
    if kind == "imm" and ty in UINTS + SINTS + BITS:
        return i % 100
    if kind == "imm" and ty in (f32, f64):
        return [0.5, -1.25, 3.0, 1e-3][i % 4]
    return pool.pick(ty, i)


def _int_ops(ty):
    ops = {
        "add": lambda b, p, a, c, d: b.add(ty, _src(p, ty, a), _src(p, ty, c)),
        "sub": lambda b, p, a, c, d: b.sub(ty, _src(p, ty, a), _src(p, ty, c)),
        "mul.lo": lambda b, p, a, c, d: b.mul(ty, _src(p, ty, a), _src(p, ty, c), mode="lo"),
        "mad.lo": lambda b, p, a, c, d: b.mad(ty, _src(p, ty, a), _src(p, ty, c), _src(p, ty, d), mode="lo"),
        "min": lambda b, p, a, c, d: b.min(ty, _src(p, ty, a), _src(p, ty, c)),
        "max": lambda b, p, a, c, d: b.max(ty, _src(p, ty, a), _src(p, ty, c)),
        "div": lambda b, p, a, c, d: b.div(ty, _src(p, ty, a), _src(p, ty, c)),
        "rem": lambda b, p, a, c, d: b.rem(ty, _src(p, ty, a), _src(p, ty, c)),
        "shr": lambda b, p, a, c, d: b.shr(ty, _src(p, ty, a), c[1] % 8),
        "setp": lambda b, p, a, c, d: b.setp(("lt", "ge", "eq")[d[1] % 3], ty, _src(p, ty, a), _src(p, ty, c)),
        "selp": lambda b, p, a, c, d: b.selp(ty, _src(p, ty, a), _src(p, ty, c), p.pick(pred, d[1])),
    }
    if ty.kind == "s":
        ops["abs"] = lambda b, p, a, c, d: b.abs(ty, p.pick(ty, a[1]))
        ops["neg"] = lambda b, p, a, c, d: b.neg(ty, p.pick(ty, a[1]))
    if ty.bits < 64:
        ops["mul.wide"] = lambda b, p, a, c, d: b.mul(ty, _src(p, ty, a), _src(p, ty, c), mode="wide")
    if ty in (u32, s32, u64, s64):
        ops["cvt.f32"] = lambda b, p, a, c, d: b.cvt(f32, ty, p.pick(ty, a[1]), rnd="rn")
        ops["cvt.u16"] = lambda b, p, a, c, d: b.cvt(u16, ty, p.pick(ty, a[1]))
    return ops


def _bit_ops(ty):
    ops = {name: (lambda op: lambda b, p, a, c, d: getattr(b, op)(ty, _src(p, ty, a), _src(p, ty, c)))(name)
           for name in ("and_", "or_", "xor")}
    ops["not_"] = lambda b, p, a, c, d: b.not_(ty, p.pick(ty, a[1]))
    ops["shl"] = lambda b, p, a, c, d: b.shl(ty, _src(p, ty, a), c[1] % ty.bits)
    ops["mov"] = lambda b, p, a, c, d: b.mov(ty, _src(p, ty, a))
    ops["setp.ne"] = lambda b, p, a, c, d: b.setp("ne", ty, _src(p, ty, a), _src(p, ty, c))
    if ty.bits >= 32:
        ops["popc"] = lambda b, p, a, c, d: b.popc(ty, p.pick(ty, a[1]))
        ops["brev"] = lambda b, p, a, c, d: b.brev(ty, p.pick(ty, a[1]))
    if ty is b32:
        ops["lop3"] = lambda b, p, a, c, d: b.lop3(ty, p.pick(ty, a[1]), p.pick(ty, c[1]), p.pick(ty, d[1]),
                                                   a[1] % 256)
        ops["prmt"] = lambda b, p, a, c, d: b.prmt(p.pick(ty, a[1]), p.pick(ty, c[1]), 0x3210)
    return ops


def _float_ops(ty):
    rnd = ("rn", "rz", "rm", "rp")
    ops = {
        "add": lambda b, p, a, c, d: b.add(ty, _src(p, ty, a), _src(p, ty, c), rnd=rnd[d[1] % 4]),
        "sub": lambda b, p, a, c, d: b.sub(ty, _src(p, ty, a), _src(p, ty, c)),
        "mul": lambda b, p, a, c, d: b.mul(ty, _src(p, ty, a), _src(p, ty, c), rnd="rn"),
        "fma": lambda b, p, a, c, d: b.fma(ty, _src(p, ty, a), _src(p, ty, c), _src(p, ty, d), rnd=rnd[a[1] % 4]),
        "min": lambda b, p, a, c, d: b.min(ty, _src(p, ty, a), _src(p, ty, c)),
        "max": lambda b, p, a, c, d: b.max(ty, _src(p, ty, a), _src(p, ty, c)),
        "abs": lambda b, p, a, c, d: b.abs(ty, p.pick(ty, a[1])),
        "neg": lambda b, p, a, c, d: b.neg(ty, p.pick(ty, a[1])),
        "div": lambda b, p, a, c, d: b.div(ty, _src(p, ty, a), _src(p, ty, c), rnd="rn"),
        "sqrt": lambda b, p, a, c, d: b.sqrt(ty, p.pick(ty, a[1]), rnd="rn"),
        "setp": lambda b, p, a, c, d: b.setp(("lt", "geu", "nan")[d[1] % 3], ty, _src(p, ty, a), _src(p, ty, c)),
        "selp": lambda b, p, a, c, d: b.selp(ty, _src(p, ty, a), _src(p, ty, c), p.pick(pred, d[1])),
    }
    if ty is f32:
        ops["ex2"] = lambda b, p, a, c, d: b.ex2(ty, p.pick(ty, a[1]), ftz=bool(c[1] % 2))
        ops["cvt.f64"] = lambda b, p, a, c, d: b.cvt(f64, f32, p.pick(ty, a[1]))
        ops["cvt.s32"] = lambda b, p, a, c, d: b.cvt(s32, f32, p.pick(ty, a[1]), rnd="rzi")
        ops["cvt.f16"] = lambda b, p, a, c, d: b.cvt(f16, f32, p.pick(ty, a[1]), rnd="rn")
        ops["cvt.bf16"] = lambda b, p, a, c, d: b.cvt(bf16, f32, p.pick(ty, a[1]), rnd="rn")
        ops["cvt.f16x2"] = lambda b, p, a, c, d: b.cvt(f16x2, f32, p.pick(ty, a[1]), p.pick(ty, c[1]), rnd="rn")
        ops["cvt.bf16x2"] = lambda b, p, a, c, d: b.cvt(bf16x2, f32, p.pick(ty, a[1]), p.pick(ty, c[1]), rnd="rz")
    else:
        ops["cvt.f32"] = lambda b, p, a, c, d: b.cvt(f32, f64, p.pick(ty, a[1]), rnd="rn")
    return ops


def _half_ops(ty):
    ops = {
        "add": lambda b, p, a, c, d: b.add(ty, p.pick(ty, a[1]), p.pick(ty, c[1]), rnd="rn"),
        "sub": lambda b, p, a, c, d: b.sub(ty, p.pick(ty, a[1]), p.pick(ty, c[1])),
        "mul": lambda b, p, a, c, d: b.mul(ty, p.pick(ty, a[1]), p.pick(ty, c[1]), rnd="rn"),
        "fma": lambda b, p, a, c, d: b.fma(ty, p.pick(ty, a[1]), p.pick(ty, c[1]), p.pick(ty, d[1]), rnd="rn"),
        "min": lambda b, p, a, c, d: b.min(ty, p.pick(ty, a[1]), p.pick(ty, c[1])),
        "max": lambda b, p, a, c, d: b.max(ty, p.pick(ty, a[1]), p.pick(ty, c[1]), nan=bool(d[1] % 2)),
        "neg": lambda b, p, a, c, d: b.neg(ty, p.pick(ty, a[1])),
        "abs": lambda b, p, a, c, d: b.abs(ty, p.pick(ty, a[1])),
        "mov": lambda b, p, a, c, d: b.mov(ty, p.pick(ty, a[1])),
    }
    if ty in (f16, bf16):
        ops["setp"] = lambda b, p, a, c, d: b.setp("le", ty, p.pick(ty, a[1]), p.pick(ty, c[1]))
        ops["cvt.f32"] = lambda b, p, a, c, d: b.cvt(f32, ty, p.pick(ty, a[1]))
    if ty in (f16, f16x2):
        ops["add.sat"] = lambda b, p, a, c, d: b.add(ty, p.pick(ty, a[1]), p.pick(ty, c[1]), ftz=True, sat=True)
    return ops


def _pred_ops():
    return {
        "and_": lambda b, p, a, c, d: b.and_(pred, p.pick(pred, a[1]), p.pick(pred, c[1])),
        "or_": lambda b, p, a, c, d: b.or_(pred, p.pick(pred, a[1]), p.pick(pred, c[1])),
        "xor": lambda b, p, a, c, d: b.xor(pred, p.pick(pred, a[1]), p.pick(pred, c[1])),
        "not_": lambda b, p, a, c, d: b.not_(pred, p.pick(pred, a[1])),
        "setp.and": lambda b, p, a, c, d: b.setp("lt", u32, p.pick(u32, a[1]), c[1], combine="and",
                                                 c=p.pick(pred, d[1])),
    }


OPS: dict[str, dict] = {}
for _ty in REGISTER_TYPES:
    if _ty is pred:
        OPS[_ty.name] = _pred_ops()
    elif _ty in BITS:
        OPS[_ty.name] = _bit_ops(_ty)
    elif _ty in UINTS + SINTS:
        OPS[_ty.name] = _int_ops(_ty)
    elif _ty in HALVES:
        OPS[_ty.name] = _half_ops(_ty)
    else:
        OPS[_ty.name] = _float_ops(_ty)


# ============================================================================ program data
@dataclass(frozen=True)
class Op:
    ty: str
    name: str
    args: tuple          # three (kind, int) choices


@dataclass(frozen=True)
class Memory:
    store: bool
    ty: str              # u32 / f32 / b64 / f16x2...
    offset: int
    choice: int


@dataclass(frozen=True)
class If:
    cond: int
    negate: bool
    uniform: bool
    then: tuple
    otherwise: tuple | None = None


@dataclass(frozen=True)
class Loop:
    body: tuple
    cond: int            # break_if(pool pred[cond])
    continue_first: bool


@dataclass(frozen=True)
class Range:
    start: int
    stop: int | None     # None: the kernel's n (a register bound)
    step: int
    unroll: object       # False, True or an int k
    body: tuple


@dataclass(frozen=True)
class While:
    bound: int
    body: tuple


_choice = st.tuples(st.sampled_from(("reg", "reg", "imm")), st.integers(0, 31))


@st.composite
def ops(draw):
    ty = draw(st.sampled_from(REGISTER_TYPES)).name
    name = draw(st.sampled_from(sorted(OPS[ty])))
    return Op(ty, name, (draw(_choice), draw(_choice), draw(_choice)))


memory = st.builds(Memory, st.booleans(), st.sampled_from(("u32", "f32", "b64", "s16", "f16x2", "bf16", "u64")),
                   st.integers(0, 15).map(lambda i: 16 * i), st.integers(0, 31))


def statements(max_leaves: int = 12):
    leaf = st.one_of(ops(), ops(), ops(), memory)

    def compound(children):
        block = st.lists(children, min_size=1, max_size=4).map(tuple)
        index = st.integers(0, 31)
        return st.one_of(
            st.builds(If, index, st.booleans(), st.booleans(), block),
            st.builds(If, index, st.booleans(), st.booleans(), block, block),
            st.builds(Loop, block, index, st.booleans()),
            st.builds(Range, st.integers(0, 3), st.one_of(st.none(), st.integers(0, 6)), st.sampled_from((1, 2, -1)),
                      st.sampled_from((False, True, 2, 3)), block),
            st.builds(While, st.integers(1, 9), block),
        )
    return st.recursive(leaf, compound, max_leaves=max_leaves)


def programs(max_statements: int = 8):
    return st.lists(statements(), min_size=1, max_size=max_statements).map(tuple)


# ============================================================================ emission
def emit_program(sb, program) -> None:
    """Emit ``program`` into the sandbox ``sb`` through the Builder."""
    pool = Pool(sb)
    for stmt in program:
        _emit(sb, pool, stmt)


def _emit(sb, pool, stmt):
    b = sb.b
    if isinstance(stmt, Op):
        pool.add(OPS[stmt.ty][stmt.name](b, pool, *stmt.args))
    elif isinstance(stmt, Memory):
        ty = ptx_type(stmt.ty)
        if stmt.store:
            b.st(ty, sb.g(stmt.offset), pool.pick(ty, stmt.choice), space="global")
        else:
            pool.add(b.ld(ty, sb.g(stmt.offset), space="global"))
    elif isinstance(stmt, If):
        cond = pool.pick(pred, stmt.cond)
        cond = cond.negated() if stmt.negate else cond
        saved = {ty: list(regs) for ty, regs in pool.regs.items()}   # what an arm writes stays in it
        if stmt.otherwise is None:
            with b.if_then(cond, uniform=stmt.uniform):
                _block(sb, pool, stmt.then)
                pool.regs = {ty: list(regs) for ty, regs in saved.items()}
        else:
            with b.if_else(cond, uniform=stmt.uniform) as (then, otherwise):
                with then:
                    _block(sb, pool, stmt.then)
                    pool.regs = {ty: list(regs) for ty, regs in saved.items()}
                with otherwise:
                    _block(sb, pool, stmt.otherwise)
                    pool.regs = {ty: list(regs) for ty, regs in saved.items()}
    elif isinstance(stmt, Loop):
        with b.loop() as lp:
            if stmt.continue_first:
                lp.continue_if(b.setp("eq", u32, pool.pick(u32, stmt.cond), 7))
            _block(sb, pool, stmt.body)
            lp.break_if(pool.pick(pred, stmt.cond))
    elif isinstance(stmt, Range):
        bound = sb.r(u32) if stmt.stop is None else stmt.stop        # None: a register bound
        start, stop = (stmt.start, bound) if stmt.step > 0 else (bound, stmt.start)    # count down
        unroll = 2 if stmt.unroll is True and stmt.stop is None else stmt.unroll     # full unroll needs ints
        for i in b.range(start, stop, stmt.step, ty=s32 if stmt.step < 0 else u32, unroll=unroll):
            if isinstance(i, Reg):
                pool.add(b.add(i.type, i, 1))
            _block(sb, pool, stmt.body)
    elif isinstance(stmt, While):
        counter = b.mov(u32, 0, name="w")
        with b.while_(lambda bb: bb.setp("lt", u32, counter, stmt.bound)):
            _block(sb, pool, stmt.body)
            b.add(u32, counter, 1, into=counter)
    else:
        raise TypeError(stmt)


def _block(sb, pool, stmts):
    for stmt in stmts:
        _emit(sb, pool, stmt)


# ============================================================================ corruptions of valid forms
@dataclass(frozen=True)
class Corruption:
    """One way to make a recorded valid emit call invalid; ``apply`` returns (operands, types, pred, mods)."""
    what: str
    detail: object = None


BAD_VALUES = ("bogus", "rn", "sys", "v8", "global", "acquire", "L2::1024B", "x3", "tile", "f32", "add")


def corruptions(call, sandbox):
    """A strategy of Corruption values that certainly make ``call`` invalid."""
    spec = SPECS[call.key]
    choices = [st.just(Corruption("unknown_group"))]
    if spec.groups:
        bad = [(g, v) for g, opts in spec.groups.items() for v in BAD_VALUES if v not in opts]
        choices.append(st.sampled_from(bad).map(lambda gv: Corruption("bad_value", gv)))
    present = [g for g in spec.required if call.mods.get(g) not in (None, False, "")]
    if present:
        choices.append(st.sampled_from(present).map(lambda g: Corruption("drop_required", g)))
    if spec.types:
        bad_types = [(i, t) for i, legal in enumerate(spec.types) for t in ALL_TYPES if t not in legal]
        choices.append(st.sampled_from(bad_types).map(lambda it: Corruption("bad_type", it)))
    choices.append(st.just(Corruption("type_count")))
    choices.append(st.just(Corruption("extra_operand")))
    required = [i for i, op in enumerate(spec.operands) if not op.optional]
    if required:
        choices.append(st.just(Corruption("drop_operand")))
    label_targets = [i for i, op in enumerate(spec.operands[:len(call.operands)])
                     if "L" not in op.kinds and call.operands[i] is not None]
    if label_targets:
        choices.append(st.sampled_from(label_targets).map(lambda i: Corruption("label_operand", i)))
    typed = [i for i, op in enumerate(spec.operands[:len(call.operands)])
             if call.operands[i] is not None and op.rule != "any" and _slot_name(spec, call, op.rule) != "pred"]
    if typed:
        choices.append(st.sampled_from(typed).map(lambda i: Corruption("pred_operand", i)))
    sources = [i for i, op in enumerate(spec.operands[:len(call.operands)])
               if not op.dest and isinstance(call.operands[i], Reg)]
    if sources:
        choices.append(st.sampled_from(sources).map(lambda i: Corruption("unwritten_source", i)))
    choices.append(st.just(Corruption("bad_guard")))
    return st.one_of(choices)


def _slot_name(spec, call, rule):
    if rule.startswith("T") and rule[1:2].isdigit():
        types = call.types
        i = int(rule[1])
        return str(types[i]) if i < len(types) else None
    return rule


def apply_corruption(corruption: Corruption, call, sandbox):
    ops, types, guard, mods = list(call.operands), list(call.types), call.pred, dict(call.mods)
    what, detail = corruption.what, corruption.detail
    if what == "unknown_group":
        mods["zz_not_a_group"] = "zz"
    elif what == "bad_value":
        mods[detail[0]] = detail[1]
    elif what == "drop_required":
        mods[detail] = None
    elif what == "bad_type":
        types[detail[0]] = detail[1]
    elif what == "type_count":
        types = types + ["u32"]
    elif what == "extra_operand":
        ops = ops + [None] * (len(SPECS[call.key].operands) - len(ops)) + [sandbox.r(u32)]
    elif what == "drop_operand":
        required = sum(1 for op in SPECS[call.key].operands if not op.optional)
        ops = ops[:required - 1]
    elif what == "label_operand":
        ops[detail] = Label("$L_corrupt")
    elif what == "pred_operand":
        ops[detail] = sandbox.r(pred)
    elif what == "unwritten_source":
        ops[detail] = sandbox.b.reg(ops[detail].type, "unwritten")
    elif what == "bad_guard":
        guard = sandbox.r(u32)
    return ops, tuple(types), guard, mods

