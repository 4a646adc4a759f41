"""The optimisation loop and its evidence on a machine without a GPU.

The gate is :class:`tests.support.fakes.ScriptedGate` (verdicts scripted by ``// fake:`` comments in each
kernel), proposals come from replay folders or from the real Anthropic/OpenAI SDKs talking to
the loopback server in tests/support/loopback.py.  Every run goes through ``optimize.start_run`` /
``resume_run`` with the gate injected, so run.json, env.json and manifest.json are the real ones.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import fields
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from kernel_forge.app.cli import cli
from kernel_forge.common.errors import InputError
from kernel_forge.evidence.run_dir import schema
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.config.file import load_config_file
from kernel_forge.app.run_setup import resume_run
from kernel_forge.proposers.ensemble import EnsembleProposer
from kernel_forge.proposers.models import make_model_proposer
from kernel_forge.proposers.pricing import cost
from kernel_forge.proposers.replay import ReplayProposer
from kernel_forge.gate.recorded import RecordedGate
from kernel_forge.model.task import load_task
from kernel_forge.model.verdict import REASONS

from tests.support.fakes import ScriptedGate, vector_add, write_proposals
from tests.support.gpu_probe import gpu_present  # noqa: F401  (used by skipif strings)
from tests.support.loop_runs import (ANTHROPIC_KEY, KEYS, MANIFEST, OPENAI_KEY, RESUME_PROPS, SPECS, TUNED_HEADER,
                                     model_proposer, new_run, outline, prompt_of, read, validate_all)
from tests.support.loopback import raw_arguments, text, tool

ROOT = Path(__file__).resolve().parents[2]
HOLDOUT_WORD = re.compile(r"\bholdout\b", re.IGNORECASE)   # the case's name ("holdout_failed" is a reason code)
HOLDOUT_N = "3145745"                                       # the holdout case's n

# this SDK release flags claude-sonnet-4-5 as deprecated; that is not what is tested here
pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")


@pytest.fixture(scope="module")
def task():
    return load_task(MANIFEST)


def attempts_by_label(hist: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for a in hist["attempts"]:
        out.setdefault(a["label"], []).append(a)
    return out


def body_lines(text: str) -> list[str]:
    """The kernel without its rendered ``// kforge:`` header."""
    return [l for l in text.splitlines() if not l.lstrip().startswith("// kforge:")]


def layout(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())


# ------------------------------------------------------------------------------ a replay run

