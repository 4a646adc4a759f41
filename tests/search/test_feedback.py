"""What the loop feeds back to the model and what it refuses to spend: duplicates, crossover
parents, directions, bounded history, fix turns, launch conflicts, per-attempt calls and cost,
profiles of each new best, an unreachable model.

The prompt's text is h-prompt's (prompts.build_prompt_parts); these tests check what the loop
hands it (a spy around build_prompt_parts) and what the loop records.
"""
from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernel_forge.search import diagnoses as diagnoses_module, loop as loop_module, request_build
from kernel_forge.app.cli import cli
from kernel_forge.analysis.diagnosis import Diagnosis
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.app.run_setup import resume_run
from kernel_forge.proposers.base import Proposal, ProposalResult
from kernel_forge.gate.recorded import RecordedGate
from kernel_forge.model.task import load_task

from tests.support.fakes import ScriptedGate, ScriptedProposer, model_call, vector_add
from tests.support.loop_runs import KEYS, MANIFEST, SPECS, TUNED_HEADER, model_proposer, new_run, read, validate_all
from tests.support.loopback import tool

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")


@pytest.fixture(scope="module")
def task():
    return load_task(MANIFEST)


@pytest.fixture
def prompts(monkeypatch):
    """Every build_prompt_parts call of the loop, as the fields of its context (the real one still runs)."""
    seen: list[dict] = []
    real = request_build.build_prompt_parts

    def spy(context):
        seen.append(vars(context))
        return real(context)

    monkeypatch.setattr(request_build, "build_prompt_parts", spy)
    return seen


def evaluated(gate) -> list[str]:
    return [c[1] for c in gate.calls if c[0] == "evaluate" and c[2] != ("holdout",)]


def attempts(opt) -> list[dict]:
    return read(opt.run_dir, "history.json")["attempts"]


# ------------------------------------------------------------------------------ duplicates

@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_six_identical_answers_are_gated_once(tmp_path, loopback, clean_env, task, provider):
    loopback.script(provider, *[tool({"source": vector_add("pass 400"), "rationale": "float4"}, input_tokens=1000)
                                for _ in range(6)])
    gate = ScriptedGate(task)
    opt = new_run(tmp_path, gate=gate, proposer=model_proposer(provider, loopback),
                  prop=ProposerConfig(models=[SPECS[provider]]), max_iterations=6)
    summary = opt.run()
    atts = attempts(opt)[1:]
    assert [(a["status"], a["reason"]) for a in atts] == [("passed", "passed")] + [("failed", "duplicate")] * 5
    for a in atts[1:]:
        assert a["message"].startswith("the same kernel as a0001 (passed at 400.00 µs)")
        assert a["evaluation"] is None and a["fix_of"] is None        # a duplicate gets no fix turn
    assert evaluated(gate) == ["a0000.cu", "a0001.cu"]
    assert [c for c in gate.calls if c[0] == "precompile"] == [("precompile", ("a0001.cu",))]
    assert len(loopback.requests(provider)) == 6
    # every attempt names its own call and carries its cost
    assert [a["model_calls"] for a in atts] == [[f"model-00{i}.json"] for i in range(1, 7)]
    calls = [read(opt.run_dir, f"model-00{i}.json") for i in range(1, 7)]
    assert [a["cost_usd"] for a in atts] == [pytest.approx(c["cost_usd"]) for c in calls]
    assert all(a["tokens"] == {"input": 1000, "output": 500} for a in atts)
    assert summary["gated"] == 2 and summary["rejected"] == {"duplicate": 5}
    assert summary["cost_usd"] == pytest.approx(sum(a["cost_usd"] for a in atts))
    assert "| a0002 | 2 |" in (opt.run_dir.path / "report.md").read_text()
    assert "| duplicate |" in (opt.run_dir.path / "report.md").read_text()
    validate_all(opt.run_dir)


@pytest.mark.parametrize("candidates, iterations", [(1, 6), (6, 1)])
def test_identical_replayed_proposals_are_gated_once(tmp_path, task, candidates, iterations):
    gate = ScriptedGate(task)
    opt = new_run(tmp_path, [vector_add("pass 400")] * 6, gate=gate, max_iterations=9, candidates=candidates)
    summary = opt.run()
    atts = attempts(opt)[1:]
    assert [a["reason"] for a in atts] == ["passed"] + ["duplicate"] * 5
    assert {a["iteration"] for a in atts} == set(range(1, iterations + 1))
    assert evaluated(gate) == ["a0000.cu", "a0001.cu"]
    assert summary["gated"] == 2 and summary["best"]["id"] == "a0001"


