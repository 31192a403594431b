"""The rules of the instruction table that a modifier list alone cannot express: each check gets
(modifiers, types, named operands) and returns an error text or None. Also the type and option sets
the table and the checks share. Cited sections are the PTX ISA 8.x manual's.
"""
from __future__ import annotations

from .values import Reg, Special, Symbol, Vec

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
    if not mods.get("vec") and hasattr(ops[idx], "items"):
        return f"a brace vector in operand {idx} needs a vector width (.v2 .v4 ...); a scalar takes one register"
    if want != got:
        return f"'.{mods.get('vec', 'scalar')}' needs {want} register(s) in operand {idx}, got {got}"
    return None


def _shared_symbol(ops, name="addr"):
    base = getattr(ops.get(name), "base", None)
    return base if isinstance(base, Symbol) and base.space == "shared" else None


def hint_needs_policy(mods, ops, policy_name="policy"):
    has_policy = ops.get(policy_name) is not None
    if bool(mods.get("hint")) != has_policy:
        return "'.L2::cache_hint' and a 64-bit cache-policy operand go together"
    if mods.get("hint") and _shared_symbol(ops):
        return (f"'.L2::cache_hint' on the .shared variable {_shared_symbol(ops).name} means nothing (shared "
                f"memory is not cached in L2), and ptxas dies on it (internal error C7907)")
    return None


def check_ldst(load: bool):
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
        return err or hint_needs_policy(mods, ops)
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
    for flag in ("relu", "satfinite"):
        clash = [f for f in ("sat", "ftz") if mods.get(flag) and mods.get(f)]
        if clash:
            return f"'.{flag}' cannot be combined with '.{clash[0]}'"
    if mods.get("relu") and not (dst in _NARROW_FLOATS and src == "f32" and rnd in ("rn", "rz")):
        return "'.relu' is only legal converting .f32 to .f16/.bf16/.f16x2/.bf16x2/.tf32 with .rn or .rz"
    if mods.get("satfinite"):
        legal = (dst in ("f16", "f16x2", "bf16", "bf16x2") and rnd in ("rn", "rz")) or (dst == "tf32" and rnd == "rna")
        if src != "f32" or not legal:
            return ("'.satfinite' is only legal converting .f32 to .f16/.bf16/.f16x2/.bf16x2 with .rn/.rz, "
                    "or to .tf32 with .rna")
    return None


def check_cvt(mods, types, ops):
    dst, src = types
    err = _check_cvt_flags(mods, dst, src)
    if err:
        return err
    dst_f, src_f = dst[0] in "fbt" and dst not in BITS, src[0] in "fbt" and src not in BITS
    if isinstance(ops["a"], Special) and dst_f:
        return f"cvt to .{dst} cannot read the special register {ops['a'].name} directly; mov it to a register first"
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
    if "bf16" in (dst, src) and (dst if src == "bf16" else src)[0] in "us":
        # ptxas (sm_90) refuses a wider integer register here, which it accepts beside .f16 and .f32
        side, ty = ("d", dst) if src == "bf16" else ("a", src)
        reg = ops.get(side)
        if isinstance(reg, Reg) and reg.type.bits != int(ty[1:]):
            return (f"cvt between .bf16 and .{ty} needs a register of exactly {ty[1:]} bits for the .{ty} side "
                    f"({reg.render()} is .{reg.type.name})")
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


def check_createpolicy(mods, types, ops):
    fraction = ops.get("fraction")
    if fraction is not None and not 0.0 < float(fraction.value) <= 1.0:
        return f"the createpolicy fraction is in (0, 1], got {fraction.value}"
    return None


def check_prefetch(mods, types, ops):
    level, space = mods["level"], mods.get("space")
    if _shared_symbol(ops):
        return (f"prefetch of the .shared variable {_shared_symbol(ops).name} (a generic address of shared "
                f"memory) is meaningless, and ptxas dies on it (internal error C7907); prefetch global or local data")
    if ops["addr"].base is None:
        return "prefetch takes a register or symbol address; ptxas dies on an absolute one (internal error C7907)"
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


