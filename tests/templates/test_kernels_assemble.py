"""Every collective kernel, unicast and multicast, assembles (nvJitLink) for sm_90a and its own target.

Why one cubin serves world sizes 2, 4, 8 and 16 (and every other): each module's ``build(cfg)``
takes only its Config, which has no world field, so nothing in the PTX can depend on the world size.
``rank`` and ``world`` are kernel parameters (:class:`pkptx.primitives.layout.WorldParams`), peers'
addresses come from a per-buffer table in device memory indexed at run time, every loop over ranks
is ``for r in range(world)`` on a register, and the barrier's expected count is computed from
``world * nctaid.x`` on the device. The rank-dependent offsets of the run-based collectives are
parameters the host computes per rank (:mod:`pkptx.templates.runs`). So there is no compile-time
world-dependent code to assemble at 2, 4, 8 and 16; :func:`test_build_takes_no_world` pins that.
"""
from __future__ import annotations

import inspect
import itertools

import pytest

from pkptx.catalog import KERNEL_MODULES
from pkptx.errors import PTXBuildError
from pkptx.templates.kernels import all_gather, all_reduce, all_to_all, reduce_scatter
from pkptx.toolchain import assemble
from tests.helpers.assemble import consumer_budget_log

MODULES = (all_reduce, all_gather, reduce_scatter, all_to_all)
WIDTHS = (16, 8, 4, 2)


def configs():
    """Every legal Config of every collective, multicast forms included (threads at the default)."""
    for algorithm, dtype, op, mc in itertools.product(("one_shot", "two_shot"), all_reduce.DTYPES, all_reduce.OPS,
                                                      (False, True)):
        yield all_reduce, all_reduce.Config(dtype=dtype, op=op, algorithm=algorithm, multicast=mc)
    for width in WIDTHS:
        yield all_gather, all_gather.Config(width=width)
        yield all_to_all, all_to_all.Config(width=width)
    yield all_gather, all_gather.Config(width=16, multicast=True)
    for dtype, op, width in itertools.product(reduce_scatter.DTYPES, reduce_scatter.OPS, WIDTHS):
        if width >= reduce_scatter.ITEMSIZE[dtype]:
            yield reduce_scatter, reduce_scatter.Config(dtype=dtype, op=op, width=width)
        if reduce_scatter.switch_reduces(dtype, op, width):
            yield reduce_scatter, reduce_scatter.Config(dtype=dtype, op=op, width=width, multicast=True)
    for threads in (128, 1024):       # other block sizes change only immediates
        yield all_gather, all_gather.Config(threads=threads)
        yield reduce_scatter, reduce_scatter.Config(threads=threads)
        yield all_to_all, all_to_all.Config(width=4, threads=threads)


CONFIGS = list(configs())


@pytest.mark.parametrize("module, cfg", CONFIGS, ids=[f"{m.__name__.rsplit('.', 1)[1]}-{c}" for m, c in CONFIGS])
def test_collective_assembles(module, cfg):
    kernel = module.build(cfg)
    for arch in sorted({"sm_90a", kernel.target}):
        cubin = assemble(kernel.render(), arch, use_cache=False)
        assert cubin.resources.spills == 0, (kernel.name, arch, cubin.resources)
    assert "ld.param.u32 %world0, [world];" in kernel.render()     # world is read at run time


@pytest.mark.parametrize("module", MODULES)
def test_build_takes_no_world(module):
    """``build`` sees only a Config, and no Config field is a world size: the PTX cannot depend on it."""
    assert list(inspect.signature(module.build).parameters) == ["cfg"]
    assert not any("world" in name or "rank" in name for name in module.Config.__dataclass_fields__)


@pytest.mark.parametrize("module, cfg", CONFIGS[::7])
def test_same_config_same_ptx(module, cfg):
    assert module.build(cfg).render() == module.build(cfg).render()


def test_kernel_names_are_unique():
    names = [module.build(cfg).name for module, cfg in CONFIGS if cfg.threads == 512]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("module", MODULES)
def test_catalogued(module):
    assert module.__name__ in KERNEL_MODULES
    assert list(module.catalog())


@pytest.mark.parametrize("make", [
    lambda: all_gather.Config(width=3),
    lambda: all_gather.Config(width=8, multicast=True),
    lambda: all_to_all.Config(width=32),
    lambda: reduce_scatter.Config(dtype="f32", width=2),
    lambda: reduce_scatter.Config(dtype="f64"),
    lambda: reduce_scatter.Config(op="prod"),
    lambda: reduce_scatter.Config(dtype="f32", op="max", multicast=True),
    lambda: reduce_scatter.Config(width=8, multicast=True),
])
def test_bad_configs_are_refused(make):
    with pytest.raises(PTXBuildError):
        make()


@pytest.mark.parametrize("module", KERNEL_MODULES)
def test_no_catalogued_kernel_has_its_wgmma_serialised(module):
    """ptxas serialises every wgmma when the pipeline holds a divergent exit (info C7518); the bounded
    mbarrier waits of the mainloop once did, at 8-25% of the GEMM's time on the H200."""
    from importlib import import_module
    for kernel in import_module(module).catalog():
        log = consumer_budget_log(kernel).log if kernel.rebalances else kernel.compile().cubin.log
        assert "C7518" not in log and "serialized" not in log, (kernel.name, log[:400])
