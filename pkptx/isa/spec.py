"""The instruction table: the one place that spells PTX.

Each row is a :class:`Spec`, keyed by the full mnemonic stem. Its ``pattern`` gives the exact order of
the dotted parts: literals, modifier groups ``{name}`` (``{name?}`` when optional) and type slots
``{T0}``, ``{T1}``...; keyword arguments give each group's legal options. ``ops`` is the operand
signature: ``name:kinds:type`` with ``>`` for a destination and ``?`` for an optional operand.
Kinds: R register, I immediate, A address, V brace vector, S special register, Y symbol, L label,
M tensor-map reference ``[tmap, {coords}]``, K pipe pair ``d|p``, N sink ``_``.
Type rules: ``T0`` (compatible with slot 0), ``T0w`` (at least as wide), ``T0x2`` (twice as wide),
``T0v`` (a brace vector whose registers together are as wide: mov's pack/unpack),
a PTX type name, or ``any``. Sections cite the PTX ISA 8.x manual.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

INT = ("u16", "u32", "u64", "s16", "s32", "s64")
INT32_64 = ("u32", "u64", "s32", "s64")
BITS = ("b16", "b32", "b64")
FLOATS = ("f32", "f64")
HALF = ("f16", "f16x2", "bf16", "bf16x2")
LDST = ("b8", "b16", "b32", "b64", "b128", "u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "f32", "f64")
SCOPES = ("cta", "cluster", "gpu", "sys")
RND_F = ("rn", "rz", "rm", "rp")
RND_I = ("rni", "rzi", "rmi", "rpi")
DIMS = ("1d", "2d", "3d", "4d", "5d")
SMEM = ("shared", "shared::cta")


@dataclass(frozen=True)
class Operand:
    name: str
    kinds: str
    rule: str
    dest: bool = False
    optional: bool = False


@dataclass(frozen=True)
class Spec:
    key: str
    pattern: tuple                       # ("lit", text) | ("grp", name, optional) | ("type", index)
    groups: dict                         # group name -> tuple of legal options
    types: tuple                         # per slot: tuple of legal type names
    operands: tuple
    section: str
    min_ptx: tuple = (7, 8)
    target: str = "sm_90"                # "sm_90a" for arch-specific instructions
    check: Callable | None = None
    version_rules: tuple = ()            # ((group, option) or type name, (major, minor))
    required: frozenset = field(default_factory=frozenset)

    def render_stem(self, mods: dict, types: tuple) -> str:
        parts = []
        for tok in self.pattern:
            if tok[0] == "lit":
                parts.append(tok[1])
            elif tok[0] == "grp":
                value = mods.get(tok[1])
                if value:
                    parts.append(value)
            else:
                parts.append(types[tok[1]])
        return ".".join(parts)


def _parse_pattern(pattern: str):
    out, required, slots = [], set(), 0
    for piece in pattern.split("."):
        if piece.startswith("{T") and piece.endswith("}"):
            out.append(("type", int(piece[2:-1])))
            slots = max(slots, int(piece[2:-1]) + 1)
        elif piece.startswith("{"):
            name = piece[1:-1]
            optional = name.endswith("?")
            name = name.rstrip("?")
            out.append(("grp", name, optional))
            if not optional:
                required.add(name)
        else:
            out.append(("lit", piece))
    return tuple(out), frozenset(required), slots


def _parse_ops(sig: str) -> tuple:
    ops = []
    for tok in sig.split():
        name, kinds, rule = (tok.split(":") + ["any"])[:3]
        dest = name.startswith(">")
        name = name.lstrip(">")
        optional = name.endswith("?")
        ops.append(Operand(name.rstrip("?"), kinds, rule, dest, optional))
    return tuple(ops)


SPECS: dict[str, Spec] = {}


def spec(key: str, pattern: str, ops: str = "", *, section: str, ptx=(7, 8), target="sm_90",
         check=None, versions=(), **options) -> Spec:
    """Add one row to the table. ``options``: group name or ``T<i>`` -> legal options. ``versions``:
    (trigger, (major, minor)) pairs raising the PTX version; a trigger is an option or type name that
    appears in the form, or a predicate ``f(mods, types)``."""
    pat, required, slots = _parse_pattern(pattern)
    groups = {k: tuple(v) for k, v in options.items() if not k.startswith("T")}
    types = tuple(tuple(options.get(f"T{i}", ())) for i in range(slots))
    for tok in pat:
        if tok[0] == "grp" and tok[1] not in groups:
            groups[tok[1]] = (tok[1],)      # a flag such as {ftz?}: its only option is its name
    row = Spec(key, pat, groups, types, _parse_ops(ops), section, ptx, target, check, tuple(versions),
               required)
    if key in SPECS:
        raise ValueError(f"duplicate spec row {key!r}")
    SPECS[key] = row
    return row


# ----------------------------------------------------------------------------- checks
def _is_bits(ty: str) -> bool:
    return ty in ("b8", "b16", "b32", "b64", "b128")


# Each check gets (mods, types, operands) and returns an error text or None.

def _scope_with_sem(mods, *_):
    """A .relaxed/.acquire/.release/.acq_rel access needs a scope; .weak/.volatile take none."""
    sem, scope = mods.get("sem"), mods.get("scope")
    if sem in ("relaxed", "acquire", "release", "acq_rel") and not scope:
        return f"'.{sem}' needs a scope: one of {', '.join('.' + s for s in SCOPES)}"
    if scope and sem not in ("relaxed", "acquire", "release", "acq_rel"):
        return f"scope '.{scope}' is only legal with .relaxed/.acquire/.release/.acq_rel, not {sem or 'no sem'}"
    return None


def _vec_count(mods, ops, idx):
    want = {"v2": 2, "v4": 4, "v8": 8}.get(mods.get("vec"), 1)
    got = len(ops[idx]) if hasattr(ops[idx], "items") else 1
    if want != got:
        return f"'.{mods.get('vec', 'scalar')}' needs {want} register(s) in operand {idx}, got {got}"
    return None


def _hint_needs_policy(mods, ops, policy_name="policy"):
    has_policy = ops.get(policy_name) is not None
    if bool(mods.get("hint")) != has_policy:
        return "'.L2::cache_hint' and a 64-bit cache-policy operand go together"
    return None


def _check_ldst(load: bool):
    def check(mods, types, ops):
        err = _scope_with_sem(mods)
        if err:
            return err
        if mods.get("sem") not in (None, "weak") and (mods.get("cache") or mods.get("nc")):
            return "cache operators and .nc are only legal on weak accesses"
        if mods.get("nc") and mods.get("space") != "global":
            return "'.nc' is only legal with .global"
        if mods.get("nc") and mods.get("sem"):
            return f"'.nc' cannot be combined with '.{mods['sem']}'"
        if mods.get("sem") == "volatile" and (mods.get("evict") or mods.get("hint")):
            return "'.volatile' cannot be combined with an L1 eviction priority or '.L2::cache_hint'"
        if mods.get("nc") and mods.get("cache") not in (None, "ca", "cg", "cs"):
            return f"ld.global.nc takes the cache operators .ca .cg .cs, not .{mods['cache']}"
        if mods.get("sem") not in (None, "weak") and mods.get("space") in ("param", "const", "local"):
            return f"'.{mods['sem']}' is not legal on .{mods['space']} (only .weak or no qualifier)"
        if mods.get("cache") and mods.get("evict"):
            return f"a cache operator (.{mods['cache']}) and an L1 eviction priority cannot be combined"
        for group in ("evict", "prefetch", "hint"):
            if mods.get(group) and mods.get("space") not in (None, "global"):
                return f"'.{mods[group]}' is only legal on .global or generic addresses, not .{mods['space']}"
        if types[0] == "b128" and mods.get("vec"):
            return "'.b128' cannot be combined with a vector width"
        lanes = {"v2": 2, "v4": 4}.get(mods.get("vec"), 1)
        bits = int("".join(ch for ch in types[0] if ch.isdigit()))
        if lanes * bits > 128:
            return f"'.{mods['vec']}.{types[0]}' is {lanes * bits} bits; sm_90 vector accesses are at most 128 bits"
        data = "d" if load else "b"
        err = _vec_count(mods, list(ops.values()), list(ops).index(data))
        return err or _hint_needs_policy(mods, ops)
    return check


_NARROW_FLOATS = ("f16", "f16x2", "bf16", "bf16x2", "tf32")


def _int_may_overflow(dst: str, src: str) -> bool:
    """Whether an integer conversion can leave the destination's range (so .sat means something)."""
    dbits, sbits = int(dst[1:]), int(src[1:])
    if dst[0] == src[0]:
        return dbits < sbits
    return src[0] == "s" or dbits <= sbits          # signed -> unsigned, or unsigned -> no wider signed


