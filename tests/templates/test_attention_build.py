"""The attention and merge kernels assemble for sm_90a without spills at every configuration the ops
launch (and a few more), their PTX is deterministic and has the intended instruction forms, and
every argument of pkptx.attention / attention_merge is checked before any GPU work."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pkptx.catalog import KERNEL_MODULES
from pkptx.errors import PTXBuildError
from pkptx.ops.attention import AttentionArgumentError, check_attention, check_merge
from pkptx.templates.kernels import attention as kernel
from pkptx.templates.kernels import attention_merge as merge
from pkptx.toolchain import assemble
from tests.helpers.assemble import consumer_budget_log

LAUNCHED = list(kernel.LAUNCHED)
MORE = [kernel.Config(head_dim=128, block_k=64, rebalance=True), kernel.Config(head_dim=64, consumers=2, stages=3),
        kernel.Config(head_dim=128, consumers=1, stages=3, q_stages=1), kernel.Config(head_dim=128, rebalance=True),
        kernel.Config(head_dim=128, q_stages=1, rebalance=True, overlap=True), kernel.Config(head_dim=64, overlap=True),
        kernel.Config(head_dim=128, q_stages=1, pingpong=True), kernel.default_config("bf16", 64),
        kernel.default_config("f16", 128)]


@pytest.mark.parametrize("cfg", LAUNCHED + MORE, ids=lambda c: c.name)
def test_attention_assembles_without_spills(cfg):
    built = kernel.build(cfg)
    cubin = (consumer_budget_log(built, slack=8 if cfg.consumers == 3 else 0) if cfg.rebalance
             else assemble(built.render(), "sm_90a", use_cache=False))
    assert cubin.resources.spills == 0 and cubin.resources.stack_bytes == 0, (cfg.name, cubin.resources)
    assert "C75" not in cubin.log, cubin.log       # no serialised wgmma, no ignored setmaxnreg


@pytest.mark.parametrize("cfg", [c for c in LAUNCHED + MORE if c.rebalance], ids=lambda c: c.name)
def test_rebalanced_kernels_load_from_ptx(cfg):
    compiled = kernel.build(cfg).compile(use_cache=False)
    assert compiled.jit and compiled.manifest()["load"] == "ptx" and "setmaxnreg.inc" in compiled.ptx


@pytest.mark.parametrize("cfg", LAUNCHED + MORE, ids=lambda c: c.name)
def test_launch_smem_is_the_template_carving(cfg):
    assert cfg.smem_bytes == kernel.template(cfg).dynamic_smem <= kernel.SMEM_LIMIT


@pytest.mark.parametrize("cfg", [merge.Config(), merge.Config(dtype="f16", threads=512)], ids=str)
def test_merge_assembles_without_spills(cfg):
    cubin = assemble(merge.build(cfg).render(), "sm_90", use_cache=False)
    assert cubin.resources.spills == 0, cubin.resources


def test_catalogued():
    assert kernel.__name__ in KERNEL_MODULES and merge.__name__ in KERNEL_MODULES
    assert [k.name for k in kernel.catalog()] == [kernel.build(cfg).name for cfg in kernel.LAUNCHED]


FORMS = [kernel.default_config("bf16", 128), kernel.Config(head_dim=128, pingpong=True),
         kernel.Config(head_dim=128, q_stages=1, overlap=True, pingpong=True, rebalance=True, rescale_threshold=8)]


@pytest.mark.parametrize("cfg", FORMS, ids=str)
def test_ptx_forms_and_determinism(cfg):
    ptx = kernel.build(cfg).render()
    assert ptx == kernel.build(cfg).render()
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16" in ptx
    pv = [line for line in ptx.splitlines() if "wgmma.mma_async" in line and ", 1, 1, 1;" in line]
    copies = 2 if cfg.overlap else 1     # the overlapped loop issues the last block's P·V after the loop
    assert len(pv) == copies * cfg.block_k // 16, "one register-A, transposed-B wgmma per 16 keys of P·V"
    assert ("bar.arrive" in ptx) == cfg.pingpong, "the warpgroups' turns are named-barrier arrivals"
    assert ("setmaxnreg" in ptx) == cfg.rebalance
    assert ("vote.sync.any.pred" in ptx) == bool(cfg.rescale_threshold), "the threshold's warp-uniform rescale"
    for form in ("ex2.approx.ftz.f32", "shfl.sync.bfly.b32", "cvt.rn.bf16x2.f32",
                 "cp.async.bulk.tensor.4d.shared::cluster.global.tile", "cp.async.bulk.tensor.4d.global.shared::cta"):
        assert form in ptx, form


@pytest.mark.parametrize("make", [
    lambda: kernel.Config(head_dim=96), lambda: kernel.Config(dtype="f32"), lambda: kernel.Config(block_k=96),
    lambda: kernel.Config(consumers=4), lambda: kernel.Config(head_dim=128, consumers=3, stages=3),
    lambda: kernel.Config(consumers=1, pingpong=True), lambda: kernel.Config(rescale_threshold=17),
    lambda: kernel.Config(pv_in_flight=True, stages=1), lambda: kernel.Config(pv_in_flight=True, overlap=True),
    lambda: merge.Config(threads=100),
])
def test_bad_configs_are_refused(make):
    with pytest.raises(PTXBuildError):
        make()


BF = "bfloat16"
Q, KV = (2, 100, 8, 128), (2, 77, 2, 128)


def check(q=Q, k=KV, v=KV, dtypes=(BF, BF, BF), **kw):
    return check_attention(q, dtypes[0], k, dtypes[1], v, dtypes[2], **kw)


def test_good_arguments_give_the_dimensions():
    assert check() == (2, 100, 77, 8, 2, 128)
    assert check(out_shape=Q, out_dtype=BF, lse_shape=(2, 8, 100), lse_dtype="float32", causal=True,
                 scale=0.1) == (2, 100, 77, 8, 2, 128)


@pytest.mark.parametrize("kw, message", [
    (dict(q=(2, 100, 8)), "q must be 4-D"),
    (dict(q=(2, 0, 8, 128)), "no empty dimension"),
    (dict(v=(2, 78, 2, 128)), "k and v must have one shape"),
    (dict(k=(3, 77, 2, 128), v=(3, 77, 2, 128)), "like q"),
    (dict(q=(2, 100, 8, 96), k=(2, 77, 2, 96), v=(2, 77, 2, 96)), "head dim D must be one of"),
    (dict(k=(2, 77, 3, 128), v=(2, 77, 3, 128)), "must divide q heads"),
    (dict(dtypes=(BF, "float16", BF)), "must all be bfloat16 or all float16"),
    (dict(dtypes=("float32",) * 3), "must all be bfloat16 or all float16"),
    (dict(out_shape=(2, 100, 8, 64)), "out must have shape"),
    (dict(out_dtype="float16"), "out must be bf16"),
    (dict(lse_shape=(2, 100, 8)), r"lse must have shape \(2, 8, 100\)"),
    (dict(lse_dtype=BF), "lse must be f32"),
    (dict(causal=1), "causal must be True or False"),
    (dict(scale=-1.0), "scale must be None"),
    (dict(scale=float("nan")), "scale must be None"),
])
def test_bad_arguments_raise_before_gpu_work(kw, message):
    with pytest.raises(AttentionArgumentError, match=message):
        check(**kw)


O, L = (2, 50, 4, 64), (2, 4, 50)


@pytest.mark.parametrize("args, message", [
    ((O, BF, L, "float32", O, BF, L, "float32"), None),
    (((2, 50, 4, 60), BF, L, "float32", (2, 50, 4, 60), BF, L, "float32"), "multiple of 8"),
    ((O, "float32", L, "float32", O, "float32", L, "float32"), "bfloat16 or float16"),
    ((O, BF, L, "float32", O, "float16", L, "float32"), "out_b must be bf16"),
    ((O, BF, (2, 50, 4), "float32", O, BF, L, "float32"), "lse_a must have shape"),
    ((O, BF, L, "float32", O, BF, L, BF), "lse_b must be f32"),
    ((O, BF, L, "float32", O, BF, L, "float32", (2, 50, 4, 128), BF), "out must have shape"),
])
def test_merge_arguments(args, message):
    if message is None:
        assert check_merge(*args) == (2, 50, 4, 64)
    else:
        with pytest.raises(AttentionArgumentError, match=message):
            check_merge(*args)


class FakeLaunch:
    """Stands in for a loaded kernel: records the launch shape and the arguments by parameter name."""

    def __init__(self, factory, cfg):
        from math import prod

        from pkptx.toolchain import build_cached
        self.compiled = build_cached(factory, cfg)
        self.threads = prod(self.compiled.block)
        self.calls = []

    def prepare(self, config, **values):
        self.compiled.signature.bind(values)           # the names are the kernel's, as LoadedKernel checks
        smem = config.smem_for(self.compiled)
        shape = (config.grid[0], config.block[0]) + ((smem,) if smem else ())
        return type("P", (), {"launch": lambda _, stream=None: self.calls.append((shape, values))})()


@pytest.fixture
def fake_gpu(monkeypatch):
    """The host path of the ops without a GPU: device, status words, tensor maps, allocation, loading."""
    from collections import OrderedDict

    import pkptx.ops.attention as op
    from pkptx.launch.array import DeviceArray
    from pkptx.ops import launches
    launched = {}
    monkeypatch.setattr(launches, "_launches", OrderedDict())       # the arrays' addresses repeat across tests
    device = type("D", (), {"sm_count": 132, "ordinal": 0})()
    monkeypatch.setattr(op.Device, "current", staticmethod(lambda: device))
    status = type("S", (), {"ptr": 0x1000, "zeroed_words": lambda self, key, count: DeviceArray(0x2000, (count,),
                                                                                                  np.uint32)})()
    monkeypatch.setattr(op, "device_status", lambda dev: status)
    monkeypatch.setattr(launches, "device_status", lambda dev: status)
    monkeypatch.setattr(op, "tensor_map", lambda arr, box: ("tmap", arr.ptr, arr.shape, box))
    monkeypatch.setattr(op, "empty", lambda shape, dtype, stream=None: DeviceArray(0x900000, shape, dtype))
    monkeypatch.setattr(op, "persistent_grid", lambda kernel, work: min(work, 132))
    monkeypatch.setattr(op, "context_sm_count", lambda dev=None: 132)

    def load(factory, cfg, dev):
        return launched.setdefault(factory.__module__, FakeLaunch(factory, cfg))
    monkeypatch.setattr(op, "load", load)
    arrays = iter(range(1, 100))
    return launched, lambda shape, dtype=BF: DeviceArray(0x100000 * next(arrays), shape, dtype)


def test_attention_host_path_passes_every_parameter(fake_gpu):
    import math

    import pkptx
    launched, array = fake_gpu
    q, k, v = array((2, 1000, 8, 128)), array((2, 700, 2, 128)), array((2, 700, 2, 128))
    lse = array((2, 8, 1000), "float32")
    out = pkptx.attention(q, k, v, causal=True, lse=lse)
    (grid, threads, smem), args = launched[kernel.__name__].calls[0]
    cfg = kernel.default_config("bf16", 128)
    q_blocks = -(-1000 // cfg.rows)
    assert (grid, threads, smem) == (min(132, 2 * 8 * q_blocks), 128 * (1 + cfg.consumers), cfg.smem_bytes)
    assert args["tmap_q"] == ("tmap", q.ptr, q.shape, (1, 64, 1, 64)) and args["tmap_o"][1] == out.ptr
    assert (args["lse"], args["tasks"], args["q_blocks"], args["heads"], args["group"]) == (lse.ptr, 2 * 8 * q_blocks,
                                                                                           q_blocks, 8, 4)
    assert (args["seq_q"], args["seq_k"], args["diag"]) == (1000, 700, -300)
    assert math.isclose(args["scale_log2"], 128 ** -0.5 * math.log2(math.e))
    pkptx.attention(q, k, v, scale=0.5)
    args = launched[kernel.__name__].calls[1][1]
    assert (args["diag"], args["lse"]) == (700, 0) and math.isclose(args["scale_log2"], 0.5 * math.log2(math.e))


def test_attention_draws_its_tasks_by_head(fake_gpu):
    """On any device (whole, MPS share, green context) the op launches the drawn kernel with its
    per-stream counter and the tasks of one (batch, head) together, with a mask or without."""
    import pkptx
    launched, array = fake_gpu
    q = array((1, 300, 4, 64))
    for call, causal in enumerate((False, True)):
        pkptx.attention(q, q, q, causal=causal)
        args = launched[kernel.__name__].calls[call][1]
        assert (args["task_counter"], args["by_query_block"]) == (0x2000, 0)
    assert launched[kernel.__name__].compiled.entry.endswith("_d"), "the drawn kernel"


def test_merge_host_path(fake_gpu):
    import pkptx
    launched, array = fake_gpu
    oa, ob = array((2, 50, 4, 64)), array((2, 50, 4, 64))
    la, lb, lse = (array((2, 4, 50), "float32") for _ in range(3))
    out = pkptx.attention_merge(oa, la, ob, lb, lse=lse)
    (grid, threads), args = launched[merge.__name__].calls[0]
    assert threads == merge.Config().threads and grid == -(-2 * 50 * 4 * 8 // threads)
    assert (args["out"], args["out_a"], args["out_b"], args["lse_out"]) == (out.ptr, oa.ptr, ob.ptr, lse.ptr)
    assert (args["vectors"], args["row_vectors"], args["heads"], args["seq"]) == (2 * 50 * 4 * 8, 8, 4, 50)
    with pytest.raises(AttentionArgumentError, match="must not be lse_a"):
        pkptx.attention_merge(oa, la, ob, lb, lse=la)


@pytest.mark.parametrize("consumers,expected", [(1, 256), (2, 232), (3, 160)])   # 3: the loader keeps 32
def test_rebalance_budget_fits_the_register_file(consumers, expected):
    """setmaxnreg.inc waits forever for registers the SM does not have: the budget is derived, and a
    given one that does not fit is refused at build."""
    cfg = kernel.Config(head_dim=64, consumers=consumers, q_stages=1, rebalance=True)
    tmpl = kernel.template(cfg)
    assert tmpl.consumer_budget == expected
    assert 128 * tmpl.producer_regs + 128 * consumers * expected <= 65536
    with pytest.raises(PTXBuildError, match="does not fit"):
        dataclasses.replace(tmpl, consumer_regs=expected + 8).build(**kernel.roles(cfg))


def test_a_build_cache_hit_keeps_loading_a_rebalanced_kernel_from_ptx(tmp_path, monkeypatch):
    """nvJitLink drops setmaxnreg from the cubin: a cache hit must still say "load the PTX"."""
    from pkptx.toolchain import build_cached
    monkeypatch.setenv("PKPTX_CACHE_DIR", str(tmp_path))
    cfg = kernel.Config(head_dim=64, consumers=2, q_stages=1, rebalance=True)
    first, hit = build_cached(kernel.build, cfg), build_cached(kernel.build, cfg)
    assert hit.cubin.from_cache and first.jit and hit.jit and hit.manifest()["load"] == "ptx"
