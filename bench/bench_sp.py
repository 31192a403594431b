"""``python bench/bench_sp.py`` still works: the code is pkptx/bench/bench_sp.py (``python -m pkptx bench sp``)."""
import pathlib
import runpy
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # a checkout without pip install
runpy.run_module("pkptx.bench.bench_sp", run_name="__main__")
