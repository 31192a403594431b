"""Benchmark result files: one JSON record per table, CSV copies, and the tables of bench/RESULTS.md.

A :class:`Record` is what :func:`pkptx.bench.common.report` prints: a title, column headers, rows, the
notes under the table and where it was measured (date, device, commit, Python). Benchmarks started by
``python -m pkptx bench --out DIR`` write each record to ``PKPTX_BENCH_OUT`` as it is reported; the
command then adds one CSV per record and ``results.json`` with all of them. :func:`load` reads such
a file back, or a Markdown file of ``## title`` sections as bench/RESULTS.md holds them.
"""
from __future__ import annotations

import csv
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import BenchError

OUT_ENV = "PKPTX_BENCH_OUT"
RECORD_GLOB = "record-*.json"


@dataclass(frozen=True)
class Record:
    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple, ...]
    notes: str = ""
    where: str = ""

    def column(self, name: str) -> list:
        """The cells of column ``name``, top to bottom."""
        i = self.headers.index(name)
        return [row[i] for row in self.rows]

    def to_json(self) -> dict:
        return {"title": self.title, "where": self.where, "headers": list(self.headers),
                "rows": [list(r) for r in self.rows], "notes": self.notes}

    @classmethod
    def from_json(cls, data: dict, source: str) -> Record:
        try:
            return cls(data["title"], tuple(data["headers"]), tuple(tuple(r) for r in data["rows"]),
                       data.get("notes", ""), data.get("where", ""))
        except (KeyError, TypeError) as exc:
            raise BenchError(f"{source}: a result record needs 'title', 'headers' and 'rows' ({exc!r})") from None


def slug(title: str) -> str:
    """A file name from a title: lower case, runs of other characters as one dash."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:80] or "result"


def _plain(value):
    """JSON for numpy scalars (their Python value) and anything else a row holds (its text)."""
    return value.item() if hasattr(value, "item") else str(value)


def write_record(title: str, headers: list[str], rows: list[list], notes: str, where: str) -> Path | None:
    """With ``PKPTX_BENCH_OUT`` set, write one table there as ``record-NN-<title>.json``; else nothing."""
    out = os.environ.get(OUT_ENV)
    if not out:
        return None
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"record-{len(list(folder.glob(RECORD_GLOB))):02d}-{slug(title)}.json"
    record = Record(title, tuple(headers), tuple(tuple(r) for r in rows), notes, where)
    path.write_text(json.dumps(record.to_json(), indent=1, default=_plain) + "\n")
    return path


def read_records(folder: Path) -> list[Record]:
    """The records benchmarks wrote into ``folder``, in the order they wrote them."""
    return [Record.from_json(json.loads(p.read_text()), str(p)) for p in sorted(folder.glob(RECORD_GLOB))]


def cell(text: str):
    """A Markdown table cell as the number it shows (int, then float), else as its text."""
    text = text.strip()
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_markdown(text: str) -> list[Record]:
    """Every ``## title`` section of ``text`` that holds a table: the line under the heading (when it
    is no table row) is where it was measured, the text after its first table the notes (a ``###``
    part below, with tables of its own, belongs to the notes)."""
    records = []
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        title, _, body = section.partition("\n")
        lines = body.strip("\n").splitlines()
        first = next((i for i, line in enumerate(lines) if line.startswith("|")), len(lines))
        last = next((i for i in range(first, len(lines)) if not lines[i].startswith("|")), len(lines)) - 1
        if last - first < 1:
            continue
        where = lines[0].strip() if first > 0 else ""
        grid = [line.strip().strip("|").split("|") for line in lines[first:last + 1]]
        ruled = all(set(c.strip()) <= set("-:") for c in grid[1])      # the |---|---| under the header
        body_rows = grid[2:] if ruled else grid[1:]
        records.append(Record(title.strip(), tuple(c.strip() for c in grid[0]),
                              tuple(tuple(cell(c) for c in r) for r in body_rows),
                              "\n".join(lines[last + 1:]).strip(), where))
    return records


def load(path: str | Path) -> list[Record]:
    """The records in a result file: ``results.json`` or one record's JSON as written here, or Markdown."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise BenchError(f"--from {path}: cannot read it ({exc.strerror})") from None
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise BenchError(f"--from {path}: not JSON ({exc})") from None
        items = data.get("records", [data]) if isinstance(data, dict) else data
        return [Record.from_json(item, str(path)) for item in items]
    return parse_markdown(text)


def stems(records: list[Record]) -> list[str]:
    """A distinct file name stem per record, from its title (the CSV and the plot share it)."""
    names: list[str] = []
    for record in records:
        name = slug(record.title)
        while name in names:
            name += "-again"
        names.append(name)
    return names


def write_tables(records: list[Record], folder: Path) -> list[Path]:
    """One CSV per record (named after its title) and ``results.json`` with all of them, in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for record, name in zip(records, stems(records)):
        path = folder / f"{name}.csv"
        with path.open("w", newline="") as f:
            out = csv.writer(f)
            out.writerow(record.headers)
            out.writerows(record.rows)
        written.append(path)
    path = folder / "results.json"
    path.write_text(json.dumps({"records": [r.to_json() for r in records]}, indent=1, default=_plain) + "\n")
    return written + [path]
