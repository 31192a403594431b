"""Tile stores, reduce-stores and loads with TMA to and from peers, and register-level peer access.

Every rank's copy of a buffer has its own tensor map; a kernel receives them as a table in global
memory (``<name>_tmaps``: ``world`` maps of 128 bytes, then the multicast map when there is one), so a
peer's map is ``table + 128 * rank``. The maps are written by the host before launch, so no
``fence.proxy.tensormap`` is owed.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import PTXBuildError
from ..isa import Builder, Kind, Param, Reg, Vec, address, b16, b32, u32, u64
from ..isa.instruction import locate

TMAP_BYTES = 128
UNIT_ACCESS = {16: (b32, 4), 8: (b32, 2), 4: (b32, 1), 2: (b16, 1)}   # bytes -> (word type, words)


@dataclass(frozen=True)
class TensorMapTable:
    name: str

    def params(self) -> list[Param]:
        return [Param(f"{self.name}_tmaps", u64, pointer=True, kind=Kind.TENSOR_MAP_TABLE)]

    def bind(self, b: Builder) -> "BoundTensorMaps":
        return BoundTensorMaps(b.load_param(f"{self.name}_tmaps"))


@dataclass(frozen=True)
class BoundTensorMaps:
    table: Reg

    def of(self, b: Builder, rank) -> Reg:
        """The address of ``rank``'s tensor map (``rank == world`` is the multicast map)."""
        if isinstance(rank, int):
            return b.add(u64, self.table, TMAP_BYTES * rank, name="tmap")
        return b.mad(u64, b.cvt(u64, u32, rank), TMAP_BYTES, self.table, mode="lo", name="tmap")


def store_async(b: Builder, dst, coords, smem, *, reduce_op=None, commit: bool = True) -> None:
    """Primitive 1: one thread stores a shared-memory tile at tile ``coords`` of the tensor whose map is
    at ``dst`` (an address: the local map, ``maps.of(b, rank)`` for a peer's copy, ``maps.of(b, world)``
    for the multicast copy); ``reduce_op='add'|'min'|'max'`` atomically reduces into it instead.

    PTX: ``cp.async.bulk.tensor.<n>d.global.shared::cta.tile.bulk_group [dst, {coords}], [smem];``
    (or ``cp.reduce.async.bulk.tensor.<n>d.global.shared::cta.<op>.tile.bulk_group``) then
    ``cp.async.bulk.commit_group;`` (``commit=False``: the caller commits it with later stores, as one
    bulk group). Ordering owed by the caller: ``fence.proxy.async.shared::cta`` after writing the tile
    with ordinary stores and a barrier before this; :func:`sync.publish_async_writes` before signalling
    the destination.

    Coordinates (seen on an H200): a store with any negative coordinate kills the CUDA context
    (illegal instruction); past the far edge it is clipped. ``reduce_op`` follows the tensor map's
    element type, and f32 has no min/max reduce (only add).
    """
    if reduce_op is None:
        b.tensor_store(dst, coords, address(smem))
    else:
        b.tensor_reduce(reduce_op, dst, coords, address(smem))
    if commit:
        b.bulk_commit_group()


def store_add_async(b: Builder, dst, coords, smem, *, commit: bool = True) -> None:
    """Primitive 2: :func:`store_async` that adds the tile into the destination (the peer-reduction
    store): ``cp.reduce.async.bulk.tensor.<n>d.global.shared::cta.add.tile.bulk_group``, same contract."""
    store_async(b, dst, coords, smem, reduce_op="add", commit=commit)


def store_async_all(b: Builder, maps: BoundTensorMaps, coords, smem, *, world: Reg, multicast: bool,
                    reduce_op=None) -> None:
    """Broadcast a tile to every rank: one store to the multicast map (index ``world``), or the unicast
    fallback, one store per rank (same result). Same PTX and ordering contract as :func:`store_async`."""
    if multicast:
        store_async(b, maps.of(b, world), coords, smem, reduce_op=reduce_op)
        return
    for r in b.range(0, world, name="dst"):
        store_async(b, maps.of(b, r), coords, smem, reduce_op=reduce_op)


