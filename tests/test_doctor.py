"""``python -m pkptx doctor``: on this machine as it is (a CPU-only machine must say "no GPU" and still
check the rest), and over a fake driver that plays a GPU machine (tests/launch/mpi_programs/fake_cuda.py),
so the GPU checks, the P2P table, the multicast gate and the two-process IPC/VMM check run here too."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest
from cuda.bindings import driver as cu
from hypothesis import given
from hypothesis import strategies as st

from pkptx import __main__ as cli
from pkptx import doctor, doctor_sharing
from pkptx.launch.multicast import DISABLING_ENV
from tests.helpers.gpu import probe as gpu_probe
from tests.helpers.mpi import REPO
from tests.launch.mpi_programs.fake_cuda import FakeDriver

OK = cu.CUresult.CUDA_SUCCESS
ATTR = cu.CUdevice_attribute
P2P = cu.CUdevice_P2PAttribute
MULTICAST_CALLS = ("cuMulticastCreate", "cuMulticastAddDevice", "cuMulticastBindMem", "cuMulticastGetGranularity")


class GpuMachine(FakeDriver):
    """A fake H200 machine: ``devices`` GPUs, driver CUDA ``cuda``, pairs in ``no_peer`` without access."""

    def __init__(self, *, cuda: int = 13000, cc=(9, 0), no_peer=(), mode: int = 0, **options):
        super().__init__(forbid=MULTICAST_CALLS, **options)
        self.cuda, self.cc, self.no_peer, self.mode = cuda, cc, {frozenset(p) for p in no_peer}, mode

    def cuDriverGetVersion(self):
        return OK, self.cuda

    def cuDeviceGetName(self, length, device):
        return OK, b"NVIDIA H200\0"

    def cuDeviceTotalMem(self, device):
        return OK, 141 << 30

    def cuDeviceGetAttribute(self, attribute, device):
        values = {ATTR.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: self.cc[0],
                  ATTR.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: self.cc[1],
                  ATTR.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: 132,
                  ATTR.CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: self.mode,
                  ATTR.CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED: self.multicast_supported}
        return OK, values.get(attribute, 0)

    def cuDeviceCanAccessPeer(self, a, b):
        return OK, int(frozenset((int(a), int(b))) not in self.no_peer)

    def cuDeviceGetP2PAttribute(self, attribute, a, b):
        if attribute == P2P.CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
            return OK, 0
        return OK, int(frozenset((int(a), int(b))) not in self.no_peer)


@pytest.fixture
def machine(monkeypatch):
    """Install a GpuMachine built by the test (multicast opt-outs cleared); uninstalled afterwards."""
    for name, _ in DISABLING_ENV:
        monkeypatch.delenv(name, raising=False)
    fakes: list[GpuMachine] = []
    yield lambda **options: fakes.append(GpuMachine(**options).install()) or fakes[-1]
    for fake in reversed(fakes):
        fake.uninstall()


def by_name(checks, name):
    return [c for c in checks if c.name == name]


# ------------------------------------------------------------------------------- this machine

@pytest.fixture(scope="module")
def report():
    proc = subprocess.run([sys.executable, "-m", "pkptx", "doctor", "--json"], capture_output=True, text=True,
                          timeout=300)
    return proc, json.loads(proc.stdout)


def test_json_report_and_exit_status_agree(report):
    proc, data = report
    checks = [doctor.Check(**c) for c in data["checks"]]
    assert {c.status for c in checks} <= set(doctor.STATUSES)
    assert proc.returncode == data["exit_status"] == doctor.exit_status(checks)
    names = [c.name for c in checks]
    for name in ("python", "cuda-bindings", "nvidia-nvjitlink", "numpy", "ml_dtypes", "mpi4py", "assembly",
                 "driver", "multicast", "mps", "cache"):
        assert name in names
    assert by_name(checks, "assembly")[0].status == "ok"         # nvJitLink works on every machine
    assert all(c.fix for c in checks if c.status in ("warn", "fail"))


def test_without_a_gpu_it_says_so_and_checks_the_rest(report):
    if gpu_probe() is None:
        pytest.skip("a GPU answers here: the no-GPU lines are checked on CPU-only machines")
    proc, data = report
    lines = {c["name"]: c for c in data["checks"]}
    assert lines["driver"]["status"] == "warn" and lines["driver"]["detail"].startswith("no GPU: ")
    for name in ("gpus", "p2p", "multicast", "ipc"):
        assert lines[name]["status"] == "skip" and "no GPU" in lines[name]["detail"], lines[name]
    assert proc.returncode == 1 or any(c["status"] == "fail" for c in data["checks"])


def test_plain_report_is_one_line_per_check_and_a_summary():
    proc = subprocess.run([sys.executable, "-m", "pkptx", "doctor"], capture_output=True, text=True, timeout=300)
    lines = proc.stdout.splitlines()
    assert lines[-1].startswith("pkptx doctor: ") and lines[-1].endswith(f"exit status {proc.returncode}")
    assert all(line.split()[0] in doctor.STATUSES for line in lines[:-1])
    assert len(lines) - 1 == int(lines[-1].split()[2])
    assert proc.stderr == ""


@given(st.lists(st.sampled_from(doctor.STATUSES), max_size=8))
def test_exit_status_is_the_worst_line(statuses):
    checks = [doctor.Check(f"c{i}", s, "") for i, s in enumerate(statuses)]
    want = 2 if "fail" in statuses else 1 if "warn" in statuses else 0
    assert doctor.exit_status(checks) == want


@pytest.mark.parametrize("cuda, ptx", [((11, 8), (7, 8)), ((12, 0), (8, 0)), ((12, 5), (8, 5)), ((12, 6), (8, 5)),
                                       ((12, 8), (8, 7)), ((12, 9), (8, 8)), ((13, 0), (9, 0)), ((13, 1), (9, 1))])
def test_newest_ptx_follows_the_ptx_release_history(cuda, ptx):
    assert doctor.newest_ptx(cuda) == ptx


def test_a_crashing_check_is_a_failure_line(monkeypatch):
    def broken(machine):
        raise ValueError("boom")
    monkeypatch.setattr(doctor, "CHECKS", (doctor.check_python, broken))
    checks = doctor.run_checks()
    assert checks[-1].name == "broken" and checks[-1].status == "fail" and "ValueError: boom" in checks[-1].detail


def test_cache_line(monkeypatch, tmp_path):
    monkeypatch.setenv("PKPTX_CACHE", "0")
    assert "disabled" in doctor.check_cache(None)[0].detail
    monkeypatch.delenv("PKPTX_CACHE")
    monkeypatch.setenv("PKPTX_CACHE_DIR", str(tmp_path))
    (tmp_path / "a.cubin").write_bytes(b"x" * 3000)
    (tmp_path / "a.json").write_bytes(b"y" * 1000)
    (line,) = doctor.check_cache(None)
    assert line.status == "ok" and f"{tmp_path}: 2 files" in line.detail
    monkeypatch.setenv("PKPTX_CACHE_DIR", str(tmp_path / "not-yet"))
    assert "created by the first build" in doctor.check_cache(None)[0].detail


def test_launcher_of_another_mpi_than_mpi4py_warns(monkeypatch):
    from pkptx.bench import mpirun
    monkeypatch.setattr(mpirun, "find", lambda: mpirun.Launcher("/usr/bin/mpirun", "openmpi"))
    monkeypatch.setattr(doctor, "mpi_library", lambda: (True, "MPICH Version: 5.0.2"))
    (line,) = doctor.check_launcher(None)
    assert line.status == "warn" and "mpi4py runs on mpich" in line.detail and "mpich" in line.fix
    monkeypatch.setattr(doctor, "mpi_library", lambda: (True, "Open MPI v5.0.3"))
    assert doctor.check_launcher(None)[0].status == "ok"


# ---------------------------------------------------------------------------------- MPS helper

def fake_mps(running: bool, calls: list):
    status = types.SimpleNamespace(running=running, pipe_dir="/tmp/mps-pipe" if running else None, detail="fake")
    return types.SimpleNamespace(status=lambda: status, main=lambda argv: calls.append(argv) or 3)


@pytest.mark.parametrize("running", [True, False])
def test_mps_line_reads_the_helper(monkeypatch, running):
    monkeypatch.setitem(sys.modules, "pkptx.launch.mps", fake_mps(running, []))
    (line,) = doctor.check_mps(None)
    assert line.status == "ok" and ("MPS daemon is up (pipe directory /tmp/mps-pipe)" in line.detail) == running


def test_mps_subcommand_delegates_every_argument(monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "pkptx.launch.mps", fake_mps(False, calls))
    assert cli.main(["mps", "start", "--pipe-dir", "/x", "--help"]) == 3
    assert calls == [["start", "--pipe-dir", "/x", "--help"]]


def test_mps_subcommand_without_the_helper(monkeypatch, capsys):
    monkeypatch.setattr("pkptx.bench.mpirun.mps_module", lambda: None)
    assert cli.main(["mps", "status"]) == 2
    assert "not available in this version" in capsys.readouterr().err


# --------------------------------------------------------------------- a GPU machine, faked

def test_gpu_machine_lines(machine):
    fake = machine(devices=4, multicast_supported=1, no_peer=[(0, 3)])
    found = doctor.probe()
    assert found == doctor.Machine(4, None)
    driver_line = doctor.check_driver(found)[0]
    assert driver_line.status == "ok" and "CUDA 13.0, loads PTX up to 9.0; pkptx emits at most 9.0" in driver_line.detail
    gpus = doctor.check_gpus(found)
    assert [g.status for g in gpus] == ["ok"] * 4
    assert "GPU 2: NVIDIA H200, sm_90, 132 SMs, 141.0 GiB (sm_90a kernels run)" == gpus[2].detail
    p2p = doctor.check_p2p(found)
    assert [(c.status, c.detail.split(":")[0]) for c in p2p] == [
        ("ok", "GPU pairs 0-1, 0-2, 1-2, 1-3, 2-3"), ("fail", "GPU pairs 0-3")]
    (mc,) = doctor.check_multicast(found)
    assert mc.status == "ok" and "supported on GPUs 0, 1, 2, 3; gate open" in mc.detail
    assert "multicast paths in use" in mc.detail
    assert not fake.forbidden_calls


def test_multicast_gate_names_the_variable_that_closed_it(machine, monkeypatch):
    fake = machine(devices=2, multicast_supported=1)
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    (mc,) = doctor.check_multicast(doctor.probe())
    assert "gate closed by NCCL_NVLS_ENABLE=0" in mc.detail and "unicast fallbacks in use" in mc.detail
    assert not fake.forbidden_calls


def test_old_driver_and_newer_packages(machine):
    machine(devices=1, cuda=12080, cc=(8, 0))
    found = doctor.probe()
    lines = doctor.check_driver(found)
    assert lines[0].status == "warn" and "CUDA 12.8, loads PTX up to 8.7" in lines[0].detail
    assert {c.name: c.status for c in lines[1:]} == {"cuda-bindings": "fail", "nvidia-nvjitlink": "fail"}
    assert "pip install 'cuda-bindings<13'" in lines[1].fix
    (gpu,) = doctor.check_gpus(found)
    assert gpu.status == "fail" and "sm_80" in gpu.detail
    assert doctor.check_p2p(found)[0].status == "skip"


def test_exclusive_process_gpus_warn(machine):
    machine(devices=2, mode=int(cu.CUcomputemode.CU_COMPUTEMODE_EXCLUSIVE_PROCESS))
    lines = doctor.check_gpus(doctor.probe())
    assert [g.status for g in lines] == ["warn", "warn"] and "compute mode exclusive-process" in lines[1].detail
    assert lines[1].fix.startswith("nvidia-smi -i 1 -c DEFAULT")


def test_ipc_and_vmm_sharing_with_a_child_process(machine, monkeypatch):
    fake = machine(devices=1)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    child = (sys.executable, "-c", "import sys; "
             "from tests.launch.mpi_programs.fake_cuda import FakeDriver; FakeDriver().install(); "
             "from pkptx.doctor_sharing import child; sys.exit(child(sys.argv[1:]))")
    found = doctor_sharing.check_sharing(child)
    assert [(name, ok) for name, ok, _, _ in found] == [("ipc", True), ("vmm-fd", True)], found
    assert all("2048 KiB read back intact" in detail for _, _, detail, _ in found)
    assert fake.live() == {} and FakeDriver.open_fake_fds() == []


def test_a_child_that_fails_fails_both_lines(machine):
    machine(devices=1)
    found = doctor_sharing.check_sharing((sys.executable, "-c", "import sys; sys.exit('no driver here')"))
    assert [ok for _, ok, _, _ in found] == [False, False]
    assert all("exit status 1): no driver here" in detail and fix for _, _, detail, fix in found)


def test_verdict_counts_wrong_words():
    want = doctor_sharing.pattern(1024)
    got = want.copy()
    got[[3, 700]] ^= 1
    assert doctor_sharing.verdict(want, want, "x") == (True, "x: 4 KiB read back intact in a child process")
    assert doctor_sharing.verdict(got, want, "x") == (False, "x: 2 of 1024 words read back wrong in the child "
                                                             "process")
