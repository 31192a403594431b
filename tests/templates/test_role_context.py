"""The role context: parameters by attribute, checked at build time against what the template declares;
no role loads a parameter twice; the communicators' buffers share the dynamic window with the compute
blocks' (a block is one or the other)."""
from __future__ import annotations

import pytest

from pkptx.errors import PTXBuildError
from pkptx.isa import Param, u32
from pkptx.templates.kernels import ag_gemm, moe_dispatch_gemm, ring_attention, ulysses
from pkptx.templates.lcsc import WINDOW_SLACK, Buffer, Template

PARAMS = (Param("n", u32),)


def _comm_kernel(communicator, *, comm_buffers=(), dynamic_buffers=()):
    t = Template("ctx_probe", params=PARAMS, comm_threads=32, progress=False, comm_buffers=comm_buffers,
                 dynamic_buffers=dynamic_buffers)
    return t.build(comm_tasks=lambda ctx: ctx.p.n, communicator=communicator)


def test_a_misspelt_parameter_fails_at_build_naming_the_line_and_the_parameters():
    def communicator(ctx, task):
        ctx.b.add(u32, task, ctx.p.nn)

    with pytest.raises(PTXBuildError, match=r"no parameter 'nn'; it has n, rank, world") as info:
        _comm_kernel(communicator)
    assert "test_role_context.py" in info.value.origin


def test_parameters_by_computed_name_and_one_load_each():
    def communicator(ctx, task):
        ctx.b.add(u32, task, ctx.p["n"])
        ctx.b.add(u32, task, ctx.p.n)

    ptx = _comm_kernel(communicator).render()
    assert sum("ld.param.u32" in line and "[n]" in line for line in ptx.splitlines()) == 1


def test_comm_buffers_start_at_the_window_like_the_compute_buffers():
    compute = (Buffer("stages", 40_000, 1024),)
    comm = (Buffer("staging", 10_000, 1024), Buffer("more", 50_000, 128))
    t = Template("carve", comm_threads=32, dynamic_buffers=compute, comm_buffers=comm, progress=False)
    assert t.dynamic_smem == 10_112 + 50_000 + WINDOW_SLACK      # "more" starts at the next 128 bytes
    assert Template("carve", comm_threads=32, dynamic_buffers=compute, progress=False).dynamic_smem == \
        40_000 + WINDOW_SLACK
    with pytest.raises(PTXBuildError, match="'stages' is declared twice"):
        _comm_kernel(lambda ctx, task: None, comm_buffers=(Buffer("stages", 64),), dynamic_buffers=compute)


@pytest.mark.parametrize("build, staging", [
    (lambda: ag_gemm.build(), "push_chunk"),
    (lambda: moe_dispatch_gemm.build(), "push_rows"),
    (lambda: ring_attention.build(), "relay_staging"),
    (lambda: ulysses.build(), "push_staging")])
def test_communicators_stage_in_their_own_buffer_not_the_compute_sides(build, staging):
    """The fused kernels' communicators declare their staging (no borrowed smem_a or smem_q), and it fits
    the window the compute side already asks for."""
    kernel = build()
    ptx = kernel.render()
    assert f"%{staging}0" in ptx