def _check_cvt_flags(mods, dst: str, src: str):
    """.ftz/.sat/.relu/.satfinite each exist only for some conversions (ptxas for sm_90 is the reference)."""
    rnd = mods.get("rnd")
    if mods.get("ftz") and ("f32" not in (dst, src) or dst in ("tf32", "f16x2", "bf16x2")):
        return f"'.ftz' only applies to conversions to or from .f32 (not .{src} -> .{dst})"
    if mods.get("sat"):
        odd = {dst, src} & {"bf16", "bf16x2", "f16x2", "tf32"}
        if odd:
            return f"'.sat' is not defined for conversions involving .{sorted(odd)[0]}"
        if dst[0] in "us" and src[0] in "us" and not _int_may_overflow(dst, src):
            return f"'.sat' is meaningless for .{src} -> .{dst} (the value always fits)"
    if mods.get("relu") and not (dst in _NARROW_FLOATS and src == "f32" and rnd in ("rn", "rz")):
        return "'.relu' is only legal converting .f32 to .f16/.bf16/.f16x2/.bf16x2/.tf32 with .rn or .rz"
    if mods.get("satfinite"):
        legal = (dst in ("f16", "f16x2", "bf16", "bf16x2") and rnd in ("rn", "rz")) or (dst == "tf32" and rnd == "rna")
        if src != "f32" or not legal:
            return ("'.satfinite' is only legal converting .f32 to .f16/.bf16/.f16x2/.bf16x2 with .rn/.rz, "
                    "or to .tf32 with .rna")
    return None


def _check_cvt(mods, types, ops):
    dst, src = types
    err = _check_cvt_flags(mods, dst, src)
    if err:
        return err
    dst_f, src_f = dst[0] in "fbt" and dst not in BITS, src[0] in "fbt" and src not in BITS
    rnd = mods.get("rnd")
    width = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64, "tf32": 32, "f16x2": 32, "bf16x2": 32}
    if dst.endswith("x2"):
        if src != "f32" or rnd not in ("rn", "rz"):
            return f"cvt to .{dst} packs two .f32 sources and needs .rn or .rz"
        if ops.get("b") is None:
            return f"cvt to .{dst} takes two source operands"
        return None
    if ops.get("b") is not None:
        return "only packing conversions (to .f16x2/.bf16x2) take a second source"
    if dst == "tf32":
        if src != "f32" or rnd not in ("rna", "rn", "rz"):
            return f"cvt to .tf32 converts .f32 with .rna, .rn or .rz, not .{src} with {rnd and '.' + rnd}"
        return None
    if rnd == "rna":
        return "'.rna' is only legal for cvt.rna.tf32.f32"
    if "bf16" in (dst, src) and {dst, src} & {"u8", "s8"}:
        return f"cvt between .bf16 and 8-bit integers is not defined (.{src} -> .{dst}); go through .s16/.u16"
    if dst_f and src_f:
        if {dst, src} == {"f16", "bf16"} or (src == "bf16" and dst in FLOATS):
            # same width or from bf16: rounding optional (ptxas accepts it)
            return None if rnd in (None,) + RND_F else f"cvt .{src} -> .{dst} takes .rn .rz .rm .rp or nothing"
        narrowing = width.get(dst, 0) < width.get(src, 0)
        if narrowing and rnd not in RND_F:
            return f"narrowing float conversion .{src} -> .{dst} needs a rounding mode: .rn .rz .rm .rp"
        if not narrowing and rnd in RND_F:
            return f"widening float conversion .{src} -> .{dst} takes no rounding mode"
        if rnd in RND_I and not narrowing and dst != src:
            return "integer rounding (.rni...) is only legal for float-to-same-width-float or float-to-int"
    elif dst_f and not src_f:
        if rnd not in RND_F:
            return f"integer-to-float conversion .{src} -> .{dst} needs one of .rn .rz .rm .rp"
    elif src_f and not dst_f:
        if rnd not in RND_I:
            return f"float-to-integer conversion .{src} -> .{dst} needs one of .rni .rzi .rmi .rpi"
    elif rnd:
        return f"integer-to-integer conversion .{src} -> .{dst} takes no rounding mode"
    return None


def _check_createpolicy(mods, types, ops):
    fraction = ops.get("fraction")
    if fraction is not None and not 0.0 < float(fraction.value) <= 1.0:
        return f"the createpolicy fraction is in (0, 1], got {fraction.value}"
    return None


def _check_prefetch(mods, types, ops):
    level, space = mods["level"], mods.get("space")
    if level == "tensormap" and space not in (None, "const", "param"):
        return f"prefetch.tensormap takes a generic, .const or .param address, not .{space}"
    if level != "tensormap" and space in ("const", "param"):
        return f"'.{space}' is only legal with prefetch.tensormap; .{level} takes .global, .local or generic"
    if level.startswith("L2::") and space not in (None, "global"):
        return f"'.{level}' is only legal on .global or generic addresses, not .{space}"
    return None


# Which rounding modes and flags each float type takes, per instruction family (ptxas for sm_90 is the
# reference): type -> (legal .rnd options, rounding required, legal flag groups).
_FX = {"f32": (RND_F, {"ftz", "sat"}), "f64": (RND_F, set()), "f16": (("rn",), {"ftz", "sat"}),
       "f16x2": (("rn",), {"ftz", "sat"}), "bf16": (("rn",), set()), "bf16x2": (("rn",), set())}
FLOAT_RULES = {
    "add": {t: (rnd, False, flags) for t, (rnd, flags) in _FX.items()},
    "fma": {t: ((RND_F if t.startswith("bf16") else rnd), True, flags) for t, (rnd, flags) in _FX.items()},
    "mad": {"f32": (RND_F, True, {"ftz", "sat"}), "f64": (RND_F, True, set())},
    "min": {"f32": ((), False, {"ftz", "nan"}), "f64": ((), False, set()), "f16": ((), False, {"ftz", "nan"}),
            "f16x2": ((), False, {"ftz", "nan"}), "bf16": ((), False, {"nan"}), "bf16x2": ((), False, {"nan"})},
    "abs": {"f32": ((), False, {"ftz"}), "f64": ((), False, set()), "f16": ((), False, {"ftz"}),
            "f16x2": ((), False, {"ftz"}), "bf16": ((), False, set()), "bf16x2": ((), False, set())},
}
_FLAG_GROUPS = ("ftz", "sat", "nan", "cc")


