"""The attempt ledger and its lessons, and history kernels in the prompt keeping their main loop (the
clipping itself: tests/model/test_clip.py)."""
from __future__ import annotations

from pathlib import Path

from kernel_forge.search import reflection
from kernel_forge.model.clip import hot_loop
from kernel_forge.records.attempt import Attempt
from kernel_forge.search.prompt_blocks import PromptAttempt
from kernel_forge.search.prompts import PromptContext, build_prompt_parts
from kernel_forge.model.task import load_task

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "kernel_forge" / "kernels" / "gemm"     # the matmul_f32 templates of the library


def ev(**cases) -> dict:
    return {"cases": [{"name": k, "role": "performance", "timing": {"median": v}} for k, v in cases.items()]
            + [{"name": "holdout", "role": "holdout", "timing": {"median": 1.0}}]}


def att(i, *, parent="a0000", technique="", status="passed", reason="passed", cases=None, pred=None,
        proposer="model", label=None, tunables=None, defines=None, iteration=1, message="") -> Attempt:
    from kernel_forge.common.stats import geomean
    score = geomean(list(cases.values())) if cases and status == "passed" else None
    return Attempt(id=f"a{i:04d}", iteration=iteration, proposer=proposer, label=label or f"a{i:04d}", parent=parent,
                   status=status, reason=reason, score_us=score, evaluation=ev(**cases) if cases else None,
                   technique=technique, predicted_speedup=pred, tunables=tunables or {}, defines=defines or {},
                   message=message)


def history():
    return [att(0, parent=None, proposer="initial", cases={"small": 10.0, "large": 1000.0}, iteration=0),
            att(1, technique="cmp:regblock", cases={"small": 8.0, "large": 500.0}, pred=1.6),
            att(2, technique="stall:mio_throttle", status="failed", reason="compile_error"),
            att(3, technique="mem:coalesce", cases={"small": 10.02, "large": 999.0}),
            att(4, technique="focus:large", parent="a0001", cases={"small": 9.0, "large": 600.0}, iteration=2),
            att(5, technique="stall:mio_throttle", parent="a0001", status="failed", reason="holdout_failed",
                iteration=2),
            att(6, technique="lat:parallel", parent="a0001", proposer="model", label="tuned", tunables={"B": [1, 2]},
                defines={"B": 1}, cases={"small": 7.0, "large": 450.0}, iteration=2),
            att(7, technique="lat:parallel", parent="a0001", proposer="model", label="tuned", tunables={"B": [1, 2]},
                defines={"B": 2}, status="failed", reason="mismatch", iteration=2)]


def test_every_proposal_gets_one_line_with_its_verdict_against_its_parent():
    rows = reflection.ledger_lines(history(), noise=0.01)
    lines = [r[0] for r in rows]
    assert len(lines) == 6                                   # the tuned proposal's two settings share a line
    assert lines[0] == ("- a0001 [cmp:regblock] from a0000: passed 63.25 µs; x1.58 vs a0000 (gain) — small x1.25, "
                        "large x2.00; predicted x1.60, measured x1.58")
    assert lines[1] == "- a0002 [stall:mio_throttle] from a0000: failed: compile_error"
    assert "x1.00 vs a0000 (within noise)" in lines[2]
    assert "x0.86 vs a0001 (SLOWER)" in lines[3] and "small x0.89, large x0.83" in lines[3]
    assert lines[4] == "- a0005 [stall:mio_throttle] from a0001: failed a hidden case"
    assert lines[5].startswith("- a0006..a0007 [lat:parallel] from a0001: 2 settings, fastest a0006 (B=1), 1 failed;")
    assert "(gain)" in lines[5]


def test_the_lessons_say_what_to_try_again_and_what_to_avoid():
    text = reflection.ledger_section(history(), noise=0.01)
    assert text.startswith("# Attempt ledger")
    assert "Try again (these techniques gained; build on them from the current best): cmp:regblock (1 gained); " \
           "lat:parallel (1 gained)" in text
    assert "Avoid (failed or slower, never a gain; do not repeat them as they were done): stall:mio_throttle " \
           "(2 failed); focus:large (1 slower)" in text
    assert "No measurable effect so far: mem:coalesce (1 within noise)" in text
    assert "holdout" not in text.replace("hidden", "")


def test_a_long_ledger_keeps_its_newest_lines_and_counts_the_rest():
    xs = [att(0, parent=None, proposer="initial", cases={"small": 10.0, "large": 1000.0}, iteration=0)]
    xs += [att(i, technique=f"t{i % 3}", cases={"small": 10.0 + i, "large": 1000.0}) for i in range(1, 60)]
    text = reflection.ledger_section(xs, noise=0.01, limit=10)
    assert "- (49 earlier proposals: 49 slower; counted in the lists below)" in text
    assert "- a0059 [" in text and "- a0049 [" not in text


def test_the_profile_change_is_shown_where_both_kernels_were_profiled():
    before = {"available": True, "cases": {"large": {"dram_pct": 45.0, "sm_pct": 60.0,
                                                     "stalls": [{"reason": "long_scoreboard", "share": 0.5}]}}}
    after = {"available": True, "cases": {"large": {"dram_pct": 31.0, "sm_pct": 82.0,
                                                    "stalls": [{"reason": "mio_throttle", "share": 0.4}]}}}
    assert reflection.profile_change(after, before) == \
        "large: DRAM 45→31%, SM 60→82%, top stall long_scoreboard→mio_throttle"
    assert reflection.profile_change(after, {"available": False}) == ""
    xs = history()
    profiles = {"a0000": before, "a0001": after}
    lines = [r[0] for r in reflection.ledger_lines(xs, profile=lambda a: profiles.get(a.id))]
    assert lines[0].endswith("; profile large: DRAM 45→31%, SM 60→82%, top stall long_scoreboard→mio_throttle")


# ------------------------------------------------------------------------------ clipping

def hot_text(src: str) -> str:
    loop = hot_loop(src)
    lines = src.splitlines()
    return "\n".join(lines[loop.first_line:loop.last_line + 1])


def test_history_kernels_in_the_prompt_keep_their_main_loop():
    task = load_task(ROOT / "manifests" / "matmul_f32.json")
    src = (TEMPLATES / "matmul_f32_regblock.cu").read_text() + "\n" + "\n".join(f"// note {i}" for i in range(200))
    best = PromptAttempt(id="a0009", source="// best\n", passed=True, reason="passed", message="", score_us=50.0)
    hist = PromptAttempt(id="a0003", source=src, passed=True, reason="passed", message="", score_us=70.0)
    _, dynamic = build_prompt_parts(PromptContext(task, reference_source="def reference(**kw): pass\n", device=None,
                                                  calibration=None, best=best, history=[hist], failures=[]))
    assert "## a0003" in dynamic and hot_text(src) in dynamic
    assert "after the main loop:" in dynamic
