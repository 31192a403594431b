"""A kernel's signature: its parameters as the host binds them, each with the kind of value it carries.

A kernel and the host op that launches it share one contract: the kernel declares its ``.param`` list
once (the primitives and templates that add parameters give each its kind: a layout's peer table, the
status words, a table of tensor maps), and the host passes values by name. :meth:`Signature.bind` turns
those into the launch's argument order, once, when a launch is prepared, and names the kernel, the
missing, misspelt or extra argument and the kind it expected, so a mistake in a host op is found
before any GPU work, on any machine. The value itself is checked when it is packed
(:class:`pkptx.launch.Packer`). Nothing here knows the driver.
"""
from __future__ import annotations

import difflib
from enum import Enum
from typing import Mapping

from ..errors import ArgumentError


class Kind(str, Enum):
    """What a parameter carries. A kind without its own spelling follows from the Param's attributes
    (:func:`default_kind`); the others are given by the code that declares the parameter."""
    SCALAR = "scalar"                      # a number of the parameter's type
    POINTER = "pointer"                    # a device address
    PEER_TABLE = "peer_table"              # a layout's table of per-rank base addresses (primitives.layout)
    MULTICAST = "multicast"                # a layout's multicast address, 0 without multicast
    TENSOR_MAP = "tensor_map"              # a 128-byte CUtensorMap, by value
    TENSOR_MAP_TABLE = "tensor_map_table"  # a device table of per-rank tensor maps (primitives.p2p)
    FLAGS = "flags"                        # the heap's progress flags' peer table (templates.progress)
    STATUS = "status"                      # the device's status words, where a timed-out wait reports
    BYTES = "bytes"                        # any other by-value byte array

    def __str__(self) -> str:
        return self.value

    @property
    def about(self) -> str:
        """What a host passes for this kind, for error messages."""
        return _ABOUT[self]


_ABOUT = {
    Kind.SCALAR: "a number",
    Kind.POINTER: "a device address",
    Kind.PEER_TABLE: "the device address of a layout's per-rank pointer table (SymmetricBuffer.peer_table_ptr)",
    Kind.MULTICAST: "a layout's multicast address (SymmetricBuffer.multicast_ptr, or 0)",
    Kind.TENSOR_MAP: "a 128-byte tensor map (TensorMap)",
    Kind.TENSOR_MAP_TABLE: "the device address of a table of per-rank 128-byte tensor maps",
    Kind.FLAGS: "the peer table of the heap's progress flags (the heap's HeapOps supplies it)",
    Kind.STATUS: "the device status words (pkptx.launch.status.device_status(device).ptr)",
    Kind.BYTES: "bytes of the parameter's size",
}
TENSOR_MAP_BYTES = 128
_POINTERS = frozenset({Kind.POINTER, Kind.PEER_TABLE, Kind.TENSOR_MAP_TABLE, Kind.FLAGS, Kind.STATUS})


def default_kind(pointer: bool, count: int, nbytes: int) -> Kind:
    """The kind a Param's attributes imply: a pointer, a 128-byte array (a tensor map), other bytes, a
    scalar."""
    if pointer:
        return Kind.POINTER
    if count > 1:
        return Kind.TENSOR_MAP if nbytes == TENSOR_MAP_BYTES else Kind.BYTES
    return Kind.SCALAR


def legal_kinds(default: Kind, bits: int) -> frozenset:
    """The kinds a parameter whose attributes imply ``default`` may declare: a pointer may be any kind
    of device address, a 64-bit scalar a multicast address; every other kind is its attributes'."""
    if default is Kind.POINTER:
        return _POINTERS
    if default is Kind.SCALAR and bits == 64:
        return frozenset({Kind.SCALAR, Kind.MULTICAST})
    return frozenset({default})


class Signature:
    """The parameters of kernel ``entry`` in ``.param`` order, each a Param with its ``kind``.

    ``names`` is the order arguments are packed in; :meth:`bind` puts values given by name into it.
    """
    __slots__ = ("entry", "params", "names", "_index")

    def __init__(self, entry: str, params):
        self.entry, self.params = entry, tuple(params)
        self.names = tuple(p.name for p in self.params)
        self._index = {p.name: i for i, p in enumerate(self.params)}

    def index(self, name: str) -> int:
        """The position of parameter ``name``, or ArgumentError listing the parameters."""
        try:
            return self._index[name]
        except KeyError:
            raise ArgumentError(f"kernel '{self.entry}' has no parameter {name!r}{_close(name, self.names)}; it "
                                f"has {', '.join(self.names) or 'none'}") from None

    def bind(self, values: Mapping) -> tuple:
        """The values of ``values`` (name -> value) in parameter order; ArgumentError naming the kernel and
        every missing argument (with the kind it expects) and every unexpected one (with the parameter it
        may have meant to be)."""
        names = self.names
        if len(values) == len(names):
            try:
                return tuple(values[n] for n in names)
            except KeyError:
                pass
        missing = [p for p in self.params if p.name not in values]
        extra = [n for n in values if n not in self._index]
        problems = [f"missing {p.name!r} ({p.kind}: {p.kind.about})" for p in missing]
        problems += [f"unexpected {n!r}{_close(n, [p.name for p in missing] or names)}" for n in extra]
        raise ArgumentError(f"kernel '{self.entry}': {'; '.join(problems)}")

    def describe(self) -> list[dict]:
        """One JSON-ready row per parameter, for manifests: name, kind, type, count, size, alignment and
        whether the launcher takes device memory for it."""
        return [{"name": p.name, "kind": p.kind.value, "type": p.type.name, "count": p.count, "size": p.size,
                 "align": p.alignment, "pointer": p.pointer} for p in self.params]

    def __repr__(self) -> str:
        return f"Signature('{self.entry}', {', '.join(f'{p.name}: {p.kind}' for p in self.params)})"


def _close(name: str, names) -> str:
    match = difflib.get_close_matches(name, list(names), n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""


__all__ = ["Kind", "Signature", "default_kind", "legal_kinds", "TENSOR_MAP_BYTES"]