def test_reformatted_copies_and_the_default_launch_spelled_out_are_duplicates(tmp_path, task):
    original = vector_add("pass 400")
    reformatted = ("/* the same, reformatted */\n" + original.replace("    ", "\t").replace("c[i] = a[i] + b[i];",
                                                                                           "c[i]=a[i]+b[i];  // add"))
    spelled = "// kforge: grid = [cdiv(n,256)]\n// kforge: block = [256, 1, 1]\n" + original   # the manifest's launch
    other = vector_add("pass 400", variant="really different")
    gate = ScriptedGate(task)
    opt = new_run(tmp_path, gate=gate, proposer=ScriptedProposer([[original], [reformatted], [spelled], [other]]),
                  max_iterations=9)
    opt.run()
    assert [a["reason"] for a in attempts(opt)[1:]] == ["passed", "duplicate", "duplicate", "passed"]
    assert evaluated(gate) == ["a0000.cu", "a0001.cu", "a0004.cu"]


def test_a_tuned_proposal_again_gates_only_its_untried_settings(tmp_path, task):
    src = vector_add("pass 400", header=TUNED_HEADER)
    gate = ScriptedGate(task)
    opt = new_run(tmp_path, gate=gate, proposer=ScriptedProposer([[src]] * 4), max_iterations=9, tune_budget=2,
                  search="greedy")
    opt.run()
    atts = attempts(opt)[1:]
    # iteration 1: 64, 32 (the default and the smallest) and the neighbour 128; later iterations climb
    # from the best setting so far: 256 and 512 (one and two steps from 128), then 1024
    assert [(a["iteration"], a["defines"]["BLOCK"]) for a in atts if a["evaluation"]] == [
        (1, 64), (1, 32), (1, 128), (2, 256), (2, 512), (3, 1024)]   # each setting once, none twice
    assert "1 step from the best setting (a0003)" in atts[3]["rationale"]
    (dup,) = [a for a in atts if a["reason"] == "duplicate"]          # the 4th time nothing is left
    assert dup["iteration"] == 4 and dup["defines"] == {"BLOCK": 64}
    assert dup["message"].startswith("the same kernel as a0001")
    assert len(evaluated(gate)) == 1 + 6


# ------------------------------------------------------------------------------- crossover

def parents(call: dict) -> tuple | None:
    return tuple(p.id for p in call["crossover"]) if call["crossover"] else None


def test_crossover_pairs_the_best_with_a_distinct_runner_up(tmp_path, prompts):
    # a0001 is the faster on n64M, a0003 on n16M (its BLOCK is n16M's optimum): each has a strength
    a = vector_add("pass 500", header="// kforge: tune BLOCK = [256]\n// fake-opt@n16M: BLOCK=1024")
    b = vector_add("pass 520", header="// kforge: tune BLOCK = [256]")
    gate = ScriptedGate(load_task(MANIFEST))
    gate.times_each_case = True
    # (no settings per shape: a composite of a and b, each the faster on one case, would join the history)
    opt = new_run(tmp_path, gate=gate, proposer=ScriptedProposer([[a], [a.replace("    ", "  ")], [b], [a]]),
                  max_iterations=4, crossover_every=1, search="greedy", dispatch=False)
    opt.run()
    # before each iteration: only the initial and the best (a0001) exist, then a0002 duplicates a0001
    assert [parents(c) for c in prompts] == [None, None, None, ("a0001", "a0003")]
    assert (opt.run_dir.path / "profiles" / "a0003.json").is_file()     # a kernel to combine is profiled first
    last = prompts[-1]
    # parents not repeated, and the initial kernel not shown once a better one exists
    assert last["best"].id == "a0001" and [h.id for h in last["history"]] == []