def _arith(family: str):
    """Modifier rules of add/sub/mul/mad/fma/min/max/abs/neg: floats by FLOAT_RULES; integers take a
    .hi/.lo/.wide mode for mul/mad, .cc (32/64-bit) and .sat (.s32) for add/sub, .hi.sat.s32 for mad."""
    def check(mods, types, ops):
        ty, rnd, mode = types[0], mods.get("rnd"), mods.get("mode")
        flags = {g for g in _FLAG_GROUPS if mods.get(g)}
        if ty in INT:
            if rnd:
                return f"'.{rnd}' is only legal on floating-point types, not .{ty}"
            if family in ("mul", "mad") and not mode:
                return f"integer {family} .{ty} needs one of .hi .lo .wide"
            if mode == "wide" and ty in ("u64", "s64"):
                return ".wide is only legal on 16- and 32-bit integers"
            legal = set()
            if family == "add":
                legal = ({"cc"} if ty in INT32_64 else set()) | ({"sat"} if ty == "s32" else set())
            if family == "mad" and ty == "s32" and mode == "hi":
                legal = {"sat"}
            if flags - legal:
                bad = sorted(flags - legal)[0]
                return f"'.{mods[bad]}' is not legal on {family} .{ty}" + (
                    "; .cc is for 32/64-bit add/sub" if bad == "cc" else "")
            if {"cc", "sat"} <= flags:
                return "'.cc' and '.sat' cannot be combined"
            return None
        if mode:
            return f"'.{mode}' is only legal on integer types, not .{ty}"
        rule = FLOAT_RULES["add" if family == "mul" else family].get(ty)
        if rule is None:
            return f"{family} is not defined on .{ty}"
        rnds, required, legal = rule
        if rnd and rnd not in rnds:
            return f"{family}.{ty} rounds with {' '.join('.' + r for r in rnds) or 'no rounding mode'}, not .{rnd}"
        if required and not rnd:
            return f"{family}.{ty} needs a rounding mode: {' '.join('.' + r for r in rnds)}"
        if flags - legal:
            bad = sorted(flags - legal)[0]
            return (f"'.{mods[bad]}' is not legal on {family}.{ty}; legal flags: "
                    + (" ".join("." + ("NaN" if f == "nan" else f) for f in sorted(legal)) or "none"))
        return None
    return check


def _check_div(mods, types, ops):
    ty, mode = types[0], mods.get("mode")
    if ty in INT and (mode or mods.get("ftz")):
        return f"integer div takes no modifiers, got .{mode or 'ftz'}"
    if ty == "f32" and not mode:
        return "div.f32 needs one of .approx .full .rn .rz .rm .rp"
    if ty == "f64" and mode not in RND_F:
        return "div.f64 needs one of .rn .rz .rm .rp"
    if ty == "f64" and mods.get("ftz"):
        return "'.ftz' is only legal on div.f32"
    return None


def _special_fn(op: str):
    """rcp/sqrt/rsqrt/ex2/lg2/sin/cos/tanh: which of .approx/.rnd and .ftz each type takes."""
    def check(mods, types, ops):
        ty, mode, ftz = types[0], mods["mode"], mods.get("ftz")
        if op == "tanh" and ftz:
            return "tanh.approx.f32 takes no .ftz"
        if ty == "f64" and op == "sqrt" and (mode == "approx" or ftz):
            return "sqrt.f64 takes .rn .rz .rm .rp and no .ftz"
        if ty == "f64" and op == "rcp" and mode == "approx" and not ftz:
            return "rcp.approx.f64 is only defined with .ftz (rcp.approx.ftz.f64)"
        return None
    return check


def _check_setp(mods, types, ops):
    ty, cmp = types[0], mods["cmp"]
    unsigned_only = ("lo", "ls", "hi", "hs")
    unordered = ("equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan")
    is_float = ty in FLOATS or ty in HALF
    if cmp in unsigned_only and not ty.startswith("u"):
        return f"'.{cmp}' compares unsigned integers; .{ty} needs one of .lt .le .gt .ge (or a .u type)"
    if cmp in unordered and not is_float:
        return f"'.{cmp}' is a floating-point comparison, not legal on .{ty}"
    if cmp in ("lt", "le", "gt", "ge") and _is_bits(ty):
        return f"ordered comparison '.{cmp}' is not defined on bit type .{ty}; use .u or .s"
    if mods.get("ftz") and ty not in ("f32", "f16"):
        return f"'.ftz' is only legal on setp .f32 and .f16, not .{ty}"
    if bool(mods.get("bool")) != (ops.get("c") is not None):
        return "a boolean combine (.and/.or/.xor) and a third predicate operand go together"
    return None


_HALF_ADD = ("f16", "bf16", "f16x2", "bf16x2")
# op -> legal types, per instruction family (ptxas for sm_90 is the reference for these tables)
ATOM_TYPES = {"add": ("u32", "s32", "u64", "f32", "f64") + _HALF_ADD, "min": INT32_64, "max": INT32_64,
              "inc": ("u32",), "dec": ("u32",), "and": ("b32", "b64"), "or": ("b32", "b64"),
              "xor": ("b32", "b64"), "exch": ("b32", "b64"), "cas": ("b32", "b64")}
BULK_REDUCE_GLOBAL_TYPES = {"add": ("u32", "s32", "u64", "f32", "f64", "f16", "bf16"),
                            "min": ("u32", "s32", "u64", "s64", "f16", "bf16"),
                            "max": ("u32", "s32", "u64", "s64", "f16", "bf16"), "inc": ("u32",), "dec": ("u32",),
                            "and": ("b32", "b64"), "or": ("b32", "b64"), "xor": ("b32", "b64")}
BULK_REDUCE_CLUSTER_TYPES = {"add": ("u32", "s32", "u64"), "min": ("u32", "s32"), "max": ("u32", "s32"),
                             "inc": ("u32",), "dec": ("u32",), "and": ("b32",), "or": ("b32",), "xor": ("b32",)}


def _op_type(table: dict, what: str, mods, types):
    """The reduction operator must be defined on the type; 16-bit float adds are spelled .add.noftz."""
    op, ty = mods["op"], types[0]
    if ty not in table[op]:
        return f"{what} '.{op}' is not defined on .{ty}; legal types: {' '.join('.' + t for t in table[op])}"
    needs_noftz = op == "add" and ty in _HALF_ADD
    if needs_noftz and not mods.get("noftz"):
        return f"{what} '.add' on .{ty} is spelled .add.noftz"
    if mods.get("noftz") and not needs_noftz:
        return "'.noftz' is only legal with .add on 16-bit float types"
    return None


def _check_atom(mods, types, ops):
    sem, scope = mods.get("sem"), mods.get("scope")
    if sem and not scope:                    # PTX would default to .gpu; pkptx wants ordering spelled out
        return (f"atom/red '.{sem}' without a scope means .gpu in PTX; spell the scope out: one of "
                + " ".join("." + s for s in SCOPES))
    if scope and not sem:                    # ... and the semantics to .relaxed
        return (f"atom/red scope '.{scope}' without semantics means .relaxed in PTX; spell it out: "
                f"sem= .relaxed .acquire .release or .acq_rel")
    err = _scope_with_sem(mods) or _op_type(ATOM_TYPES, "atom/red", mods, types)
    if err:
        return err
    if (mods["op"] == "cas") != (ops.get("c") is not None):
        return "atom.cas takes a compare and a swap value; other ops take one value"
    if mods.get("hint") and (mods["op"] == "cas" or mods.get("space") not in (None, "global")):
        return "'.L2::cache_hint' is only legal on .global or generic atom/red, and not on atom.cas"
    return _hint_needs_policy(mods, ops)


