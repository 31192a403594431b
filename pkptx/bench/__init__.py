"""The benchmarks, runnable from the installed package: ``python -m pkptx bench NAME`` (see :mod:`.cli`).

One module per benchmark (``bench_*.py``, each with ``main(argv=None) -> int``), their shared timing and
table plumbing (:mod:`.common`), result files (:mod:`.results`), plots (:mod:`.plot`) and the launcher
of MPI runs (:mod:`.mpirun`).
"""
