"""The instruction mix of a compiled kernel: parsing SASS (nvdisasm) and PTX (NVRTC), the hot
loop, vector widths, the ratios the diagnosis reads -- on real kernels compiled here (no GPU)."""
from __future__ import annotations

from pathlib import Path

import pytest

from kernel_forge.model.candidate import load_candidate
from kernel_forge.gpu.instruction_mix import hot_loop, loops, mix_for_candidate, mix_of, parse_ptx, parse_sass, ratios, render

ROOT = Path(__file__).resolve().parents[2]
TILED = ROOT / "kernel_forge" / "kernels" / "gemm" / "matmul_f32_tiled.cu"
WARPTILE = ROOT / "kernel_forge" / "kernels" / "gemm" / "gemm_simt_warptile.cu"

SASS = """
	.section	.text.other,"ax",@progbits
other:
        /*0000*/                   FFMA R1, R2, R3, R1 ;
//--------------------- .text.k          --------------------------
	.section	.text.k,"ax",@progbits
k:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;
.L_x_1:
        /*0020*/                   LDS.128 R8, [R0] ;
        /*0030*/                   LDS R12, [R0+0x80] ;
        /*0040*/                   FFMA R20, R8, R12, R20 ;
        /*0050*/                   FFMA R21, R9, R12, R21 ;
        /*0060*/                   HFMA2.MMA R22, -RZ, RZ, 0, 0 ;
        /*0070*/               @P0 BRA `(.L_x_1) ;
        /*0080*/                   STG.E.128 desc[UR4][R2.64], R20 ;
        /*0090*/                   LDL R30, [R1] ;
        /*00a0*/                   EXIT ;
.L_x_2:
        /*00b0*/                   BRA `(.L_x_2);
"""

PTX = """
.visible .entry k(
	.param .u64 k_param_0
)
{
	ld.param.u64 	%rd1, [k_param_0];
	ld.global.nc.v4.f32 	{%f1, %f2, %f3, %f4}, [%rd1];
$L__BB0_1:
	ld.shared.v4.f32 	{%f5, %f6, %f7, %f8}, [%r1];
	ld.shared.f32 	%f9, [%r1+128];
	fma.rn.f32 	%f10, %f5, %f9, %f10;
	cp.async.cg.shared.global [%r2], [%rd1], 16;
	@%p1 bra 	$L__BB0_1;
	st.global.v2.f32 	[%rd1], {%f10, %f10};
	ret;
}
"""


def test_sass_of_one_function_is_counted_by_kind_with_vector_widths_and_its_loop():
    listing = parse_sass(SASS, "k")
    ops = [i.op for i in listing.instrs]
    assert ops[0] == "LDC" and "FFMA" in ops and len(listing.instrs) == 12          # not the other function's
    assert loops(listing) == [(0x20, 0x70), (0xb0, 0xb0)]
    assert hot_loop(listing) == (0x20, 0x70)                                           # the one with the FFMAs
    from kernel_forge.gpu.instruction_mix import summarise
    mix = summarise(listing, source="sass", tool="nvdisasm", arch="sm_90", defines={}).to_json()
    assert mix["kernel"]["ldg"] == 1 and mix["kernel_widths"]["ldg"] == {"128": 1}
    assert mix["kernel"]["ldl"] == 1 and mix["kernel"].get("hfma2", 0) == 0         # HFMA2.MMA is a move
    hl = mix["hot_loop"]
    assert (hl["start"], hl["end"], hl["instructions"]) == ("0x0020", "0x0070", 6)
    assert hl["counts"] == {"lds": 2, "ffma": 2, "other": 1, "branch": 1}
    assert hl["widths"] == {"lds": {"128": 1, "32": 1}}
    r = ratios(mix)
    assert r["ffma_per_lds"] == 1.0 and r["lds_bits"] == 128
    assert "1 local-memory (spill) instructions" in render(mix)


def test_ptx_is_counted_the_same_way():
    listing = parse_ptx(PTX, "k")
    cats = [i.category for i in listing.instrs]
    assert cats == ["other", "ldg", "lds", "lds", "ffma", "ldgsts", "branch", "stg", "branch"]
    widths = [i.width for i in listing.instrs if i.category in ("ldg", "lds", "ldgsts", "stg")]
    assert widths == [128, 128, 32, 128, 64]
    assert hot_loop(listing) == (2, 6)
    assert parse_ptx(PTX, "nope").instrs == []


@pytest.fixture(scope="module")
def nvrtc():
    pytest.importorskip("cuda.bindings.nvrtc")