def _check_bulk_reduce(table):
    def check(mods, types, ops):
        return _op_type(table, "cp.reduce.async.bulk", mods, types) or _hint_needs_policy(mods, ops)
    return check


def _check_fence(mods, types, ops):
    return None


def _check_bulk_load(mods, types, ops):
    if bool(mods.get("multicast")) != (ops.get("mask") is not None):
        return "'.multicast::cluster' and a 16-bit CTA mask operand go together"
    return _hint_needs_policy(mods, ops)


def _check_tensor(mods, types, ops):
    dims = int(mods["dim"][0])
    ref = ops["tensor"]
    if len(ref.coords) != dims:
        return f"a .{mods['dim']} tensor copy takes {dims} coordinate(s), got {len(ref.coords)}"
    if mods.get("load_mode", "tile") != "tile" and dims < 3:
        return "im2col modes need at least 3 dimensions"
    offsets = ops.get("offsets")
    if mods.get("load_mode") == "im2col":
        got = len(offsets) if offsets is not None else 0
        if got != dims - 2:
            return f"a .{mods['dim']}.im2col copy takes {dims - 2} 16-bit im2col offset(s) {{..}}, got {got}"
    elif offsets is not None:
        return "im2col offsets are only legal with .im2col"
    if "multicast" in mods or "mask" in ops:
        err = _check_bulk_load(mods, types, ops)
        if err:
            return err
    return _hint_needs_policy(mods, ops)


MULTIMEM_TYPES = {"add": ("u32", "s32", "u64", "f32", "f64") + HALF, "min": INT32_64 + HALF,
                  "max": INT32_64 + HALF, "and": ("b32", "b64"), "or": ("b32", "b64"), "xor": ("b32", "b64")}
MULTIMEM_VEC = {"f32": ("v2", "v4"), "f16x2": ("v2", "v4"), "bf16x2": ("v2", "v4"), "f16": ("v2", "v4", "v8"),
                "bf16": ("v2", "v4", "v8")}


def _check_multimem(mods, types, ops):
    ty, op, vec = types[0], mods.get("op"), mods.get("vec")
    err = _scope_with_sem({"sem": mods.get("sem"), "scope": mods.get("scope")})
    if err:
        return err
    if op is not None and ty not in MULTIMEM_TYPES[op]:
        return (f"multimem '.{op}' is not defined on .{ty}; legal types: "
                + " ".join("." + t for t in MULTIMEM_TYPES[op]))
    if mods.get("acc") and (ty not in HALF or op != "add"):
        return f"'.acc::f32' is only legal with .add on 16-bit float types, not .{op}.{ty}"
    if vec and vec not in MULTIMEM_VEC.get(ty, ()):
        legal = " ".join("." + v for v in MULTIMEM_VEC.get(ty, ())) or "none (scalar only)"
        return f"'.{vec}' is not a legal vector width for multimem .{ty}; legal: {legal}"
    if not vec and ty in ("f16", "bf16"):
        return f"multimem on .{ty} needs a vector width (.v2 .v4 .v8); use .{ty}x2 for one register"
    data = "d" if "d" in ops else "b"
    return _vec_count(mods, list(ops.values()), list(ops).index(data))


def _check_multimem_red(mods, types, ops):
    op, ty = mods["op"], types[0]
    if op in ("min", "max") and ty in ("f16x2", "bf16x2") and not mods.get("vec"):
        return f"multimem.red '.{op}' on .{ty} needs a vector width (.v2 .v4)"
    return _check_multimem(mods, types, ops)


def _mixed_int_wgmma(mods, types) -> bool:
    return {types[1], types[2]} == {"s8", "u8"}


_WGMMA_ACC_REGS = {"f32": ("f32", "b32"), "s32": ("s32", "u32", "b32"), "f16": ("f16x2", "b32", "u32")}


def _check_wgmma(register_a: bool):
    k_for = {"f16": 16, "bf16": 16, "tf32": 8, "e4m3": 32, "e5m2": 32, "s8": 32, "u8": 32}

    def check(mods, types, ops):
        dtype, atype, btype = types
        shape = mods["shape"]
        try:
            m, rest = shape[1:].split("n")
            n, k = (int(x) for x in rest.split("k"))
        except ValueError:
            return f"bad wgmma shape '{shape}'"
        if int(m) != 64 or k != k_for[atype]:
            return f"wgmma with .{atype} inputs needs shape m64nNk{k_for[atype]}, got {shape}"
        pairs = (("e4m3", "e5m2"), ("s8", "u8"))
        if atype != btype and not any(atype in p and btype in p for p in pairs):
            return f"wgmma A and B types must match (or both be fp8, or both 8-bit integers), got .{atype} and .{btype}"
        if (dtype == "s32") != (atype in ("s8", "u8")):
            return f"wgmma .s32 accumulation goes with .s8/.u8 inputs and only with them, got .{dtype} with .{atype}"
        integer = atype in ("s8", "u8")
        if not (8 <= n <= 256 and n % 8 == 0) or (integer and n > 32 and n % 16):
            legal = "8, 16, 24, 32, then multiples of 16 up to 256" if integer else "multiples of 8 in 8..256"
            return f"wgmma N with .{atype} inputs is one of {legal}; got {n}"
        if dtype == "f16" and atype not in ("f16", "e4m3", "e5m2"):
            return f"wgmma .f16 accumulation needs .f16 or fp8 inputs, not .{atype}"
        regs = n // 2 if dtype in ("f32", "s32") else n // 4
        if len(ops["d"]) != regs:
            return f"wgmma {shape} with .{dtype} accumulators needs {regs} destination registers, got {len(ops['d'])}"
        legal = _WGMMA_ACC_REGS[dtype]
        bad = [r for r in ops["d"] if getattr(r, "type", None) is None or r.type.name not in legal]
        if bad:
            return (f"wgmma .{dtype} accumulators are 32-bit registers of type {' '.join('.' + t for t in legal)}"
                    f"{' (each holds an f16x2 pair)' if dtype == 'f16' else ''}; got {bad[0].render()} "
                    f"(.{getattr(bad[0], 'type', '?')})")
        if register_a and len(ops["a"]) != 4:
            return f"register-A wgmma takes 4 .b32 registers for A, got {len(ops['a'])}"
        transposable = atype in ("f16", "bf16")
        if not transposable and (ops.get("ta") is not None or ops.get("tb") is not None):
            return f"wgmma with .{atype} inputs takes no transpose operands"
        if transposable and ops.get("tb") is None:
            return "wgmma with 16-bit inputs takes the transpose-B immediate (and transpose-A for descriptor A)"
        for name in ("sa", "sb"):
            if integer and ops.get(name) is not None:
                return "integer wgmma (.s8/.u8) takes no scale-a/scale-b immediates"
            if not integer and ops.get(name) is None:
                return f"wgmma with .{atype} inputs takes the scale-a and scale-b immediates (1 or -1)"
            if not integer and ops[name].value not in (1, -1):
                return f"wgmma scale immediates are 1 or -1, got {ops[name].value}"
        return None
    return check


