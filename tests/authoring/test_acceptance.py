"""A generated task is refused until it is accepted: ``kforge validate --accept`` re-runs every
check (the reference in the sandbox, the weak-case lint, the cross-check) and records who accepted
it; an edit counts as review unless the witnesses disagreed; eval, the MCP eval tool and the kind
reader refuse it before then."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernel_forge.app.cli import cli
from kernel_forge.app.run_setup import start_run
from kernel_forge.authoring.acceptance import accept, check_usable
from kernel_forge.common.errors import EnvironmentProblem, InputError
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.model.generated import review
from kernel_forge.model.task import load_task

from tests.support.described_task import WRONG, described, needs_cxx, numpy_witness, record_disagreement
from tests.support.fakes import ScriptedGate, write_proposals
from tests.support.host_witness import HostWitness

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")


@pytest.mark.slow
@needs_cxx
def test_accept_reruns_the_checks_and_records_who_accepted(tmp_path):
    m = described(tmp_path)
    with pytest.raises(InputError, match="has not been accepted"):
        check_usable(load_task(m))
    res = accept(m, runner=HostWitness(), by="alice@lab")
    assert res.status == "accepted" and any("agree on all" in line for line in res.lines)
    block = json.loads(m.read_text())["generated"]
    assert block["accepted"] is True and block["accepted_by"] == "alice@lab" and block["accepted_at"]
    assert (m.parent / "relu_like_describe" / "crosscheck-accept.json").is_file()
    r = check_usable(load_task(m))
    assert r.accepted and r.edited == [] and r.evidence()["review"] == "accepted"
    assert accept(m, runner=HostWitness()).status == "already"
    # a run of the accepted task carries it in its evidence
    props = write_proposals(tmp_path / "props", ['// fake: pass 300\n#define FAKE_SCRIPT "a"\n'
                                                 + (m.parent / "relu_like_witness.cu").read_text()])
    opt = start_run(m, LoopConfig(max_iterations=2, archive="off"), GateOptions(), ProposerConfig(replay=str(props)),
                    runs_dir=tmp_path / "runs", gate=ScriptedGate(load_task(m)))
    summary = opt.run()
    run_json = json.loads((opt.run_dir.path / "run.json").read_text())
    assert run_json["generated"]["accepted_by"] == "alice@lab" and run_json["baseline"] == "translation"
    assert summary["generated"]["review"] == "accepted"
    assert "**generated task**" in (opt.run_dir.path / "report.md").read_text()


def test_accept_refuses_witnesses_that_disagree_and_changes_nothing(tmp_path):
    m = described(tmp_path)
    before = m.read_bytes()
    with pytest.raises(InputError) as err:
        accept(m, runner=numpy_witness(shift=3))
    assert "do not agree" in err.value.message and "CUDA witness" in err.value.message
    assert m.read_bytes() == before


def test_accept_refuses_weak_cases(tmp_path):
    m = described(tmp_path)
    data = json.loads(m.read_text())
    data["args"]["x"]["init"] = {"kind": "uniform", "low": 0, "high": 1}      # never negative: a branch never taken
    m.write_text(json.dumps(data, indent=2))
    with pytest.raises(InputError, match="without weak-case warnings") as err:
        accept(m, runner=numpy_witness())
    assert "never negative" in err.value.message


def test_accept_without_a_gpu_says_the_cross_check_needs_one(tmp_path):
    m = described(tmp_path)
    with pytest.raises(EnvironmentProblem, match="GPU"):
        accept(m)                                 # the real gate: no GPU here
    with pytest.raises(InputError, match="not a generated task"):
        accept(Path(__file__).resolve().parents[2] / "manifests" / "vector_add.json")


def test_an_edited_task_counts_as_reviewed_unless_its_witnesses_disagreed(tmp_path):
    m = described(tmp_path)
    assert review(load_task(m)).edited == []
    data = json.loads(m.read_text())
    m.write_text(json.dumps(data))                # reformatted only: not an edit
    assert review(load_task(m)).edited == []
    ref = m.parent / "relu_like_reference.py"
    ref.write_text(ref.read_text() + "\n# reviewed by bob\n")
    notes = []
    r = check_usable(load_task(m), notes.append)
    assert r.edited == ["relu_like_reference.py"] and r.usable and not r.accepted
    assert "taken as reviewed" in notes[0] and "validate --accept" in notes[0]
    assert r.evidence()["review"] == "edited"
    wrong = described(tmp_path / "w", WRONG)
    record_disagreement(wrong, numpy_witness())
    (wrong.parent / "relu_like_witness.cu").write_text("// edited\n" + (wrong.parent / "relu_like_witness.cu").read_text())
    with pytest.raises(InputError, match="the cross-check must run again"):
        check_usable(load_task(wrong))


@pytest.mark.slow
def test_validate_accept_runs_the_reference_in_the_sandbox_and_accepts_a_good_one(tmp_path, monkeypatch):
    m = described(tmp_path)
    ref = m.parent / "relu_like_reference.py"
    outside = tmp_path / "written-by-the-reference"
    # the good reference, and a line that a reviewer missed: it tries to write outside its folder
    ref.write_text(ref.read_text() + f"\n\ndef _leak():\n    try:\n        open({str(outside)!r}, 'w').write('x')\n"
                   "    except OSError:\n        pass\n\n\n_leak()\n")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-planted-0123456789")
    res = accept(m, runner=numpy_witness(), by="alice@lab")
    assert res.status == "accepted", "\n".join(res.lines)
    sandbox = next(line for line in res.lines if "the reference ran in the sandbox" in line)
    assert "environment (scrubbed" in sandbox and "folder (private" in sandbox and "limits (" in sandbox
    if sys.platform.startswith("linux") and "landlock (" in sandbox:
        assert not outside.exists()
    assert json.loads(m.read_text())["generated"]["accepted"] is True


def test_the_kind_is_not_read_from_a_generated_reference_before_it_is_accepted(tmp_path, monkeypatch):
    """Reading the kind runs the reference; a model-written one runs only after validate --accept
    (the built-in tuner's budget line and bound patterns asked for the kind before the check)."""
    from kernel_forge.kinds import identify
    from kernel_forge.model import reference_process

    m = described(tmp_path)
    ran = []
    monkeypatch.setattr(reference_process, "run_reference", lambda *a, **kw: ran.append(a) or pytest.fail("ran"))
    found = identify(load_task(m))
    assert found.match is None and "has not been accepted" in found.line() and not ran
    data = json.loads(m.read_text())
    data["generated"]["accepted"] = True                 # as validate --accept leaves it
    m.write_text(json.dumps(data, indent=2))
    monkeypatch.undo()
    assert identify(load_task(m)).match is not None       # an accepted one is read (an elementwise map)


def test_eval_and_the_mcp_eval_tool_refuse_a_generated_task_before_it_is_accepted(tmp_path, monkeypatch):
    """kforge eval ran the model-written reference of a task nobody accepted (optimize refused it)."""
    from kernel_forge.app.mcp_server import Service
    from kernel_forge.common.errors import InputError
    from kernel_forge.model import reference_process

    m = described(tmp_path)
    monkeypatch.setattr(reference_process, "run_reference", lambda *a, **kw: pytest.fail("the reference ran"))
    witness = m.parent / "relu_like_witness.cu"
    r = CliRunner().invoke(cli, ["eval", str(m), str(witness), "--arch", "sm_90"])
    assert r.exit_code == 2 and "has not been accepted" in r.output, r.output
    service = Service(tmp_path / "runs", gate_factory=lambda task, options: pytest.fail("no gate may be made"),
                      allow=(tmp_path,))
    with pytest.raises(InputError, match="has not been accepted"):
        service.eval_kernel(str(m), path=str(witness))
