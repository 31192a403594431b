"""``python bench/bench_build.py`` still works: the code is pkptx/bench/bench_build.py (``python -m pkptx bench build``)."""
import pathlib
import runpy
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # a checkout without pip install
runpy.run_module("pkptx.bench.bench_build", run_name="__main__")