def _check_setmaxnreg(mods, types, ops):
    n = ops["n"].value
    if not (24 <= n <= 256 and n % 8 == 0):
        return f"setmaxnreg takes a multiple of 8 in 24..256, got {n}"
    return None


def _check_matrix(mods, types, ops):
    want = int(mods["num"][1])
    data = ops.get("d") if "d" in ops else ops.get("b")
    got = len(data) if hasattr(data, "items") else 1
    return None if got == want else f".{mods['num']} moves {want} register(s), got {got}"


def _check_vote(mods, types, ops):
    if (mods["mode"] == "ballot") != (types[0] == "b32"):
        return "vote.ballot returns .b32; vote.all/.any/.uni return .pred"
    return None


def _check_redux(mods, types, ops):
    if mods["op"] in ("and", "or", "xor") and types[0] != "b32":
        return f"redux.sync .{mods['op']} needs .b32"
    if mods["op"] in ("add", "min", "max") and types[0] not in ("u32", "s32"):
        return f"redux.sync .{mods['op']} needs .u32 or .s32"
    return None


def _addr64(check=None):
    """Wrap ``check`` with the rule that generic and .global addresses are 64-bit (``.address_size 64``):
    a 32-bit register base only addresses a state space such as .shared (ptxas otherwise dies with a
    line-less "32-Bit ABI is not supported")."""
    def wrapped(mods, types, ops):
        space = mods.get("space")
        base = getattr(ops.get("addr"), "base", None)
        if space in (None, "global") and getattr(base, "name", "").startswith("%") and base.type.bits == 32:
            where = "a generic" if space is None else "a .global"
            return (f"{where} address needs a 64-bit register; {base.name} is .{base.type} "
                    f"(name a state space such as .shared::cta, or convert it with cvta)")
        return check(mods, types, ops) if check else None
    return wrapped


def _check_mbar_sem(mods, types, ops):
    sem, scope = mods.get("sem"), mods.get("scope")
    if scope and not sem:
        return f"an mbarrier scope '.{scope}' needs a semantics qualifier (.release / .acquire / .relaxed)"
    if sem and not scope:
        return f"mbarrier '.{sem}' needs a scope: .cta or .cluster"
    return None


def _check_mbar_arrive(mods, types, ops):
    """An arrive on a remote barrier (.shared::cluster) returns no state: its destination is the sink ``_``."""
    state = ops.get("state")
    if mods.get("space") == "shared::cluster" and getattr(state, "name", "_") != "_":
        return ("an arrive on .shared::cluster returns no state; its destination must be the sink _ "
                f"(b.sink()), not {state.render()}")
    return _check_mbar_sem(mods, types, ops)


# ----------------------------------------------------------------------------- the table

# 9.7.1 Integer and 9.7.3 floating-point arithmetic
for _op in ("add", "sub"):
    spec(_op, f"{_op}.{{rnd?}}.{{ftz?}}.{{sat?}}.{{cc?}}.{{T0}}", ">d:R:T0 a:RI:T0 b:RI:T0",
         section="9.7.1.1/9.7.3.1", rnd=RND_F, T0=INT + FLOATS + HALF, check=_arith("add"))
for _op in ("addc", "subc"):
    spec(_op, f"{_op}.{{cc?}}.{{T0}}", ">d:R:T0 a:RI:T0 b:RI:T0", section="9.7.2", T0=INT32_64)
spec("mul", "mul.{mode?}.{rnd?}.{ftz?}.{sat?}.{T0}", ">d:R:T0x2 a:RI:T0 b:RI:T0", section="9.7.1.3/9.7.3.5",
     mode=("hi", "lo", "wide"), rnd=RND_F, T0=INT + FLOATS + HALF, check=_arith("mul"))
spec("mad", "mad.{mode?}.{rnd?}.{ftz?}.{sat?}.{T0}", ">d:R:T0x2 a:RI:T0 b:RI:T0 c:RI:T0x2",
     section="9.7.1.4/9.7.3.6", mode=("hi", "lo", "wide"), rnd=RND_F, T0=INT + FLOATS, check=_arith("mad"))
spec("fma", "fma.{rnd}.{ftz?}.{sat?}.{T0}", ">d:R:T0 a:RI:T0 b:RI:T0 c:RI:T0", section="9.7.3.6/9.7.4.5",
     rnd=RND_F, T0=FLOATS + HALF, check=_arith("fma"))
spec("div", "div.{mode?}.{ftz?}.{T0}", ">d:R:T0 a:RI:T0 b:RI:T0", section="9.7.1.6/9.7.3.8",
     mode=("approx", "full") + RND_F, T0=INT + FLOATS, check=_check_div)
spec("rem", "rem.{T0}", ">d:R:T0 a:RI:T0 b:RI:T0", section="9.7.1.7", T0=INT)
for _op in ("abs", "neg"):
    spec(_op, f"{_op}.{{ftz?}}.{{T0}}", ">d:R:T0 a:R:T0", section="9.7.1.8/9.7.3.10",
         T0=("s16", "s32", "s64") + FLOATS + HALF, check=_arith("abs"))
for _op in ("min", "max"):
    spec(_op, f"{_op}.{{ftz?}}.{{nan?}}.{{T0}}", ">d:R:T0 a:RI:T0 b:RI:T0", section="9.7.1.10/9.7.3.11",
         nan=("NaN",), T0=INT + FLOATS + HALF, check=_arith("min"))
for _op, _modes in (("rcp", ("approx",) + RND_F), ("sqrt", ("approx",) + RND_F), ("rsqrt", ("approx",)),
                    ("ex2", ("approx",)), ("lg2", ("approx",)), ("sin", ("approx",)), ("cos", ("approx",)),
                    ("tanh", ("approx",))):
    spec(_op, f"{_op}.{{mode}}.{{ftz?}}.{{T0}}", ">d:R:T0 a:R:T0", section="9.7.3.13-22", mode=_modes,
         T0=("f32", "f64") if _op in ("rcp", "sqrt", "rsqrt") else ("f32",), check=_special_fn(_op))
spec("popc", "popc.{T0}", ">d:R:u32 a:R:T0", section="9.7.1.14", T0=("b32", "b64"))
spec("clz", "clz.{T0}", ">d:R:u32 a:R:T0", section="9.7.1.15", T0=("b32", "b64"))
spec("brev", "brev.{T0}", ">d:R:T0 a:R:T0", section="9.7.1.17", T0=("b32", "b64"))
spec("bfe", "bfe.{T0}", ">d:R:T0 a:R:T0 b:RI:u32 c:RI:u32", section="9.7.1.19", T0=INT32_64)
spec("bfi", "bfi.{T0}", ">d:R:T0 a:RI:T0 b:R:T0 c:RI:u32 e:RI:u32", section="9.7.1.20", T0=("b32", "b64"))

# 9.7.8 Logic and shift
for _op in ("and", "or", "xor"):
    spec(_op, f"{_op}.{{T0}}", ">d:R:T0 a:RI:T0 b:RI:T0", section="9.7.8", T0=("pred",) + BITS)
