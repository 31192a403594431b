"""The instruction table: the one place that spells PTX.

Each row is a :class:`Spec`, keyed by the full mnemonic stem. Its ``pattern`` gives the exact order of
the dotted parts: literals, modifier groups ``{name}`` (``{name?}`` when optional) and type slots
``{T0}``, ``{T1}``...; keyword arguments give each group's legal options. ``ops`` is the operand
signature: ``name:kinds:type`` with ``>`` for a destination and ``?`` for an optional operand.
Kinds: R register, I immediate, A address, V brace vector, S special register, Y symbol, L label,
M tensor-map reference ``[tmap, {coords}]``, K pipe pair ``d|p``, N sink ``_``.
Type rules: ``T0`` (compatible with slot 0), ``T0w`` (at least as wide), ``T0x2`` (twice as wide),
``T0v`` (a brace vector whose registers together are as wide: mov's pack/unpack),
a PTX type name, or ``any``; a trailing ``!`` refuses float registers (where ptxas does). An operand
may end in ``[lo..hi]`` or ``[lo..hi%m]`` (an immediate must lie in lo..hi and be a multiple of m;
``[lo..]`` has no upper bound), and an address or symbol operand in ``@space`` (its state space when
the stem fixes it; otherwise the row's ``space`` group, or generic).

``ptx`` is the row's minimum PTX ISA version and ``versions`` raise it per modifier or type, as the
PTX ISA manual's "PTX ISA Notes" of each instruction give them; the per-form assembly test
(tests/isa/test_version_floors.py) holds every accepted form to exactly the version computed here.
Sections cite the PTX ISA 8.x manual.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .checks import (
    hint_needs_policy, check_ldst, check_cvt, check_createpolicy, check_prefetch, arith,
    check_div, special_fn, check_setp, check_atom, check_bulk_reduce, check_bulk_load,
    check_tensor, check_multimem, check_multimem_red, mixed_int_wgmma, b128_sys, check_wgmma,
    check_matrix, check_vote, check_redux, check_cvta, check_mov, check_mbar_sem, check_mbar_arrive,
    INT, INT32_64, BITS, FLOATS, HALF, LDST,
    SCOPES, RND_F, RND_I, DIMS, SMEM, BULK_REDUCE_GLOBAL_TYPES,
    BULK_REDUCE_CLUSTER_TYPES,
)


@dataclass(frozen=True)
class Operand:
    name: str
    kinds: str
    rule: str
    dest: bool = False
    optional: bool = False
    limits: tuple | None = None          # (lo, hi or None, multiple) for an immediate
    space: str | None = None             # the state space the stem fixes for an address/symbol operand
    no_float: bool = False               # integer or bit registers only (ptxas refuses a float one)


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


def _parse_limits(text: str) -> tuple:
    """``lo..hi`` / ``lo..hi%m`` / ``lo..`` -> (lo, hi or None, m)."""
    bounds, _, multiple = text.partition("%")
    lo, _, hi = bounds.partition("..")
    return int(lo), int(hi) if hi else None, int(multiple or 1)


def _parse_ops(sig: str) -> tuple:
    ops = []
    for tok in sig.split():
        tok, _, space = tok.partition("@")
        limits = None
        if tok.endswith("]"):
            tok, _, text = tok[:-1].partition("[")
            limits = _parse_limits(text)
        name, kinds, rule = (tok.split(":") + ["any"])[:3]
        dest = name.startswith(">")
        name = name.lstrip(">")
        optional = name.endswith("?")
        ops.append(Operand(name.rstrip("?"), kinds, rule.rstrip("!"), dest, optional, limits, space or None,
                           rule.endswith("!")))
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


# ----------------------------------------------------------------------------- the table

# 9.7.1 Integer and 9.7.3 floating-point arithmetic
for _op in ("add", "sub"):
    spec(_op, f"{_op}.{{rnd?}}.{{ftz?}}.{{sat?}}.{{cc?}}.{{T0}}", ">d:R:T0 a:RI:T0 b:RI:T0",
         section="9.7.1.1/9.7.3.1", rnd=RND_F, T0=INT + FLOATS + HALF, check=arith(_op, rules="add"))
for _op in ("addc", "subc"):
    spec(_op, f"{_op}.{{cc?}}.{{T0}}", ">d:R:T0 a:RI:T0 b:RI:T0", section="9.7.2", T0=INT32_64)
spec("mul", "mul.{mode?}.{rnd?}.{ftz?}.{sat?}.{T0}", ">d:R:T0x2 a:RI:T0 b:RI:T0", section="9.7.1.3/9.7.3.5",
     mode=("hi", "lo", "wide"), rnd=RND_F, T0=INT + FLOATS + HALF, check=arith("mul"))
spec("mad", "mad.{mode?}.{rnd?}.{ftz?}.{sat?}.{T0}", ">d:R:T0x2 a:RI:T0 b:RI:T0 c:RI:T0x2",
     section="9.7.1.4/9.7.3.6", mode=("hi", "lo", "wide"), rnd=RND_F, T0=INT + FLOATS, check=arith("mad"))
spec("fma", "fma.{rnd}.{ftz?}.{sat?}.{T0}", ">d:R:T0 a:RI:T0 b:RI:T0 c:RI:T0", section="9.7.3.6/9.7.4.5",
     rnd=RND_F, T0=FLOATS + HALF, check=arith("fma"))
spec("div", "div.{approx?}.{full?}.{rnd?}.{ftz?}.{T0}", ">d:R:T0 a:RI:T0 b:RI:T0", section="9.7.1.6/9.7.3.8",
     rnd=RND_F, T0=INT + FLOATS, check=check_div)
spec("rem", "rem.{T0}", ">d:R:T0 a:RI:T0 b:RI:T0", section="9.7.1.7", T0=INT)
for _op in ("abs", "neg"):
    spec(_op, f"{_op}.{{ftz?}}.{{T0}}", ">d:R:T0 a:R:T0", section="9.7.1.8/9.7.3.10",
         T0=("s16", "s32", "s64") + FLOATS + HALF, check=arith(_op, rules="abs"))
for _op in ("min", "max"):
    spec(_op, f"{_op}.{{ftz?}}.{{nan?}}.{{T0}}", ">d:R:T0 a:RI:T0 b:RI:T0", section="9.7.1.10/9.7.3.11",
         nan=("NaN",), T0=INT + FLOATS + HALF, check=arith(_op, rules="min"))
for _op in ("rcp", "sqrt"):                 # .approx or a rounding mode
    spec(_op, f"{_op}.{{approx?}}.{{rnd?}}.{{ftz?}}.{{T0}}", ">d:R:T0 a:R:T0", section="9.7.3.13-14", rnd=RND_F,
         T0=("f32", "f64"), check=special_fn(_op))
for _op in ("rsqrt", "ex2", "lg2", "sin", "cos", "tanh"):     # .approx only
    spec(_op, f"{_op}.approx.{{ftz?}}.{{T0}}", ">d:R:T0 a:R:T0", section="9.7.3.15-22",
         T0=("f32", "f64") if _op == "rsqrt" else ("f32",), check=special_fn(_op))
spec("popc", "popc.{T0}", ">d:R:u32 a:R:T0", section="9.7.1.14", T0=("b32", "b64"))
spec("clz", "clz.{T0}", ">d:R:u32 a:R:T0", section="9.7.1.15", T0=("b32", "b64"))
spec("brev", "brev.{T0}", ">d:R:T0 a:R:T0", section="9.7.1.17", T0=("b32", "b64"))
spec("bfe", "bfe.{T0}", ">d:R:T0 a:R:T0 b:RI:u32[0..255] c:RI:u32[0..255]", section="9.7.1.19", T0=INT32_64)
spec("bfi", "bfi.{T0}", ">d:R:T0 a:RI:T0 b:R:T0 c:RI:u32[0..255] e:RI:u32[0..255]", section="9.7.1.20",
     T0=("b32", "b64"))

# 9.7.8 Logic and shift
for _op in ("and", "or", "xor"):
    spec(_op, f"{_op}.{{T0}}", ">d:R:T0 a:RI:T0 b:RI:T0", section="9.7.8", T0=("pred",) + BITS)
spec("not", "not.{T0}", ">d:R:T0 a:R:T0", section="9.7.8.4", T0=("pred",) + BITS)
spec("shl", "shl.{T0}", ">d:R:T0 a:RI:T0 b:RI:u32", section="9.7.8.7", T0=BITS)
spec("shr", "shr.{T0}", ">d:R:T0 a:RI:T0 b:RI:u32", section="9.7.8.8", T0=BITS + INT)
spec("lop3", "lop3.{T0}", ">d:R:T0 a:RI:T0 b:RI:T0 c:RI:T0 lut:I:u32[0..255]", section="9.7.8.6", T0=("b32",))
spec("prmt", "prmt.{T0}.{mode?}", ">d:R:T0 a:RI:T0 b:RI:T0 c:RI:T0", section="9.7.9.7", T0=("b32",),
     mode=("f4e", "b4e", "rc8", "ecl", "ecr", "rc16"))

# 9.7.7 Comparison and selection
spec("setp", "setp.{cmp}.{bool?}.{ftz?}.{T0}", ">p:R:pred a:RI:T0 b:RI:T0 c?:R:pred", section="9.7.7.1",
     cmp=("eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs", "equ", "neu", "ltu", "leu", "gtu",
          "geu", "num", "nan"), bool=("and", "or", "xor"), T0=BITS + INT + FLOATS + ("f16", "bf16"),
     check=check_setp)
spec("selp", "selp.{T0}", ">d:R:T0 a:RI:T0 b:RI:T0 c:R:pred", section="9.7.7.2", T0=BITS + INT + FLOATS)

# 9.7.9 Data movement and conversion
spec("mov", "mov.{T0}", ">d:RV:T0v a:RISYV:T0v", section="9.7.9.1",
     T0=("pred",) + BITS + ("b128",) + INT + FLOATS, check=check_mov, versions=(("b128", (8, 3)),))
spec("cvt", "cvt.{rnd?}.{ftz?}.{sat?}.{relu?}.{satfinite?}.{T0}.{T1}", ">d:R:T0w a:RIS:T1w b?:R:T1",
     section="9.7.9.21", rnd=RND_F + RND_I + ("rna",),
     T0=INT + ("u8", "s8") + FLOATS + HALF + ("tf32",), T1=INT + ("u8", "s8") + FLOATS + ("f16", "bf16"),
     check=check_cvt, versions=(("satfinite", (8, 1)),))
spec("cvta", "cvta.{to?}.{space}.{T0}", ">d:R:T0 a:RY:T0", section="9.7.9.20",
     space=("global", "shared", "shared::cta", "shared::cluster", "local", "const", "param"),
     T0=("u64",), check=check_cvta)
spec("ld", "ld.{sem?}.{scope?}.{space?}.{nc?}.{cache?}.{evict?}.{prefetch?}.{hint?}.{vec?}.{T0}",
     ">d:RV:T0w addr:A policy?:R:b64!", section="9.7.9.8",
     sem=("weak", "relaxed", "acquire", "volatile"), scope=SCOPES,
     space=("global", "shared", "shared::cta", "shared::cluster", "local", "param", "const"),
     cache=("ca", "cg", "cs", "lu", "cv"),
     evict=("L1::evict_normal", "L1::evict_unchanged", "L1::evict_first", "L1::evict_last", "L1::no_allocate"),
     prefetch=("L2::64B", "L2::128B", "L2::256B"), hint=("L2::cache_hint",), vec=("v2", "v4"), T0=LDST,
     check=check_ldst(load=True), versions=(("b128", (8, 3)), (b128_sys, (8, 4))))
spec("st", "st.{sem?}.{scope?}.{space?}.{cache?}.{evict?}.{hint?}.{vec?}.{T0}", "addr:A b:RIV:T0w policy?:R:b64!",
     section="9.7.9.9", sem=("weak", "relaxed", "release", "volatile"), scope=SCOPES,
     space=("global", "shared", "shared::cta", "shared::cluster", "local"),
     cache=("wb", "cg", "cs", "wt"),
     evict=("L1::evict_normal", "L1::evict_unchanged", "L1::evict_first", "L1::evict_last", "L1::no_allocate"),
     hint=("L2::cache_hint",), vec=("v2", "v4"), T0=LDST, check=check_ldst(load=False),
     versions=(("b128", (8, 3)), (b128_sys, (8, 4))))
spec("prefetch", "prefetch.{space?}.{level}", "addr:A", section="9.7.9.15",
     space=("global", "local", "const", "param"),
     level=("L1", "L2", "L2::evict_last", "L2::evict_normal", "tensormap"), check=check_prefetch,
     versions=(("tensormap", (8, 0)),))
spec("mapa", "mapa.{space?}.{T0}", ">d:R:T0 a:RY:T0 rank:RI:u32", section="9.7.9.22",
     space=("shared::cluster",), T0=("u32", "u64"))
spec("getctarank", "getctarank.{space?}.{T0}", ">d:R:u32 a:RY:T0", section="9.7.9.23",
     space=("shared::cluster",), T0=("u32", "u64"))
spec("createpolicy", "createpolicy.fractional.{primary}.{secondary?}.b64", ">d:R:b64! fraction?:I:f32",
     section="9.7.9.18", primary=("L2::evict_last", "L2::evict_normal", "L2::evict_first", "L2::evict_unchanged"),
     secondary=("L2::evict_first", "L2::evict_unchanged"), check=check_createpolicy)
spec("ldmatrix", "ldmatrix.sync.aligned.{shape}.{num}.{trans?}.{space?}.{T0}", ">d:RV:b32 addr:A",
     section="9.7.14.5.15", shape=("m8n8",), num=("x1", "x2", "x4"), space=SMEM, T0=("b16",), check=check_matrix)
spec("stmatrix", "stmatrix.sync.aligned.{shape}.{num}.{trans?}.{space?}.{T0}", "addr:A b:RV:b32",
     section="9.7.14.5.16", ptx=(7, 8), shape=("m8n8",), num=("x1", "x2", "x4"), space=SMEM, T0=("b16",),
     check=check_matrix)

# 9.7.12 Parallel synchronization and communication
_BAR = "id:RI:u32[0..15] count{}:RI:u32[32..1024%32]"      # 16 named barriers; whole warps, at most a CTA
spec("bar.sync", "bar.sync", _BAR.format("?"), section="9.7.12.1")
spec("bar.arrive", "bar.arrive", _BAR.format(""), section="9.7.12.1")
spec("barrier.sync", "barrier.sync.{aligned?}", _BAR.format("?"), section="9.7.12.1")
spec("barrier.arrive", "barrier.arrive.{aligned?}", _BAR.format(""), section="9.7.12.1")
spec("barrier.cluster.arrive", "barrier.cluster.arrive.{sem?}.{aligned?}", section="9.7.12.2",
     sem=("release", "relaxed"), versions=(("relaxed", (8, 0)), ("release", (8, 0))))
spec("barrier.cluster.wait", "barrier.cluster.wait.{sem?}.{aligned?}", section="9.7.12.2", sem=("acquire",),
     versions=(("acquire", (8, 0)),))
spec("membar", "membar.{level}", section="9.7.12.4", level=("cta", "gl", "sys"))
spec("fence", "fence.{sem?}.{scope}", section="9.7.12.4", sem=("sc", "acq_rel"), scope=SCOPES)
spec("fence.proxy.async", "fence.proxy.async.{space?}", section="9.7.12.4",
     space=("shared::cta", "shared::cluster", "global"), ptx=(8, 0))
spec("fence.proxy.alias", "fence.proxy.alias", section="9.7.12.4", ptx=(7, 5))
spec("fence.proxy.tensormap.release", "fence.proxy.tensormap::generic.release.{scope}", section="9.7.12.4",
     ptx=(8, 3), scope=SCOPES)
spec("fence.proxy.tensormap.acquire", "fence.proxy.tensormap::generic.acquire.{scope}", "addr:A size:I:u32[128..128]",
     section="9.7.12.4", ptx=(8, 3), scope=SCOPES)
spec("fence.mbarrier_init", "fence.mbarrier_init.release.cluster", section="9.7.12.4", ptx=(8, 0))
spec("atom", "atom.{sem?}.{scope?}.{space?}.{op}.{noftz?}.{hint?}.{T0}",
     ">d:R:T0 addr:A b:RI:T0 c?:RI:T0 policy?:R:b64!", section="9.7.12.5",
     sem=("relaxed", "acquire", "release", "acq_rel"), scope=SCOPES,
     space=("global", "shared", "shared::cta", "shared::cluster"),
     op=("and", "or", "xor", "cas", "exch", "add", "inc", "dec", "min", "max"), hint=("L2::cache_hint",),
     T0=("b32", "b64", "u32", "u64", "s32", "s64", "f32", "f64", "f16", "bf16", "f16x2", "bf16x2"),
     check=check_atom)
spec("red", "red.{sem?}.{scope?}.{space?}.{op}.{noftz?}.{hint?}.{T0}", "addr:A b:RI:T0 policy?:R:b64!",
     section="9.7.12.6", sem=("relaxed", "release"), scope=SCOPES,
     space=("global", "shared", "shared::cta", "shared::cluster"),
     op=("and", "or", "xor", "add", "inc", "dec", "min", "max"), hint=("L2::cache_hint",),
     T0=("b32", "b64", "u32", "u64", "s32", "s64", "f32", "f64", "f16", "bf16", "f16x2", "bf16x2"),
     check=check_atom)
spec("shfl.sync", "shfl.sync.{mode}.b32", ">d:R:b32 a:RI:b32 b:RI:u32 c:RI:u32 mask:RI:u32", section="9.7.9.6",
     mode=("up", "down", "bfly", "idx"))
spec("vote.sync", "vote.sync.{mode}.{T0}", ">d:R:T0 a:R:pred mask:RI:u32", section="9.7.12.10",
     mode=("all", "any", "uni", "ballot"), T0=("pred", "b32"), check=check_vote)
spec("redux.sync", "redux.sync.{op}.{T0}", ">d:R:T0! a:R:T0! mask:RI:u32", section="9.7.12.12",
     op=("add", "min", "max", "and", "or", "xor"), T0=("u32", "s32", "b32"), check=check_redux)
spec("elect.sync", "elect.sync", ">d:K:any mask:RI:u32", section="9.7.12.13", ptx=(8, 0))
spec("activemask", "activemask.b32", ">d:R:b32", section="9.7.12.11")
spec("griddepcontrol", "griddepcontrol.{action}", section="9.7.12.16", ptx=(7, 8),
     action=("launch_dependents", "wait"))

# 9.7.12.15 mbarrier. A .sem and a .scope go together; .relaxed on arrive/wait forms is PTX 8.6.
_MB_SCOPE = dict(scope=("cta", "cluster"))
_MB_ARRIVE = dict(sem=("release", "relaxed"), space=SMEM + ("shared::cluster",), versions=(("relaxed", (8, 6)),),
                  check=check_mbar_arrive, **_MB_SCOPE)
_MB_TX = dict(sem=("relaxed",), space=SMEM + ("shared::cluster",), check=check_mbar_sem, **_MB_SCOPE)
_MB_WAIT = dict(sem=("acquire", "relaxed"), space=SMEM, versions=(("relaxed", (8, 6)),),
                check=check_mbar_sem, **_MB_SCOPE)
_COUNT = "count?:RI:u32[1..1048575]"           # arrival counts and tx-counts are 20-bit (2^20 - 1)
_TX = "tx:RI:u32[0..1048575]"
spec("mbarrier.init", "mbarrier.init.{space?}.b64", "addr:A count:RI:u32[1..1048575]", section="9.7.12.15.9",
     ptx=(7, 0), space=SMEM)
spec("mbarrier.inval", "mbarrier.inval.{space?}.b64", "addr:A", section="9.7.12.15.10", ptx=(7, 0), space=SMEM)
spec("mbarrier.arrive", "mbarrier.arrive.{sem?}.{scope?}.{space?}.b64", f">state:RN:b64! addr:A {_COUNT}",
     section="9.7.12.15.13", ptx=(8, 0), **_MB_ARRIVE)
spec("mbarrier.arrive_drop", "mbarrier.arrive_drop.{sem?}.{scope?}.{space?}.b64",
     f">state:RN:b64! addr:A {_COUNT}", section="9.7.12.15.14", ptx=(8, 0), **_MB_ARRIVE)
spec("mbarrier.arrive.expect_tx", "mbarrier.arrive.expect_tx.{sem?}.{scope?}.{space?}.b64",
     f">state:RN:b64! addr:A {_TX}", section="9.7.12.15.13", ptx=(8, 0), **_MB_ARRIVE)
spec("mbarrier.expect_tx", "mbarrier.expect_tx.{sem?}.{scope?}.{space?}.b64", f"addr:A {_TX}",
     section="9.7.12.15.11", ptx=(8, 0), **_MB_TX)
spec("mbarrier.complete_tx", "mbarrier.complete_tx.{sem?}.{scope?}.{space?}.b64", f"addr:A {_TX}",
     section="9.7.12.15.12", ptx=(8, 0), **_MB_TX)
for _wait in ("test_wait", "try_wait"):
    _hint = " hint?:RI:u32" if _wait == "try_wait" else ""
    spec(f"mbarrier.{_wait}", f"mbarrier.{_wait}.{{sem?}}.{{scope?}}.{{space?}}.b64",
         f">p:R:pred addr:A state:R:b64!{_hint}", section="9.7.12.15.16", ptx=(8, 0), **_MB_WAIT)
    spec(f"mbarrier.{_wait}.parity", f"mbarrier.{_wait}.parity.{{sem?}}.{{scope?}}.{{space?}}.b64",
         f">p:R:pred addr:A parity:RI:u32[0..1]{_hint}", section="9.7.12.15.16", ptx=(8, 0), **_MB_WAIT)
spec("mbarrier.pending_count", "mbarrier.pending_count.b64", ">d:R:u32 state:R:b64!", section="9.7.12.15.17",
     ptx=(7, 0))

# 9.7.9.25 Bulk and tensor asynchronous copies. Sizes are multiples of 16 bytes within the 20-bit tx-count.
_SIZE = "size:RI:u32[16..1048560%16]"
spec("cp.async.bulk.shared::cluster.global",
     "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.{multicast?}.{hint?}",
     f"dst:A@shared::cluster src:A@global {_SIZE} mbar:A@shared::cluster mask?:RI:u16[0..65535] policy?:R:b64!",
     section="9.7.9.25.4.1", ptx=(8, 0), multicast=("multicast::cluster",), hint=("L2::cache_hint",),
     check=check_bulk_load)
spec("cp.async.bulk.shared::cluster.shared::cta",
     "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes",
     f"dst:A@shared::cluster src:A@shared::cta {_SIZE} mbar:A@shared::cluster", section="9.7.9.25.4.1", ptx=(8, 0))
spec("cp.async.bulk.global.shared::cta", "cp.async.bulk.global.shared::cta.bulk_group.{hint?}",
     f"dst:A@global src:A@shared::cta {_SIZE} policy?:R:b64!", section="9.7.9.25.4.1", ptx=(8, 0),
     hint=("L2::cache_hint",),
     check=lambda m, t, o: hint_needs_policy(m, o))
spec("cp.reduce.async.bulk.global.shared::cta",
     "cp.reduce.async.bulk.global.shared::cta.bulk_group.{hint?}.{op}.{noftz?}.{T0}",
     f"dst:A@global src:A@shared::cta {_SIZE} policy?:R:b64!", section="9.7.9.25.4.2", ptx=(8, 0),
     hint=("L2::cache_hint",),
     op=("add", "min", "max", "inc", "dec", "and", "or", "xor"),
     T0=("b32", "b64", "u32", "s32", "u64", "s64", "f32", "f64", "f16", "bf16"),
     check=check_bulk_reduce(BULK_REDUCE_GLOBAL_TYPES))
spec("cp.reduce.async.bulk.shared::cluster.shared::cta",
     "cp.reduce.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes.{op}.{T0}",
     f"dst:A@shared::cluster src:A@shared::cta {_SIZE} mbar:A@shared::cluster", section="9.7.9.25.4.2", ptx=(8, 0),
     op=("add", "min", "max", "inc", "dec", "and", "or", "xor"), T0=("b32", "b64", "u32", "s32", "u64", "s64"),
     check=check_bulk_reduce(BULK_REDUCE_CLUSTER_TYPES))
spec("cp.async.bulk.prefetch.L2.global", "cp.async.bulk.prefetch.L2.global.{hint?}",
     f"src:A@global {_SIZE} policy?:R:b64!",
     section="9.7.9.25.4.3", ptx=(8, 0), hint=("L2::cache_hint",), check=lambda m, t, o: hint_needs_policy(m, o))
spec("cp.async.bulk.tensor.shared::cluster.global",
     "cp.async.bulk.tensor.{dim}.shared::cluster.global.{load_mode?}.mbarrier::complete_tx::bytes.{multicast?}.{hint?}",
     "dst:A@shared::cluster tensor:M mbar:A@shared::cluster offsets?:V:b16 mask?:RI:u16[0..65535] policy?:R:b64!",
     section="9.7.9.25.5.1", ptx=(8, 0), dim=DIMS,
     load_mode=("tile", "im2col"), multicast=("multicast::cluster",), hint=("L2::cache_hint",), check=check_tensor)
spec("cp.async.bulk.tensor.global.shared::cta",
     "cp.async.bulk.tensor.{dim}.global.shared::cta.{load_mode?}.bulk_group.{hint?}",
     "tensor:M src:A@shared::cta policy?:R:b64!", section="9.7.9.25.5.1", ptx=(8, 0), dim=DIMS,
     load_mode=("tile", "im2col_no_offs"), hint=("L2::cache_hint",), check=check_tensor)
spec("cp.reduce.async.bulk.tensor",
     "cp.reduce.async.bulk.tensor.{dim}.global.shared::cta.{op}.{load_mode?}.bulk_group.{hint?}",
     "tensor:M src:A@shared::cta policy?:R:b64!", section="9.7.9.25.5.2", ptx=(8, 0), dim=DIMS,
     op=("add", "min", "max", "inc", "dec", "and", "or", "xor"), load_mode=("tile", "im2col_no_offs"),
     hint=("L2::cache_hint",), check=check_tensor)
spec("cp.async.bulk.prefetch.tensor", "cp.async.bulk.prefetch.tensor.{dim}.L2.global.{load_mode?}.{hint?}",
     "tensor:M offsets?:V:b16 policy?:R:b64!", section="9.7.9.25.5.3", ptx=(8, 0), dim=DIMS,
     load_mode=("tile", "im2col"),
     hint=("L2::cache_hint",), check=check_tensor)
spec("cp.async.bulk.commit_group", "cp.async.bulk.commit_group", section="9.7.9.25.6.1", ptx=(8, 0))
spec("cp.async.bulk.wait_group", "cp.async.bulk.wait_group.{read?}", "n:I:u32[0..]", section="9.7.9.25.6.2",
     ptx=(8, 0))

# 9.7.12.14 multimem (NVLink SHARP through a multicast address)
_MM = dict(scope=SCOPES, space=("global",), vec=("v2", "v4", "v8"),
           T0=("b32", "b64", "u32", "u64", "s32", "s64", "f32", "f64", "f16", "f16x2", "bf16", "bf16x2"))
spec("multimem.ld_reduce", "multimem.ld_reduce.{sem?}.{scope?}.{space?}.{op}.{acc?}.{vec?}.{T0}",
     ">d:RV:T0 addr:A", section="9.7.12.14", ptx=(8, 1), sem=("weak", "relaxed", "acquire"),
     op=("min", "max", "add", "and", "or", "xor"), acc=("acc::f32",), check=check_multimem,
     versions=(("acc::f32", (8, 2)),), **_MM)
spec("multimem.st", "multimem.st.{sem?}.{scope?}.{space?}.{vec?}.{T0}", "addr:A b:RIV:T0", section="9.7.12.14",
     ptx=(8, 1), sem=("weak", "relaxed", "release"), check=check_multimem, **_MM)
spec("multimem.red", "multimem.red.{sem?}.{scope?}.{space?}.{op}.{vec?}.{T0}", "addr:A b:RIV:T0",
     section="9.7.12.14", ptx=(8, 1), sem=("relaxed", "release"), op=("add", "min", "max", "and", "or", "xor"),
     check=check_multimem_red, **_MM)

# 9.7.15 wgmma (sm_90a) and 9.7.19 setmaxnreg
spec("wgmma.fence", "wgmma.fence.sync.aligned", section="9.7.15.5.1", ptx=(8, 0), target="sm_90a")
spec("wgmma.commit_group", "wgmma.commit_group.sync.aligned", section="9.7.15.6.2", ptx=(8, 0), target="sm_90a")
spec("wgmma.wait_group", "wgmma.wait_group.sync.aligned", "n:I:u32[0..]", section="9.7.15.6.3", ptx=(8, 0),
     target="sm_90a")
_WG = dict(shape=tuple(f"m64n{n}k{k}" for k in (8, 16, 32) for n in range(8, 257, 8)),
           T0=("f32", "f16", "s32"), T1=("f16", "bf16", "tf32", "e4m3", "e5m2", "s8", "u8"),
           T2=("f16", "bf16", "tf32", "e4m3", "e5m2", "s8", "u8"), versions=((mixed_int_wgmma, (8, 4)),))
spec("wgmma.mma_async.ss", "wgmma.mma_async.sync.aligned.{shape}.{T0}.{T1}.{T2}",
     ">d:V:any a:R:b64 b:R:b64 scale:RI:pred sa?:I:s32 sb?:I:s32 ta?:I:s32 tb?:I:s32", section="9.7.15.5.2",
     ptx=(8, 0), target="sm_90a", check=check_wgmma(register_a=False), **_WG)
spec("wgmma.mma_async.rs", "wgmma.mma_async.sync.aligned.{shape}.{T0}.{T1}.{T2}",
     ">d:V:any a:V:b32 b:R:b64 scale:RI:pred sa?:I:s32 sb?:I:s32 tb?:I:s32", section="9.7.15.5.2",
     ptx=(8, 0), target="sm_90a", check=check_wgmma(register_a=True), **_WG)
spec("setmaxnreg", "setmaxnreg.{action}.sync.aligned.u32", "n:I:u32[24..256%8]", section="9.7.19.1", ptx=(8, 0),
     target="sm_90a", action=("inc", "dec"))

# 9.7.13 Control flow and miscellaneous
spec("bra", "bra.{uni?}", "target:L", section="9.7.13.4")
spec("ret", "ret.{uni?}", section="9.7.13.7")
spec("exit", "exit", section="9.7.13.8")
spec("trap", "trap", section="9.7.18.2")
spec("brkpt", "brkpt", section="9.7.18.3")
spec("nanosleep", "nanosleep.u32", "t:RI:u32", section="9.7.18.4", ptx=(6, 3))
spec("pmevent", "pmevent", "n:I:u32[0..15]", section="9.7.18.5")
