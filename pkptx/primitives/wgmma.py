"""wgmma shared-memory matrix descriptors and the accumulator fragment layout.

A descriptor (PTX ISA 9.7.15.5.1) is 64 bits: start address >> 4 in bits 0-13, leading-dimension byte
offset >> 4 in bits 16-29, stride-dimension byte offset >> 4 in bits 32-45, swizzle mode in bits 62-63
(1 = 128-byte, 2 = 64-byte, 3 = 32-byte). For a K-major tile written by TMA with 128-byte swizzle,
rows are 128 bytes apart, 8-row groups 1024 bytes apart (the stride offset), and the leading offset is
unused; moving 16 bf16 elements along K adds 32 bytes to the start address.
"""
from __future__ import annotations

from ..errors import PTXBuildError
from ..isa import Builder, Reg, Vec, b32, b64, u32
from ..isa.instruction import locate

SWIZZLE_MODE = {128: 1, 64: 2, 32: 3, 0: 0}


def desc_high(*, stride_bytes: int, swizzle: int) -> int:
    """The constant upper 32 bits: stride offset and swizzle mode."""
    if swizzle not in SWIZZLE_MODE:
        raise locate(PTXBuildError(f"swizzle must be one of {sorted(SWIZZLE_MODE)}, got {swizzle}"))
    return (stride_bytes >> 4) | (SWIZZLE_MODE[swizzle] << 30)


def smem_desc(b: Builder, smem_addr: Reg, *, stride_bytes: int = 1024, leading_bytes: int | Reg = 0,
              swizzle: int = 128, name: str = "desc") -> Reg:
    """A descriptor for the tile at shared address ``smem_addr`` (.u32, 1024-aligned for 128B swizzle).
    ``leading_bytes`` may be a register (.u32, a multiple of 16 below 256 KB): an offset known only at
    run time, e.g. to a tile elsewhere in shared memory that serves as the operand's next 64 columns.

    PTX: ``shr.b32 lo, addr, 4; or.b32 lo, lo, <lbo<<16>; mov.b64 desc, {lo, <hi>};`` (a register
    offset: ``shr.b32 t, lbo, 4; shl.b32 t, t, 16; or.b32 lo, lo, t;``)
    """
    lo = b.shr(b32, smem_addr, 4, name=f"{name}_lo")
    if isinstance(leading_bytes, Reg):
        lo = b.or_(b32, lo, b.shl(b32, b.shr(b32, leading_bytes, 4), 16), name=f"{name}_lo")
    elif leading_bytes:
        lo = b.or_(b32, lo, (leading_bytes >> 4) << 16)
    hi = b.mov(b32, desc_high(stride_bytes=stride_bytes, swizzle=swizzle), name=f"{name}_hi")
    return b.mov(b64, Vec((lo, hi)), name=name)


def advance(b: Builder, desc: Reg, byte_offset: int, *, name: str = "desc_k") -> Reg:
    """The descriptor of the same tile ``byte_offset`` bytes further (a multiple of 16): the start
    address field is the low bits, so a 64-bit add of ``byte_offset >> 4`` moves it (no carry out of
    14 bits while the tile stays inside shared memory)."""
    if byte_offset % 16:
        raise locate(PTXBuildError(f"descriptor offsets are multiples of 16 bytes, got {byte_offset}"))
    if byte_offset == 0:
        return desc
    return b.add("u64", desc, byte_offset >> 4, name=name)


def fragment_coords(n: int):
    """(register index, row offset, column) of each f32 accumulator of an m64nNk* wgmma, relative to
    the warp's 16-row slab and the lane's quad position: row = 16*warp + lane/4 + row_offset,
    col = column + 2*(lane%4)."""
    for chunk in range(n // 8):
        for half in range(2):
            for pair in range(2):
                yield 4 * chunk + 2 * half + pair, 8 * half, 8 * chunk + pair


def warp_quad(b: Builder, tid: Reg) -> tuple[Reg, Reg]:
    """(row of this lane inside its warpgroup's 64 rows, 2 * (lane % 4)) for the fragment layout."""
    lane = b.and_(b32, tid, 31, name="lane")
    warp = b.and_(b32, b.shr(u32, tid, 5), 3, name="warp_in_wg")
    row = b.add(u32, b.shl(b32, warp, 4), b.shr(u32, lane, 2), name="frag_row")
    col = b.shl(b32, b.and_(b32, lane, 3), 1, name="frag_col")
    return row, col
