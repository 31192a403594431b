"""Issue 24's reproducers, each as the issue states it, now a clear PkptxError (naming the argument, what
was expected and, for what a kernel declares or emits, the caller's file:line) or a correct result.

The checklist: bullet -> test. Tests named ``module::test`` live elsewhere because they need that
module's fixtures or programs; the rest are here.

- Silent wrong launches: test_a_32_bit_pointer_parameter, test_a_host_array_for_a_pointer_parameter,
  test_a_register_of_another_kernel_with_the_same_name, test_a_block_other_than_the_kernel_assumes,
  test_every_shipped_kernel_states_its_block_or_reads_it
- A crash: test_a_99870_character_kernel_name, test_non_ascii_names_and_pred_parameters
- Invalid PTX rendered: test_a_negative_offset_assembles, test_cluster_wait_with_its_defaults_assembles,
  test_operands_only_ptxas_caught, test_declaration_errors_carry_the_callers_line
- Python errors instead of the project's: test_python_errors_in_the_builder, test_python_errors_in_kernel,
  test_a_world_of_no_ranks, test_no_driver_library
- Accepted though no launch can use them: test_declarations_no_launch_can_use,
  test_the_manifest_holds_validated_values
- MPI: launch/test_world_cpu.py::test_rank_killed_during_setup_is_named_within_the_timeout_and_survivors_exit
  (MPICH -disable-auto-cleanup: a rank dies before the world, after it (with the launcher's SIGUSR1 notice) or
  inside the heap setup; the survivors name it at the timeout and exit with status 1, or world.abort's, with no
  os._exit in the program), ::test_late_arrival_at_an_abandoned_barrier_raises
- README: test_readme.py::test_gpu_machine_commands_use_the_venv_and_exist (gpu_check through the venv, no
  bare mpirun), ::test_the_manifest_alone_launches_exactly_the_kernels_the_readme_names,
  ::test_host_api_snippet_is_the_example_and_uses_only_defined_names_and_real_signatures,
  ::test_host_api_example_runs_on_two_ranks (GPU), ::test_first_lines_are_the_two_commands_and_ci_runs_the_second
- Weak tests: isa/test_invalid.py::test_immediates_at_the_edges_of_their_type (renders and assembles),
  isa/test_random_programs.py::test_random_programs_assemble (a fresh rebuild, every line traced) and
  ::test_recorded_forms_replay_cleanly (each replay renders the recorded line),
  primitives/test_gpu_primitives.py::test_rank1_tensor_map_encodes (GPU: the encoding depends on the box),
  isa/test_spec_table.py::test_forms_assemble (one version lower is refused) with
  isa/test_version_floors.py (every form at its own floor)
- The spec-driven random-program property: isa/test_spec_programs.py
"""
from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

from pkptx.errors import DriverUnavailableError, LaunchError, PTXBuildError
from pkptx.isa import Kernel, Param, address, f32, pred, u32, u64
from pkptx.launch import Device, LaunchConfig, Packer, empty, from_numpy
from pkptx.launch.config import DeviceLimits
from pkptx.ops.common import ArgumentError
from tests.helpers.assemble import Sandbox, assert_assembles
from tests.helpers.errors import build_error
from tests.helpers.gpu import no_driver_library  # noqa: F401  (a fixture)

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.fixture
def sb():
    return Sandbox("issue24")


# ----------------------------------------------------------------------------- silent wrong launches
def test_a_32_bit_pointer_parameter():
    with build_error("Param('p')", "pointer=True needs type .u64 or .b64", "got .u32"):
        Param('p', u32, pointer=True)


def test_a_host_array_for_a_pointer_parameter():
    host = np.arange(4, dtype=np.float32)
    packer = Packer([Param("x", u64, pointer=True)], "scale")
    with pytest.raises(LaunchError, match=r"argument 0 'x' \(\.u64\).*expected device memory.*host memory; "
                                          r"copy it to the device first"):
        packer.pack([host])


def test_a_register_of_another_kernel_with_the_same_name(sb):
    theirs = Kernel("other").builder().mov(u32, 1)
    assert theirs.name == "%r0" and sb.b.mov(u32, 2, name="r").name == "%r0"
    with build_error("register %r0 was not declared by this kernel's builder"):
        sb.b.add(u32, theirs, 1)


def test_a_block_other_than_the_kernel_assumes():
    """A shipped LCSC kernel (warpgroup roles) runs with exactly its block; a smaller one is refused by the
    launcher's check and by the CPU interpreter."""
    from pkptx.templates.kernels import all_to_all
    kernel = all_to_all.build(all_to_all.Config(width=2))
    compiled = kernel.compile()
    threads = compiled.required_block[0]
    assert compiled.required_block == (threads, 1, 1) and compiled.manifest()["required_block"] == [threads, 1, 1]
    with pytest.raises(LaunchError, match=rf"block=\({threads - 128}, 1, 1\); expected exactly \({threads}, 1, 1\)"):
        LaunchConfig(8, threads - 128).validate(DeviceLimits(), compiled)
    LaunchConfig(8, threads).validate(DeviceLimits(), compiled)
    with pytest.raises(LaunchError, match=rf"written for a block of exactly \({threads}, 1, 1\)"):
        kernel.interpret(1, threads - 128, *([0] * len(kernel.params)))


def test_every_shipped_kernel_states_its_block_or_reads_it():
    """A kernel may declare only a maximum block (.maxntid) when its code reads the block size (%ntid);
    one that does not assumes its block and must state it (.reqntid)."""
    from pkptx.catalog import kernels
    for k in kernels():
        assert k.req_threads or (k.max_threads and "%ntid" in k.render()), k.name


