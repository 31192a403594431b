"""When the assembler rejects a kernel, the AssemblyError names the PTX line and the Python line that
emitted it (here: raw_ptx lines, the one escape hatch the table does not check)."""
from __future__ import annotations

import pytest

from pkptx.errors import AssemblyError
from pkptx.isa import u32
from pkptx.toolchain import assemble
from tests.helpers.assemble import Sandbox, assert_assembles
from tests.helpers.errors import caller_line


def test_bad_raw_line_is_mapped_to_the_pythoncaller_line():
    sb = Sandbox()
    sb.b.raw_ptx("add.u32 %r0, %bogus, 1;"); bad = caller_line()  # noqa: E702 - the line number is the point
    with pytest.raises(AssemblyError) as info:
        assert_assembles(sb.finish())
    message = str(info.value)
    assert "%bogus" in message and "ptxas" in message
    assert f"{__file__}:{bad}" in message
    assert any(origin.startswith(f"{__file__}:{bad}") for origin in info.value.origins.values())
    assert "error" in info.value.log


def test_every_rejected_line_is_reported():
    sb = Sandbox()
    sb.b.raw_ptx("mul.u32 %r0, %n0, 3;"); first = caller_line()  # noqa: E702 - mul on an int needs .lo/.hi
    sb.b.add(u32, sb.r(u32), 1)
    sb.b.raw_ptx("ld.global.f16 %r1, [%ptr0];"); second = caller_line()  # noqa: E702 - no .f16 loads
    with pytest.raises(AssemblyError) as info:
        assert_assembles(sb.finish())
    message = str(info.value)
    assert f"{__file__}:{first}" in message and f"{__file__}:{second}" in message
    assert "mul.u32 %r0, %n0, 3;" in message and "ld.global.f16" in message


def test_plain_ptx_without_origins_still_quotes_thecaller_line():
    ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n\tbogus.instruction;\n\tret;\n}\n"
    with pytest.raises(AssemblyError) as info:
        assemble(ptx, "sm_90", use_cache=False)
    assert "PTX line 6: bogus.instruction;" in str(info.value)
    assert info.value.origins == {6: ""}


def test_raw_ptx_tracks_the_registers_it_names():
    sb = Sandbox()
    out = sb.b.reg(u32, "raw_out")
    sb.b.raw_ptx(f"add.u32 {out.name}, %n0, 1;", defines=[out], uses=[sb.r(u32)])
    sb.b.st(u32, sb.g(), out, space="global")          # reads the register the raw line wrote
    compiled = assert_assembles(sb.finish())
    assert f"\tadd.u32 {out.name}, %n0, 1;" in compiled.ptx