def test_two_kernels_each_faster_on_one_case_are_gated_as_one_file_a_kernel_per_shape(tmp_path):
    """Issue 30: where a0001 wins n64M and a0003 n16M, the loop proposes the composite of the two
    (kernel_forge.model.composite), gated whole, each performance case run with its own kernel."""
    from kernel_forge.model.candidate import parse_candidate
    from kernel_forge.model.composite import IMPL
    from kernel_forge.search.dispatch_fit import COMPOSITE_DIRECTION

    a = vector_add("pass 500", header="// kforge: tune BLOCK = [256]\n// fake-opt@n16M: BLOCK=1024")
    b = vector_add("pass 520", header="// kforge: tune BLOCK = [256]")
    gate = ScriptedGate(load_task(MANIFEST))
    gate.times_each_case = True
    opt = new_run(tmp_path, gate=gate, proposer=ScriptedProposer([[a], [b]]), max_iterations=2, search="greedy")
    opt.run()
    hist = read(opt.run_dir, "history.json")["attempts"]
    [comp] = [h for h in hist if h["direction"] == COMPOSITE_DIRECTION]
    assert comp["label"].startswith("composite(") and comp["dispatch"], comp
    src = (opt.run_dir.path / comp["source_file"]).read_text()
    cand = parse_candidate(src, name="composite.cu")
    assert f"#if {IMPL} == 0" in src and len({b.defines[IMPL] for b in cand.dispatch.branches}) == 2
    validate_all(opt.run_dir)


def test_crossover_never_pairs_the_best_with_a_kernel_slower_on_every_case(tmp_path, prompts):
    """Issue 32: a crossover of two kernels of which one wins no case has nothing to combine."""
    a = vector_add("pass 500")
    opt = new_run(tmp_path, proposer=ScriptedProposer([[a], [a.replace("    ", "  ")], [vector_add("pass 550")], [a]]),
                  max_iterations=4, crossover_every=1, search="greedy")
    opt.run()
    assert [parents(c) for c in prompts] == [None, None, None, None]


def test_crossover_never_uses_the_initial_while_other_kernels_passed(tmp_path, prompts):
    opt = new_run(tmp_path, proposer=ScriptedProposer([[vector_add("pass 700")], [vector_add("pass 800")],
                                                       [vector_add("pass 900")]]), max_iterations=3, crossover_every=1,
                  search="greedy")
    opt.run()
    # a0001 and a0002 are slower than the initial on every case: nothing to combine, no crossover
    assert [parents(c) for c in prompts] == [None, None, None]
    assert all(c["best"].id == "a0000" for c in prompts)


def test_crossover_never_pairs_two_settings_of_one_kernel(tmp_path, prompts):
    tuned = vector_add("pass 700", header=TUNED_HEADER)                 # six passed settings, one kernel
    opt = new_run(tmp_path, proposer=ScriptedProposer([[tuned], [vector_add("pass 900")]]), max_iterations=2,
                  crossover_every=1, search="greedy")
    opt.run()
    assert len([a for a in attempts(opt) if a["status"] == "passed"]) == 1 + 6 + 1
    assert [parents(c) for c in prompts] == [None, None]
    fastest = min((a for a in attempts(opt)[1:7]), key=lambda a: a["score_us"])
    assert fastest["defines"] == {"BLOCK": 256}
    assert [h.id for h in prompts[1]["history"]] == [fastest["id"]]    # its fastest setting, once (the initial is best)


# ------------------------------------------------------------------------------ directions

def test_each_proposal_of_an_iteration_gets_its_own_direction(tmp_path, prompts, monkeypatch):
    asked: list[tuple] = []
    real = diagnoses_module.direction_items

    def spy(diag, n):
        asked.append((diag, n))
        return real(diag, n)

    monkeypatch.setattr(diagnoses_module, "direction_items", spy)
    slow = lambda i: [vector_add(f"pass {700 + 10 * i + k}") for k in range(3)]  # noqa: E731  (no new best)
    proposer = ScriptedProposer([slow(0), slow(1)])
    opt = new_run(tmp_path, proposer=proposer, max_iterations=2, candidates=3, search="greedy")
    summary = opt.run()
    atts = attempts(opt)[1:]
    for it, req in enumerate(proposer.requests, start=1):
        directions = [s.direction for s in req.slots]
        assert all(s.prompt for s in req.slots) and len(set(directions)) == 3 and all(directions)
        assert [a["direction"] for a in atts if a["iteration"] == it] == directions
        assert [c["direction"] for c in prompts[3 * (it - 1):3 * it]] == directions
        assert len({req.full_prompt(i) for i in range(3)}) == 3
    first, second = proposer.requests
    firsts, seconds = [s.direction for s in first.slots], [s.direction for s in second.slots]
    assert seconds[0] not in firsts                                       # untried directions come first
    assert all(isinstance(d, Diagnosis) for d, _ in asked)
    assert {r["direction"] for r in summary["directions"]} == set(firsts) | set(seconds)
    assert sum(r["attempts"] for r in summary["directions"]) == 6


