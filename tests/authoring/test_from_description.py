"""``kforge init --describe``: a task written by a model, and nothing of it trusted until checked (CPU).

The model's answers come from the recorded exchanges in tests/data/describe/ (``--replay``) or
from the real Anthropic/OpenAI SDKs talking to the loopback server.  ``init`` runs nothing the
model wrote; ``accept`` (``kforge validate --accept``) runs the reference in the sandbox and the
cross-check, with the CUDA witness built for the host with g++ (tests/support/host_witness.py; those
tests skip without a C++ compiler), stood in for by NumPy, or not at all (no GPU here: the
cross-check is pending).  tests/authoring/test_from_description_gpu.py runs the witness through the real gate.
The cross-check's own tests are in test_crosscheck.py, accepting a task's in test_acceptance.py; the
recorded task they share is tests/support/described_task.py.
"""
from __future__ import annotations

import json

import jsonschema
import pytest
from click.testing import CliRunner

from kernel_forge.app.cli import cli
from kernel_forge.app.run_setup import start_run
from kernel_forge.authoring.acceptance import accept
from kernel_forge.authoring.crosscheck import run_crosscheck
from kernel_forge.authoring.from_description import MAX_DESCRIPTION, check_description, describe_task, fenced, screen_reference
from kernel_forge.authoring.validate import validate_manifest
from kernel_forge.common.errors import InputError
from kernel_forge.config.describe import DescribeConfig
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.evidence.run_dir import schema
from kernel_forge.model.task import load_task

from tests.support.described_task import (DESCRIPTION, GOOD, WRONG, described, needs_cxx, record_disagreement,
                                          recorded_text)
from tests.support.host_witness import HostWitness
from tests.support.loopback import text

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")

# ------------------------------------------------------------------------------ the done criteria

@pytest.mark.slow
@needs_cxx
def test_recorded_answers_write_a_task_that_validates_and_whose_witnesses_agree_once_accepted(tmp_path):
    res = describe_task("relu_like", DESCRIPTION, tmp_path, DescribeConfig(replay=str(GOOD)))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["relu_like.json", "relu_like_describe", "relu_like_reference.py", "relu_like_witness.cu"]
    report = validate_manifest(tmp_path / "relu_like.json")
    assert report.warnings == [] and report.task.initial is None
    assert any("NOT accepted" in n for n in report.notes) and any("reference not run" in n for n in report.notes)
    block = json.loads((tmp_path / "relu_like.json").read_text())["generated"]
    assert block["accepted"] is False and block["crosscheck"]["status"] == "pending"
    assert block["crosscheck"]["extra_shapes"] == 4
    assert block["model"] == "anthropic:claude-sonnet-5-5" and block["replayed_from"] == str(GOOD)
    assert sorted(block["files"]) == ["relu_like.json", "relu_like_reference.py", "relu_like_witness.cu"]
    # the exchange is kept beside the task: three calls
    ex = sorted(p.name for p in (tmp_path / "relu_like_describe").iterdir())
    assert ex == ["model-001.json", "model-002.json", "model-003.json"]
    # accepting runs the cross-check on every case and the four random shapes init recorded
    acc = accept(res.manifest, runner=HostWitness(), by="alice@lab")
    assert acc.status == "accepted", "\n".join(acc.lines)
    check = json.loads((tmp_path / "relu_like_describe" / "crosscheck-accept.json").read_text())
    checked = [c["case"] for c in check["cases"]]
    assert checked[:5] == ["one", "prime", "ragged", "n16M", "hidden"] and len(checked) == 9   # + 4 random shapes
    assert all(c["status"] == "agreed" for c in check["cases"])
    for f in (tmp_path / "relu_like_describe").glob("model-*.json"):
        jsonschema.validate(json.loads(f.read_text()), schema("describe_call.schema.json"))