def test_the_32x32_tile_issues_5_lds_per_4_ffma_in_its_hot_loop(nvrtc):
    cand = load_candidate(TILED).with_defines({"TILE": 32, "RPT": 4})
    mix = mix_of(cand.source, arch="sm_90", entry="matmul_f32", defines=cand.compile_defines(), prefer="ptx").to_json()
    assert mix["source"] == "ptx" and mix["tool"].startswith("NVRTC ")
    hl = mix["hot_loop"]["counts"]
    assert hl["ffma"] == 128 and hl["lds"] == 160 and hl["bar"] == 2
    assert mix["hot_loop"]["widths"]["lds"] == {"32": 160}
    assert "(5 LDS per 4 FFMA)" in render(mix)


def test_the_warp_tiled_sgemm_issues_16_ffma_per_128_bit_lds(nvrtc):
    cand = load_candidate(WARPTILE)
    mix = mix_of(cand.source, arch="sm_90", entry="matmul_f32", defines=cand.compile_defines(), prefer="ptx")
    r = ratios(mix)
    assert r["ffma_per_lds"] == 16.0 and r["lds_bits"] == 128
    assert mix.hot_loop["widths"]["ldg"]["128"] >= 2                  # float4 global loads in the main loop
    assert mix.kernel.get("ldl", 0) == 0 and mix.kernel.get("stl", 0) == 0


def test_sass_is_used_where_nvdisasm_is_found_and_agrees_with_ptx_on_the_memory_mix(nvrtc):
    from kernel_forge.gpu.disasm import find_nvdisasm
    if find_nvdisasm() is None:
        pytest.skip('no nvdisasm (pip install "cuda-toolkit[nvdisasm]")')
    cand = load_candidate(TILED).with_defines({"TILE": 32, "RPT": 4})
    sass = mix_of(cand.source, arch="sm_90", entry="matmul_f32", defines=cand.compile_defines())
    ptx = mix_of(cand.source, arch="sm_90", entry="matmul_f32", defines=cand.compile_defines(), prefer="ptx")
    assert sass.source == "sass" and sass.tool.startswith("nvdisasm") and not sass.note
    for k in ("ffma", "lds", "sts", "ldg"):
        assert sass.hot_loop["counts"][k] == ptx.hot_loop["counts"][k], k
    assert sass.hot_loop["start"].startswith("0x")


def test_without_nvdisasm_the_mix_says_it_counted_ptx(nvrtc, monkeypatch, tmp_path):
    from kernel_forge.gpu import disasm
    monkeypatch.setenv("KFORGE_NVDISASM", str(tmp_path / "missing-nvdisasm"))
    disasm._find.cache_clear()
    try:
        cand = load_candidate(TILED)
        mix = mix_of(cand.source, arch="sm_90", entry="matmul_f32", defines=cand.compile_defines())
    finally:
        disasm._find.cache_clear()
    assert mix.source == "ptx" and "nvdisasm" in mix.note and "counted from PTX" in mix.note
    assert "[SASS needs nvdisasm" in render(mix)


def test_a_kernel_that_does_not_compile_gives_an_error_entry_not_an_exception(nvrtc):
    from kernel_forge.model.candidate import parse_candidate
    bad = parse_candidate('extern "C" __global__ void matmul_f32(const float* a) { this is not cuda; }',
                          name="bad.cu")
    got = mix_for_candidate(bad, "matmul_f32", "sm_90")
    assert set(got) == {"error"} and "could not compile" in got["error"]


def test_a_kernel_without_loops_reports_the_whole_kernel(nvrtc):
    cand = load_candidate(ROOT / "kernel_forge" / "kernels" / "elementwise" / "vector_add_vec4.cu")
    mix = mix_of(cand.source, arch="sm_90", entry="vector_add", defines=cand.compile_defines(), prefer="ptx")
    assert mix.hot_loop is None and mix.kernel["ldg"] >= 4
    assert mix.kernel_widths["ldg"]["128"] >= 4 and "whole kernel (no loop)" in render(mix)


def test_kforge_compile_mix_prints_the_instruction_mix(nvrtc):
    from click.testing import CliRunner

    from kernel_forge.app.cli import cli

    r = CliRunner().invoke(cli, ["compile", str(TILED), "--arch", "sm_90", "--mix", "-D", "RPT=4", "-D", "TILE=32"])
    assert r.exit_code == 0, r.output
    lines = r.output.strip().splitlines()
    assert lines[0].startswith(f"compiled {TILED} for sm_90") and lines[1].startswith("instruction mix (")
    assert "128 FFMA" in lines[1] and "(5 LDS per 4 FFMA)" in lines[1]
