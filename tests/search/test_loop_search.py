"""The search in the loop: the tuner searches until every setting is gated or ruled out, the
stop rules say why with their figures (exhaustion, --roof-stop, the tuner's default time limit),
model proposals get the strategy's parents and techniques, and the budget is shown before a run.
The gate is the scripted one (tests/support/fakes.py); a landscape gate gives the regblock template a
known optimum.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernel_forge.search import strategies
from kernel_forge.app.budget_line import estimate, render
from kernel_forge.model.candidate import load_candidate
from kernel_forge.app.cli import cli
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.app.run_setup import resume_run, start_run
from kernel_forge.proposers.base import Proposal
from kernel_forge.model.task import load_task

from tests.support.fakes import ScriptedGate, ScriptedProposer, vector_add
from tests.support.landscape_gate import OPT, LandscapeGate
from tests.support.loop_runs import MANIFEST, new_run, read, validate_all

ROOT = Path(__file__).resolve().parents[2]
MATMUL = ROOT / "manifests" / "matmul_f32.json"


def tuner_run(tmp_path, manifest=MANIFEST, gate=None, **loop):
    task = load_task(manifest)
    loop.setdefault("archive", "off")
    return start_run(manifest, LoopConfig(**loop), GateOptions(), ProposerConfig(), runs_dir=tmp_path / "runs",
                     gate=gate or ScriptedGate(task))


def valid_settings(task) -> dict[str, int]:
    return {t.name: len(load_candidate(t).configurations()) for t in task.templates}


def gated_settings(hist) -> dict[str, list]:
    out: dict[str, list] = {}
    for a in hist["attempts"]:
        if a["proposer"] == "tune" and a["evaluation"]:
            out.setdefault(a["label"], []).append(tuple(sorted(a["defines"].items())))
    return out


# ------------------------------------------------------------------------------ exhaustion

@pytest.mark.slow
@pytest.mark.parametrize("search", strategies.NAMES)
def test_the_tuner_is_exhausted_only_when_every_setting_of_every_template_was_gated(tmp_path, search):
    opt = tuner_run(tmp_path, search=search, max_iterations=50)
    summary = opt.run()
    task = load_task(MANIFEST)
    assert summary["stop_reason"].startswith("proposer_exhausted: every setting of every template")
    gated = gated_settings(read(opt.run_dir, "history.json"))
    for name, n in valid_settings(task).items():
        assert len(gated[name]) == len(set(gated[name])) == n        # each valid setting once
    assert "vector_add_vec4.cu: 30 of 30 settings gated" in summary["stop_detail"]
    assert "vector_add_gridstride.cu: 35 of 35 settings gated" in summary["stop_detail"]
    spaces = {s["label"]: s for s in summary["search"]["spaces"]}
    assert spaces["vector_add_vec4.cu"]["gated"] == 30 and summary["search"]["strategy"] == search
    validate_all(opt.run_dir)


@pytest.mark.slow
def test_make_optimize_on_matmul_keeps_searching_past_the_first_sample(tmp_path):
    """The class of the old stop (2 of 7 iterations, 25 of 68 regblock settings gated): with the
    default options every iteration proposes unexplored settings, and the run ends only when every
    setting of every template was gated, having found the landscape's optimum."""
    task = load_task(MATMUL)
    opt = tuner_run(tmp_path, MATMUL, gate=LandscapeGate(task), tune_time_limit_s=0)   # no wall-clock stop on a slow CI
    summary = opt.run()
    gated = gated_settings(read(opt.run_dir, "history.json"))
    assert {k: len(v) for k, v in gated.items()} == valid_settings(task)
    assert len(gated["matmul_f32_regblock.cu"]) == 68 and len(gated["matmul_f32_tiled.cu"]) == 7
    assert summary["iterations"] > 2 and summary["stop_reason"].startswith("proposer_exhausted")
    assert summary["best"]["defines"] == OPT
    firsts = {}
    for a in read(opt.run_dir, "history.json")["attempts"]:
        firsts.setdefault(a["iteration"], a)
    assert all(a["proposer"] == "tune" for i, a in firsts.items() if i > 0)


