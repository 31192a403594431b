"""``python bench/bench_moe.py`` still works: the code is pkptx/bench/bench_moe.py (``python -m pkptx bench moe``)."""
import pathlib
import runpy
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # a checkout without pip install
runpy.run_module("pkptx.bench.bench_moe", run_name="__main__")