@pytest.mark.slow
@needs_cxx
def test_the_planted_off_by_one_reference_is_caught_with_both_values_shown(tmp_path):
    res = describe_task("relu_like", DESCRIPTION, tmp_path, DescribeConfig(replay=str(WRONG)))
    before = res.manifest.read_bytes()
    with pytest.raises(InputError, match="weak-case warnings") as err:      # the lint runs first, sandboxed
        accept(res.manifest, runner=HostWitness())
    assert "case one: output y is all zeros" in err.value.message
    assert res.manifest.read_bytes() == before                  # a refused acceptance writes nothing
    check = run_crosscheck(load_task(res.manifest), tmp_path / "relu_like_witness.cu", HostWitness(), seed=7)
    assert check.status == "disagreed"
    text = "\n".join(check.lines())
    # every shape disagrees on its last element: where, the reference's value and the witness's
    for c in check.cases:
        n = c.vars["n"]
        assert c.status == "disagreed" and c.outputs[0]["mismatches"] == 1
        first = c.outputs[0]["first"][0]
        assert first["index"] == [n - 1] and first["reference"] == 0.0 and first["witness"] != 0.0
        assert f"y[{n - 1}]: reference 0.0, CUDA witness {first['witness']!r}" in text
    # a disagreement recorded in the block (as an earlier kforge did) stops optimize, with both values, before any
    # GPU or run folder
    record_disagreement(res.manifest, HostWitness())
    with pytest.raises(InputError) as err:
        start_run(tmp_path / "relu_like.json", LoopConfig(archive="off"), GateOptions(), ProposerConfig(),
                  runs_dir=tmp_path / "runs")
    assert "did not agree" in err.value.message and "reference 0.0, CUDA witness" in err.value.message
    assert not (tmp_path / "runs").exists()


def test_init_describe_with_recorded_answers_on_the_command_line_leaves_the_cross_check_pending(tmp_path):
    """init runs nothing the model wrote: the task is written, marked pending and refused by
    optimize until it is accepted, which needs a GPU for the witness."""
    out = tmp_path / "t"
    r = CliRunner().invoke(cli, ["init", "relu_like", "--describe", DESCRIPTION, "--replay", str(GOOD),
                                 "--dir", str(out)])
    assert r.exit_code == 0, r.output
    assert f"wrote {out / 'relu_like.json'}" in r.output and "nothing the model wrote has run" in r.output
    assert f"kforge validate --accept {out / 'relu_like.json'}" in r.output
    block = json.loads((out / "relu_like.json").read_text())["generated"]
    assert block["crosscheck"]["status"] == "pending" and block["accepted"] is False
    assert "GPU" in block["crosscheck"]["detail"]
    v = CliRunner().invoke(cli, ["validate", "--no-compile", str(out / "relu_like.json")])
    assert v.exit_code == 0 and "NOT accepted" in v.output and "no initial kernel" in v.output
    assert "reference not run: relu_like_reference.py is model-written" in v.output
    o = CliRunner().invoke(cli, ["optimize", str(out / "relu_like.json"), "--runs-dir", str(tmp_path / "runs")])
    assert o.exit_code == 2 and "has not been accepted" in o.output, o.output and "validate --accept" in o.output
    assert not (tmp_path / "runs").exists()
    a = CliRunner().invoke(cli, ["validate", "--accept", str(out / "relu_like.json")])
    assert a.exit_code == 3 and "GPU" in a.output
    assert json.loads((out / "relu_like.json").read_text())["generated"]["accepted"] is False


def test_init_refuses_to_overwrite_and_takes_describe_options_only_with_describe(tmp_path):
    described(tmp_path)
    again = CliRunner().invoke(cli, ["init", "relu_like", "--describe", DESCRIPTION, "--replay", str(GOOD),
                                     "--dir", str(tmp_path / "task")])
    assert again.exit_code == 2 and "already exist" in again.output
    stray = CliRunner().invoke(cli, ["init", "saxpy", "--signature",
                                     'extern "C" __global__ void saxpy(const float* x, float* y, int n)',
                                     "--extra-shapes", "2", "--dir", str(tmp_path / "s")])
    assert stray.exit_code == 2 and "--extra-shapes: only with --describe" in stray.output
    both = CliRunner().invoke(cli, ["init", "relu_like", "--describe", DESCRIPTION, "--signature", "x",
                                    "--dir", str(tmp_path / "b")])
    assert both.exit_code == 2 and "without --from or --signature" in both.output