spec("not", "not.{T0}", ">d:R:T0 a:R:T0", section="9.7.8.4", T0=("pred",) + BITS)
spec("shl", "shl.{T0}", ">d:R:T0 a:RI:T0 b:RI:u32", section="9.7.8.7", T0=BITS)
spec("shr", "shr.{T0}", ">d:R:T0 a:RI:T0 b:RI:u32", section="9.7.8.8", T0=BITS + INT)
spec("lop3", "lop3.{T0}", ">d:R:T0 a:RI:T0 b:RI:T0 c:RI:T0 lut:I:u32", section="9.7.8.6", T0=("b32",))
spec("prmt", "prmt.{T0}.{mode?}", ">d:R:T0 a:RI:T0 b:RI:T0 c:RI:T0", section="9.7.9.7", T0=("b32",),
     mode=("f4e", "b4e", "rc8", "ecl", "ecr", "rc16"))

# 9.7.7 Comparison and selection
spec("setp", "setp.{cmp}.{bool?}.{ftz?}.{T0}", ">p:R:pred a:RI:T0 b:RI:T0 c?:R:pred", section="9.7.7.1",
     cmp=("eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs", "equ", "neu", "ltu", "leu", "gtu",
          "geu", "num", "nan"), bool=("and", "or", "xor"), T0=BITS + INT + FLOATS + ("f16", "bf16"),
     check=_check_setp)
spec("selp", "selp.{T0}", ">d:R:T0 a:RI:T0 b:RI:T0 c:R:pred", section="9.7.7.2", T0=BITS + INT + FLOATS)

# 9.7.9 Data movement and conversion
spec("mov", "mov.{T0}", ">d:RV:T0v a:RISYV:T0v", section="9.7.9.1",
     T0=("pred",) + BITS + ("b128",) + INT + FLOATS, versions=(("b128", (8, 3)),))
spec("cvt", "cvt.{rnd?}.{ftz?}.{sat?}.{relu?}.{satfinite?}.{T0}.{T1}", ">d:R:T0w a:RIS:T1w b?:R:T1",
     section="9.7.9.21", rnd=RND_F + RND_I + ("rna",),
     T0=INT + ("u8", "s8") + FLOATS + HALF + ("tf32",), T1=INT + ("u8", "s8") + FLOATS + ("f16", "bf16"),
     check=_check_cvt, versions=(("satfinite", (8, 1)),))
spec("cvta", "cvta.{to?}.{space}.{T0}", ">d:R:T0 a:RY:T0", section="9.7.9.20",
     space=("global", "shared", "shared::cta", "shared::cluster", "local", "const", "param"),
     T0=("u64",))
spec("ld", "ld.{sem?}.{scope?}.{space?}.{nc?}.{cache?}.{evict?}.{prefetch?}.{hint?}.{vec?}.{T0}",
     ">d:RV:T0w addr:A policy?:R:b64", section="9.7.9.8",
     sem=("weak", "relaxed", "acquire", "volatile"), scope=SCOPES,
     space=("global", "shared", "shared::cta", "shared::cluster", "local", "param", "const"),
     cache=("ca", "cg", "cs", "lu", "cv"),
     evict=("L1::evict_normal", "L1::evict_unchanged", "L1::evict_first", "L1::evict_last", "L1::no_allocate"),
     prefetch=("L2::64B", "L2::128B", "L2::256B"), hint=("L2::cache_hint",), vec=("v2", "v4"), T0=LDST,
     check=_addr64(_check_ldst(load=True)), versions=(("b128", (8, 3)),))
spec("st", "st.{sem?}.{scope?}.{space?}.{cache?}.{evict?}.{hint?}.{vec?}.{T0}", "addr:A b:RIV:T0w policy?:R:b64",
     section="9.7.9.9", sem=("weak", "relaxed", "release", "volatile"), scope=SCOPES,
     space=("global", "shared", "shared::cta", "shared::cluster", "local"),
     cache=("wb", "cg", "cs", "wt"),
     evict=("L1::evict_normal", "L1::evict_unchanged", "L1::evict_first", "L1::evict_last", "L1::no_allocate"),
     hint=("L2::cache_hint",), vec=("v2", "v4"), T0=LDST, check=_addr64(_check_ldst(load=False)),
     versions=(("b128", (8, 3)),))
spec("prefetch", "prefetch.{space?}.{level}", "addr:A", section="9.7.9.15",
     space=("global", "local", "const", "param"),
     level=("L1", "L2", "L2::evict_last", "L2::evict_normal", "tensormap"), check=_addr64(_check_prefetch),
     versions=(("tensormap", (8, 0)),))
spec("mapa", "mapa.{space?}.{T0}", ">d:R:T0 a:RY:T0 rank:RI:u32", section="9.7.9.22",
     space=("shared::cluster",), T0=("u32", "u64"))
spec("getctarank", "getctarank.{space?}.{T0}", ">d:R:u32 a:RY:T0", section="9.7.9.23",
     space=("shared::cluster",), T0=("u32", "u64"))
spec("createpolicy", "createpolicy.fractional.{primary}.{secondary?}.b64", ">d:R:b64 fraction?:I:f32",
     section="9.7.9.18", primary=("L2::evict_last", "L2::evict_normal", "L2::evict_first", "L2::evict_unchanged"),
     secondary=("L2::evict_first", "L2::evict_unchanged"), check=_check_createpolicy)
spec("ldmatrix", "ldmatrix.sync.aligned.{shape}.{num}.{trans?}.{space?}.{T0}", ">d:RV:b32 addr:A",
     section="9.7.14.5.15", shape=("m8n8",), num=("x1", "x2", "x4"), space=SMEM, T0=("b16",), check=_check_matrix)
spec("stmatrix", "stmatrix.sync.aligned.{shape}.{num}.{trans?}.{space?}.{T0}", "addr:A b:RV:b32",
     section="9.7.14.5.16", ptx=(7, 8), shape=("m8n8",), num=("x1", "x2", "x4"), space=SMEM, T0=("b16",),
     check=_check_matrix)

# 9.7.12 Parallel synchronization and communication
spec("bar.sync", "bar.sync", "id:RI:u32 count?:RI:u32", section="9.7.12.1")
spec("bar.arrive", "bar.arrive", "id:RI:u32 count:RI:u32", section="9.7.12.1")
spec("barrier.sync", "barrier.sync.{aligned?}", "id:RI:u32 count?:RI:u32", section="9.7.12.1")
spec("barrier.arrive", "barrier.arrive.{aligned?}", "id:RI:u32 count:RI:u32", section="9.7.12.1")
spec("barrier.cluster.arrive", "barrier.cluster.arrive.{sem?}.{aligned?}", section="9.7.12.2",
     sem=("release", "relaxed"), versions=(("relaxed", (8, 0)),))
spec("barrier.cluster.wait", "barrier.cluster.wait.{sem?}.{aligned?}", section="9.7.12.2", sem=("acquire",))
spec("membar", "membar.{level}", section="9.7.12.4", level=("cta", "gl", "sys"))
spec("fence", "fence.{sem?}.{scope}", section="9.7.12.4", sem=("sc", "acq_rel"), scope=SCOPES)
spec("fence.proxy.async", "fence.proxy.async.{space?}", section="9.7.12.4",
     space=("shared::cta", "shared::cluster", "global"), ptx=(8, 0))
spec("fence.proxy.alias", "fence.proxy.alias", section="9.7.12.4", ptx=(7, 5))
spec("fence.proxy.tensormap.release", "fence.proxy.tensormap::generic.release.{scope}", section="9.7.12.4",
     ptx=(8, 3), scope=SCOPES)
spec("fence.proxy.tensormap.acquire", "fence.proxy.tensormap::generic.acquire.{scope}", "addr:A size:I:u32",
     section="9.7.12.4", ptx=(8, 3), scope=SCOPES)
