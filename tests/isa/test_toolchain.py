"""The nvJitLink wrapper: the on-disk cache (hits, keys, concurrent writers, opting out) and the resource
report parsed from the assembler's info log."""
from __future__ import annotations

import multiprocessing
import os

import pytest

from pkptx.isa import Kernel, Param, address, f32, u32, u64
from pkptx.toolchain import assemble, parse_resources
from tests.helpers.assemble import Sandbox

PTX = ".version 8.0\n.target {arch}\n.address_size 64\n.visible .entry k(.param .u32 n)\n{{\n\tret;\n}}\n"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PKPTX_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PKPTX_CACHE", raising=False)
    return tmp_path


def entries(root):
    return sorted(p.name for p in root.iterdir())


def test_second_assemble_comes_from_the_cache(cache):
    first = assemble(PTX.format(arch="sm_90"), "sm_90")
    second = assemble(PTX.format(arch="sm_90"), "sm_90")
    assert not first.from_cache and second.from_cache
    assert second.data == first.data and second.key == first.key and second.resources == first.resources
    assert second.seconds < first.seconds and second.seconds < 0.01
    assert entries(cache) == [f"{first.key}.cubin", f"{first.key}.json"]


def test_key_depends_on_text_arch_and_options(cache):
    base = assemble(PTX.format(arch="sm_90a"), "sm_90a")
    keys = {base.key,
            assemble(PTX.format(arch="sm_90"), "sm_90").key,
            assemble(PTX.format(arch="sm_90a"), "sm_90a", options=("-Xptxas=-O2",)).key,
            assemble(PTX.format(arch="sm_90a") + "\n", "sm_90a").key}
    assert len(keys) == 4
    assert assemble(PTX.format(arch="sm_90a"), "sm_90a").from_cache


def test_cache_can_be_disabled(cache, monkeypatch):
    monkeypatch.setenv("PKPTX_CACHE", "0")
    assert not assemble(PTX.format(arch="sm_90"), "sm_90").from_cache
    assert not assemble(PTX.format(arch="sm_90"), "sm_90").from_cache
    assert entries(cache) == []


def test_use_cache_false_bypasses_it(cache):
    assemble(PTX.format(arch="sm_90"), "sm_90")
    assert not assemble(PTX.format(arch="sm_90"), "sm_90", use_cache=False).from_cache


def test_a_corrupt_entry_is_rebuilt(cache):
    first = assemble(PTX.format(arch="sm_90"), "sm_90")
    (cache / f"{first.key}.cubin").write_bytes(b"garbage")
    again = assemble(PTX.format(arch="sm_90"), "sm_90")
    assert not again.from_cache and again.data == first.data
    assert assemble(PTX.format(arch="sm_90"), "sm_90").from_cache


def test_compiled_kernels_use_the_cache(cache):
    sb = Sandbox()
    kernel = sb.finish()
    assert not kernel.compile().cubin.from_cache
    assert kernel.compile().cubin.from_cache


def _writer(args):
    root, ptx, arch = args
    os.environ["PKPTX_CACHE_DIR"] = root
    cubin = assemble(ptx, arch)
    return cubin.key, cubin.data


def test_concurrent_writers_do_not_corrupt_the_cache(cache):
    """Several processes compile the same kernels into one cache at once (as MPI ranks do)."""
    kernels = [PTX.format(arch="sm_90").replace("ret;", "ret;\n" * i) for i in range(1, 4)]
    jobs = [(str(cache), ptx, "sm_90") for ptx in kernels for _ in range(4)]
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        results = pool.map(_writer, jobs)
    by_key = {}
    for key, data in results:
        by_key.setdefault(key, set()).add(data)
    assert len(by_key) == 3 and all(len(datas) == 1 for datas in by_key.values())
    names = entries(cache)
    assert not [n for n in names if n.endswith(".tmp")], names       # no half-written leftovers
    assert sorted(names) == sorted(f"{k}.{ext}" for k in by_key for ext in ("cubin", "json"))
    for ptx in kernels:
        hit = assemble(ptx, "sm_90")
        assert hit.from_cache and hit.data in by_key[hit.key]


# ------------------------------------------------------------------ resources
def test_resources_from_a_real_kernel():
    sb = Sandbox()
    sb.b.bar_sync(3)
    big = sb.k.shared("big", 5000)
    sb.b.st(u32, address(big), sb.r(u32), space="shared")
    compiled = sb.finish().compile(use_cache=False)
    res = compiled.resources
    assert res.registers > 0 and res.spills == 0 and res.stack_bytes == 0
    assert res.shared_bytes >= 5000
    assert res.barriers == 4                                   # named barriers 0..3


def test_spills_are_reported():
    k = Kernel("spill", [Param("x", u64, pointer=True)], max_regs=24)
    b = k.builder()
    x = b.load_param("x")
    values = [b.ld(f32, address(x, 4 * i), space="global", sem="volatile") for i in range(48)]
    acc = values[-1]
    for v in reversed(values[:-1]):
        acc = b.fma(f32, acc, v, values[24], rnd="rn")
    for i, v in enumerate(values):
        b.st(f32, address(x, 512 + 4 * i), b.add(f32, v, acc), space="global")
    b.ret()
    res = k.compile(use_cache=False).resources
    assert res.registers <= 24 and res.spill_stores > 0 and res.spill_loads > 0 and res.stack_bytes > 0
    assert res.spills == res.spill_stores + res.spill_loads


def test_parse_resources_from_a_log():
    log = ("ptxas info    : Compiling entry function 'k' for 'sm_90a'\n"
           "ptxas info    : Function properties for k\n"
           "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
           "ptxas info    : Used 40 registers, used 2 barriers, 4096 bytes smem\n"
           "info    : Function properties for 'k':\n"
           "info    : used 40 registers, used 6 barriers, 16 stack, 5120 bytes smem, 536 bytes cmem[0]\n")
    res = parse_resources(log)
    assert (res.registers, res.stack_bytes, res.spill_stores, res.spill_loads) == (40, 16, 8, 12)
    assert res.shared_bytes == 5120        # the linker's final figure (includes the reserved 1 KiB)
    assert res.barriers == 2               # ptxas' named-barrier count, not the linker's
    assert parse_resources("") == type(res)()
