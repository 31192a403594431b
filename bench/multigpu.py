"""``python bench/multigpu.py`` still works: the code is pkptx/bench/multigpu.py (``python -m pkptx.bench.multigpu``)."""
import pathlib
import runpy
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # a checkout without pip install
runpy.run_module("pkptx.bench.multigpu", run_name="__main__")