def test_replay_run_wrong_slower_faster(tmp_path):
    props = {"01_wrong.cu": vector_add("mismatch 300"), "02_slower.cu": vector_add("pass 800"),
             "03_faster.cu": vector_add("pass 400")}
    opt = new_run(tmp_path, props, max_iterations=10)
    summary = opt.run()
    run = opt.run_dir
    hist = read(run, "history.json")
    by = attempts_by_label(hist)

    (wrong,), (slower,), (faster,) = by["01_wrong.cu"], by["02_slower.cu"], by["03_faster.cu"]
    assert (wrong["status"], wrong["reason"], wrong["best"]) == ("failed", "mismatch", False)
    assert wrong["message"].startswith("case odd:") and "differ" in wrong["message"]
    assert (slower["status"], slower["best"]) == ("passed", False)
    assert slower["score_us"] == pytest.approx(800)
    assert (faster["status"], faster["best"]) == ("passed", True)
    assert faster["retimed"]["best_id"] == "a0000" and faster["retimed"]["candidate_us"] == pytest.approx(400)
    assert [a["id"] for a in hist["attempts"]] == ["a0000", "a0001", "a0002", "a0003"]

    on_disk = read(run, "summary.json")
    assert on_disk == json.loads(json.dumps(summary))
    assert on_disk["stop_reason"].startswith("proposer_exhausted: all 3 recorded proposals")
    assert on_disk["iterations"] == 3 and on_disk["gated"] == 4 and on_disk["passed"] == 3
    assert on_disk["rejected"] == {"mismatch": 1}
    best = on_disk["best"]
    assert best["id"] == faster["id"] and best["label"] == "03_faster.cu"
    assert best["speedup_vs_initial"] == pytest.approx(600 / 400)
    assert best["speedup_vs_baselines"]["cupy_add"] == pytest.approx(250 / 400)
    assert best["holdout"] == {"passed": True, "reason": "passed", "message": "", "final": True}
    assert {r["case"] for r in best["per_case"]} == {"n16M", "n64M"}
    for r in best["per_case"]:
        assert r["speedup_vs_initial"] == pytest.approx(1.5)
        assert r["speedup_vs_baselines"]["cupy_add"] == pytest.approx(250 / 400)
    assert on_disk["initial"]["score_us"] == pytest.approx(600)

    # best.cu is the faster proposal's source under its rendered header, and replays on its own
    best_cu = (run.path / "best.cu").read_text()
    assert body_lines(best_cu) == body_lines(props["03_faster.cu"])
    assert best_cu == (run.path / faster["source_file"]).read_text()
    req = read(run, "best-case-n16M.json")
    assert req["attempt"] == faster["id"] and req["kernel"] == "best.cu" and req["role"] == "performance"
    assert req["median_us"] == pytest.approx(400 * 0.5)          # n16M moves a quarter of n64M's bytes
    assert req["launch"] == {"grid": [65536, 1, 1], "block": [256, 1, 1], "shared_mem": 0}
    assert not (run.path / "best-case-holdout.json").exists()

    names = validate_all(run)
    assert {"run.json", "history.json", "summary.json", "env.json", "manifest.json"} <= set(names)
    assert {"best-case-odd.json", "best-case-tiny.json", "best-case-n16M.json", "best-case-n64M.json"} <= set(names)
    for png in ("progress.png", "cases.png"):
        assert (run.path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (run.path / "report.md").read_text()
    assert f"## Best: {faster['id']}" in report and "x1.50 vs the initial kernel" in report
    assert "| a0001 | 1 | replay | 01_wrong.cu |  | mismatch |" in report


def test_schemas_are_strict(tmp_path):
    opt = new_run(tmp_path, [vector_add("mismatch 300"), vector_add("pass 400")], max_iterations=5)
    opt.run()
    hist = read(opt.run_dir, "history.json")
    hist_schema = schema("history.schema.json")
    jsonschema.validate(hist, hist_schema)

    def broken(change):
        h = json.loads(json.dumps(hist))
        change(h)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(h, hist_schema)

    broken(lambda h: h["attempts"][1].update(status="ok"))
    broken(lambda h: h["attempts"][1].update(reason="wrong_answer"))
    broken(lambda h: h["attempts"][1].update(reason="passed"))          # failed with reason passed
    broken(lambda h: h["attempts"][2].update(status="pending"))        # pending with a verdict
    broken(lambda h: h["attempts"][1].pop("sha256"))
    broken(lambda h: h["attempts"][2]["evaluation"]["cases"][2]["timing"].pop("median"))
    broken(lambda h: h["state"].pop("iteration"))
    summary = read(opt.run_dir, "summary.json")
    summary["stop_reason"] = "bored"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(summary, schema("summary.schema.json"))


def test_schemas_match_the_code():
    """Enums and config fields in the schemas follow the code they describe."""
    hist = schema("history.schema.json")
    assert set(hist["$defs"]["case"]["properties"]["reason"]["enum"]) == set(REASONS)
    assert set(hist["$defs"]["attempt"]["properties"]["reason"]["enum"]) == set(REASONS) | {"holdout_failed", ""}
    run = schema("run.schema.json")["properties"]
    assert set(run["loop"]["properties"]) == {f.name for f in fields(LoopConfig)}
    assert set(run["gate"]["properties"]) == {f.name for f in fields(GateOptions)}
    assert set(run["proposer"]["properties"]) == {f.name for f in fields(ProposerConfig)}
    for name in ("run", "history", "summary", "env", "model_call", "replay_request"):
        s = schema(f"{name}.schema.json")
        jsonschema.Draft202012Validator.check_schema(s)
        assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        # every property is required, except those a release added (their description says runs of
        # earlier releases lack them, so that those runs still read)
        added = {k for k, v in s["properties"].items() if "earlier releases" in v.get("description", "")}
        assert set(s["required"]) == set(s["properties"]) - added
        missing = [k for k, v in s["properties"].items() if not v.get("description")]
        assert not missing, f"{name}: top-level properties without a description: {missing}"


# ------------------------------------------------------------------------ moving the best

def test_faster_within_noise_does_not_move_best(tmp_path):
    opt = new_run(tmp_path, {"01_half_percent.cu": vector_add("pass 597"), "02_two_percent.cu": vector_add("pass 588")},
                  max_iterations=5, min_improvement=0.01)
    opt.run()
    by = attempts_by_label(read(opt.run_dir, "history.json"))
    (small,), (real,) = by["01_half_percent.cu"], by["02_two_percent.cu"]
    assert small["status"] == "passed" and small["best"] is False
    assert small["message"].startswith("not faster beyond noise")
    assert small["retimed"]["noise"] == pytest.approx(0.01)      # the gate's own band is ~0.1 %
    assert real["best"] is True
    assert read(opt.run_dir, "summary.json")["best"]["id"] == real["id"]


def test_measured_noise_band_beats_min_improvement(tmp_path, task):
    """With noisy timings (p20-p80 band ~6 %) a 2 % gain is not enough either."""
    opt = new_run(tmp_path, [vector_add("pass 588")], gate=ScriptedGate(task, noise=0.1), max_iterations=5)
    opt.run()
    a = read(opt.run_dir, "history.json")["attempts"][1]
    assert a["best"] is False and a["retimed"]["noise"] > 0.05
    assert read(opt.run_dir, "summary.json")["best"]["id"] == "a0000"


def test_holdout_failure_is_rejected_and_hidden_from_the_prompt(tmp_path):
    opt = new_run(tmp_path, {"01_overfit.cu": vector_add("pass 300", holdout="fail"),
                             "02_slower.cu": vector_add("mismatch 900")}, max_iterations=5)
    opt.run()
    hist = read(opt.run_dir, "history.json")
    (cheat,) = attempts_by_label(hist)["01_overfit.cu"]
    assert (cheat["status"], cheat["reason"], cheat["best"]) == ("failed", "holdout_failed", False)
    assert cheat["holdout"]["passed"] is False and cheat["holdout"]["final"] is False
    assert HOLDOUT_N in cheat["holdout"]["message"]          # the evidence keeps the gate's details
    summary = read(opt.run_dir, "summary.json")
    assert summary["best"]["id"] == "a0000" and summary["best"]["holdout"] is None
    assert summary["rejected"] == {"holdout_failed": 1, "mismatch": 1}

    prompt = opt._prompt()
    assert f"- {cheat['id']}: holdout_failed" in prompt and "failed a hidden case" in prompt
    assert "- a0002: mismatch" in prompt
    assert "n16M" in prompt and "odd" in prompt                # shown cases are there
    # failed sources are shown; their scripted-gate lines ("// fake-holdout:", FAKE_SCRIPT) are test artifacts
    unscripted = "\n".join(l for l in prompt.splitlines() if "fake" not in l.lower())
    assert not HOLDOUT_WORD.search(unscripted), "the holdout case's name reached the prompt"
    assert HOLDOUT_N not in prompt
    # the initial kernel's own evaluation holds the holdout case; the prompt must not show it
    assert any(c["role"] == "holdout" for c in hist["attempts"][0]["evaluation"]["cases"])
    validate_all(opt.run_dir)


# --------------------------------------------------------------------------------- tunables

@pytest.mark.parametrize("budget, settings, best_block", [
    (2, [64, 32, 128], 128),                    # default + min, then the neighbour of the better one
    (24, [64, 32, 128, 256, 512, 1024], 256),   # all six; neighbours of 256 were all tried
])
def test_tunables_expand_within_budget_and_refine(tmp_path, budget, settings, best_block):
    opt = new_run(tmp_path, {"01_tuned.cu": vector_add("pass 400", header=TUNED_HEADER)}, search="greedy",
                  max_iterations=3, tune_budget=budget)
    opt.run()
    hist = read(opt.run_dir, "history.json")
    tuned = attempts_by_label(hist)["01_tuned.cu"]
    assert [a["defines"]["BLOCK"] for a in tuned] == settings
    assert all(a["status"] == "passed" and a["iteration"] == 1 for a in tuned)
    assert all(a["tunables"] == {"BLOCK": [64, 32, 128, 256, 512, 1024]} for a in tuned)
    # the gate's optimum is BLOCK=256: each 2x away costs 10 %
    for a in tuned:
        assert a["score_us"] == pytest.approx(400 * (1 + 0.1 * abs(math.log2(a["defines"]["BLOCK"] / 256))))
    neighbours = [a for a in tuned if a["rationale"].startswith("neighbour of")]
    if budget == 2:
        assert len(neighbours) == 1 and neighbours[0]["parent"] == tuned[0]["id"]   # BLOCK=64 was the better
    else:
        assert neighbours == []
    summary = read(opt.run_dir, "summary.json")
    assert summary["best"]["defines"] == {"BLOCK": best_block}
    best_cu = (opt.run_dir.path / "best.cu").read_text()
    assert f"// kforge: define BLOCK = {best_block}" in best_cu
    req = read(opt.run_dir, "best-case-n16M.json")
    assert req["launch"]["block"] == [best_block, 1, 1] and req["launch"]["grid"] == [16777216 // best_block, 1, 1]
    validate_all(opt.run_dir)


def test_model_proposals_with_tunables_refine_separately(tmp_path, task):
    """Two unlabeled proposals in one iteration are two groups: each is refined around its own best."""
    from kernel_forge.proposers.base import Proposal, ProposalResult

    class Two:
        name = "scripted"
        needs_prompt = True

        def propose(self, request):
            src = lambda t: vector_add(t, header=TUNED_HEADER)  # noqa: E731
            return ProposalResult(proposals=[Proposal(source=src("pass 400"), proposer="scripted"),
                                             Proposal(source=src("pass 420"), proposer="scripted")])

    opt = new_run(tmp_path, proposer=Two(), max_iterations=1, candidates=2, tune_budget=2, search="greedy")
    opt.run()
    hist = read(opt.run_dir, "history.json")
    groups = attempts_by_label(hist)
    del groups["vector_add.cu"]
    assert sorted(groups) == ["a0001", "a0003"]           # each proposal labelled by its first attempt
    for members in groups.values():
        assert [a["defines"]["BLOCK"] for a in members] == [64, 32, 128]


# ------------------------------------------------------------------------------- stop rules

@pytest.mark.parametrize("loop, sources, reason, iterations", [
    ({"max_iterations": 2}, ["pass 500", "pass 450", "pass 400", "pass 350"], "max_iterations", 2),
    ({"max_iterations": 9, "patience": 2}, ["pass 800", "pass 700", "pass 900", "pass 100"], "patience", 2),
    ({"max_iterations": 9, "target_speedup": 1.2}, ["pass 300", "pass 200"], "target_speedup", 1),
    ({"max_iterations": 9, "time_limit_s": 1e-6}, ["pass 300"], "time_limit", 0),
    ({"max_iterations": 9}, ["pass 500"], "proposer_exhausted: all 1 recorded proposals", 1),
])
def test_stop_rules(tmp_path, loop, sources, reason, iterations):
    opt = new_run(tmp_path, [vector_add(s) for s in sources], **loop)
    returned = opt.run()
    summary = read(opt.run_dir, "summary.json")
    assert summary["stop_reason"].startswith(reason) and returned["stop_reason"] == summary["stop_reason"]
    assert summary["iterations"] == iterations
    assert summary["attempts"] == 1 + iterations
    hist = read(opt.run_dir, "history.json")
    assert hist["state"]["iteration"] == iterations
    if reason == "patience":
        assert hist["state"]["since_improvement"] == 2
    validate_all(opt.run_dir)


class ClockGate(ScriptedGate):
    """Each gated candidate takes ``step`` seconds of the run's clock (no real waiting)."""

    def __init__(self, task, step: float = 10.0, **kw):
        super().__init__(task, **kw)
        self.step, self.opt = step, None

    def evaluate(self, candidate, *, roles=("correctness", "performance")):
        if self.opt is not None:
            self.opt.state.elapsed_before += self.step
        return super().evaluate(candidate, roles=roles)


def test_time_limit_is_checked_before_every_candidate_and_resume_finishes(tmp_path, task):
    """A limit reached in the middle of a tuned iteration: the remaining settings stay pending, the
    best of those gated is still settled, and --resume with a longer limit gates the rest."""
    props = {"01_tuned.cu": vector_add("pass 400", header=TUNED_HEADER)}
    gate = ClockGate(task)
    opt = new_run(tmp_path, props, gate=gate, max_iterations=3, tune_budget=6, time_limit_s=25, search="greedy")
    gate.opt = opt
    lines = []
    opt.progress = lines.append
    summary = opt.run()
    assert lines[-1] == (f"[kforge] 4 candidate(s) left ungated; to gate them: "
                         f"kforge optimize --resume {opt.run_dir.path} --time-limit LONGER")
    hist = read(opt.run_dir, "history.json")
    tuned = attempts_by_label(hist)["01_tuned.cu"]
    assert summary["stop_reason"] == "time_limit"
    assert [a["status"] for a in tuned] == ["passed", "passed", "pending", "pending", "pending", "pending"]
    assert not [a for a in tuned if a["rationale"].startswith("neighbour of")]     # no refinement
    assert summary["best"]["defines"] == {"BLOCK": 64}           # 64 beat 32 and the initial kernel
    assert hist["state"]["settled"] is True
    validate_all(opt.run_dir)

    resumed = resume_run(opt.run_dir.path, gate=ScriptedGate(task), overrides={"time_limit_s": 25})
    assert resumed.run()["stop_reason"] == "time_limit"          # still out of time: nothing gated
    assert [a["status"] for a in attempts_by_label(read(opt.run_dir, "history.json"))["01_tuned.cu"]][2:] == \
        ["pending"] * 4

    summary = resume_run(opt.run_dir.path, gate=ScriptedGate(task), overrides={"time_limit_s": 1000}).run()
    tuned = attempts_by_label(read(opt.run_dir, "history.json"))["01_tuned.cu"]
    assert all(a["status"] == "passed" for a in tuned)
    assert summary["best"]["defines"] == {"BLOCK": 256}
    validate_all(opt.run_dir)


@pytest.mark.parametrize("rule, limit, iterations", [("budget_usd", 0.02, 3), ("max_tokens", 1500, 1)])
def test_budget_and_token_stops_with_a_model(tmp_path, loopback, clean_env, rule, limit, iterations):
    for t in (500, 450, 400, 350):
        loopback.script("anthropic", tool({"source": vector_add(f"pass {t}"), "rationale": "faster"},
                                          input_tokens=1000, output_tokens=500))
    # no per-call budget check here (the proposer is built without one): the loop's own stop between iterations
    proposer = make_model_proposer(SPECS["anthropic"], base_url=loopback.anthropic_base_url,
                                   api_key=ANTHROPIC_KEY, request_timeout_s=5, max_tokens=1000)
    opt = new_run(tmp_path, proposer=proposer, prop=ProposerConfig(models=[SPECS["anthropic"]], max_tokens=1000),
                  max_iterations=9, **{rule: limit})
    opt.run()
    summary = read(opt.run_dir, "summary.json")
    per_call = cost("anthropic", "claude-sonnet-5-5", 1000, 500).usd           # 0.007 by the shipped table
    assert per_call == pytest.approx(1000 * 2.0 / 1e6 + 500 * 10.0 / 1e6)
    assert summary["stop_reason"] == rule and summary["iterations"] == iterations
    assert summary["cost_usd"] == pytest.approx(iterations * per_call)
    assert summary["tokens"] == {"input": 1000 * iterations, "output": 500 * iterations}
    assert len(loopback.requests("anthropic")) == iterations


def test_the_budget_is_checked_before_every_call_and_never_overshot(tmp_path, loopback, clean_env):
    from kernel_forge.proposers.budget import Budget

    budget = 0.05
    for t in range(500, 100, -20):
        loopback.script("anthropic", tool({"source": vector_add(f"pass {t}"), "rationale": "faster"},
                                          input_tokens=1000, output_tokens=500))
    proposer = make_model_proposer(SPECS["anthropic"], base_url=loopback.anthropic_base_url, api_key=ANTHROPIC_KEY,
                                   request_timeout_s=5, max_tokens=1000, budget=Budget(budget))
    opt = new_run(tmp_path, proposer=proposer, prop=ProposerConfig(models=[SPECS["anthropic"]], max_tokens=1000),
                  max_iterations=20, budget_usd=budget)
    opt.run()
    summary = read(opt.run_dir, "summary.json")
    calls = [read(opt.run_dir, p.name) for p in opt.run_dir.model_calls()]
    assert summary["stop_reason"] == "budget_usd"
    # it stopped because the next call's worst case no longer fitted, not because the money ran out
    assert summary["cost_usd"] < budget and len(calls) == len(loopback.requests("anthropic")) >= 1
    assert summary["iterations"] == len(calls) + 1             # the refused iteration made no call
    for c in calls:                                          # each call held its worst case, above what it cost
        assert c["plan"]["budget_reserved_usd"] >= c["cost_usd"] > 0
    left = budget - summary["cost_usd"]
    assert calls[-1]["plan"]["budget_reserved_usd"] > left    # the next call (a longer prompt) did not fit
    history = read(opt.run_dir, "history.json")
    assert history["state"]["cost_usd"] == pytest.approx(sum(c["cost_usd"] for c in calls))


# ----------------------------------------------------------------------------------- resume

@pytest.mark.parametrize("kill, pending_after_kill", [
    ({"evaluate": 3}, ["a0002"]),     # during the second attempt of iteration 1
    ({"retime": 1}, []),              # after both were gated, while deciding the best
])
def test_resume_after_a_kill(tmp_path, task, kill, pending_after_kill):
    ref = new_run(tmp_path / "ref", RESUME_PROPS, max_iterations=9, candidates=2)
    ref.run()

    opt = new_run(tmp_path, RESUME_PROPS, gate=ScriptedGate(task, interrupt=kill), max_iterations=9, candidates=2)
    with pytest.raises(KeyboardInterrupt):
        opt.run()
    path = opt.run_dir.path
    killed = read(path, "history.json")
    assert read(path, "summary.json")["stop_reason"] == "interrupted"
    assert [a["id"] for a in killed["attempts"] if a["status"] == "pending"] == pending_after_kill
    assert killed["state"]["settled"] is False
    assert not any(a["best"] for a in killed["attempts"][1:])       # the best was not decided yet
    validate_all(opt.run_dir)

    gate = ScriptedGate(task)
    opt2 = resume_run(path, gate=gate)
    assert opt2.proposer.position == 2                             # 01 and 02 are not asked again
    summary = opt2.run()
    hist = read(path, "history.json")
    assert [a["label"] for a in hist["attempts"]] == ["vector_add.cu", *RESUME_PROPS]
    assert len({a["id"] for a in hist["attempts"]}) == len(hist["attempts"])
    assert all(a["status"] != "pending" for a in hist["attempts"])
    first = [c for c in gate.calls if c[0] == "evaluate"][0]
    if pending_after_kill:       # the pending attempt is gated first, nothing is gated twice
        assert first == ("evaluate", "a0002.cu", ("correctness", "performance"))
    else:                        # the settle step resumes: 01_fast's holdout check comes first
        assert first == ("evaluate", "a0001.cu", ("holdout",))
    assert not [c for c in gate.calls if c[0] == "baseline"]       # baselines come from history
    assert ("evaluate", "a0001.cu", ("correctness", "performance")) not in gate.calls
    # the same decisions and the same files as a run that was never killed
    assert outline(hist) == outline(read(ref.run_dir, "history.json"))
    assert hist["attempts"][1]["best"] is True                     # 01_fast was best after iteration 1
    assert summary["best"]["id"] == "a0003" and summary["iterations"] == 2
    assert summary["stop_reason"].startswith("proposer_exhausted")
    assert layout(path) == layout(ref.run_dir.path)
    validate_all(opt2.run_dir)


def test_resume_of_a_tuned_iteration_refines_once(tmp_path, task):
    """Killed while deciding the best of a tuned proposal (settings and their neighbour gated):
    the resumed run does not refine the neighbour again."""
    props = {"01_tuned.cu": vector_add("pass 400", header=TUNED_HEADER), "02_slow.cu": vector_add("pass 900")}
    ref = new_run(tmp_path / "ref", props, max_iterations=9, tune_budget=2, search="greedy")
    ref.run()
    opt = new_run(tmp_path, props, gate=ScriptedGate(task, interrupt={"retime": 1}), max_iterations=9, tune_budget=2,
                  search="greedy")
    with pytest.raises(KeyboardInterrupt):
        opt.run()
    assert [a["defines"] for a in read(opt.run_dir, "history.json")["attempts"][1:]] == \
        [{"BLOCK": 64}, {"BLOCK": 32}, {"BLOCK": 128}]
    summary = resume_run(opt.run_dir.path, gate=ScriptedGate(task)).run()
    hist = read(opt.run_dir, "history.json")
    assert outline(hist) == outline(read(ref.run_dir, "history.json"))
    assert [a["defines"].get("BLOCK") for a in hist["attempts"][1:]] == [64, 32, 128, None]
    assert summary["best"]["defines"] == {"BLOCK": 128}


def test_ctrl_c_skips_the_final_holdout_check(tmp_path, task):
    props = [vector_add("pass 400"), vector_add("pass 300")]
    gate = ScriptedGate(task, interrupt={"evaluate": 4})   # initial, 01, 01's holdout, then 02
    opt = new_run(tmp_path, props, gate=gate, max_iterations=9)
    with pytest.raises(KeyboardInterrupt):
        opt.run()
    assert gate.calls[-1] == ("evaluate", "a0002.cu", ("correctness", "performance"))   # nothing after the kill
    best = read(opt.run_dir, "summary.json")["best"]
    assert best["id"] == "a0001" and best["holdout"]["final"] is False
    summary = resume_run(opt.run_dir.path, gate=ScriptedGate(task)).run()
    assert summary["best"]["id"] == "a0002" and summary["best"]["holdout"]["final"] is True


def test_failing_initial_kernel_stops_with_error_evidence(tmp_path, task):
    from kernel_forge.common.errors import KForgeError

    class WrongInitial(ScriptedGate):
        @staticmethod
        def script(source):
            return ("mismatch", 600.0) if "// fake:" not in source else ScriptedGate.script(source)

    opt = new_run(tmp_path, [vector_add("pass 400")], gate=WrongInitial(task), max_iterations=3)
    with pytest.raises(KForgeError, match="initial kernel fails the gate"):
        opt.run()
    summary = read(opt.run_dir, "summary.json")
    assert summary["stop_reason"] == "error" and summary["best"] is None and summary["iterations"] == 0
    validate_all(opt.run_dir)
    # resuming gates the initial kernel again instead of optimising from a failed one
    with pytest.raises(KForgeError, match="initial kernel fails the gate"):
        resume_run(opt.run_dir.path, gate=WrongInitial(task)).run()
    assert len(read(opt.run_dir, "history.json")["attempts"]) == 1


def test_kill_while_proposing_does_not_use_up_an_iteration(tmp_path):
    class KillOnSecond(ReplayProposer):
        calls = 0

        def propose(self, request):
            KillOnSecond.calls += 1
            if KillOnSecond.calls == 2:
                raise KeyboardInterrupt
            return super().propose(request)

    props = write_proposals(tmp_path / "props", [vector_add("pass 500"), vector_add("pass 400")])
    opt = new_run(tmp_path, props_dir=props, proposer=KillOnSecond(props), max_iterations=9)
    with pytest.raises(KeyboardInterrupt):
        opt.run()
    assert read(opt.run_dir, "summary.json")["iterations"] == 1
    assert read(opt.run_dir, "history.json")["state"]["iteration"] == 1
    summary = resume_run(opt.run_dir.path, gate=ScriptedGate(load_task(MANIFEST))).run()
    assert summary["iterations"] == 2 and summary["best"]["id"] == "a0002"


# ----------------------------------------------------------------------- model proposers

def assert_no_secret(path: Path, key: str) -> None:
    for f in path.rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            assert key.encode() not in data, f"the API key is in {f}"
            assert b"test-secret-123456789" not in data, f"part of the API key is in {f}"


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_model_proposer_in_the_loop(tmp_path, loopback, clean_env, task, provider):
    loopback.script(provider,
                    tool({"source": vector_add("mismatch 400"), "rationale": "float4 loads"}, input_tokens=1200),
                    tool({"source": vector_add("pass 400"), "rationale": "grid-stride loop"}, output_tokens=700,
                         input_tokens=1000),
                    tool({"source": vector_add("pass 300"), "rationale": "unrolled by 4"}, input_tokens=1000))
    proposer = model_proposer(provider, loopback)
    opt = new_run(tmp_path, proposer=proposer, prop=ProposerConfig(models=[SPECS[provider]],
                                                                   base_url=loopback.url), max_iterations=3)
    summary = opt.run()
    run = opt.run_dir
    calls = [read(run, p.name) for p in run.model_calls()]
    assert [p.name for p in run.model_calls()] == ["model-001.json", "model-002.json", "model-003.json"]
    assert [c["iteration"] for c in calls] == [1, 2, 3] and [c["index"] for c in calls] == [1, 2, 3]
    assert [(c["input_tokens"], c["output_tokens"]) for c in calls] == [(1200, 500), (1000, 700), (1000, 500)]
    model = SPECS[provider].split(":", 1)[1]
    for c in calls:
        assert c["provider"] == provider and c["error"] is None and c["response"] is not None
        assert c["cost_usd"] == pytest.approx(cost(provider, model, c["input_tokens"], c["output_tokens"]).usd)
        assert c["cost_usd"] > 0
    summary = read(run, "summary.json")
    assert summary["tokens"] == {"input": sum(c["input_tokens"] for c in calls),
                                 "output": sum(c["output_tokens"] for c in calls)}
    assert summary["cost_usd"] == pytest.approx(sum(c["cost_usd"] for c in calls))
    assert summary["per_model"][SPECS[provider]]["calls"] == 3
    hist = read(run, "history.json")
    assert [a["model_calls"] for a in hist["attempts"][1:]] == [["model-001.json"], ["model-002.json"], ["model-003.json"]]
    assert [a["cost_usd"] for a in hist["attempts"][1:]] == [pytest.approx(c["cost_usd"]) for c in calls]
    assert [a["tokens"] for a in hist["attempts"][1:]] == [{"input": c["input_tokens"], "output": c["output_tokens"]}
                                                          for c in calls]
    assert [a["proposer"] for a in hist["attempts"][1:]] == [SPECS[provider]] * 3
    assert summary["best"]["id"] == "a0003" and summary["proposer"] == SPECS[provider]

    # what the model was told
    bodies = [r.body for r in loopback.requests(provider)]
    assert len(bodies) == 3
    prompts = [prompt_of(provider, b) for b in bodies]
    for p in prompts:
        assert task.signature.text in p
    assert "# Current best: a0000" in prompts[0] and "Recent failures" not in prompts[0]
    assert "fix a0001 (mismatch)" in prompts[1]                  # iteration 2 is the fix turn of a0001
    assert "# Current best: a0002" in prompts[2] and "// fake: pass 400" in prompts[2]   # the new best's source
    for b in bodies:
        dumped = json.dumps(b)
        assert not HOLDOUT_WORD.search(dumped) and HOLDOUT_N not in dumped

    # the key went over the wire (a header) and into no file of the run
    assert any(KEYS[provider] in v for r in loopback.requests(provider) for v in r.headers.values())
    assert_no_secret(run.path, KEYS[provider])
    assert set(validate_all(run)) >= {"model-001.json", "model-002.json", "model-003.json", "run.json"}


def test_ensemble_round_robin_by_iteration(tmp_path, loopback, clean_env):
    for t in (500, 400):
        loopback.script("anthropic", tool({"source": vector_add(f"pass {t}"), "rationale": "a"}))
    loopback.script("openai", tool({"source": vector_add("pass 450"), "rationale": "o"}))
    ens = EnsembleProposer([model_proposer("anthropic", loopback), model_proposer("openai", loopback)])
    opt = new_run(tmp_path, proposer=ens, prop=ProposerConfig(models=list(SPECS.values())), max_iterations=3)
    summary = opt.run()
    calls = [read(opt.run_dir, p.name) for p in opt.run_dir.model_calls()]
    assert [(c["iteration"], c["provider"]) for c in calls] == [(1, "anthropic"), (2, "openai"), (3, "anthropic")]
    assert len(loopback.requests("anthropic")) == 2 and len(loopback.requests("openai")) == 1
    assert summary["proposer"] == "+".join(SPECS.values())
    assert {k: v["calls"] for k, v in summary["per_model"].items()} == {SPECS["anthropic"]: 2, SPECS["openai"]: 1}
    assert_no_secret(opt.run_dir.path, ANTHROPIC_KEY)
    assert_no_secret(opt.run_dir.path, OPENAI_KEY)
    validate_all(opt.run_dir)


@pytest.mark.parametrize("provider, bad", [
    ("anthropic", text("I would vectorise it, but here is no code.")),
    ("openai", raw_arguments('{"source": "extern \\"C\\" __global__ void vector_add(')),
])
def test_malformed_answer_is_repaired_once(tmp_path, loopback, clean_env, provider, bad):
    loopback.script(provider, bad, tool({"source": vector_add("pass 400"), "rationale": "fixed"}))
    opt = new_run(tmp_path, proposer=model_proposer(provider, loopback),
                  prop=ProposerConfig(models=[SPECS[provider]]), max_iterations=1)
    summary = opt.run()
    first, second = (read(opt.run_dir, p.name) for p in opt.run_dir.model_calls())
    assert first["error"].startswith("invalid answer:") and second["error"] is None
    assert first["iteration"] == second["iteration"] == 1
    (a,) = read(opt.run_dir, "history.json")["attempts"][1:]
    assert a["model_calls"] == ["model-001.json", "model-002.json"] and a["status"] == "passed"
    assert summary["best"]["id"] == a["id"]
    assert summary["per_model"][SPECS[provider]]["calls"] == 2
    reqs = loopback.requests(provider)
    assert len(reqs) == 2
    turns = reqs[1].body.get("messages") or reqs[1].body["input"]
    last = turns[-1]
    repair = last["content"] if isinstance(last["content"], str) else last["content"][0].get("text", "")
    assert "could not be used" in repair and "```cuda" in repair
    validate_all(opt.run_dir)


# ------------------------------------------------------------------------------------ config

def test_shipped_example_config_builds():
    path = resources.files("kernel_forge").joinpath("data/optimize.example.json")
    cfg = load_config_file(str(path))
    loop = LoopConfig(**cfg["loop"])
    gate = GateOptions(**cfg["gate"])
    prop = ProposerConfig(**cfg["proposer"])
    assert (loop.max_iterations, loop.candidates, loop.budget_usd, loop.patience, loop.tune_budget) == (7, 2, 5.0, 3, 24)
    assert (gate.warmup, gate.reps) == (10, 100)
    assert prop.models == ["anthropic:claude-sonnet-5-5"] and prop.kind == "models"
    # a current model, and one whose worst-case request fits the example's budget
    from kernel_forge.app.run_setup import check_budget_prices
    from kernel_forge.proposers import capabilities
    assert capabilities.entries()["anthropic:claude-sonnet-5-5"].status == "current"
    check_budget_prices(prop, loop.budget_usd)
    assert cfg["$comment"]
    assert (ROOT / cfg["manifest"]).is_file()


def test_config_unknown_key_names_its_path(tmp_path):
    p = tmp_path / "cfg.json"
    p.write_text(json.dumps({"loop": {"max_iterations": 3, "xyz": 1}}))
    with pytest.raises(InputError, match=r"\$\.loop\.xyz"):
        load_config_file(p)
    p.write_text(json.dumps({"loops": {}}))
    with pytest.raises(InputError, match=r"\$\.loops"):
        load_config_file(p)


# ----------------------------------------------------------------------------- RecordedGate

def test_recorded_gate_replays_a_finished_run(tmp_path):
    props = write_proposals(tmp_path / "props", {
        "01_wrong.cu": vector_add("mismatch 300"), "02_tuned.cu": vector_add("pass 450", header=TUNED_HEADER),
        "03_overfit.cu": vector_add("pass 200", holdout="fail"), "04_faster.cu": vector_add("pass 380"),
        "05_slow.cu": vector_add("pass 900")})
    loop = dict(max_iterations=9, tune_budget=3, search="greedy")
    first = new_run(tmp_path / "a", props_dir=props, **loop)
    s1 = first.run()
    recorded = RecordedGate.from_run(first.run_dir.path)
    again = new_run(tmp_path / "b", props_dir=props, gate=recorded, **loop)
    s2 = again.run()
    # a0002-a0004: 02_tuned at BLOCK 64, 32, 1024 (budget 3), a0005 its neighbour 128, a0006 overfit
    assert s2["best"]["id"] == s1["best"]["id"] == "a0007"
    assert outline(read(again.run_dir, "history.json")) == outline(read(first.run_dir, "history.json"))
    assert s2["rejected"] == s1["rejected"] == {"mismatch": 1, "holdout_failed": 1}
    assert ("retime", ("a0000.cu", "a0005.cu")) in recorded.calls
    assert ("retime", ("a0005.cu", "a0007.cu")) in recorded.calls
    validate_all(again.run_dir)


# ---------------------------------------------------------------------------------------- CLI

@pytest.fixture
def kforge(monkeypatch):
    monkeypatch.chdir(ROOT)
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_cli_replay_and_model_are_exclusive(kforge, tmp_path):
    r = kforge("optimize", MANIFEST, "--replay", tmp_path, "--model", "anthropic:claude-sonnet-4-5",
               "--runs-dir", tmp_path / "runs")
    assert r.exit_code == 2
    assert "--replay and --model are exclusive" in r.stderr
    assert not (tmp_path / "runs").exists()


def test_cli_resume_needs_a_run_folder(kforge, tmp_path):
    r = kforge("optimize", "--resume", tmp_path)
    assert r.exit_code == 2
    assert "is not a kforge run folder (no run.json)" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.skipif("gpu_present()", reason="checks the no-GPU path")
def test_cli_optimize_without_gpu_explains_the_tuner(kforge, tmp_path):
    r = kforge("optimize", MANIFEST, "--runs-dir", tmp_path / "runs")
    assert r.exit_code == 3
    assert "no model configured: using the built-in tuner" in r.stderr
    assert "To use an LLM: --model anthropic:claude-sonnet-5-5" in r.stderr
    assert "no usable NVIDIA GPU" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists()                      # no run folder without a GPU


def test_cli_approve_a_finished_run(kforge, tmp_path):
    opt = new_run(tmp_path, [vector_add("pass 400")], max_iterations=3)
    summary = opt.run()
    approvals, dest = tmp_path / "ci" / "approved.json", tmp_path / "ci" / "kernels"
    r = kforge("approve", opt.run_dir.path, "--into", approvals, "--copy-to", dest)
    assert r.exit_code == 0, r.output + r.stderr
    assert "approved" in r.output and "x1.50 vs initial" in r.output
    (entry,) = json.loads(approvals.read_text())["approved"]
    kernel = dest / "vector_add.cu"
    assert kernel.read_text() == (opt.run_dir.path / "best.cu").read_text()
    assert entry["sha256"] == hashlib.sha256(kernel.read_bytes()).hexdigest()
    assert entry["speedup_vs_initial"] == pytest.approx(summary["best"]["speedup_vs_initial"])
    assert (entry["task"], entry["from_run"], entry["device"]) == ("vector_add", opt.run_dir.path.name,
                                                                   "NVIDIA H200 (scripted)")
    assert (approvals.parent / entry["kernel"]).resolve() == kernel.resolve()


def test_cli_approve_refuses_a_best_that_failed_the_final_holdout(kforge, tmp_path):
    # passes the holdout when it becomes best, fails the final check with fresh values
    opt = new_run(tmp_path, [vector_add("pass 400", holdout="flaky")], max_iterations=3)
    summary = opt.run()
    assert summary["best"]["id"] == "a0001"
    assert summary["best"]["holdout"]["passed"] is False and summary["best"]["holdout"]["final"] is True
    approvals = tmp_path / "approved.json"
    r = kforge("approve", opt.run_dir.path, "--into", approvals, "--copy-to", tmp_path / "k")
    assert r.exit_code == 2
    assert "failed the final holdout check" in r.stderr
    assert not approvals.exists()


def test_cli_report_redraws_a_finished_run(kforge, tmp_path):
    opt = new_run(tmp_path, [vector_add("pass 400")], max_iterations=2)
    opt.run()
    run = opt.run_dir.path
    for name in ("report.md", "progress.png", "cases.png"):
        (run / name).unlink()
    r = kforge("report", run)
    assert r.exit_code == 0, r.output + r.stderr
    text = (run / "report.md").read_text()
    assert "## Best: a0001" in text and "x1.50 vs the initial kernel" in text
    assert (run / "progress.png").read_bytes()[:4] == b"\x89PNG"
    r = kforge("report", tmp_path)
    assert r.exit_code == 2 and "not a kforge run folder" in r.stderr


def test_a_new_best_records_each_case_s_ratio_and_band_and_says_where_it_was_faster(tmp_path):
    opt = new_run(tmp_path, {"01_faster.cu": vector_add("pass 400")}, max_iterations=3)
    lines = []
    opt.progress = lines.append
    summary = opt.run()
    (faster,) = attempts_by_label(read(opt.run_dir, "history.json"))["01_faster.cu"]
    r = faster["retimed"]
    assert faster["best"] and r["rule"] == "case by case" and r["slower"] == [] and r["faster"]
    for name in r["faster"]:
        assert r["cases"][name]["ratio"] < 1 - r["cases"][name]["band"]
    assert summary["best"]["retimed"]["cases"] == r["cases"]
    (moved,) = [line for line in lines if "new best" in line]
    assert "; faster on " + r["faster"][0] + " x" in moved
    validate_all(opt.run_dir)