def test_a_proposal_that_echoes_its_direction_is_matched_by_it(tmp_path):
    def reversed_answers(request):
        return [Proposal(source=vector_add(f"pass {700 + i}"), direction=d, proposer="scripted")
                for i, d in enumerate(reversed([s.direction for s in request.slots]))]

    proposer = ScriptedProposer([reversed_answers])
    opt = new_run(tmp_path, proposer=proposer, max_iterations=1, candidates=3)
    opt.run()
    (req,) = proposer.requests
    assert [a["direction"] for a in attempts(opt)[1:]] == list(reversed([s.direction for s in req.slots]))


# ------------------------------------------------------------------------- bounded prompt

PROMPT_BOUND = 45_000   # static part + best (clipped at 12k) + history (16k) + failures + crossover


def test_the_prompt_stops_growing(tmp_path, prompts):
    filler = "\n".join(f"// line {i} of a long explanation of this kernel's design" for i in range(60))

    def kernel(i):
        if i % 4 == 3:
            return vector_add(f"mismatch {590 - 8 * i}", variant=f"v{i}", note=filler)
        return vector_add(f"pass {590 - 8 * i}", variant=f"v{i}", note=filler)

    proposer = ScriptedProposer([[kernel(i)] for i in range(20)])
    opt = new_run(tmp_path, proposer=proposer, max_iterations=20)
    opt.run()
    sizes = [len(r.full_prompt(0)) for r in proposer.requests]
    assert len(sizes) == 20
    assert max(sizes) < PROMPT_BOUND
    assert sizes[-1] <= 1.05 * max(sizes[:10])                        # saturated after a few iterations
    for call in prompts:
        history = {h.id for h in call["history"]}
        parents = [p.id for p in call["crossover"] or ()]
        assert len(history) == len(call["history"]) and call["best"].id not in history     # no kernel twice
        assert not history & set(parents) and parents[:1] in ([], [call["best"].id])     # best x runner-up
        assert len(call["history"]) <= 5
        assert sum(len(h.source) for h in call["history"]) <= 16000
        assert len(call["failures"]) <= 3
    assert len(prompts[-1]["history"]) == 4                           # 16000 chars hold four of these kernels


# ------------------------------------------------------------------------------- fix turns

def test_a_compile_error_gets_one_fix_turn_with_its_source_errors_and_defines(tmp_path, prompts):
    broken = vector_add("compile_error 0", header=TUNED_HEADER)
    proposer = ScriptedProposer([[broken], [vector_add("mismatch 400")], [vector_add("pass 400")]])
    opt = new_run(tmp_path, proposer=proposer, max_iterations=3, tune_budget=2)
    opt.run()
    atts = attempts(opt)
    assert [(a["id"], a["reason"], a["fix_of"]) for a in atts[1:]] == [
        ("a0001", "compile_error", None), ("a0002", "compile_error", None),   # BLOCK 64 and 32
        ("a0003", "mismatch", "a0001"), ("a0004", "passed", None)]
    assert atts[3]["parent"] == "a0001" and atts[3]["direction"].startswith("fix a0001 (compile_error)")
    first, second, third = prompts
    assert first["fix"] is None and third["fix"] is None                 # one turn: a failed fix is not fixed again
    fix = second["fix"]
    source = (opt.run_dir.path / atts[1]["source_file"]).read_text()
    assert fix.id == "a0001" and fix.reason == "compile_error" and fix.source == source
    assert fix.defines == {"BLOCK": 64}                                  # a tuned failure keeps its defines
    assert fix.launch == {"grid": ["cdiv(n, BLOCK)"], "block": ["BLOCK"], "shared_mem": 0}
    line5 = source.splitlines()[4]
    assert 'a0001.cu(5): error: identifier "nope" is undefined' in fix.compile_log
    assert f"       5 | {line5}" in fix.compile_log                      # the error's line, mapped
    assert fix.diff.startswith("--- a0000.cu\n+++ a0001.cu\n") and "+// fake: compile_error 0" in fix.diff
    assert fix.parent == "a0000" and fix.direction == atts[1]["direction"]
    assert second["direction"] == atts[3]["direction"]
    assert not [f for f in second["failures"] if f.id in ("a0001", "a0002")]   # shown as the fix, not again
    assert [f.id for f in third["failures"]] == ["a0002", "a0003"]