def test_recorded_answers_for_another_description_are_refused(tmp_path):
    with pytest.raises(InputError, match="recorded for another description"):
        describe_task("relu_like", "Softmax over rows", tmp_path, DescribeConfig(replay=str(GOOD)))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("text, words", [("", "is empty"), ("   \n ", "is empty"),
                                         ("x" * (MAX_DESCRIPTION + 1), "characters long")])
def test_an_empty_or_too_long_description_is_refused_before_anything_is_asked(text, words):
    with pytest.raises(InputError, match=words):
        check_description(text)


def test_describe_needs_a_model_or_recorded_answers(tmp_path):
    with pytest.raises(InputError, match="needs a model"):
        describe_task("relu_like", DESCRIPTION, tmp_path, DescribeConfig())
    with pytest.raises(InputError, match="exclusive"):
        describe_task("relu_like", DESCRIPTION, tmp_path, DescribeConfig(model="openai:x", replay=str(GOOD)))
    with pytest.raises(InputError, match="not an http"):
        describe_task("relu_like", DESCRIPTION, tmp_path, DescribeConfig(model="openai:x", base_url="ftp://h"))
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------ the answers

def test_the_reference_screen_refuses_what_a_reference_does_not_need():
    ok = "import numpy as np\nimport math\n\ndef reference(x, y, n):\n    y[...] = np.maximum(x, 0)\n"
    assert screen_reference(ok, ["x", "y", "n"]) == []
    bad = {"import os\ndef reference(x, y, n): pass": "imports os",
           "from subprocess import run\ndef reference(x, y, n): pass": "imports from subprocess",
           "def reference(x, y, n):\n    open('/etc/passwd')": "uses open()",
           "import numpy as np\ndef reference(x, y, n):\n    np.save('f', x)": "uses .save",
           "def reference(x, y, n):\n    x.__class__": "uses .__class__",
           "def reference(y, x, n): pass": "it must take the kernel's parameters (x, y, n)",
           "def ref(x, y, n): pass": "no top-level function `reference`",
           "def reference(x, y, n)\n    pass": "does not parse",
           "G = 0\ndef reference(x, y, n):\n    global G": "keeps global state"}
    for source, words in bad.items():
        assert any(words in p for p in screen_reference(source, ["x", "y", "n"])), source


def test_fenced_takes_the_block_of_the_asked_language():
    t = "intro\n```python\nprint(1)\n```\n```json\n{\"a\": 1}\n```\n"
    assert fenced(t, ("json",)) == '{"a": 1}\n'
    assert fenced(t, ("cuda",)) is None
    assert fenced("```\nplain\n```", ("json",)) == "plain\n"


class Scripted:
    """A TextModel answering each role from a list, recording what it was asked."""

    name = "scripted:model"

    def __init__(self, answers: dict[str, list[str]]):
        self.answers = {k: list(v) for k, v in answers.items()}
        self.asked: list[tuple[str, list[dict]]] = []

    def ask(self, role, system, messages):
        from kernel_forge.proposers.text import Answer
        from kernel_forge.proposers.base import ModelCall
        self.asked.append((role, messages))
        return Answer(self.answers[role].pop(0), [ModelCall("anthropic", "scripted", {"messages": messages},
                                                            {"content": []})])


def good_answers() -> dict[str, list[str]]:
    return {r: [recorded_text(GOOD, r)] for r in ("spec", "reference", "witness")}


def test_an_unusable_answer_goes_back_once_with_the_reason(tmp_path):
    answers = good_answers()
    answers["spec"].insert(0, "I think the kernel should be fast.")
    answers["reference"].insert(0, "```python\nimport os\ndef reference(x, y, n):\n    y[...] = x\n```")
    answers["witness"].insert(0, '```cuda\nextern "C" __global__ void relu_like(const float* x, float* y)\n{}\n```')
    model = Scripted(answers)
    res = describe_task("relu_like", DESCRIPTION, tmp_path, DescribeConfig(), model=model)
    assert res.manifest.is_file()
    roles = [r for r, _ in model.asked]
    assert roles == ["spec", "spec", "reference", "reference", "witness", "witness"]
    repairs = {r: m[-1]["content"] for r, m in model.asked if len(m) > 1}
    assert "holds no ```json block" in repairs["spec"]
    assert "imports os" in repairs["reference"]
    assert "signature" in repairs["witness"] or "parameters" in repairs["witness"]
    assert len(list((tmp_path / "relu_like_describe").glob("model-*.json"))) == 6