def arith(family: str, rules: str | None = None):
    """Modifier rules of add/sub/mul/mad/fma/min/max/abs/neg: floats by FLOAT_RULES[rules or family]
    (mul shares add's); integers take a .hi/.lo/.wide mode for mul/mad, .cc (32/64-bit) and .sat (.s32)
    for add/sub, .hi.sat.s32 for mad. Messages name ``family``."""
    rules = rules or ("add" if family == "mul" else family)

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
            if rules == "add" and family != "mul":
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
        rule = FLOAT_RULES[rules].get(ty)
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


def _one_mode(mods, groups):
    """The one of ``groups`` (approx/full/rnd) that is set, or an error text when several are."""
    given = [g for g in groups if mods.get(g)]
    if len(given) > 1:
        return None, f"'.{mods[given[0]]}' and '.{mods[given[1]]}' cannot be combined; give one"
    return (mods[given[0]] if given else None), None


def check_div(mods, types, ops):
    ty = types[0]
    mode, err = _one_mode(mods, ("approx", "full", "rnd"))
    if err:
        return err
    if ty in INT and (mode or mods.get("ftz")):
        return f"integer div takes no modifiers, got .{mode or 'ftz'}"
    if ty == "f32" and not mode:
        return "div.f32 needs approx=True, full=True or rnd= one of .rn .rz .rm .rp"
    if ty == "f64" and mode not in RND_F:
        return "div.f64 needs rnd= one of .rn .rz .rm .rp"
    if ty == "f64" and mods.get("ftz"):
        return "'.ftz' is only legal on div.f32"
    return None


def special_fn(op: str):
    """rcp/sqrt (approx=True or rnd=) and rsqrt/ex2/lg2/sin/cos/tanh (always .approx): .ftz per type."""
    def check(mods, types, ops):
        ty, ftz = types[0], mods.get("ftz")
        mode, err = _one_mode(mods, ("approx", "rnd"))
        if err:
            return err
        mode = mode or ("approx" if op not in ("rcp", "sqrt") else None)
        if mode is None:
            return f"{op}.{ty} needs approx=True or rnd= one of .rn .rz .rm .rp"
        if op == "tanh" and ftz:
            return "tanh.approx.f32 takes no .ftz"
        if ty == "f64" and op == "sqrt" and (mode == "approx" or ftz):
            return "sqrt.f64 takes .rn .rz .rm .rp and no .ftz"
        if ty == "f64" and op == "rcp" and mode == "approx" and not ftz:
            return "rcp.approx.f64 is only defined with .ftz (rcp.approx.ftz.f64)"
        return None
    return check


def check_setp(mods, types, ops):
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


def check_atom(mods, types, ops):
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
    return hint_needs_policy(mods, ops)


def check_bulk_reduce(table):
    def check(mods, types, ops):
        return _op_type(table, "cp.reduce.async.bulk", mods, types) or hint_needs_policy(mods, ops)
    return check


def _check_fence(mods, types, ops):
    return None


def check_bulk_load(mods, types, ops):
    if bool(mods.get("multicast")) != (ops.get("mask") is not None):
        return "'.multicast::cluster' and a 16-bit CTA mask operand go together"
    return hint_needs_policy(mods, ops)


def check_tensor(mods, types, ops):
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
        err = check_bulk_load(mods, types, ops)
        if err:
            return err
    return hint_needs_policy(mods, ops)


MULTIMEM_TYPES = {"add": ("u32", "s32", "u64", "f32", "f64") + HALF, "min": INT32_64 + HALF,
                  "max": INT32_64 + HALF, "and": ("b32", "b64"), "or": ("b32", "b64"), "xor": ("b32", "b64")}
MULTIMEM_VEC = {"f32": ("v2", "v4"), "f16x2": ("v2", "v4"), "bf16x2": ("v2", "v4"), "f16": ("v2", "v4", "v8"),
                "bf16": ("v2", "v4", "v8")}