spec("fence.mbarrier_init", "fence.mbarrier_init.release.cluster", section="9.7.12.4", ptx=(8, 0))
spec("atom", "atom.{sem?}.{scope?}.{space?}.{op}.{noftz?}.{hint?}.{T0}",
     ">d:R:T0 addr:A b:RI:T0 c?:RI:T0 policy?:R:b64", section="9.7.12.5",
     sem=("relaxed", "acquire", "release", "acq_rel"), scope=SCOPES,
     space=("global", "shared", "shared::cta", "shared::cluster"),
     op=("and", "or", "xor", "cas", "exch", "add", "inc", "dec", "min", "max"), hint=("L2::cache_hint",),
     T0=("b32", "b64", "u32", "u64", "s32", "s64", "f32", "f64", "f16", "bf16", "f16x2", "bf16x2"),
     check=_addr64(_check_atom))
spec("red", "red.{sem?}.{scope?}.{space?}.{op}.{noftz?}.{hint?}.{T0}", "addr:A b:RI:T0 policy?:R:b64",
     section="9.7.12.6", sem=("relaxed", "release"), scope=SCOPES,
     space=("global", "shared", "shared::cta", "shared::cluster"),
     op=("and", "or", "xor", "add", "inc", "dec", "min", "max"), hint=("L2::cache_hint",),
     T0=("b32", "b64", "u32", "u64", "s32", "s64", "f32", "f64", "f16", "bf16", "f16x2", "bf16x2"),
     check=_addr64(_check_atom))
spec("shfl.sync", "shfl.sync.{mode}.b32", ">d:R:b32 a:RI:b32 b:RI:u32 c:RI:u32 mask:RI:u32", section="9.7.9.6",
     mode=("up", "down", "bfly", "idx"))
spec("vote.sync", "vote.sync.{mode}.{T0}", ">d:R:T0 a:R:pred mask:RI:u32", section="9.7.12.10",
     mode=("all", "any", "uni", "ballot"), T0=("pred", "b32"), check=_check_vote)
spec("redux.sync", "redux.sync.{op}.{T0}", ">d:R:T0 a:R:T0 mask:RI:u32", section="9.7.12.12",
     op=("add", "min", "max", "and", "or", "xor"), T0=("u32", "s32", "b32"), check=_check_redux)
spec("elect.sync", "elect.sync", ">d:K:any mask:RI:u32", section="9.7.12.13", ptx=(8, 0))
spec("activemask", "activemask.b32", ">d:R:b32", section="9.7.12.11")
spec("griddepcontrol", "griddepcontrol.{action}", section="9.7.12.16", ptx=(7, 8),
     action=("launch_dependents", "wait"))

# 9.7.12.15 mbarrier. A .sem and a .scope go together; .relaxed on arrive/wait forms is PTX 8.6.
_MB_SCOPE = dict(scope=("cta", "cluster"))
_MB_ARRIVE = dict(sem=("release", "relaxed"), space=SMEM + ("shared::cluster",), versions=(("relaxed", (8, 6)),),
                  check=_addr64(_check_mbar_arrive), **_MB_SCOPE)
_MB_TX = dict(sem=("relaxed",), space=SMEM + ("shared::cluster",), check=_addr64(_check_mbar_sem), **_MB_SCOPE)
_MB_WAIT = dict(sem=("acquire", "relaxed"), space=SMEM, versions=(("relaxed", (8, 6)),),
                check=_addr64(_check_mbar_sem), **_MB_SCOPE)
spec("mbarrier.init", "mbarrier.init.{space?}.b64", "addr:A count:RI:u32", section="9.7.12.15.9", ptx=(7, 0),
     space=SMEM, check=_addr64())
spec("mbarrier.inval", "mbarrier.inval.{space?}.b64", "addr:A", section="9.7.12.15.10", ptx=(7, 0), space=SMEM,
     check=_addr64())
spec("mbarrier.arrive", "mbarrier.arrive.{sem?}.{scope?}.{space?}.b64", ">state:RN:b64 addr:A count?:RI:u32",
     section="9.7.12.15.13", ptx=(8, 0), **_MB_ARRIVE)
spec("mbarrier.arrive_drop", "mbarrier.arrive_drop.{sem?}.{scope?}.{space?}.b64",
     ">state:RN:b64 addr:A count?:RI:u32", section="9.7.12.15.14", ptx=(8, 0), **_MB_ARRIVE)
spec("mbarrier.arrive.expect_tx", "mbarrier.arrive.expect_tx.{sem?}.{scope?}.{space?}.b64",
     ">state:RN:b64 addr:A tx:RI:u32", section="9.7.12.15.13", ptx=(8, 0), **_MB_ARRIVE)
spec("mbarrier.expect_tx", "mbarrier.expect_tx.{sem?}.{scope?}.{space?}.b64", "addr:A tx:RI:u32",
     section="9.7.12.15.11", ptx=(8, 0), **_MB_TX)
spec("mbarrier.complete_tx", "mbarrier.complete_tx.{sem?}.{scope?}.{space?}.b64", "addr:A tx:RI:u32",
     section="9.7.12.15.12", ptx=(8, 0), **_MB_TX)
for _wait in ("test_wait", "try_wait"):
    _hint = " hint?:RI:u32" if _wait == "try_wait" else ""
    spec(f"mbarrier.{_wait}", f"mbarrier.{_wait}.{{sem?}}.{{scope?}}.{{space?}}.b64",
         f">p:R:pred addr:A state:R:b64{_hint}", section="9.7.12.15.16", ptx=(8, 0), **_MB_WAIT)
    spec(f"mbarrier.{_wait}.parity", f"mbarrier.{_wait}.parity.{{sem?}}.{{scope?}}.{{space?}}.b64",
         f">p:R:pred addr:A parity:RI:u32{_hint}", section="9.7.12.15.16", ptx=(8, 0), **_MB_WAIT)
spec("mbarrier.pending_count", "mbarrier.pending_count.b64", ">d:R:u32 state:R:b64", section="9.7.12.15.17",
     ptx=(7, 0))

# 9.7.9.25 Bulk and tensor asynchronous copies
spec("cp.async.bulk.shared::cluster.global",
     "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.{multicast?}.{hint?}",
     "dst:A src:A size:RI:u32 mbar:A mask?:RI:u16 policy?:R:b64", section="9.7.9.25.4.1", ptx=(8, 0),
     multicast=("multicast::cluster",), hint=("L2::cache_hint",), check=_check_bulk_load)
spec("cp.async.bulk.shared::cluster.shared::cta",
     "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes", "dst:A src:A size:RI:u32 mbar:A",
     section="9.7.9.25.4.1", ptx=(8, 0))
spec("cp.async.bulk.global.shared::cta", "cp.async.bulk.global.shared::cta.bulk_group.{hint?}",
     "dst:A src:A size:RI:u32 policy?:R:b64", section="9.7.9.25.4.1", ptx=(8, 0), hint=("L2::cache_hint",),
     check=lambda m, t, o: _hint_needs_policy(m, o))
spec("cp.reduce.async.bulk.global.shared::cta",
     "cp.reduce.async.bulk.global.shared::cta.bulk_group.{hint?}.{op}.{noftz?}.{T0}",
     "dst:A src:A size:RI:u32 policy?:R:b64", section="9.7.9.25.4.2", ptx=(8, 0), hint=("L2::cache_hint",),
     op=("add", "min", "max", "inc", "dec", "and", "or", "xor"),
     T0=("b32", "b64", "u32", "s32", "u64", "s64", "f32", "f64", "f16", "bf16"),
     check=_check_bulk_reduce(BULK_REDUCE_GLOBAL_TYPES))