def test_a_mismatch_fix_shows_the_first_mismatches(tmp_path, prompts):
    opt = new_run(tmp_path, proposer=ScriptedProposer([[vector_add("mismatch 400")], [vector_add("pass 400")]]),
                  max_iterations=2)
    opt.run()
    fix = prompts[1]["fix"]
    assert fix.reason == "mismatch" and fix.message.startswith("case odd:")
    (odd,) = [c for c in fix.cases if c["name"] == "odd"]
    assert odd["outputs"][0]["first"] == [{"index": [3], "actual": 1.5, "expected": -0.25}]
    assert not any(c["role"] == "holdout" for c in fix.cases)


@pytest.mark.parametrize("turns, fixes", [(0, [None, None, None]), (2, [None, "a0001", "a0002"])])
def test_fix_turns_can_be_turned_off_or_up(tmp_path, prompts, turns, fixes):
    opt = new_run(tmp_path, proposer=ScriptedProposer([[vector_add(f"mismatch {400 + i}")] for i in range(3)]),
                  max_iterations=3, fix_turns=turns)
    opt.run()
    assert [c["fix"].id if c["fix"] else None for c in prompts] == fixes
    atts = attempts(opt)[1:]
    assert [a["fix_of"] for a in atts] == fixes
    if turns == 2:     # the second fix keeps the first attempt's direction, not "fix a0001 ..." nested
        assert atts[2]["direction"] == f"fix a0002 (mismatch), keeping its approach: {atts[0]['direction']}"


def test_a_fix_turn_is_counted_in_the_budget(tmp_path):
    proposer = ScriptedProposer([[vector_add("mismatch 400")], [vector_add("pass 400")], [vector_add("pass 300")]])
    opt = new_run(tmp_path, proposer=proposer, max_iterations=2)
    summary = opt.run()
    assert summary["iterations"] == 2 and summary["stop_reason"] == "max_iterations"
    assert [a["fix_of"] for a in attempts(opt)[1:]] == [None, "a0001"]


# -------------------------------------------------------------------------- launch conflict

def test_a_header_that_contradicts_the_tool_launch_is_a_verdict(tmp_path, task, prompts):
    src = vector_add("pass 400", header=TUNED_HEADER)
    conflict = Proposal(source=src, launch={"grid": ["cdiv(n, 128)"], "block": [128], "shared_mem": 0})
    tunables = Proposal(source=src, tunables={"BLOCK": [128, 256]})
    agree = Proposal(source=vector_add("pass 450", header=TUNED_HEADER),
                     launch={"grid": ["cdiv(n,BLOCK)"], "block": ["BLOCK", 1, 1]})
    gate = ScriptedGate(task)
    opt = new_run(tmp_path, gate=gate, proposer=ScriptedProposer([[conflict], [tunables], [agree]]), max_iterations=3)
    opt.run()
    a1, a2, a3 = attempts(opt)[1:4]
    assert (a1["status"], a1["reason"], a1["evaluation"]) == ("failed", "launch_conflict", None)
    assert "header says grid [cdiv(n, BLOCK)], block [BLOCK], shared_mem 0" in a1["message"]
    assert "tool's launch says grid [cdiv(n, 128)], block [128], shared_mem 0" in a1["message"]
    assert a2["reason"] == "launch_conflict" and "tunable BLOCK" in a2["message"] and "[128, 256]" in a2["message"]
    assert a3["reason"] == "passed"                                    # the same launch, spelled differently
    assert not [n for n in evaluated(gate) if n in ("a0001.cu", "a0002.cu")]
    # the model sees it: the next prompt fixes it, with the message
    assert prompts[1]["fix"].id == "a0001" and "tool's launch says" in prompts[1]["fix"].message
    assert (opt.run_dir.path / a1["source_file"]).read_text() == src     # the source as proposed
    validate_all(opt.run_dir)


# ----------------------------------------------------------------- model calls and their cost

