"""One emitted line of PTX, frozen, with the Python frame that emitted it."""
from __future__ import annotations

import inspect
import os
import traceback
from dataclasses import dataclass

from ..errors import PTXBuildError

_ISA_DIR = os.path.dirname(os.path.abspath(__file__))
_PKG_DIR = os.path.dirname(_ISA_DIR)


@dataclass(frozen=True)
class Origin:
    """Where an instruction came from: the first frame outside pkptx/isa (``site``) and, when that is
    inside pkptx (a primitive or template), the first frame outside the package (``user``)."""
    site: tuple            # (filename, lineno, function)
    user: tuple | None = None

    def __str__(self) -> str:
        def fmt(f):
            return f"{f[0]}:{f[1]} (in {f[2]})"
        if self.user and self.user != self.site:
            return f"{fmt(self.user)} via {fmt(self.site)}"
        return fmt(self.site)

    @property
    def file_line(self) -> str:
        f = self.user or self.site
        return f"{f[0]}:{f[1]}"


def capture_origin() -> Origin | None:
    """Walk the stack outward (``traceback.walk_stack``) to the caller of the ISA layer.

    The walk starts at this frame explicitly: ``walk_stack(None)`` starts a version-dependent number
    of frames up (four on Python 3.11), which skipped the user's own frame when they called
    ``Builder.emit`` directly."""
    site = user = None
    for frame, lineno in traceback.walk_stack(inspect.currentframe()):
        filename = frame.f_code.co_filename
        absname = os.path.abspath(filename)
        if site is None:
            generated = filename.startswith("<") and frame.f_code.co_name.startswith("__")   # dataclass __init__
            if absname.startswith(_ISA_DIR + os.sep) or generated:
                continue
            site = (filename, lineno, frame.f_code.co_name)
        if not absname.startswith(_PKG_DIR + os.sep) and not filename.startswith("<frozen"):
            user = (filename, lineno, frame.f_code.co_name)
            break
    if site is None:
        return None
    return Origin(site, user)


def locate(exc: PTXBuildError) -> PTXBuildError:
    """``exc`` with the user's ``file:line`` attached (the first frame outside pkptx/isa), unless it
    already names one. Every error the ISA layer raises goes through here or through Builder.emit."""
    if exc.origin is not None:
        return exc
    origin = capture_origin()
    return type(exc)(exc.args[0], str(origin) if origin else None)


@dataclass(frozen=True)
class Instruction:
    """A rendered instruction (``kind='ins'``), a label, a raw line or a comment."""
    kind: str                      # "ins", "label", "raw", "comment"
    text: str                      # mnemonic with modifiers, label name, raw line or comment text
    operands: tuple = ()           # rendered operand strings
    guard: str = ""                # "@%p1" / "@!%p1"
    origin: Origin | None = None
    key: str = ""                  # spec key, for instructions

    def render(self) -> str:
        if self.kind == "label":
            return f"{self.text}:"
        if self.kind == "comment":
            return f"\t// {self.text}"
        if self.kind == "raw":
            return f"\t{self.text}"
        guard = f"{self.guard} " if self.guard else ""
        ops = (" " + ", ".join(self.operands)) if self.operands else ""
        return f"\t{guard}{self.text}{ops};"
