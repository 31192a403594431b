"""The GPU tests' kernels (kernels.py) are built with the builder alone and assemble without a GPU,
so a GPU run never meets a kernel that does not assemble."""
from __future__ import annotations

import pytest

from tests.launch import kernels as K

BUILDS = {f"axpy_{d}": (K.axpy, d) for d in ("float32", "float64", "float16", "bfloat16", "int32")}
BUILDS.update({f"vec4_add_{d}": (K.vec4_add, d) for d in ("float32", "int32")})
BUILDS.update(block_sum=(K.block_sum,), cluster_ids=(K.cluster_ids,), tma_copy_2d=(K.tma_copy_2d,))


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_kernel_is_built_and_assembles(name):
    make, *args = BUILDS[name]
    kernel = make(*args)
    assert kernel.name == name
    assert not [ins.text for ins in kernel.body if ins.kind == "raw"], "raw PTX lines in a test kernel"
    compiled = kernel.compile()
    assert compiled.entry == name and compiled.cubin.data
    assert compiled.cubin.resources.spills == 0


def test_cluster_ids_insists_on_its_block():
    compiled = K.cluster_ids().compile()
    assert compiled.block == (128, 1, 1) and compiled.block_exact


def test_tma_copy_follows_the_gemm_smem_pattern():
    """The dynamic window is declared 16-byte aligned and aligned up at run time (the GEMM's working
    pattern); the mbarrier is a static 8-byte-aligned array; the maps are addressed through cvta.param."""
    kernel = K.tma_copy_2d()
    ptx = kernel.render()
    assert ".extern .shared .align 16 .b8 window[];" in ptx
    assert ".shared .align 8 .b8 bar[8];" in ptx
    assert "cvta.param.u64" in ptx and ".tile.mbarrier::complete_tx::bytes" in ptx
    assert kernel.compile().dynamic_smem == K.TILE_SLACK
