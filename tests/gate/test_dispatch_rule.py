"""A dispatch rule's profile (gate/dispatch_rule.profile_rule): each case keeps what the setting
it runs with measured, its instruction mix included, and the diagnosis reads it per case (issue 32
item 6)."""
from __future__ import annotations

from pathlib import Path

from kernel_forge.analysis.diagnosis import diagnose
from kernel_forge.model.candidate import parse_candidate
from kernel_forge.gate.dispatch_rule import profile_rule
from kernel_forge.model.task import load_task

ROOT = Path(__file__).resolve().parents[2]
MATMUL = load_task(ROOT / "manifests" / "matmul_f32.json")

RULE = """// kforge: grid = [cdiv(n, T), cdiv(m, T), 1]
// kforge: block = [T, T, 1]
// kforge: tune T = [16, 32]
// kforge: dispatch m*n*k >= 1073741824 -> T=32
// kforge: dispatch default -> T=16
extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k) {}
"""

#: a register-blocked loop (16 FFMA per shared load) and a shared-memory-bound one (1 FFMA per load)
BLOCKED = {"source": "sass", "hot_loop": {"start": "0x0100", "end": "0x0900", "instructions": 300,
                                          "counts": {"ffma": 256, "lds": 16}, "widths": {"lds": {"128": 16}}}}
SHARED = {"source": "sass", "hot_loop": {"start": "0x0100", "end": "0x0400", "instructions": 120,
                                         "counts": {"ffma": 32, "lds": 32}, "widths": {"lds": {"32": 32}}}}


class _Gate:
    """Profiles each setting as if it had been measured: T=32 register-blocked, T=16 not."""

    def __init__(self):
        self.asked: list[tuple[dict, tuple]] = []

    def profile(self, cand, cases):
        self.asked.append((dict(cand.defines), tuple(cases)))
        mix = BLOCKED if cand.defines["T"] == 32 else SHARED
        stalls = [{"reason": "mio_throttle", "share": 0.5}]
        return {"available": True, "reason": "", "tool": "ncu", "seconds": 1.0, "instruction_mix": mix,
                "cases": {c: {"stalls": stalls, "mio_issue_pct": 40.0} for c in cases}}


def test_each_case_keeps_the_instruction_mix_of_the_setting_it_runs_with():
    cand = parse_candidate(RULE, name="r.cu")
    gate = _Gate()
    prof = profile_rule(gate, MATMUL, cand, ["sq256", "rect", "large"])
    assert sorted(gate.asked, key=str) == sorted([({"T": 16}, ("sq256", "rect")), ({"T": 32}, ("large",))], key=str)
    assert prof["instruction_mixes"] == {"sq256": SHARED, "rect": SHARED, "large": BLOCKED}
    assert "instruction_mix" not in prof          # never one setting's mix for every case


def test_the_diagnosis_names_each_cases_limit_from_its_own_settings_mix():
    cand = parse_candidate(RULE, name="r.cu")
    prof = profile_rule(_Gate(), MATMUL, cand, ["sq256", "rect", "large"])
    ev = {"cases": [{"name": n, "role": "performance", "timing": {"median": t, "p10": t, "p90": t}}
                    for n, t in (("sq256", 8.0), ("rect", 9.0), ("large", 3100.0))]}
    d = diagnose(MATMUL, ev, profile=prof)
    # the shared-memory-bound default setting names shared-memory issue with its 1 FFMA per LDS;
    # the large case's register-blocked setting is not told so
    assert d.case("sq256").limiter["key"] == "shared_issue"
    assert "hot loop 1.0 FFMA per shared-memory load, 32-bit LDS" in d.case("sq256").limiter["evidence"]
    assert "16.0 FFMA per shared-memory load" in d.case("large").limiter["evidence"]
    text = d.render()
    assert "Instruction mix of the setting of sq256, rect:" in text
    assert "Instruction mix of the setting of large:" in text