def test_an_answer_still_unusable_after_its_repair_stops_init_and_keeps_the_exchange(tmp_path):
    model = Scripted({"spec": ['```json\n{"signature": "extern \\"C\\" __global__ void other(int n)"}\n```'] * 2})
    with pytest.raises(InputError) as err:
        describe_task("relu_like", DESCRIPTION, tmp_path, DescribeConfig(), model=model)
    assert "spec answer cannot be used" in err.value.message and "relu_like_describe" in err.value.hint
    assert sorted(p.name for p in tmp_path.iterdir()) == ["relu_like_describe"]      # no task file
    assert len(list((tmp_path / "relu_like_describe").glob("model-*.json"))) == 2


def test_a_spec_without_a_case_of_every_role_is_sent_back(tmp_path):
    spec = json.loads(fenced(recorded_text(GOOD, "spec"), ("json",)))
    spec["cases"] = [c for c in spec["cases"] if c["role"] != "holdout"]
    answers = good_answers()
    answers["spec"].insert(0, "```json\n" + json.dumps(spec) + "\n```")
    model = Scripted(answers)
    describe_task("relu_like", DESCRIPTION, tmp_path, DescribeConfig(), model=model)
    assert "no holdout case" in model.asked[1][1][-1]["content"]


def test_the_reference_and_the_witness_are_asked_apart_and_never_see_each_other(tmp_path):
    model = Scripted(good_answers())
    describe_task("relu_like", DESCRIPTION, tmp_path, DescribeConfig(), model=model)
    asked = {role: "\n".join(m["content"] for m in msgs) for role, msgs in model.asked}
    assert "np.where" not in asked["witness"] and "def reference" not in asked["witness"]
    assert "y[i] = v > 0.0f" not in asked["reference"] and "__global__ void relu_like(const float* x, float* y, int n)\n{" \
        not in asked["reference"]
    for role in ("reference", "witness"):       # both get the spec: signature, shapes, cases, tolerance
        assert "extern \"C\" __global__ void relu_like(const float* x, float* y, int n)" in asked[role]
        assert "ragged (n=1000003)" in asked[role] and "1e-06" in asked[role]


def test_initial_writes_the_witness_as_the_initial_kernel(tmp_path):
    res = describe_task("relu_like", DESCRIPTION, tmp_path, DescribeConfig(replay=str(GOOD), initial=True))
    task = load_task(res.manifest)
    assert task.initial == (tmp_path / "relu_like.cu").resolve()
    assert task.initial.read_text() == (tmp_path / "relu_like_witness.cu").read_text()
    assert "relu_like.cu" in task.generated["files"]


# ------------------------------------------------------------------------------ the providers