def load_async(b: Builder, maps: BoundTensorMaps, src_rank, coords, smem, mbar, tile_bytes: int) -> None:
    """One thread loads tile ``coords`` of ``src_rank``'s buffer into shared memory; completion lands
    on ``mbar`` as ``tile_bytes`` transaction bytes (announced here, so the barrier needs one arrival).

    PTX: ``mbarrier.arrive.expect_tx.shared::cta.b64 _, [mbar], bytes;``
    ``cp.async.bulk.tensor.<n>d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [smem], [tmap_r, {coords}], [mbar];``
    Consumers wait with :func:`mbarrier.wait_parity`; data is then visible to them. The innermost
    coordinate times the element size must be a multiple of 16 bytes (else the CUDA context is lost, seen
    on an H200); negative or far coordinates are fine and zero-fill.
    """
    b.mbarrier_arrive_expect_tx(address(mbar), tile_bytes)
    b.tensor_load(address(smem), maps.of(b, src_rank), coords, address(mbar))


def peer_load(b: Builder, base: Reg, offset, ty, *, vec: int = 4, name: str = "peer_v"):
    """``ld.global.v<vec>.<ty> {..}, [base + offset]``: 16-byte vector load from a peer's copy (weak:
    the caller's acquire on a flag orders it)."""
    addr = b.add(u64, base, offset) if isinstance(offset, Reg) else address(base, offset)
    return b.ld(ty, address(addr), space="global", vec=vec, name=name)


def peer_store(b: Builder, base: Reg, offset, ty, values) -> None:
    """``st.global.v<n>.<ty> [base + offset], {..}``: vector store into a peer's copy."""
    addr = b.add(u64, base, offset) if isinstance(offset, Reg) else address(base, offset)
    b.st(ty, address(addr), values, space="global")


def peer_red(b: Builder, base: Reg, offset, op, ty, value, *, sem, scope) -> None:
    """``red.<sem>.<scope>.global.<op>.<ty> [base + offset], value``: an atomic into a peer's copy."""
    addr = b.add(u64, base, offset) if isinstance(offset, Reg) else address(base, offset)
    b.red(op, ty, address(addr), value, sem=sem, scope=scope, space="global")


def unit_access(width: int):
    """(word type, word count) that moves one ``width``-byte unit: 16 -> ``.v4.b32``, 8 -> ``.v2.b32``,
    4 -> ``.b32``, 2 -> ``.b16``."""
    if width not in UNIT_ACCESS:
        raise locate(PTXBuildError(f"unit width must be one of {sorted(UNIT_ACCESS)} bytes, got {width!r}"))
    return UNIT_ACCESS[width]


def load_unit(b: Builder, addr: Reg, width: int, *, name: str = "word") -> list[Reg]:
    """``ld.global{.v4|.v2}.<b32|b16> {..}, [addr]``: one ``width``-byte unit (``addr`` a multiple of
    ``width``) as a list of words. Weak: the caller's acquire (a barrier) orders it after the writer."""
    ty, words = unit_access(width)
    value = b.ld(ty, address(addr), space="global", vec=words, name=name)
    return list(value) if words > 1 else [value]


def store_unit(b: Builder, addr: Reg, words: list[Reg], width: int) -> None:
    """``st.global{.v4|.v2}.<b32|b16> [addr], {..}``: the inverse of :func:`load_unit`. Weak: the
    caller's release (a barrier after ``bar.sync``) publishes it."""
    ty, count = unit_access(width)
    if len(words) != count:
        raise locate(PTXBuildError(f"store_unit: a {width}-byte unit is {count} word(s), got {len(words)}"))
    b.st(ty, address(addr), Vec(tuple(words)) if count > 1 else words[0], space="global")