def tuned_settings(hist: list[dict]) -> set[tuple]:
    """(template, setting) of every tuned attempt gated, a dispatch rule left out (no setting)."""
    return {(a["label"], tuple(sorted(a["defines"].items())))
            for a in hist if a["proposer"] == "tune" and a["evaluation"] and not a.get("dispatch")}


class ShapeLandscapeGate(LandscapeGate):
    """As LandscapeGate, but the large case has its own regblock optimum (128x128 tiles, BK=16, 8x8
    per thread) as on the H200, so the tuner fits a dispatch rule over the settings it gated."""

    times_each_case = True
    LARGE = {"BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 8, "MINB": 1}

    def time_us(self, cand, case=None):
        if case == "large" and "TM" in cand.defines and "WM" not in cand.defines:
            vals = load_candidate(ROOT / "kernel_forge" / "kernels" / "gemm" / "matmul_f32_regblock.cu").tunables
            d = cand.defines
            dist = sum(abs(sorted(vals[n]).index(d[n]) - sorted(vals[n]).index(self.LARGE[n])) for n in self.LARGE)
            return 40.0 * (1 + 0.3 * dist)
        return super().time_us(cand)


@pytest.mark.slow
def test_the_summary_counts_each_gated_setting_once_and_a_dispatch_rule_as_no_setting(tmp_path):
    """The H200 make-optimize run's summary tallied 100 gated settings where its history held 103
    tuned attempts: three were dispatch rules (label "...+dispatch"), gated whole, not settings."""
    task = load_task(MATMUL)
    opt = tuner_run(tmp_path, MATMUL, gate=ShapeLandscapeGate(task), tune_time_limit_s=0, max_iterations=3)
    summary = opt.run()
    hist = read(opt.run_dir, "history.json")["attempts"]
    rules = [a for a in hist if a.get("dispatch")]
    assert rules and all(a["label"].endswith("+dispatch") for a in rules)
    settings = tuned_settings(hist)
    spaces = summary["search"]["spaces"]
    assert sum(s["gated"] for s in spaces) == len(settings)
    assert {s["label"] for s in spaces} == {lbl for lbl, _ in settings}


def test_on_the_h200_make_optimize_run_the_summary_tally_is_the_historys():
    """The same identity on the committed H200 run (make optimize on matmul_f32, every default):
    its tuned attempts are its settings plus its dispatch rules, and summary.json counts the settings."""
    import io
    import json
    import tarfile

    tgz = ROOT / "bench" / "evidence" / "h200-2026-12-03-s9" / "matmul-defaults" / "round7-tune.tgz"
    with tarfile.open(tgz) as tar:
        read_json = lambda name: json.load(io.TextIOWrapper(tar.extractfile(f"./runs-matmul_f32/run-001/{name}")))  # noqa: E731
        hist, summary = read_json("history.json")["attempts"], read_json("summary.json")
    tuned = [a for a in hist if a["proposer"] == "tune" and a["evaluation"]]
    rules = [a for a in tuned if a.get("dispatch")]
    settings = tuned_settings(hist)
    assert rules and len(settings) == len(tuned) - len(rules)
    assert sum(s["gated"] + s["ruled_out"] for s in summary["search"]["spaces"]) == len(settings)


def test_the_tuner_stops_at_its_limits_before_exhaustion_and_says_where_the_search_stands(tmp_path):
    opt = tuner_run(tmp_path, max_iterations=1, tune_budget=4)
    summary = opt.run()
    assert summary["stop_reason"] == "max_iterations"
    assert "1 of --max-iterations 1" in summary["stop_detail"]
    assert "vector_add_vec4.cu: 4 of 30 settings gated" in summary["stop_detail"]
    assert "26 left" in summary["stop_detail"]


@pytest.mark.slow
def test_a_spent_template_is_proposed_no_more(tmp_path):
    task = load_task(MATMUL)
    gate = LandscapeGate(task)
    opt = tuner_run(tmp_path, MATMUL, gate=gate, max_iterations=3, tune_budget=24)
    opt.run()
    hist = read(opt.run_dir, "history.json")
    tiled = [a for a in hist["attempts"] if a["label"] == "matmul_f32_tiled.cu"]
    assert {a["iteration"] for a in tiled} == {1}                    # all 7 in iteration 1, then spent
    assert not [a for a in hist["attempts"] if a["reason"] == "duplicate"]


class ClockGate(ScriptedGate):
    """Each gated candidate takes 10 s of the run's clock (no real waiting)."""

    opt = None

    def evaluate(self, candidate, *, roles=("correctness", "performance")):
        if self.opt is not None:
            self.opt.state.elapsed_before += 10.0
        return super().evaluate(candidate, roles=roles)


def test_the_tuner_has_a_default_time_limit_that_the_stop_reason_names(tmp_path):
    task = load_task(MANIFEST)
    gate = ClockGate(task)
    opt = tuner_run(tmp_path, gate=gate, tune_time_limit_s=45, max_iterations=50)
    gate.opt = opt
    summary = opt.run()
    assert summary["stop_reason"] == "time_limit"
    assert "of 45 s (the built-in tuner's default time limit (--tune-time-limit" in summary["stop_detail"]
    assert "settings gated" in summary["stop_detail"]
    gate2 = ClockGate(task)
    opt2 = tuner_run(tmp_path / "b", gate=gate2, tune_time_limit_s=45, time_limit_s=95, max_iterations=50)
    gate2.opt = opt2
    s2 = opt2.run()
    assert s2["stop_reason"] == "time_limit" and "of 95 s (--time-limit)" in s2["stop_detail"]
    assert s2["gated"] > summary["gated"]


def test_a_model_run_has_no_default_time_limit(tmp_path):
    opt = new_run(tmp_path, [vector_add("pass 500")], tune_time_limit_s=1)
    assert opt.time_limit() == (None, "")


@pytest.mark.slow
def test_a_killed_tuner_run_resumes_the_same_search_and_gates_each_setting_once(tmp_path):
    task = load_task(MANIFEST)
    opt = tuner_run(tmp_path, gate=ScriptedGate(task, interrupt={"evaluate": 40}), max_iterations=50)
    with pytest.raises(KeyboardInterrupt):
        opt.run()
    summary = resume_run(opt.run_dir.path, gate=ScriptedGate(task)).run()
    assert summary["stop_reason"].startswith("proposer_exhausted")
    gated = gated_settings(read(opt.run_dir, "history.json"))
    assert sum(len(v) for v in gated.values()) == sum(valid_settings(task).values())
    assert all(len(v) == len(set(v)) for v in gated.values())


# ------------------------------------------------------------------------------ roof stop

def test_roof_stop_fires_when_every_case_is_at_the_share_of_its_roof(tmp_path):
    """The scripted gate's bandwidth puts a 105 µs vector_add at 100 %: 110 µs is 95.6 %."""
    props = [vector_add("pass 130"), vector_add("pass 110"), vector_add("pass 100")]
    opt = new_run(tmp_path, props, max_iterations=9)
    summary = opt.run()
    assert summary["stop_reason"] == "roof_stop" and summary["iterations"] == 2
    assert summary["stop_detail"].startswith("the best (a0002) is at >= 90% of its roof on every performance case")
    assert "n16M 95.5% of the measured bandwidth" in summary["stop_detail"]
    assert "n64M 95.5% of the measured bandwidth" in summary["stop_detail"]
    validate_all(opt.run_dir)


@pytest.mark.parametrize("share, iterations, reason", [(0, 3, "proposer_exhausted"), (0.99, 3, "roof_stop"),
                                                       (0.8, 1, "roof_stop")])
def test_roof_stop_can_be_moved_or_turned_off(tmp_path, share, iterations, reason):
    """130 µs is 81 % of the roof, 110 µs 95.5 %, 100 µs 105 %."""
    props = [vector_add("pass 130"), vector_add("pass 110"), vector_add("pass 100")]
    summary = new_run(tmp_path, props, max_iterations=9, roof_stop=share).run()
    assert summary["iterations"] == iterations
    assert summary["stop_reason"].startswith(reason)


def test_no_roof_stop_while_one_case_is_below_it(tmp_path):
    opt = new_run(tmp_path, [vector_add("pass 110")], max_iterations=1)
    opt.run()
    reached, why = opt.roof_reached(0.99)
    assert not reached and why == "case n16M at 95.5% of the measured bandwidth"


# ------------------------------------------------------------------------------ model plans

def test_model_proposals_carry_the_strategys_parent_technique_and_prediction(tmp_path):
    def answer(request):
        assert len(request.slots) == request.n == 4
        return [Proposal(source=vector_add(f"pass {560 - 10 * request.iteration - i}", variant=f"{request.iteration}.{i}"),
                         predicted_speedup=1.2 + i / 10) for i in range(4)]

    proposer = ScriptedProposer([answer] * 4)
    opt = new_run(tmp_path, proposer=proposer, max_iterations=4, candidates=4, roof_stop=0)
    opt.run()
    hist = read(opt.run_dir, "history.json")["attempts"]
    models = [a for a in hist if a["proposer"] == "scripted"]
    assert all(a["technique"] for a in models)
    assert [a["predicted_speedup"] for a in models[:4]] == [1.2, 1.3, 1.4, 1.5]
    for req in proposer.requests:
        assert [a["parent"] for a in models if a["iteration"] == req.iteration] == [s.parent for s in req.slots]
        assert [a["technique"] for a in models if a["iteration"] == req.iteration] == [s.technique for s in req.slots]
    crosses = [a for a in models if a["technique"] == "crossover"]
    assert all(a["second_parent"] and a["second_parent"] != a["parent"] for a in crosses)
    validate_all(opt.run_dir)


def test_the_prompt_carries_the_ledger_and_a_non_best_parent_is_shown_to_start_from(tmp_path):
    answers = [[vector_add("pass 400", variant="a"), vector_add("pass 420", variant="b"),
                vector_add("mismatch 300", variant="c"), vector_add("pass 596", variant="d")]] + \
              [[vector_add(f"pass {700 + i}", variant=f"x{i}") for i in range(4)]] * 3
    proposer = ScriptedProposer(answers)
    opt = new_run(tmp_path, proposer=proposer, max_iterations=4, candidates=4, roof_stop=0)
    opt.run()
    third = proposer.requests[2]
    text = third.full_prompt(0)
    assert "# Attempt ledger" in text
    assert "- a0001 [" in text and "x1.50 vs a0000 (gain)" in text and "n16M x1.50" in text
    assert "failed: mismatch" in text and "x1.01 vs a0000 (within noise)" in text
    assert "(a fix; compared with a0000)" in text                    # a0003 failed: its fix is measured against a0000
    assert "Try again (these techniques gained" in text
    starts = [s.prompt for s in third.slots if "# Start from a0002 for this proposal" in s.prompt]
    assert starts, "a stalled population develops a second line"


# ------------------------------------------------------------------------------ budget

def test_the_budget_of_a_model_run_is_its_worst_case():
    loop = LoopConfig(max_iterations=5, candidates=4)
    prop = ProposerConfig(models=["anthropic:claude-sonnet-5-5"], max_tokens=8000, max_tokens_cap=16000)
    b = estimate(loop, prop, load_task(MANIFEST))
    # three calls a proposal: the answer, one retry of a cut-off answer, one repair (its input quotes the answer)
    assert (b.proposals, b.calls) == (20, 60)
    assert b.output_tokens_per_call == (8000, 16000)
    tin = b.input_tokens_per_call
    assert b.tokens == 20 * (tin + 8000 + 2 * (tin + 16000 + 16000))
    from kernel_forge.proposers.pricing import PriceTable
    table = PriceTable()
    want = 20 * (table.worst_case("anthropic", "claude-sonnet-5-5", tin, 8000).usd
                 + 2 * table.worst_case("anthropic", "claude-sonnet-5-5", tin + 16000, 16000).usd)
    assert b.usd == pytest.approx(want) and b.usd > 0
    text = "\n".join(render(b))
    assert "5 iterations x 4 proposals = 20 proposals, at most 60 model calls" in text
    assert f"at most ${want:.2f}" in text and "time: no limit" in text


def test_the_budget_names_a_model_without_a_price_and_the_tuners_settings():
    b = estimate(LoopConfig(), ProposerConfig(models=["openai:my-local-model"]))
    assert b.usd is None and "no price for openai:my-local-model" in "\n".join(render(b))
    task = load_task(MATMUL)
    t = estimate(LoopConfig(), ProposerConfig(), task)
    n = sum(valid_settings(task).values())
    assert n > 68 + 7 and (t.settings, t.time_limit_s, t.settings_cap) == (n, 180.0, None)
    assert f"gates at most {n} settings (every setting of gemm_simt_warptile.cu (276); " in render(t)[0]
    for name, count in valid_settings(task).items():          # the budget line names what is searched
        assert f"{name} ({count})" in render(t)[0]
    capped = estimate(LoopConfig(max_iterations=2), ProposerConfig(), task)
    templates = len(task.templates)     # the SIMT pattern, the split-TF32 ones (wgmma, mma.sync), regblock, tiled
    assert templates == 5
    assert f"gates at most {min(n, 2 * 24 * templates)} settings ({n} settings" in render(capped)[0]
    assert "at most 180 s" in render(t)[0]


def test_optimize_prints_the_budget_before_it_starts(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    for var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    r = CliRunner().invoke(cli, ["optimize", str(MANIFEST), "--model", "anthropic:claude-sonnet-5-5",
                                 "--max-iterations", "3", "--runs-dir", str(tmp_path / "runs")])
    assert "[kforge] budget (worst case, before it starts): 3 iterations x 4 proposals = 12 proposals" in r.stderr
    assert "at most $" in r.stderr
    assert r.exit_code != 0 and not (tmp_path / "runs").exists()      # no key / no GPU: nothing ran


def test_search_options_are_checked_before_anything_runs(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    run = lambda *a: CliRunner().invoke(cli, ["optimize", str(MANIFEST), *a, "--runs-dir", str(tmp_path)])  # noqa: E731
    r = run("--search", "bogus")
    assert r.exit_code == 2 and "greedy" in r.stderr and "population" in r.stderr
    r = run("--roof-stop", "3")
    assert r.exit_code == 2 and "--roof-stop" in r.stderr and "2" in r.stderr
    assert math.isclose(LoopConfig().roof_stop, 0.9) and LoopConfig().search == strategies.DEFAULT
    assert LoopConfig().candidates >= 4


# ------------------------------------------------------------------------------ the next prompt

def test_dry_run_resume_prints_the_next_prompt_of_a_recorded_run_and_writes_nothing(tmp_path):
    """`kforge optimize --resume RUN --dry-run`: the prompt a model would get next in a recorded run
    (here the tuner's), with its best, the ledger and a direction, from the run's verdicts alone."""
    opt = tuner_run(tmp_path, max_iterations=2, tune_budget=4)
    summary = opt.run()
    before = {p.name: p.read_bytes() for p in opt.run_dir.path.iterdir() if p.is_file()}
    r = CliRunner().invoke(cli, ["optimize", "--resume", str(opt.run_dir.path), "--dry-run"])
    assert r.exit_code == 0, r.output + (r.stderr or "")
    assert f"# Current best: {summary['best']['id']}" in r.stdout
    assert "# Attempt ledger" in r.stdout and "[tune:vector_add_vec4.cu]" in r.stdout
    # every proposal of the iteration, not only the first (issue 32)
    n = r.stdout.count("# Direction for this proposal")
    assert n == opt.config.candidates and f"=== user prompt: dynamic part of proposal {n} of {n} ===" in r.stdout
    assert {p.name: p.read_bytes() for p in opt.run_dir.path.iterdir() if p.is_file()} == before
    bad = CliRunner().invoke(cli, ["optimize", "--resume", str(opt.run_dir.path), "--dry-run", str(MANIFEST)])
    assert bad.exit_code == 2 and "takes the run's own manifest" in bad.stderr


def test_every_parent_a_prompt_starts_from_is_profiled_before_it_is_asked(tmp_path):
    """Issue 32: only the best was ever profiled, so a proposal starting from another kernel got no
    ncu data."""
    answers = [[vector_add("pass 400", variant="a"), vector_add("pass 420", variant="b"),
                vector_add("mismatch 300", variant="c"), vector_add("pass 596", variant="d")]] + \
              [[vector_add(f"pass {700 + i}", variant=f"x{i}") for i in range(4)]] * 3
    proposer = ScriptedProposer(answers)
    gate = ScriptedGate(load_task(MANIFEST), profiler=True)
    opt = new_run(tmp_path, gate=gate, proposer=proposer, max_iterations=4, candidates=4, roof_stop=0)
    opt.run()
    profiled = [c[1] for c in gate.calls if c[0] == "profile"]
    passed = {a["id"] for a in read(opt.run_dir, "history.json")["attempts"] if a["status"] == "passed"}
    for req in proposer.requests:            # a fix's parent is the failed attempt: nothing to profile
        for parent in [p for s in req.slots for p in (s.parent, s.second_parent) if p in passed]:
            assert (opt.run_dir.path / "profiles" / f"{parent}.json").exists(), (req.iteration, parent)
    starts = [s.prompt for s in proposer.requests[2].slots if "# Start from a0002 for this proposal" in s.prompt]
    assert starts and "a0002.cu" in profiled
    assert all("ncu:" in p.split("# Start from a0002")[1] and "no Nsight Compute profile" not in p for p in starts)


class ArchGate(ScriptedGate):
    """A scripted gate on a GPU of ``arch``."""

    def __init__(self, task, arch: str):
        super().__init__(task)
        self.arch = arch


@pytest.mark.parametrize("arch, searched", [("sm_80", False), ("sm_90", True)])
def test_a_template_that_needs_another_gpus_target_is_not_searched_and_the_run_says_so(tmp_path, arch, searched):
    """matmul_f16 lists the Hopper-only wgmma pattern first: on an A100 each of its settings would
    fail to compile, so the tuner drops it at the start (with a line saying why) and searches the
    mma.sync pattern; on the H200 it searches both."""
    manifest = ROOT / "manifests" / "matmul_f16.json"
    task = load_task(manifest)
    lines = []
    opt = start_run(manifest, LoopConfig(archive="off", max_iterations=1, tune_budget=4), GateOptions(),
                    ProposerConfig(), runs_dir=tmp_path / "runs", gate=ArchGate(task, arch), progress=lines.append)
    opt.run()
    labels = {a["label"] for a in read(opt.run_dir, "history.json")["attempts"] if a["proposer"] == "tune"}
    assert "gemm_f16_mma.cu" in labels
    assert ("gemm_f16_wgmma.cu" in labels) == searched
    note = [l for l in lines if "gemm_f16_wgmma.cu is not searched" in l]
    assert bool(note) != searched
    if note:
        assert "needs sm_90a" in note[0] and "(sm_80) compiles for sm_80" in note[0]
