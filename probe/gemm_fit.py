"""Refit pkptx.ops.gemm_plan's TILE_RATE (``--fp8``: FP8_TILE_RATE, to a ``--fp8`` sweep) to a sweep of
probe/gemm_sweep_probe.py (no GPU needed).

The objective is what the model is for: per shape, the measured time of the schedule the model would pick
(TMA epilogue, as ``plan`` weighs) over the fastest one measured, as a geometric mean over the shapes (1.0:
the model always picks the fastest), to 3 decimals; the mean log error of the modelled times breaks ties
(the regret is flat over wide ranges of a rate). Coordinate
descent over each tile shape's rate (but 128x256's, the reference) on a grid, a few rounds; prints the rates, the objective before and
after, and per shape the pick and its regret.

    python probe/gemm_fit.py [--fp8] probe/data/gemm_sweep_2026-12-04.txt [more sweeps ...]
"""
from __future__ import annotations

import math
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pkptx.ops import gemm_plan  # noqa: E402

REFERENCE = (128, 256)       # rate 1.0: PEAK_PER_SM is this tile's
LABEL = re.compile(r"(\d+)x(\d+)/(\d+)(?:/k(\d+))?(/pp)?(?:/ks(\d))?\*?$")


def read_sweeps(paths) -> tuple[dict, int]:
    """{(m, n, k): {GemmConfig: measured seconds}} of the TMA-epilogue schedules, and the SM count."""
    shapes: dict = {}
    sm_count = 132
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if line.startswith("# ") and " SMs" in line:
                sm_count = int(re.search(r"(\d+) SMs", line).group(1))
            cells = [c.strip() for c in line.split("|")]
            if len(cells) != 8 or not re.fullmatch(r"\d+x\d+x\d+", cells[0]):
                continue
            match = LABEL.fullmatch(cells[1])
            if match is None:        # cuBLAS, direct-epilogue schedules, the summary lines
                continue
            tm, tn, stages, splits = (int(g) if g else 1 for g in match.groups()[:4])
            shape = tuple(int(v) for v in cells[0].split("x"))
            cfg = gemm_plan.GemmConfig(tm, tn, stages, splits, pingpong=bool(match.group(5)),
                                       k_split=int(match.group(6) or 1))
            shapes.setdefault(shape, {})[cfg] = float(cells[3]) * 1e-6
    return shapes, sm_count


def score(shapes: dict, sm_count: int, dtype: str) -> tuple[float, float, dict]:
    """(geometric-mean regret of the picks, mean |log(model / measured)|, {shape: (pick, regret)})."""
    regrets, errors, picks = [], [], {}
    for (m, n, k), measured in shapes.items():
        modelled = {cfg: gemm_plan.estimate_s(cfg, m, n, k, 2, sm_count, dtype) for cfg in measured}
        pick = min(modelled, key=modelled.get)
        regret = measured[pick] / min(measured.values())
        regrets.append(math.log(regret))
        errors += [abs(math.log(modelled[c] / measured[c])) for c in measured]
        picks[m, n, k] = (pick, regret)
    return math.exp(sum(regrets) / len(regrets)), sum(errors) / len(errors), picks


def main(argv) -> int:
    fp8 = "--fp8" in argv
    dtype, name = ("e4m3", "FP8_TILE_RATE") if fp8 else ("bf16", "TILE_RATE")
    shapes, sm_count = read_sweeps([a for a in argv[1:] if a != "--fp8"])
    rates = getattr(gemm_plan, name)
    before = score(shapes, sm_count, dtype)
    grid = [round(0.2 + 0.02 * i, 2) for i in range(46)]       # 0.20 .. 1.10
    for _ in range(4):
        for tile in sorted(set(rates) - {REFERENCE}):
            best = None
            for value in grid:
                rates[tile] = value
                regret, error, _ = score(shapes, sm_count, dtype)
                if best is None or (round(regret, 3), error) < best[0]:
                    best = ((round(regret, 3), error), value)
            rates[tile] = best[1]
    regret, error, picks = score(shapes, sm_count, dtype)
    print(f"{len(shapes)} shapes; regret {before[0]:.4f} -> {regret:.4f}; mean |log error| {before[1]:.3f} -> {error:.3f}")
    print(f"{name} = {{" + ", ".join(f"{t}: {v}" for t, v in sorted(rates.items(), reverse=True)) + "}")
    for shape, (pick, value) in picks.items():
        print(f"  {'x'.join(map(str, shape))}: {pick.label} regret {value:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
