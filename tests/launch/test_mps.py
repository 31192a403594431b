"""The MPS helper on the CPU: shares, the per-rank cap, and a daemon's whole life (start, env, stop,
nothing left running), with a stand-in for nvidia-cuda-mps-control that behaves like it."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, strategies as st

from pkptx.launch import mps

FAKE = textwrap.dedent('''\
    #!{python}
    """Stand-in for nvidia-cuda-mps-control: -d forks a daemon that owns $CUDA_MPS_PIPE_DIRECTORY/control;
    'quit' on stdin stops it; 'get_server_list' answers."""
    import os, sys, time, signal
    pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]
    if sys.argv[1:] == ["-d"]:
        if os.fork() == 0:
            os.setsid()
            os.execv(sys.executable, [sys.executable, __file__, "serve"])
        sys.exit(0)
    if sys.argv[1:] == ["serve"]:
        open(os.path.join(pipe, "control"), "w").write(str(os.getpid()))
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
        while os.path.exists(os.path.join(pipe, "control")):
            time.sleep(0.05)
        sys.exit(0)
    line = sys.stdin.readline().strip()
    control = os.path.join(pipe, "control")
    if not os.path.exists(control):
        sys.exit("cannot connect to the MPS control daemon")
    if line == "quit":
        os.unlink(control)
    elif line == "get_server_list":
        print("")
''')


@pytest.fixture
def fake_control(tmp_path, monkeypatch):
    path = tmp_path / "bin" / mps.CONTROL
    path.parent.mkdir()
    path.write_text(FAKE.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{path.parent}{os.pathsep}{os.environ['PATH']}")
    return path


@given(n=st.integers(1, 16))
def test_equal_shares_fit_the_gpu(n):
    got = mps.shares(n)
    assert len(got) == n and min(got) >= 1 and max(got) - min(got) == 0
    assert sum(got) == 100 if n == 1 else mps.SHARED_TOTAL - n < sum(got) <= mps.SHARED_TOTAL, "SMs left free"


@pytest.mark.parametrize("n, split", [(2, (30, 80)), (2, (50,)), (0, None), (2, (0, 50)), (1, ("x",))])
def test_bad_shares_are_refused(n, split):
    with pytest.raises((mps.MpsError, ValueError)):
        mps.shares(n, split)


def test_apply_share_takes_the_local_ranks_share(monkeypatch):
    monkeypatch.delenv(mps.PERCENT_ENV, raising=False)
    monkeypatch.setenv(mps.SHARES_ENV, "30,70")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1")
    assert mps.apply_share() == 70 and os.environ[mps.PERCENT_ENV] == "70"
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2")
    monkeypatch.delenv(mps.PERCENT_ENV)
    with pytest.raises(mps.MpsError, match="local rank 2"):
        mps.apply_share()


def test_an_explicit_percentage_wins(monkeypatch):
    monkeypatch.setenv(mps.PERCENT_ENV, "25")
    monkeypatch.setenv(mps.SHARES_ENV, "30,70")
    assert mps.apply_share() == 25


def test_daemon_lives_only_inside_its_block(fake_control):
    with mps.daemon() as d:
        assert d.alive and mps.status(d.pipe_dir).running
        env = d.env(40)
        assert env[mps.PIPE_ENV] == d.pipe_dir and env[mps.PERCENT_ENV] == "40"
        pipe = d.pipe_dir
    assert not d.alive and not os.path.exists(pipe)
    assert not mps.status(pipe).running


def test_daemon_is_stopped_after_a_failure(fake_control):
    with pytest.raises(RuntimeError):
        with mps.daemon() as d:
            raise RuntimeError("a step failed")
    assert not d.alive


def test_run_gives_the_command_the_daemon_and_the_shares(fake_control, tmp_path):
    probe = tmp_path / "env.txt"
    code = (f"import os; open({str(probe)!r}, 'w').write(os.environ['{mps.PIPE_ENV}'] + ' ' + "
            f"os.environ['{mps.SHARES_ENV}'])")
    assert mps.main(["run", "--ranks", "3", "--", sys.executable, "-c", code]) == 0
    pipe, shares = probe.read_text().split()
    assert shares == ",".join([str(mps.SHARED_TOTAL // 3)] * 3) == "26,26,26" and not os.path.exists(pipe)


def test_without_the_control_binary_the_error_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(mps.MpsError, match="not on PATH"):
        mps.Daemon().start()


def test_cli_status_without_a_daemon(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(mps.PIPE_ENV, str(tmp_path))
    assert mps.main(["status"]) == 1
    assert "no MPS control pipe" in capsys.readouterr().out
    assert subprocess.run([sys.executable, "-c", "import pkptx.launch.mps"]).returncode == 0


def test_a_client_knows_it_is_one(fake_control, monkeypatch):
    with mps.daemon() as d:
        monkeypatch.setenv(mps.PIPE_ENV, d.pipe_dir)
        assert mps.in_client_env()
    assert not mps.in_client_env()
