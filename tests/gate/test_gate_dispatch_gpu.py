"""GPU: a dispatch rule on the matmul regblock template through the strict gate, holdout included,
each case with the setting its shape picks (the 4096^3 case with the large tiles)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from kernel_forge.model.candidate import load_candidate
from kernel_forge.model.dispatch import Branch, Rule
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.gate.gate import Gate
from kernel_forge.model.task import load_task

from tests.support.paths import ROOT

pytestmark = pytest.mark.gpu

#: the fastest setting of the template on 4096^3 and on the two small cases (H200, tests/data/dispatch)
LARGE = {"BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 8, "MINB": 1}
SMALL = {"BM": 32, "BN": 32, "BK": 32, "TM": 4, "TN": 4, "MINB": 1}


def regblock_rule():
    template = load_candidate(ROOT / "kernel_forge" / "kernels" / "gemm" / "matmul_f32_regblock.cu")
    rule = Rule((Branch("m*n*k >= 1073741824", LARGE), Branch(None, SMALL)))
    return replace(template, name="regblock-rule.cu", dispatch=rule, defines=dict(SMALL))


def test_a_rule_on_the_matmul_template_passes_the_strict_gate_and_runs_4096_cubed_with_the_large_tiles():
    task = load_task(ROOT / "manifests" / "matmul_f32.json")
    cand = regblock_rule()
    with Gate(task, GateOptions()) as gate:
        assert gate.options.strict
        gate.precompile([cand])
        ev = gate.evaluate(cand, roles=("correctness", "performance", "holdout"))
    assert ev.passed, ev.message
    by = {c.name: c for c in ev.cases}
    assert set(by) == {"odd", "k1", "row", "sq256", "rect", "large", "holdout"}
    assert all(c.passed for c in ev.cases)
    large = by["large"]
    assert large.variant == {"branch": 0, "when": "m*n*k >= 1073741824", "defines": dict(sorted(LARGE.items()))}
    # the launch it ran is the large setting's: 128x128 tiles, (128/8)*(128/8) = 256 threads
    assert large.launch == {"grid": [32, 32, 1], "block": [256, 1, 1], "shared_mem": 0}
    assert large.timing is not None and large.resources["threads_per_block"] == 256
    for name in ("odd", "k1", "row", "sq256", "rect", "holdout"):
        assert by[name].variant["branch"] == 1, name
        assert by[name].launch["block"] == [64, 1, 1], name          # (32/4)*(32/4) threads
    assert len(by["holdout"].seeds) == 1 and by["sq256"].timing is not None
    assert len(ev.compile["variants"]) == 2
    assert ev.score_us is not None and ev.dispatch == cand.dispatch.to_json()


def test_side_by_side_retiming_of_a_rule_keeps_each_case_on_its_setting():
    task = load_task(ROOT / "manifests" / "matmul_f32.json")
    cand = regblock_rule()
    with Gate(task, GateOptions()) as gate:
        (ev,) = gate.retime([cand], rounds=2)
    assert ev.passed, ev.message
    assert {c.name: c.variant["branch"] for c in ev.cases} == {"sq256": 1, "rect": 1, "large": 0}


def test_a_rule_that_only_speeds_up_4096_cubed_moves_the_best_case_by_case_side_by_side():
    """Issue 30's a0108 on the GPU: the rule runs the small cases with the very setting of the best,
    so only the large case can differ; its gain must move the best, whatever the 8 µs cases' spread."""
    from kernel_forge.common.stats import median_uncertainty
    from kernel_forge.search.selection import compare

    task = load_task(ROOT / "manifests" / "matmul_f32.json")
    template = load_candidate(ROOT / "kernel_forge" / "kernels" / "gemm" / "matmul_f32_regblock.cu")
    one_setting = replace(template, name="small-everywhere.cu", defines=dict(SMALL))
    with Gate(task, GateOptions()) as gate:
        best_ev, rule_ev = gate.retime([one_setting, regblock_rule()], rounds=2)
    assert best_ev.passed and rule_ev.passed, (best_ev.message, rule_ev.message)
    for ev in (best_ev, rule_ev):
        for c in ev.cases:
            assert len(c.timing.round_medians) == 2 and median_uncertainty(c.timing) < 0.05, c.name
    cmp = compare(best_ev, rule_ev, 0.01)
    assert cmp.faster == ["large"] and cmp.slower == [], cmp.describe()
    assert cmp.moves


def test_profiling_a_rule_keeps_each_cases_instruction_mix_and_the_diagnosis_reads_it():
    """Issue 32 item 6: the merged profile of a rule dropped the instruction mix.  Each case keeps
    the mix of the setting it runs with: the 8x8 register tile of 4096^3 issues 16 FFMA per LDS.128
    (64 per 4), the 4x4 tile of the small cases 8 (16 per 2)."""
    from kernel_forge.analysis.diagnosis import diagnose
    from kernel_forge.gpu.instruction_mix import ratios

    task = load_task(ROOT / "manifests" / "matmul_f32.json")
    cand = regblock_rule()
    with Gate(task, GateOptions()) as gate:
        ev = gate.evaluate(cand)
        prof = gate.profile(cand, ["sq256", "rect", "large"])
    mixes = prof.get("instruction_mixes") or {}
    assert set(mixes) == {"sq256", "rect", "large"} and "instruction_mix" not in prof
    assert mixes["sq256"] == mixes["rect"] and mixes["large"] != mixes["sq256"]
    assert ratios(mixes["large"])["ffma_per_lds"] > ratios(mixes["sq256"])["ffma_per_lds"] >= 4
    d = diagnose(task, ev.to_json(), device=gate.device_info(), calibration=gate.calibrate(), profile=prof)
    text = d.render()
    assert "Instruction mix of the setting of sq256, rect:" in text and "Instruction mix of the setting of large:" in text


def test_a_composite_of_the_simt_and_split_tf32_kernels_passes_the_strict_gate_each_case_on_its_kernel():
    """A kernel per shape (kernel_forge.model.composite): the split-TF32 wgmma GEMM on 4096^3, the
    SIMT regblock GEMM elsewhere, in one file, through the strict gate with the holdout."""
    from kernel_forge.model.composite import IMPL, compose
    from kernel_forge.model.limits import target_arch

    task = load_task(ROOT / "manifests" / "matmul_f32.json")
    simt = load_candidate(ROOT / "kernel_forge" / "kernels" / "gemm" / "matmul_f32_regblock.cu")
    wg = load_candidate(ROOT / "kernel_forge" / "kernels" / "gemm" / "gemm_tf32x3_wgmma.cu")
    comp = compose([simt, wg], task.launch)
    rule = Rule((Branch("m*n*k >= 1073741824", {**comp.defines, **wg.defines, IMPL: 1}),
                 Branch(None, {**comp.defines, **SMALL, IMPL: 0})))
    cand = replace(comp, name="composite.cu", dispatch=rule, defines=dict(rule.default.defines))
    with Gate(task, GateOptions()) as gate:
        if target_arch(gate.arch) != "sm_90a":
            pytest.skip(f"wgmma needs an sm_90a GPU ({gate.arch})")
        gate.precompile([cand])
        ev = gate.evaluate(cand, roles=("correctness", "performance", "holdout"))
    assert ev.passed, ev.message
    by = {c.name: c for c in ev.cases}
    assert by["large"].variant["defines"][IMPL] == 1 and by["large"].launch["block"] == [128 * wg.defines["WGS"], 1, 1]
    assert all(by[n].variant["defines"][IMPL] == 0 for n in ("odd", "k1", "row", "sq256", "rect", "holdout"))
    assert len(ev.compile["variants"]) == 2
