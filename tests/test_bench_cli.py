"""``python -m pkptx bench``: argument handling, the mpirun command line, result files (JSON, CSV, the
Markdown of bench/RESULTS.md) and plots from a recorded result, all without a GPU; one benchmark that
needs none (``build``) runs end to end, in this process and as two MPI ranks."""
from __future__ import annotations

import csv
import io
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pkptx.bench import cli, mpirun, progress, results
from pkptx.bench.common import table
from pkptx.errors import BenchError

ROOT = Path(__file__).resolve().parents[1]
RESULTS_MD = ROOT / "bench" / "RESULTS.md"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_cli(capsys, *argv):
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# ------------------------------------------------------------------------------ arguments

@pytest.mark.parametrize("argv, message", [
    (["nope"], "no benchmark `nope`; expected one of collectives, gemm"),
    (["gemm", "--ranks", "2"], "`gemm` runs in one process; the MPI benchmarks are collectives, fused"),
    (["collectives", "--mps"], "--mps shares one GPU among the ranks of --ranks N"),
    (["gemm", "--from", "bench/RESULTS.md"], "--from needs --out DIR"),
    (["gemm", "--from", "bench/RESULTS.md", "--out", "x", "--quick"], "the benchmark options --quick need a run"),
    (["gemm", "--from", "no/such/file.md", "--out", "x"], "--from no/such/file.md: cannot read it"),
    (["gemm", "--from", "README.md", "--out", "x"], "no table of `gemm` in it"),
    (["collectives", "--ranks", "0"], "--ranks 0: expected a whole number of ranks >= 1"),
])
def test_bad_arguments_are_one_clear_line(capsys, argv, message, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(mpirun, "find", lambda: mpirun.Launcher("mpiexec", "mpich"))
    rc, out, err = run_cli(capsys, *argv)
    assert rc == 2 and message in err and err.count("\n") == 1, err


@pytest.mark.parametrize("argv", [["copy"], ["collectives", "--ranks", "2"], ["gemm", "--quick"]])
def test_gpu_benchmarks_without_a_gpu_say_why(capsys, monkeypatch, argv):
    from pkptx import doctor
    monkeypatch.setattr(doctor, "probe", lambda: doctor.Machine(0, "cuInit -> CUDA_ERROR_NO_DEVICE"))
    rc, out, err = run_cli(capsys, *argv)
    assert rc == 2 and err == (f"pkptx bench {argv[0]}: needs a CUDA GPU, and none answers here (cuInit -> "
                               "CUDA_ERROR_NO_DEVICE); `pkptx bench build` runs without one, `pkptx doctor` "
                               "checks this machine\n")


def test_a_benchmarks_own_usage_errors_name_it(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["build", "--bogus"])
    assert stop.value.code == 2 and "pkptx bench build: error: unrecognized arguments: --bogus" in capsys.readouterr().err
    with pytest.raises(BenchError, match="ranks=0"):
        mpirun.command(mpirun.Launcher("L", "mpich"), 0, ["x"])


def test_mps_needs_the_helper(capsys, monkeypatch):
    monkeypatch.setattr(mpirun, "mps_module", lambda: None)
    rc, _, err = run_cli(capsys, "collectives", "--ranks", "2", "--mps")
    assert rc == 2 and "--mps needs pkptx.launch.mps" in err


def test_mps_gives_each_rank_its_share_inside_the_daemons_life(capsys, monkeypatch):
    import contextlib
    import types

    from pkptx import doctor
    events = []

    @contextlib.contextmanager
    def daemon(pipe_dir=None):
        events.append("start")
        yield types.SimpleNamespace(env=lambda share_percent=None: {"CUDA_MPS_PIPE_DIRECTORY": "/p",
                                                                      "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(share_percent)})
        events.append("stop")
    fake = types.SimpleNamespace(daemon=daemon, shares=lambda n, split=None: [40, 30, 30])
    monkeypatch.setattr(mpirun, "mps_module", lambda: fake)
    monkeypatch.setattr(mpirun, "find", lambda: mpirun.Launcher("/bin/mpirun", "openmpi"))
    monkeypatch.setattr(doctor, "probe", lambda: doctor.Machine(1, None))
    monkeypatch.setattr(cli.subprocess, "run", lambda cmd, env: events.append((cmd, env)) or types.SimpleNamespace(
        returncode=0))
    rc, _, err = run_cli(capsys, "fused", "--ranks", "3", "--mps", "--sizes", "2048")
    assert rc == 0, err
    start, (cmd, env), stop = events
    assert (start, stop) == ("start", "stop") and results.OUT_ENV in env
    shares = [a.split("=")[1] for a in cmd if a.startswith("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=")]
    assert shares == ["40", "30"] and cmd.count(":") == 1
    assert cmd[-5:] == [sys.executable, "-m", "pkptx.bench.bench_fused", "--sizes", "2048"]


def test_help_lists_benchmarks_and_the_benchmarks_own_options(capsys):
    rc, out, _ = run_cli(capsys, "--help")
    assert rc == 0 and all(f"  {name} " in out for name in cli.BENCHES)
    rc, out, _ = run_cli(capsys, "gemm", "--help")
    assert rc == 0 and "options of `gemm` (passed through)" in out and "--quick" in out and "--record" in out
    assert run_cli(capsys)[0] == 2


def test_pkptx_bench_passes_every_argument_on(monkeypatch):
    from pkptx import __main__ as main
    seen = []
    monkeypatch.setattr(cli, "main", lambda argv: seen.append(argv) or 5)
    assert main.main(["bench", "--ranks", "2", "collectives", "--max-bytes", "64"]) == 5
    assert seen == [["--ranks", "2", "collectives", "--max-bytes", "64"]]


# -------------------------------------------------------------------------- mpirun command

def test_open_mpi_command_as_root_and_not():
    launcher = mpirun.Launcher("/opt/ompi/bin/mpirun", "openmpi")
    argv = ["python", "-m", "pkptx.bench.bench_fused", "--sizes", "2048"]
    assert mpirun.command(launcher, 4, argv, ("PKPTX_BENCH_OUT", "PYTHONPATH"), as_root=True) == [
        "/opt/ompi/bin/mpirun", "--allow-run-as-root", "--oversubscribe", "-x", "PKPTX_BENCH_OUT", "-x", "PYTHONPATH",
        "-n", "4", *argv]
    assert mpirun.command(launcher, 2, argv, as_root=False) == ["/opt/ompi/bin/mpirun", "--oversubscribe", "-n", "2",
                                                                *argv]


def test_mpich_command_passes_the_environment_itself():
    launcher = mpirun.Launcher("/venv/bin/mpiexec", "mpich")
    assert mpirun.command(launcher, 3, ["a.py"], ("PKPTX_BENCH_OUT",), as_root=True) == [
        "/venv/bin/mpiexec", "-n", "3", "a.py"]


@given(st.lists(st.sampled_from([{}, {"SHARE": "50"}, {"SHARE": "25"}, {"SHARE": "25", "PIPE": "/p"}]),
                min_size=1, max_size=9), st.sampled_from(["openmpi", "mpich"]))
def test_per_rank_environments_become_application_contexts(envs, flavor):
    cmd = mpirun.command(mpirun.Launcher("L", flavor), len(envs), ["prog", "-x"], rank_env=envs, as_root=False)
    start = 2 if flavor == "openmpi" else 1
    assert cmd[:start] == (["L", "--oversubscribe"] if flavor == "openmpi" else ["L"])
    contexts, current = [], []
    for arg in cmd[start:]:
        if arg == ":":
            contexts.append(current)
            current = []
        else:
            current.append(arg)
    contexts.append(current)
    expanded = []
    for ctx in contexts:
        assert ctx[0] == "-n" and ctx[-2:] == ["prog", "-x"]
        body, env = ctx[2:-2], {}
        while body:
            if flavor == "openmpi":
                assert body[0] == "-x"
                key, value = body[1].split("=", 1)
                body = body[2:]
            else:
                assert body[0] == "-env"
                key, value, body = body[1], body[2], body[3:]
            env[key] = value
        expanded += [env] * int(ctx[1])
    assert expanded == envs
    assert all(a != b for a, b in zip(contexts, contexts[1:]))         # neighbours with one env are merged


def write_launcher(folder: Path, name: str, version_text: str) -> Path:
    path = folder / name
    path.write_text(f"#!/bin/sh\necho '{version_text}'\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("text, flavor", [("HYDRA build details:\n Version: 4.2", "mpich"),
                                          ("mpirun (Open MPI) 4.1.5", "openmpi"), ("something else", "unknown")])
def test_launcher_next_to_python_comes_first(tmp_path, text, flavor):
    launcher = write_launcher(tmp_path, "mpiexec", text)
    found = mpirun.find(str(tmp_path / "python"))
    assert found == mpirun.Launcher(str(launcher), flavor)


def test_no_launcher_anywhere(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(BenchError, match="none answers"):
        mpirun.find(str(tmp_path / "python"))


# --------------------------------------------------------------------------- result files

cells = st.one_of(st.integers(-10 ** 9, 10 ** 9), st.floats(-1e6, 1e6).map(lambda x: round(x, 3)),
                  st.text("abcxyz_-/ ", min_size=1, max_size=8).map(str.strip).filter(
                      lambda s: s and not s.lstrip("-").replace(".", "").isdigit()))
records = st.builds(
    lambda title, cols, rows: results.Record(title, tuple(f"col {i}" for i in range(cols)),
                                             tuple(tuple(r[:cols]) for r in rows), "notes here", "a date · a GPU"),
    st.text("abc XYZ,()", min_size=1, max_size=20).map(str.strip).filter(bool),
    st.integers(1, 4), st.lists(st.lists(cells, min_size=4, max_size=4), min_size=1, max_size=5))


@given(st.lists(records, min_size=1, max_size=4))
def test_results_json_round_trip(tmp_path_factory, recs):
    folder = tmp_path_factory.mktemp("out")
    written = results.write_tables(recs, folder)
    assert [p.name for p in written] == [f"{s}.csv" for s in results.stems(recs)] + ["results.json"]
    assert results.load(folder / "results.json") == recs
    for record, path in zip(recs, written):
        with path.open() as f:
            grid = list(csv.reader(f))
        assert grid[0] == list(record.headers)
        assert [[results.cell(c) for c in row] for row in grid[1:]] == [list(r) for r in record.rows]


@given(records)
def test_markdown_sections_read_back(record):
    text = (f"# results\n\nprose\n\n## {record.title}\n{record.where}\n\n"
            f"{table(list(record.headers), [list(r) for r in record.rows])}\n\n{record.notes}\n")
    (back,) = results.parse_markdown(text)
    assert back.title == record.title and back.where == record.where and back.notes == record.notes
    assert back.headers == record.headers
    assert [list(r) for r in back.rows] == [[pytest.approx(c) if isinstance(c, float) else c for c in r]
                                            for r in record.rows]


def test_a_probe_part_below_a_table_stays_in_the_notes():
    """A ``###`` part under a recorded table, with a table of other columns, is notes: the record's rows
    are its own table's (the replot read the probe's rows as the GEMM's before)."""
    probe = "### Probe\n\n| shape | pick |\n|---|---|\n| 1x2x3 | 128x200/4 |"
    text = f"## GEMM bf16: x\nwhere\n\n| a | b |\n|---|---|\n| 1 | 2.5 |\n\nnotes\n\n{probe}\n"
    (back,) = results.parse_markdown(text)
    assert back.headers == ("a", "b") and back.rows == ((1, 2.5),) and back.notes == f"notes\n\n{probe}"


def test_records_written_under_the_environment_variable(tmp_path, monkeypatch):
    monkeypatch.delenv(results.OUT_ENV, raising=False)
    assert results.write_record("t", ["a"], [[1]], "", "") is None
    monkeypatch.setenv(results.OUT_ENV, str(tmp_path / "sink"))
    first = results.write_record("GEMM bf16: x", ["a", "b"], [[1, np.float64(2.5)]], "n", "w")
    second = results.write_record("GEMM bf16: x", ["a"], [["s"]], "", "")
    assert first.name == "record-00-gemm-bf16-x.json" and second.name == "record-01-gemm-bf16-x.json"
    assert results.read_records(tmp_path / "sink") == [results.Record("GEMM bf16: x", ("a", "b"), ((1, 2.5),), "n", "w"),
                                                       results.Record("GEMM bf16: x", ("a",), (("s",),))]


def test_select_takes_the_newest_section_of_each_title():
    recs = results.parse_markdown(RESULTS_MD.read_text())
    bench = cli.BENCHES["collectives"]
    picked = cli.select(recs, bench, None)
    titles = [r.title for r in picked]
    assert len(titles) == len(set(titles)) and all(t.split()[0] in ("all_reduce", "all_gather", "reduce_scatter",
                                                                    "all_to_all") for t in titles)
    for record in picked:
        assert record is [r for r in recs if r.title == record.title][-1]
    assert {r.title for r in cli.select(recs, bench, "4 rank(s)")} == {t for t in titles if "4 rank(s)" in t}


# ---------------------------------------------------------------------------------- plots

def test_gemm_plot_from_the_recorded_results(tmp_path, capsys):
    rc, out, err = run_cli(capsys, "gemm", "--from", str(RESULTS_MD), "--out", str(tmp_path))
    assert rc == 0, err
    picked = cli.select(results.parse_markdown(RESULTS_MD.read_text()), cli.BENCHES["gemm"], None)
    assert sorted(r.title.split(":")[0] for r in picked) == ["GEMM bf16", "GEMM fp8 e4m3, per-tensor scales, bf16 out"]
    for record, stem in zip(picked, results.stems(picked)):
        assert record.title in out and record.where in out and "pkptx TFLOP/s" in out
        png = (tmp_path / f"{stem}.png").read_bytes()
        assert png.startswith(PNG_MAGIC) and len(png) > 10_000
        with (tmp_path / f"{stem}.csv").open() as f:
            grid = list(csv.reader(f))
        tflops = np.array([float(row[record.headers.index("pkptx TFLOP/s")]) for row in grid[1:]])
        assert np.array_equal(tflops, np.array(record.column("pkptx TFLOP/s"), dtype=float))
    recorded = json.loads((tmp_path / "results.json").read_text())["records"]
    assert [r["title"] for r in recorded] == [r.title for r in picked]


@pytest.mark.parametrize("name", ["collectives", "fused", "copy"])
def test_every_plotted_benchmark_plots_its_recorded_tables(tmp_path, capsys, name):
    rc, out, err = run_cli(capsys, name, "--from", str(RESULTS_MD), "--out", str(tmp_path))
    picked = cli.select(results.parse_markdown(RESULTS_MD.read_text()), cli.BENCHES[name], None)
    assert rc == 0, err
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(f"{s}.png" for s in results.stems(picked))


def test_plot_names_a_missing_column():
    record = results.Record("GEMM bf16", ("M x N x K", "ms"), (("1x1x1", 1.0),))
    with pytest.raises(BenchError, match="has no column 'pkptx TFLOP/s'"):
        cli.plot(record, cli.BENCHES["gemm"].plot, Path("unused.png"))


def test_without_matplotlib_tables_are_written_and_the_fix_is_named(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    rc, out, err = run_cli(capsys, "gemm", "--from", str(RESULTS_MD), "--out", str(tmp_path))
    assert rc == 1 and "pip install 'pkptx[plot]'" in err and "Traceback" not in err
    assert list(tmp_path.glob("*.csv")) and not list(tmp_path.glob("*.png"))


# ------------------------------------------------------------------------------- progress

def test_progress_bar_only_when_watched(monkeypatch):
    for value, show, drawn in (("1", True, True), ("0", True, False), ("1", False, False)):
        monkeypatch.setenv(progress.PROGRESS_ENV, value)
        stream = io.StringIO()
        assert list(progress.progress(range(3), "sizes", show=show, stream=stream)) == [0, 1, 2]
        assert ("sizes [" + "#" * progress.WIDTH + "] 3/3" in stream.getvalue()) == drawn
    monkeypatch.delenv(progress.PROGRESS_ENV)
    assert not progress.enabled(io.StringIO())                 # not a terminal


# ---------------------------------------------------------------- a benchmark that runs here

def test_build_benchmark_runs_and_writes_its_table(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PKPTX_CACHE_DIR", str(tmp_path / "cache"))     # the benchmark moves it; restored after
    rc, out, err = run_cli(capsys, "build", "--out", str(tmp_path / "out"))
    assert rc == 0, err
    assert "Build and assemble a" in out and "nothing written" not in err
    (record,) = results.load(tmp_path / "out" / "results.json")
    assert record.title.startswith("Build and assemble") and record.headers == ("step", "ms", "goal")
    assert all(isinstance(row[1], float) and row[1] > 0 for row in record.rows)
    assert results.OUT_ENV not in os.environ


@pytest.mark.skipif(not mpirun.candidates(), reason="no mpiexec/mpirun next to Python or on PATH (pip install mpich)")
def test_ranks_start_the_benchmark_under_the_launcher(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(cli.BENCHES, "build", replace(cli.BENCHES["build"], mpi=True))
    monkeypatch.setenv("PKPTX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    rc, out, err = run_cli(capsys, "build", "--ranks", "2", "--out", str(tmp_path / "out"))
    assert rc == 0, err
    recs = results.load(tmp_path / "out" / "results.json")
    assert recs and all(r.title.startswith("Build and assemble") for r in recs)