def test_each_attempt_names_its_own_model_calls_and_cost(tmp_path):
    tuned = vector_add("pass 450", header=TUNED_HEADER)
    result = ProposalResult(
        proposals=[Proposal(source=vector_add("pass 400"), calls=[0]), Proposal(source=tuned, calls=[1, 2])],
        calls=[model_call(1000, 500, 0.01), model_call(2000, 100, 0.02, error="invalid answer: no tool call"),
               model_call(300, 50, 0.003), model_call(800, 0, 0.004, error="timeout")],
        errors=["proposal 3 of 3: request failed"])
    opt = new_run(tmp_path, proposer=ScriptedProposer([result]), max_iterations=1, candidates=3, tune_budget=2,
                  refine=False)
    summary = opt.run()
    atts = attempts(opt)[1:]
    assert [(a["id"], a["model_calls"], a["cost_usd"], a["tokens"]) for a in atts] == [
        ("a0001", ["model-001.json"], 0.01, {"input": 1000, "output": 500}),
        ("a0002", ["model-002.json", "model-003.json"], 0.023, {"input": 2300, "output": 150}),
        ("a0003", ["model-002.json", "model-003.json"], 0.0, {"input": 0, "output": 0})]   # its 2nd setting
    assert summary["cost_usd"] == pytest.approx(0.037)                  # the failed call is paid, by no attempt
    assert len(opt.run_dir.model_calls()) == 4
    validate_all(opt.run_dir)


# --------------------------------------------------------------------------------- profiles

def test_the_best_and_each_new_best_are_profiled(tmp_path, task, prompts, monkeypatch):
    diagnosed: list = []
    real = diagnoses_module.diagnose
    monkeypatch.setattr(diagnoses_module, "diagnose", lambda *a, **kw: diagnosed.append(kw) or real(*a, **kw))
    gate = ScriptedGate(task, profiler=True)
    opt = new_run(tmp_path, [vector_add("pass 500"), vector_add("pass 800"), vector_add("pass 400")], gate=gate,
                  max_iterations=9)
    opt.run()
    assert [c[1:] for c in gate.calls if c[0] == "profile"] == [(f"{i}.cu", ("n16M", "n64M"))
                                                                for i in ("a0000", "a0001", "a0003")]
    hist = read(opt.run_dir, "history.json")
    assert [a["profile"] for a in hist["attempts"]] == ["profiles/a0000.json", "profiles/a0001.json", None,
                                                       "profiles/a0003.json"]
    assert set(hist["state"]["profile_seconds"]) == {"a0000", "a0001", "a0003"}
    prof = read(opt.run_dir, "profiles/a0001.json")
    assert prof["attempt"] == "a0001" and prof["available"] is True and prof["tool"] == "ncu (scripted)"
    assert set(prof["cases"]) == {"n16M", "n64M"} and prof["cases"]["n16M"]["dram_pct"] == 40.0
    # the prompt and the diagnosis get the current best's profile
    assert [c["best"].id for c in prompts] == ["a0000", "a0001", "a0001", "a0003"]
    assert prompts[1]["best"].profile == prof
    assert [d["profile"]["attempt"] for d in diagnosed if d["profile"]][:2] == ["a0000", "a0001"]
    # a recorded gate answers with the recorded profiles
    recorded = RecordedGate.from_run(opt.run_dir.path)
    last = read(opt.run_dir, "profiles/a0003.json")
    again = recorded.profile(opt._candidate(opt.state.best), ["n16M"])
    assert again["available"] is True and again["cases"] == {"n16M": last["cases"]["n16M"]}
    validate_all(opt.run_dir)



def test_a_proposer_that_reads_no_prompt_gets_one_profile_of_the_final_best(tmp_path, task):
    """The built-in tuner reads no prompt: profiling each new best would cost seconds for nothing,
    so only the final best is profiled, after the final holdout, for the report."""
    gate = ScriptedGate(task, profiler=True)
    blind = ScriptedProposer([[vector_add("pass 500")], [vector_add("pass 800")], [vector_add("pass 400")]])
    blind.needs_prompt = False
    opt = new_run(tmp_path, gate=gate, proposer=blind, max_iterations=9)
    summary = opt.run()
    assert [c[1] for c in gate.calls if c[0] == "profile"] == ["a0003.cu"]
    profiled = [c for c in gate.calls if c[0] in ("profile", "evaluate")]
    assert profiled[-1][0] == "profile"                    # after every evaluation, the holdout included
    hist = read(opt.run_dir, "history.json")
    assert [a["profile"] for a in hist["attempts"]] == [None, None, None, "profiles/a0003.json"]
    assert summary["best"]["id"] == "a0003"
    validate_all(opt.run_dir)