def check_multimem(mods, types, ops):
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


def check_multimem_red(mods, types, ops):
    op, ty = mods["op"], types[0]
    if op in ("min", "max") and ty in ("f16x2", "bf16x2") and not mods.get("vec"):
        return f"multimem.red '.{op}' on .{ty} needs a vector width (.v2 .v4)"
    return check_multimem(mods, types, ops)


def b128_sys(mods, types) -> bool:
    """A .b128 access at .sys scope (PTX 8.4; .b128 itself is 8.3)."""
    return types[0] == "b128" and mods.get("scope") == "sys"


def mixed_int_wgmma(mods, types) -> bool:
    return {types[1], types[2]} == {"s8", "u8"}


_WGMMA_ACC_REGS = {"f32": ("f32", "b32"), "s32": ("s32", "u32", "b32"), "f16": ("f16x2", "b32", "u32")}


def check_wgmma(register_a: bool):
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
        if transposable and (ops.get("tb") is None or not register_a and ops.get("ta") is None):
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


def check_matrix(mods, types, ops):
    want = int(mods["num"][1])
    data = ops.get("d") if "d" in ops else ops.get("b")
    if not hasattr(data, "items"):
        return f".{mods['num']} moves a brace vector of {want} .b32 register(s), got {data.render()}"
    return None if len(data) == want else f".{mods['num']} moves {want} register(s), got {len(data)}"


def check_mov(mods, types, ops):
    """A symbol's address moves as a 32/64-bit integer; a brace vector of 2 or 4 packs into (or unpacks
    from) a .b32/.b64/.b128 register and never stands on both sides."""
    ty, d, a = types[0], ops["d"], ops["a"]
    if isinstance(a, Symbol) and ty not in ("u32", "u64", "s32", "s64", "b32", "b64"):
        return f"mov of the address of {a.name} needs a 32/64-bit integer type, not .{ty}"
    vectors = [v for v in (d, a) if isinstance(v, Vec)]
    if not vectors:
        return None
    if len(vectors) == 2 or ty not in ("b32", "b64", "b128"):
        return f"pack/unpack mov takes one brace vector and a .b32/.b64/.b128 register, not .{ty}"
    if len(vectors[0]) not in (2, 4):
        return f"pack/unpack mov takes 2 or 4 registers in braces, got {len(vectors[0])}"
    return None


def check_cvta(mods, types, ops):
    if mods.get("to") and not isinstance(ops["a"], Reg):
        return f"cvta.to converts a generic address held in a register, not the symbol {ops['a'].render()}"
    return None


def check_vote(mods, types, ops):
    if (mods["mode"] == "ballot") != (types[0] == "b32"):
        return "vote.ballot returns .b32; vote.all/.any/.uni return .pred"
    return None


def check_redux(mods, types, ops):
    if mods["op"] in ("and", "or", "xor") and types[0] != "b32":
        return f"redux.sync .{mods['op']} needs .b32"
    if mods["op"] in ("add", "min", "max") and types[0] not in ("u32", "s32"):
        return f"redux.sync .{mods['op']} needs .u32 or .s32"
    return None


def check_mbar_sem(mods, types, ops):
    sem, scope = mods.get("sem"), mods.get("scope")
    if scope and not sem:
        return f"an mbarrier scope '.{scope}' needs a semantics qualifier (.release / .acquire / .relaxed)"
    if sem and not scope:
        return f"mbarrier '.{sem}' needs a scope: .cta or .cluster"
    return None


def check_mbar_arrive(mods, types, ops):
    """An arrive on a remote barrier (.shared::cluster) returns no state: its destination is the sink ``_``."""
    state = ops.get("state")
    if mods.get("space") == "shared::cluster" and getattr(state, "name", "_") != "_":
        return ("an arrive on .shared::cluster returns no state; its destination must be the sink _ "
                f"(b.sink()), not {state.render()}")
    return check_mbar_sem(mods, types, ops)