@pytest.mark.parametrize("spec", ["anthropic:claude-sonnet-5-5", "openai:gpt-6.2-sol", "openai:qwen2.5-coder:32b"])
def test_init_describe_asks_each_provider_without_tools_in_requests_built_from_the_table(spec, tmp_path, loopback,
                                                                                        clean_env, monkeypatch):
    provider = spec.split(":", 1)[0]
    monkeypatch.setenv("ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY", "sk-test-key-0123456789abcdef")
    loopback.script(provider, *(text(recorded_text(GOOD, r)) for r in ("spec", "reference", "witness")))
    url = loopback.anthropic_base_url if provider == "anthropic" else loopback.openai_base_url
    r = CliRunner().invoke(cli, ["init", "relu_like", "--describe", DESCRIPTION, "--model", spec, "--base-url", url,
                                 "--dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    reqs = loopback.requests(provider)
    assert len(reqs) == 3 and loopback.pending(provider) == 0       # no 400 round trip, no truncation
    for req in reqs:
        body = req.body
        assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(body)
        turns = body["input"] if "input" in body else body["messages"]
        assert len([m for m in turns if m["role"] == "user"]) == 1            # three separate conversations
        if spec.startswith("anthropic"):      # the table's entry: adaptive thinking, an effort, room to think
            assert body["thinking"] == {"type": "adaptive"} and body["output_config"]["effort"] == "high"
            assert body["max_tokens"] == 32000 and "temperature" not in body
        elif spec == "openai:gpt-6.2-sol":   # a reasoning model: the Responses API, reasoning on
            assert body["reasoning"]["effort"] == "high" and body["store"] is False and "instructions" in body
        else:                                 # a local server: Chat Completions, the system prompt first
            assert req.path.endswith("/chat/completions") and body["messages"][0]["role"] == "system"
    assert "Write the specification" in json.dumps(reqs[0].body)
    block = json.loads((tmp_path / "relu_like.json").read_text())["generated"]
    assert block["model"] == spec and block["replayed_from"] is None
    recs = [json.loads(f.read_text()) for f in sorted((tmp_path / "relu_like_describe").glob("model-*.json"))]
    assert [x["role"] for x in recs] == ["spec", "reference", "witness"]
    assert all("sk-test-key" not in json.dumps(x) for x in recs)
    for x in recs:
        jsonschema.validate(x, schema("describe_call.schema.json"))
        assert x["error"] is None and x["plan"]["answer_format"] == "text" and x["input_tokens"] > 0
        assert (x["cost_usd"] > 0) == (spec != "openai:qwen2.5-coder:32b")        # priced from the table
    # the recorded exchange replays to the same task
    describe_task("relu_like", DESCRIPTION, tmp_path / "again", DescribeConfig(replay=str(tmp_path / "relu_like_describe")))
    assert (tmp_path / "again" / "relu_like_reference.py").read_text() == (tmp_path / "relu_like_reference.py").read_text()


def test_a_budget_that_cannot_hold_one_call_refuses_it_before_it_is_made_with_the_figures(tmp_path, loopback,
                                                                                          clean_env, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key-0123456789abcdef")
    loopback.script("anthropic", *(text(recorded_text(GOOD, r)) for r in ("spec", "reference", "witness")))
    r = CliRunner().invoke(cli, ["init", "relu_like", "--describe", DESCRIPTION, "--model", "anthropic:claude-sonnet-5-5",
                                 "--base-url", loopback.anthropic_base_url, "--budget-usd", "0.05",
                                 "--dir", str(tmp_path)])
    assert r.exit_code == 2, r.output
    assert "could cost up to $" in r.output and "--budget-usd 0.05" in r.output and "32000 output tokens" in r.output
    assert loopback.requests("anthropic") == [] and list(tmp_path.iterdir()) == []
    # a budget that holds the three calls: every call was checked against it, and the spending is the records'
    r = CliRunner().invoke(cli, ["init", "relu_like", "--describe", DESCRIPTION, "--model", "anthropic:claude-sonnet-5-5",
                                 "--base-url", loopback.anthropic_base_url, "--budget-usd", "5",
                                 "--dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    recs = [json.loads(f.read_text()) for f in sorted((tmp_path / "relu_like_describe").glob("model-*.json"))]
    assert len(recs) == 3 and all(x["plan"]["budget_reserved_usd"] > x["cost_usd"] > 0 for x in recs)
    # a model without a price cannot be held to a budget
    r = CliRunner().invoke(cli, ["init", "other", "--describe", DESCRIPTION, "--model", "openai:my-local-model",
                                 "--base-url", loopback.openai_base_url, "--budget-usd", "1", "--dir", str(tmp_path)])
    assert r.exit_code == 2 and "no price is known for openai:my-local-model" in r.output


def test_an_unreachable_model_is_an_environment_problem(tmp_path, clean_env):
    from tests.support.loopback import closed_port_url
    r = CliRunner().invoke(cli, ["init", "relu_like", "--describe", DESCRIPTION, "--model", "openai:m",
                                 "--base-url", closed_port_url() + "/v1", "--dir", str(tmp_path)])
    assert r.exit_code == 3 and "failed" in r.output and "nothing was written" in r.output
    assert list(tmp_path.iterdir()) == []          # no call was answered: not even the exchange folder is left


def test_an_answer_cut_off_at_the_output_limit_is_asked_again_with_twice_the_limit(tmp_path, loopback, clean_env,
                                                                                   monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key-0123456789abcdef")
    answers = [recorded_text(GOOD, r) for r in ("spec", "reference", "witness")]
    loopback.script("anthropic", text(answers[0]).truncated(), *(text(a) for a in answers))
    cfg = DescribeConfig(model="anthropic:claude-sonnet-5-5", base_url=loopback.anthropic_base_url, max_tokens=1000)
    res = describe_task("relu_like", DESCRIPTION, tmp_path, cfg)
    assert res.manifest.is_file()
    limits = [r.body["max_tokens"] for r in loopback.requests("anthropic")]
    assert limits == [1000, 2000, 1000, 1000]
    recs = [json.loads(f.read_text()) for f in sorted((tmp_path / "relu_like_describe").glob("model-*.json"))]
    assert [x["role"] for x in recs] == ["spec", "spec", "reference", "witness"]
    assert "cut off at the output limit (1000 tokens); asked again with max_tokens=2000" in recs[0]["error"]


# ------------------------------------------------------------------------------ model-written Python (issue 35, S3)

F2PY_REFERENCE = """```python
import numpy as np
import numpy.f2py.f2py2e as f


def reference(x, y, n):
    f.os.popen("id > {marker}").read()
    y[...] = np.where(x > 0, x, np.float32(0.01) * x)
```"""

RAISING_REFERENCE = """```python
import numpy as np


def reference(x, y, n):
    raise ValueError("this reference ran during init")
```"""


def _init_over_http(tmp_path, loopback, monkeypatch, *references: str):
    """``kforge init --describe`` with the real Anthropic SDK against the loopback server, whose
    reference answers are ``references`` (then the spec's and witness's recorded answers)."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key-0123456789abcdef")
    loopback.script("anthropic", text(recorded_text(GOOD, "spec")), *(text(r) for r in references),
                    text(recorded_text(GOOD, "witness")))
    return CliRunner().invoke(cli, ["init", "relu_like", "--describe", DESCRIPTION, "--model",
                                    "anthropic:claude-sonnet-5-5", "--base-url", loopback.anthropic_base_url,
                                    "--dir", str(tmp_path / "task")])


def test_init_describe_runs_nothing_the_model_wrote_and_asks_for_review(tmp_path, loopback, clean_env, monkeypatch):
    from kernel_forge.model import reference_process

    class NoChild:
        def __init__(self, *a, **kw):
            raise AssertionError("init started a reference process")

    monkeypatch.setattr(reference_process, "ReferenceProcess", NoChild)
    r = _init_over_http(tmp_path, loopback, monkeypatch, RAISING_REFERENCE)
    assert r.exit_code == 0, r.output
    m = tmp_path / "task" / "relu_like.json"
    assert "nothing the model wrote has run" in r.output
    assert "review relu_like.json, relu_like_reference.py (model-written Python) and relu_like_witness.cu" in r.output
    assert f"kforge validate --accept {m}  (runs the reference in a sandbox" in r.output
    assert len(loopback.requests("anthropic")) == 3                  # no repair: the reference's failure is unknown
    assert "this reference ran during init" in (tmp_path / "task" / "relu_like_reference.py").read_text()
    block = json.loads(m.read_text())["generated"]
    assert block["crosscheck"]["status"] == "pending" and "validate --accept" in block["crosscheck"]["detail"]
    assert block["accepted"] is False
    o = CliRunner().invoke(cli, ["optimize", str(m), "--runs-dir", str(tmp_path / "runs")])
    assert o.exit_code == 2 and "has not been accepted" in o.output, o.output


def test_init_describe_sends_a_reference_reaching_os_through_numpy_f2py_back_without_running_it(
        tmp_path, loopback, clean_env, monkeypatch):
    marker = tmp_path / "marker"
    r = _init_over_http(tmp_path, loopback, monkeypatch, F2PY_REFERENCE.format(marker=marker),
                        recorded_text(GOOD, "reference"))
    assert r.exit_code == 0, r.output
    assert not marker.exists()
    repair = loopback.requests("anthropic")[2].body["messages"][-1]["content"]
    repair = repair if isinstance(repair, str) else json.dumps(repair)
    assert "imports numpy.f2py.f2py2e" in repair and "uses .os" in repair
    assert "f2py" not in (tmp_path / "task" / "relu_like_reference.py").read_text()