# ------------------------------------------------------------------------------------------ a crash
def test_a_99870_character_kernel_name():
    with build_error("kernel name is 99870 characters long; expected at most 255"):
        k = Kernel('k' * 99870, [])
        k.builder().ret()
        k.compile()


def test_non_ascii_names_and_pred_parameters():
    with build_error("kernel name 'kérnel' is not a PTX identifier", "expected ASCII letters"):
        Kernel("kérnel", [])
    with build_error("parameter name 'ñ' is not a PTX identifier"):
        Kernel("k", [("ñ", u32)])
    with build_error("Param('flag'): a kernel parameter cannot be .pred", "pass a .u32"):
        Kernel("k", [("flag", pred)])


# ----------------------------------------------------------------------------------- invalid PTX
def test_a_negative_offset_assembles():
    k = Kernel("neg", [Param("x", u64, pointer=True)])
    b = k.builder()
    x = b.load_param("x")
    b.st(u32, address(x, -8), b.ld(u32, address(x, -8), space="global"), space="global")
    b.ret()
    assert "[%x0+-8]" in k.render() and "[%x0-8]" not in k.render()
    assert_assembles(k)


def test_cluster_wait_with_its_defaults_assembles():
    k = Kernel("cw")
    b = k.builder()
    b.cluster_wait()
    b.ret()
    assert k.ptx_version == (8, 0) and "barrier.cluster.wait.acquire" in k.render()
    assert_assembles(k)


def test_operands_only_ptxas_caught(sb):
    with build_error("bar.sync", "'id' must be an integer in 0..15, got 16"):
        sb.b.bar_sync(16)
    with build_error("mbarrier.init", "'count' must be an integer in 1..1048575, got 0"):
        sb.b.mbarrier_init(sb.bar, 0)
    with build_error("'size' must be an integer in 16..1048560, a multiple of 16, got 100"):
        sb.b.bulk_load(sb.s(), sb.gptr, 100, sb.bar)


def test_declaration_errors_carry_the_callers_line():
    with build_error("Param('n'): unknown PTX type 'u33'"):
        Kernel("k", [("n", "u33")])
    with build_error("parameter name 'n' is repeated"):
        Kernel("k", [("n", u32), ("n", u64)])


# ------------------------------------------------------------------ Python errors, not the project's
def test_python_errors_in_the_builder(sb):
    r = sb.b.mov(u32, 1)
    with build_error("a PTX type is a name such as 'u32' or a PtxType", "got int 32"):
        sb.b.add(32, r, 1)
    with build_error("mul.f32", "immediate 1e+300 does not fit .f32"):
        sb.b.mul(f32, sb.r(f32), 1e300)


def test_python_errors_in_kernel():
    with build_error("ptx_version='8.0': expected a (major, minor) pair of ints such as (8, 0)"):
        Kernel('k', ptx_version='8.0')
    with build_error("kernel name must be a str, got NoneType None"):
        Kernel(None)


def test_a_world_of_no_ranks():
    from pkptx.ops import collectives
    with pytest.raises(ArgumentError, match=r"reduce_scatter: world_size=0: expected an int >= 1"):
        collectives.check_reduce_scatter((4, 4), BF16, (4, 4), BF16, 0, 0, dim=0, op="sum", in_place=False)
    with pytest.raises(ArgumentError, match=r"all_gather: rank=2: expected an int in 0\.\.1"):
        collectives.check_all_gather((4, 4), BF16, (8, 4), BF16, 2, 2, dim=0, in_place=False)


@pytest.mark.parametrize("call", [lambda: Device(0), lambda: from_numpy(np.zeros(3, np.float32)),
                                  lambda: empty((2, 2), "float32")], ids=["Device(0)", "from_numpy", "empty"])
def test_no_driver_library(no_driver_library, call):  # noqa: F811
    with pytest.raises(DriverUnavailableError, match="hint: GPU work needs a machine with the NVIDIA driver"):
        call()


# ------------------------------------------------------------------ accepted though no launch can use them
@pytest.mark.parametrize("make,needle", [
    (lambda: Kernel("k", max_threads=2048), "max_threads=2048 (2048 in all): expected at most 1024"),
    (lambda: Kernel("k", cluster=32), "cluster=32 (32 in all): expected at most 16"),
    (lambda: Kernel("k", dynamic_smem="48K"), "dynamic_smem='48K': expected an int in 0..232448"),
    (lambda: Param("t", "b8", count=-4), "Param('t'): count=-4: expected an int in >= 1"),
], ids=["max_threads", "cluster", "dynamic_smem", "count"])
def test_declarations_no_launch_can_use(make, needle):
    with pytest.raises(PTXBuildError) as info:
        make()
    assert needle in str(info.value) and __file__ in info.value.origin


def test_the_manifest_holds_validated_values(tmp_path, capsys):
    """``pkptx build --out`` writes what the kernel declared, after checking it: ints, not the caller's
    spelling; a count and a dynamic shared-memory size that a launch can use."""
    from pkptx.__main__ import main
    assert main(["build", "--filter", "bulk_copy_c2048", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    (entry,) = json.loads((tmp_path / "manifest.json").read_text())["kernels"]
    assert type(entry["dynamic_smem_bytes"]) is int and 0 < entry["dynamic_smem_bytes"] <= 232448
    assert all(type(p["count"]) is int and p["count"] >= 1 for p in entry["params"])
    assert entry["required_block"] == [32, 1, 1]
