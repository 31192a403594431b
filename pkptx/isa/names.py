"""Unique, readable register and label names for one kernel."""
from __future__ import annotations

import re
from collections import defaultdict

_BAD = re.compile(r"[^A-Za-z0-9_]")


class NameScope:
    def __init__(self):
        self._counts: dict[str, int] = defaultdict(int)
        self._used: set[str] = set()

    def fresh(self, hint: str, sigil: str) -> str:
        """``%hint3`` / ``$L_hint3``: the hint made PTX-safe, numbered per hint, never reused."""
        base = _BAD.sub("_", hint) or "v"
        if base[0].isdigit():
            base = "_" + base
        if base[-1].isdigit():
            base += "_"
        while True:
            name = f"{sigil}{base}{self._counts[base]}"
            self._counts[base] += 1
            if name not in self._used:
                self._used.add(name)
                return name
