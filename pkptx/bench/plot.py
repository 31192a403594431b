"""PNG plots of benchmark records, one per record, with matplotlib (the optional ``pkptx[plot]`` extra).

A :class:`PlotSpec` says which columns of a benchmark's table to draw: busbw against message size
for the collectives, TFLOP/s per shape for the GEMM, fused against sequential time for the fused
kernels. Columns a record lacks (NCCL's, where it did not run) are left out of its plot.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import BenchError
from .results import Record

INSTALL_HINT = "PNG plots need matplotlib: pip install 'pkptx[plot]' (the tables and CSV files need nothing)"


@dataclass(frozen=True)
class PlotSpec:
    """``x`` the column along the x axis; ``ys`` the columns drawn against it; ``kind`` "sizes" (lines
    over a log2 axis of sizes) or "bars" (one group of bars per row, x read as a label); ``series`` a
    column whose values split the rows into separate lines (the kernel of a fused table), one colour
    each; ``ylog`` a log y axis (times that span orders of magnitude)."""
    x: str
    ys: tuple[str, ...]
    ylabel: str
    kind: str
    series: str | None = None
    ylog: bool = False


def pyplot():
    """matplotlib's pyplot drawing to files (no display needed), or a BenchError saying how to get it."""
    try:
        import matplotlib
    except ImportError:
        raise BenchError(INSTALL_HINT) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _groups(record: Record, spec: PlotSpec) -> list[tuple[str, list[tuple]]]:
    """(series label, rows) pairs; one unlabelled group when the spec has no series column."""
    if spec.series is None:
        return [("", list(record.rows))]
    at = record.headers.index(spec.series)
    labels = list(dict.fromkeys(row[at] for row in record.rows))
    return [(f"{label} ", [row for row in record.rows if row[at] == label]) for label in labels]


def plot(record: Record, spec: PlotSpec, path: Path) -> Path:
    """Draw ``record`` as ``spec`` says into the PNG file ``path``."""
    missing = [c for c in (spec.x, spec.series) if c is not None and c not in record.headers]
    ys = [c for c in spec.ys if c in record.headers]
    if missing or not ys:
        raise BenchError(f"cannot plot {record.title!r}: it has no column {(missing or list(spec.ys))[0]!r} "
                         f"(its columns: {', '.join(record.headers)})")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    x_at = record.headers.index(spec.x)
    if spec.kind == "bars":
        width = 0.8 / len(ys)
        for k, column in enumerate(ys):
            values = [v if _number(v) else float("nan") for v in record.column(column)]
            ax.bar([i + (k - (len(ys) - 1) / 2) * width for i in range(len(values))], values, width, label=column)
        ax.set_xticks(range(len(record.rows)), [str(row[x_at]) for row in record.rows], rotation=15)
    else:
        for g, (label, rows) in enumerate(_groups(record, spec)):
            for k, column in enumerate(ys):
                y_at = record.headers.index(column)
                points = [(row[x_at], row[y_at]) for row in rows if _number(row[x_at]) and _number(row[y_at])]
                ax.plot([x for x, _ in points], [y for _, y in points], marker="o", markersize=3,
                        linestyle=("-", "--", ":")[k % 3], color=f"C{g if spec.series else k}", label=label + column)
        ax.set_xscale("log", base=2)
    if spec.ylog:
        ax.set_yscale("log")
    ax.set_xlabel(spec.x)
    ax.set_ylabel(spec.ylabel)
    ax.set_title(record.title, fontsize=10)
    if record.where:
        fig.text(0.01, 0.01, record.where, fontsize=7, color="gray")
    ax.grid(alpha=0.3)
    ax.set_ylim(top=ax.get_ylim()[1] * (3 if spec.ylog else 1.15))      # room for the legend above the data
    ax.legend(fontsize=8, loc="upper left", ncol=2)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