spec("cp.reduce.async.bulk.shared::cluster.shared::cta",
     "cp.reduce.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes.{op}.{T0}",
     "dst:A src:A size:RI:u32 mbar:A", section="9.7.9.25.4.2", ptx=(8, 0),
     op=("add", "min", "max", "inc", "dec", "and", "or", "xor"), T0=("b32", "b64", "u32", "s32", "u64", "s64"),
     check=_check_bulk_reduce(BULK_REDUCE_CLUSTER_TYPES))
spec("cp.async.bulk.prefetch.L2.global", "cp.async.bulk.prefetch.L2.global.{hint?}", "src:A size:RI:u32 policy?:R:b64",
     section="9.7.9.25.4.3", ptx=(8, 0), hint=("L2::cache_hint",), check=lambda m, t, o: _hint_needs_policy(m, o))
spec("cp.async.bulk.tensor.shared::cluster.global",
     "cp.async.bulk.tensor.{dim}.shared::cluster.global.{load_mode?}.mbarrier::complete_tx::bytes.{multicast?}.{hint?}",
     "dst:A tensor:M mbar:A offsets?:V:b16 mask?:RI:u16 policy?:R:b64", section="9.7.9.25.5.1", ptx=(8, 0), dim=DIMS,
     load_mode=("tile", "im2col"), multicast=("multicast::cluster",), hint=("L2::cache_hint",), check=_check_tensor)
spec("cp.async.bulk.tensor.global.shared::cta",
     "cp.async.bulk.tensor.{dim}.global.shared::cta.{load_mode?}.bulk_group.{hint?}",
     "tensor:M src:A policy?:R:b64", section="9.7.9.25.5.1", ptx=(8, 0), dim=DIMS,
     load_mode=("tile", "im2col_no_offs"), hint=("L2::cache_hint",), check=_check_tensor)
spec("cp.reduce.async.bulk.tensor",
     "cp.reduce.async.bulk.tensor.{dim}.global.shared::cta.{op}.{load_mode?}.bulk_group.{hint?}",
     "tensor:M src:A policy?:R:b64", section="9.7.9.25.5.2", ptx=(8, 0), dim=DIMS,
     op=("add", "min", "max", "inc", "dec", "and", "or", "xor"), load_mode=("tile", "im2col_no_offs"),
     hint=("L2::cache_hint",), check=_check_tensor)
spec("cp.async.bulk.prefetch.tensor", "cp.async.bulk.prefetch.tensor.{dim}.L2.global.{load_mode?}.{hint?}",
     "tensor:M offsets?:V:b16 policy?:R:b64", section="9.7.9.25.5.3", ptx=(8, 0), dim=DIMS,
     load_mode=("tile", "im2col"),
     hint=("L2::cache_hint",), check=_check_tensor)
spec("cp.async.bulk.commit_group", "cp.async.bulk.commit_group", section="9.7.9.25.6.1", ptx=(8, 0))
spec("cp.async.bulk.wait_group", "cp.async.bulk.wait_group.{read?}", "n:I:u32", section="9.7.9.25.6.2", ptx=(8, 0))

# 9.7.12.14 multimem (NVLink SHARP through a multicast address)
_MM = dict(scope=SCOPES, space=("global",), vec=("v2", "v4", "v8"),
           T0=("b32", "b64", "u32", "u64", "s32", "s64", "f32", "f64", "f16", "f16x2", "bf16", "bf16x2"))
spec("multimem.ld_reduce", "multimem.ld_reduce.{sem?}.{scope?}.{space?}.{op}.{acc?}.{vec?}.{T0}",
     ">d:RV:T0 addr:A", section="9.7.12.14", ptx=(8, 1), sem=("weak", "relaxed", "acquire"),
     op=("min", "max", "add", "and", "or", "xor"), acc=("acc::f32",), check=_addr64(_check_multimem),
     versions=(("acc::f32", (8, 2)),), **_MM)
spec("multimem.st", "multimem.st.{sem?}.{scope?}.{space?}.{vec?}.{T0}", "addr:A b:RIV:T0", section="9.7.12.14",
     ptx=(8, 1), sem=("weak", "relaxed", "release"), check=_addr64(_check_multimem), **_MM)
spec("multimem.red", "multimem.red.{sem?}.{scope?}.{space?}.{op}.{vec?}.{T0}", "addr:A b:RIV:T0",
     section="9.7.12.14", ptx=(8, 1), sem=("relaxed", "release"), op=("add", "min", "max", "and", "or", "xor"),
     check=_addr64(_check_multimem_red), **_MM)

# 9.7.15 wgmma (sm_90a) and 9.7.19 setmaxnreg
spec("wgmma.fence", "wgmma.fence.sync.aligned", section="9.7.15.5.1", ptx=(8, 0), target="sm_90a")
spec("wgmma.commit_group", "wgmma.commit_group.sync.aligned", section="9.7.15.6.2", ptx=(8, 0), target="sm_90a")
spec("wgmma.wait_group", "wgmma.wait_group.sync.aligned", "n:I:u32", section="9.7.15.6.3", ptx=(8, 0),
     target="sm_90a")
_WG = dict(shape=tuple(f"m64n{n}k{k}" for k in (8, 16, 32) for n in range(8, 257, 8)),
           T0=("f32", "f16", "s32"), T1=("f16", "bf16", "tf32", "e4m3", "e5m2", "s8", "u8"),
           T2=("f16", "bf16", "tf32", "e4m3", "e5m2", "s8", "u8"), versions=((_mixed_int_wgmma, (8, 4)),))
spec("wgmma.mma_async.ss", "wgmma.mma_async.sync.aligned.{shape}.{T0}.{T1}.{T2}",
     ">d:V:any a:R:b64 b:R:b64 scale:RI:pred sa?:I:s32 sb?:I:s32 ta?:I:s32 tb?:I:s32", section="9.7.15.5.2",
     ptx=(8, 0), target="sm_90a", check=_check_wgmma(register_a=False), **_WG)
spec("wgmma.mma_async.rs", "wgmma.mma_async.sync.aligned.{shape}.{T0}.{T1}.{T2}",
     ">d:V:any a:V:b32 b:R:b64 scale:RI:pred sa?:I:s32 sb?:I:s32 tb?:I:s32", section="9.7.15.5.2",
     ptx=(8, 0), target="sm_90a", check=_check_wgmma(register_a=True), **_WG)
spec("setmaxnreg", "setmaxnreg.{action}.sync.aligned.u32", "n:I:u32", section="9.7.19.1", ptx=(8, 0),
     target="sm_90a", action=("inc", "dec"), check=_check_setmaxnreg)

# 9.7.13 Control flow and miscellaneous
spec("bra", "bra.{uni?}", "target:L", section="9.7.13.4")
spec("ret", "ret.{uni?}", section="9.7.13.7")
spec("exit", "exit", section="9.7.13.8")
spec("trap", "trap", section="9.7.18.2")
spec("brkpt", "brkpt", section="9.7.18.3")
spec("nanosleep", "nanosleep.u32", "t:RI:u32", section="9.7.18.4", ptx=(6, 3))
spec("pmevent", "pmevent", "n:I:u32", section="9.7.18.5")