def test_profiling_can_be_turned_off_and_on_at_resume(tmp_path, task):
    gate = ScriptedGate(task, profiler=True)
    opt = new_run(tmp_path, [vector_add("pass 400")], gate=gate, max_iterations=1, profile=False)
    opt.run()
    assert not [c for c in gate.calls if c[0] == "profile"] and not (opt.run_dir.path / "profiles").exists()
    gate2 = ScriptedGate(task, profiler=True)
    resume_run(opt.run_dir.path, gate=gate2, overrides={"profile": True}).run()
    assert [c[1] for c in gate2.calls if c[0] == "profile"] == ["a0001.cu"]   # the best, once
    assert read(opt.run_dir, "history.json")["attempts"][1]["profile"] == "profiles/a0001.json"


def test_a_profile_that_is_unavailable_says_why(tmp_path):
    opt = new_run(tmp_path, [vector_add("pass 400")], max_iterations=1)
    lines: list[str] = []
    opt.progress = lines.append
    opt.run()
    prof = read(opt.run_dir, "profiles/a0000.json")
    assert prof["available"] is False and prof["reason"] == "the scripted gate has no profiler"
    assert "[kforge]   no profile of a0001: the scripted gate has no profiler" in lines


# ------------------------------------------------------------------------------ unreachable

def unreachable_result() -> ProposalResult:
    return ProposalResult(calls=[model_call(0, 0, 0.0, error="APIConnectionError: Connection error.")],
                          errors=["openai:gpt-5: proposal 1 of 1: request failed after 2 attempt(s): "
                                  "APIConnectionError: Connection error."], unreachable=True)


def test_an_unreachable_model_stops_the_run(tmp_path):
    proposer = ScriptedProposer([unreachable_result(), [vector_add("pass 400")]])
    opt = new_run(tmp_path, proposer=proposer, max_iterations=5)
    summary = opt.run()
    assert summary["stop_reason"] == "unreachable" and summary["iterations"] == 1
    assert len(proposer.requests) == 1                              # not asked again
    assert "Connection error" in opt.state.stop_detail
    assert read(opt.run_dir, "model-001.json")["error"] == "APIConnectionError: Connection error."
    validate_all(opt.run_dir)


def closed_port_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}/v1"


def test_an_unreachable_base_url_stops_after_one_iteration(tmp_path, clean_env):
    from kernel_forge.proposers.models import make_model_proposer

    url = closed_port_url()
    proposer = make_model_proposer("openai:gpt-5", base_url=url, api_key=KEYS["openai"], request_timeout_s=2,
                                   max_attempts=2, sleep=lambda s: None)
    probe = proposer.propose(loop_module.ProposalRequest(system="s", prompt="p"))
    if not probe.unreachable:
        pytest.skip("this provider does not set ProposalResult.unreachable yet (h-llm's part of issue 9)")
    opt = new_run(tmp_path, proposer=proposer, prop=ProposerConfig(models=["openai:gpt-5"], base_url=url),
                  max_iterations=5)
    summary = opt.run()
    assert summary["stop_reason"] == "unreachable" and summary["iterations"] == 1


def test_cli_exits_3_naming_the_url_when_no_call_connects(tmp_path, task, monkeypatch):
    class FakeGate(ScriptedGate):
        def ensure_gpu(self):
            pass

    monkeypatch.setattr("kernel_forge.app.run_setup.Gate", lambda t, opts: FakeGate(t))
    monkeypatch.setattr("kernel_forge.app.run_setup.make_proposer",
                        lambda cfg, t, history=None, **budget: ScriptedProposer([unreachable_result()]))
    monkeypatch.chdir(Path(MANIFEST).parents[1])
    r = CliRunner().invoke(cli, ["optimize", str(MANIFEST), "--model", "openai:gpt-5", "--base-url",
                                 "http://127.0.0.1:9/v1", "--runs-dir", str(tmp_path / "runs")],
                           catch_exceptions=False)
    assert r.exit_code == 3, r.output + r.stderr
    assert "no model call reached http://127.0.0.1:9/v1: " in r.stderr and "Connection error" in r.stderr
    assert '"stop_reason": "unreachable"' in r.output


# ----------------------------------------------------------------------------------- resume

RESUME = {"01_broken.cu": vector_add("compile_error 0"), "02_fixed.cu": vector_add("pass 400"),
          "03_again.cu": vector_add("pass 400"), "04_faster.cu": vector_add("pass 300")}


def outline(hist: dict) -> list[tuple]:
    return [(a["id"], a["label"], a["status"], a["reason"], a["best"], a["defines"], a["fix_of"], a["direction"],
             a["message"]) for a in hist["attempts"]]


