"""LaunchConfig validation against a fake device: every rule, labelled, before any driver call."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from math import prod

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pkptx.errors import LaunchError
from pkptx.launch import DeviceLimits, LaunchConfig
from pkptx.launch.config import required_block


@dataclass(frozen=True)
class FakeResources:
    shared_bytes: int = 0


@dataclass(frozen=True)
class FakeKernel:
    """The CompiledKernel fields validation reads."""
    entry: str = "k"
    block: tuple | None = None
    block_exact: bool = False
    cluster: tuple | None = None
    dynamic_smem: int = 0
    resources: FakeResources = field(default_factory=FakeResources)


@dataclass(frozen=True)
class StatedKernel(FakeKernel):
    """A kernel that states the block it is written for (the builder's ``required_block`` fact)."""
    required_block: tuple | None = None


def violations(cfg: LaunchConfig, lim: DeviceLimits, k: FakeKernel) -> list[str]:
    """Regexes of the messages each broken rule produces (a model written independently of config.py)."""
    out = []
    for what, dims, top in (("grid", cfg.grid, lim.max_grid), ("block", cfg.block, lim.max_block)):
        out += [rf"{what}\.{a}={d}; expected at most {m}" for a, d, m in zip("xyz", dims, top) if d > m]
    if prod(cfg.block) > lim.max_threads_per_block:
        out.append(rf"threads; expected at most {lim.max_threads_per_block}$")
    exact = getattr(k, "required_block", None) or (k.block if k.block_exact else None)
    if exact is not None and cfg.block != exact:
        out.append(r"expected exactly .*, the block the kernel is written for")
    if exact is None and k.block is not None and prod(cfg.block) > prod(k.block):
        out.append(r"\.maxntid")
    smem = k.dynamic_smem if cfg.dynamic_smem is None else cfg.dynamic_smem
    if smem < k.dynamic_smem:
        out.append(r"dynamic_smem=\d+; expected at least")
    if smem + k.resources.shared_bytes > lim.smem_per_block_optin:
        out.append(r"dynamic_smem=\d+; expected at most")
    cluster = cfg.cluster or k.cluster
    if cluster is not None:
        if not lim.cluster_launch:
            out.append("cannot launch clusters")
        if k.cluster and cfg.cluster and cfg.cluster != k.cluster:
            out.append(r"reqnctapercluster")
        top = 16 if cfg.non_portable_cluster else 8
        if prod(cluster) > top:
            out.append(rf"blocks; expected at most {top}")
        out += [rf"grid\.{a}={g} is not a multiple of cluster\.{a}={c}"
                for a, g, c in zip("xyz", cfg.grid, cluster) if g % c]
    return out


dims = st.tuples(st.integers(1, 70000), st.integers(1, 70000), st.integers(1, 70000))
small = st.tuples(st.integers(1, 1100), st.integers(1, 40), st.integers(1, 70))
clusters = st.none() | st.tuples(st.integers(1, 9), st.integers(1, 3), st.integers(1, 2))
blocks = st.sampled_from([(128, 1, 1), (256, 1, 1), (32, 4, 1)])
kernels = st.builds(
    FakeKernel,
    block=st.none() | blocks,
    block_exact=st.booleans(),
    cluster=st.none() | st.sampled_from([(2, 1, 1), (4, 1, 1)]),
    dynamic_smem=st.sampled_from([0, 1024, 64 * 1024]),
    resources=st.builds(FakeResources, st.sampled_from([0, 1024, 200 * 1024]))) | st.builds(
    StatedKernel, block=blocks, block_exact=st.booleans(), required_block=st.none() | blocks)
limits = st.builds(DeviceLimits, cluster_launch=st.booleans(),
                   smem_per_block_optin=st.sampled_from([48 * 1024, 232448]))


@given(grid=st.one_of(dims, st.tuples(st.sampled_from([1, 2, 4, 6, 8, 12, 16]), st.integers(1, 4), st.just(1))),
       block=small, cluster=clusters, smem=st.none() | st.integers(0, 240 * 1024),
       non_portable=st.booleans(), lim=limits, kernel=kernels)
@example(grid=(8, 1, 1), block=(128, 1, 1), cluster=(9, 1, 1), smem=0, non_portable=False,
         lim=DeviceLimits(), kernel=FakeKernel())
def test_validation_matches_model(grid, block, cluster, smem, non_portable, lim, kernel):
    cfg = LaunchConfig(grid, block, cluster, smem, non_portable)
    broken = violations(cfg, lim, kernel)
    if not broken:
        cfg.validate(lim, kernel)
        return
    with pytest.raises(LaunchError) as info:
        cfg.validate(lim, kernel)
    message = str(info.value)
    assert message.startswith(f"LaunchConfig of kernel 'k' on {lim.name}: ")
    assert any(re.search(rx, message) for rx in broken), (message, broken)


def test_block_over_1024_threads(fake_limits):
    with pytest.raises(LaunchError, match=r"block=\(64, 32, 1\) has 2048 threads; expected at most 1024"):
        LaunchConfig(1, (64, 32)).validate(fake_limits)


@pytest.mark.parametrize("kernel", [FakeKernel(block=(128, 1, 1), block_exact=True),
                                    StatedKernel(block=(256, 1, 1), required_block=(128,))],
                         ids=["reqntid", "required_block under a larger maxntid"])
def test_the_required_block_must_match(fake_limits, kernel):
    LaunchConfig(4, 128).validate(fake_limits, kernel)
    for smaller_or_other in (64, (64, 2), 256):
        with pytest.raises(LaunchError, match=r"block=\(.*\); expected exactly \(128, 1, 1\), the block the kernel "
                                              "is written for"):
            LaunchConfig(4, smaller_or_other).validate(fake_limits, kernel)


def test_no_stated_block_leaves_the_maxntid_bound(fake_limits):
    kernel = StatedKernel(block=(256, 1, 1), required_block=None)
    LaunchConfig(4, 64).validate(fake_limits, kernel)
    with pytest.raises(LaunchError, match=r"\.maxntid"):
        LaunchConfig(4, 512).validate(fake_limits, kernel)


def test_maxntid_bounds_the_product(fake_limits):
    kernel = FakeKernel(block=(256, 1, 1))
    LaunchConfig(4, (16, 16)).validate(fake_limits, kernel)
    with pytest.raises(LaunchError, match=r"expected at most 256, the kernel's \.maxntid"):
        LaunchConfig(4, (16, 17)).validate(fake_limits, kernel)


def test_register_bound_from_the_loaded_function(fake_limits):
    with pytest.raises(LaunchError, match="at most 512, the most this kernel runs with its register use"):
        LaunchConfig(1, 1024).validate(fake_limits, max_threads=512)


def test_smem_limits(fake_limits):
    LaunchConfig(1, 32, dynamic_smem=232448).validate(fake_limits)
    with pytest.raises(LaunchError, match=r"dynamic_smem=232449; expected at most 232448 bytes"):
        LaunchConfig(1, 32, dynamic_smem=232449).validate(fake_limits)
    with pytest.raises(LaunchError, match=r"expected at most 231424 bytes.*\(1024 bytes are static\)"):
        LaunchConfig(1, 32, dynamic_smem=232448).validate(fake_limits, static_smem=1024)


def test_smem_defaults_to_the_kernels_need(fake_limits):
    kernel = FakeKernel(dynamic_smem=4096)
    assert LaunchConfig(1, 32).smem_for(kernel) == 4096
    with pytest.raises(LaunchError, match="dynamic_smem=1024; expected at least 4096 bytes"):
        LaunchConfig(1, 32, dynamic_smem=1024).validate(fake_limits, kernel)


def test_cluster_rules(fake_limits):
    LaunchConfig(16, 128, cluster=8).validate(fake_limits)
    LaunchConfig(16, 128, cluster=16, non_portable_cluster=True).validate(fake_limits)
    with pytest.raises(LaunchError, match=r"cluster=\(16, 1, 1\) has 16 blocks; expected at most 8 \(up to 16 with"):
        LaunchConfig(16, 128, cluster=16).validate(fake_limits)
    with pytest.raises(LaunchError, match="expected at most 16$"):
        LaunchConfig(18, 128, cluster=(9, 2), non_portable_cluster=True).validate(fake_limits)
    with pytest.raises(LaunchError, match=r"grid.x=6 is not a multiple of cluster.x=4"):
        LaunchConfig(6, 128, cluster=4).validate(fake_limits)
    with pytest.raises(LaunchError, match="cannot launch clusters"):
        LaunchConfig(4, 128, cluster=2).validate(DeviceLimits(cluster_launch=False, cc=(8, 0)))


def test_declared_cluster(fake_limits):
    kernel = FakeKernel(cluster=(2, 1, 1))
    assert LaunchConfig(4, 32).effective_cluster(kernel) == (2, 1, 1)
    with pytest.raises(LaunchError, match="grid.x=3 is not a multiple of cluster.x=2"):
        LaunchConfig(3, 32).validate(fake_limits, kernel)
    with pytest.raises(LaunchError, match=r"cluster=\(4, 1, 1\); expected \(2, 1, 1\), the kernel's \.reqnctapercluster"):
        LaunchConfig(4, 32, cluster=4).validate(fake_limits, kernel)


@pytest.mark.parametrize("field_, value", [("grid", 0), ("grid", 1.5), ("block", (1, 2, 3, 4)), ("block", ()),
                                           ("cluster", (0, 1)), ("grid", True), ("block", "32")])
def test_shape_types(field_, value):
    args = {"grid": 1, "block": 1, field_: value}
    with pytest.raises(LaunchError, match=rf"LaunchConfig\.{field_}=.*expected a positive int or a tuple"):
        LaunchConfig(**args)


@pytest.mark.parametrize("smem", [-1, 1.0, "1"])
def test_smem_type(smem):
    with pytest.raises(LaunchError, match="LaunchConfig.dynamic_smem"):
        LaunchConfig(1, 1, dynamic_smem=smem)


def test_normalised_and_hashable():
    a = LaunchConfig(np.int64(4), [128, 2])
    assert a.grid == (4, 1, 1) and a.block == (128, 2, 1) and a.threads == 256
    assert a == LaunchConfig((4,), (128, 2, 1)) and hash(a) == hash(LaunchConfig(4, (128, 2)))
    assert a != LaunchConfig(4, (128, 2), dynamic_smem=0)


def test_a_compiled_reqntid_kernel_refuses_another_block(fake_limits):
    from pkptx.isa import Kernel
    k = Kernel("exact", [], req_threads=(32, 4))
    k.builder().ret()
    compiled = k.compile()
    assert required_block(compiled) == (32, 4, 1)
    LaunchConfig(2, (32, 4)).validate(fake_limits, compiled)
    with pytest.raises(LaunchError, match=r"kernel 'exact'.*block=\(128, 1, 1\); expected exactly \(32, 4, 1\)"):
        LaunchConfig(2, 128).validate(fake_limits, compiled)