@pytest.mark.parametrize("kill", [3, 5])     # while gating the fix turn (a0002); after the duplicate (a0004)
def test_resume_keeps_fix_turns_and_duplicates(tmp_path, task, kill):
    ref = new_run(tmp_path / "ref", RESUME, max_iterations=9)
    ref.run()
    hist = read(ref.run_dir, "history.json")
    assert [(a["reason"], a["fix_of"]) for a in hist["attempts"][1:]] == [
        ("compile_error", None), ("passed", "a0001"), ("duplicate", None), ("passed", None)]

    opt = new_run(tmp_path, RESUME, gate=ScriptedGate(task, interrupt={"evaluate": kill}), max_iterations=9)
    with pytest.raises(KeyboardInterrupt):
        opt.run()
    killed = read(opt.run_dir, "history.json")
    assert killed["attempts"][2]["fix_of"] == "a0001"
    validate_all(opt.run_dir)
    gate = ScriptedGate(task)
    resume_run(opt.run_dir.path, gate=gate).run()
    assert outline(read(opt.run_dir, "history.json")) == outline(hist)
    assert "a0003.cu" not in evaluated(gate) and "a0001.cu" not in evaluated(gate)
    assert len(evaluated(gate)) == (2 if kill == 3 else 1)


# --------------------------------------------------------------------------------- on a GPU

@pytest.mark.gpu
@pytest.mark.parametrize("name, template", [("matmul_f32", "matmul_f32_tiled.cu"),
                                            ("softmax_rows", "softmax_rows_group.cu")])
def test_gpu_replay_profiles_the_best_and_each_new_best(tmp_path, name, template):
    """The real gate's profile of the initial best and of each new best lands in profiles/ (or says
    why not), and the seconds it took are in the history's state."""
    from kernel_forge.model.candidate import load_candidate
    from kernel_forge.config.gate_settings import GateOptions
    from kernel_forge.config.loop_settings import LoopConfig
    from kernel_forge.app.run_setup import start_run

    root = Path(MANIFEST).parents[1]
    task = load_task(root / "manifests" / f"{name}.json")
    tuned = load_candidate(next((root / "kernel_forge" / "kernels").glob(f"*/{template}")))
    fixed = replace(tuned, tunables={}, constraints=()).render()          # the template at its defaults
    props = tmp_path / "props"
    props.mkdir()
    (props / "01_template.cu").write_text(fixed)
    opt = start_run(task.path, LoopConfig(max_iterations=2, profile=True), GateOptions(warmup=3, reps=20),
                    ProposerConfig(replay=str(props)), runs_dir=tmp_path / "runs")
    try:
        summary = opt.run()
    finally:
        opt.gate.close()
    hist = read(opt.run_dir, "history.json")
    bests = [a for a in hist["attempts"] if a["best"]]
    assert bests[0]["id"] == "a0000" and summary["best"]["id"] == bests[-1]["id"]
    for a in bests:
        prof = read(opt.run_dir, a["profile"])
        assert prof["available"] is True or prof["reason"], prof
        if prof["available"]:
            assert set(prof["cases"]) == {c.name for c in task.cases if c.role == "performance"}
        print(f"\nPROFILE {name} {a['id']}: available={prof['available']} tool={prof.get('tool')} "
              f"reason={prof.get('reason')!r} {hist['state']['profile_seconds'][a['id']]:.1f} s")
    assert set(hist["state"]["profile_seconds"]) == {a["id"] for a in bests}
    validate_all(opt.run_dir)


def test_a_parallel_ensemble_keeps_each_proposal_on_its_own_calls():
    from kernel_forge.proposers.ensemble import EnsembleProposer
    from kernel_forge.proposers.base import ProposalRequest

    def member(name, cost, unreachable=False):
        result = ProposalResult(proposals=[] if unreachable else [Proposal(source=name, calls=[1])],
                                calls=[model_call(cost_usd=cost, error="invalid answer: no tool call"),
                                       model_call(cost_usd=cost)], unreachable=unreachable)
        return ScriptedProposer([result], name=name)

    merged = EnsembleProposer([member("a", 0.1), member("b", 0.2)], "parallel").propose(ProposalRequest("s", "p"))
    assert [(p.source, p.calls) for p in merged.proposals] == [("a", [1]), ("b", [3])]
    assert [c.cost_usd for c in merged.calls] == [0.1, 0.1, 0.2, 0.2] and merged.unreachable is False
    down = EnsembleProposer([member("a", 0, True), member("b", 0, True)], "parallel").propose(ProposalRequest("s", "p"))
    assert down.unreachable is True
