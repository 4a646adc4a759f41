"""The loop's history on disk: a run killed hard keeps every save it made in its attempt log
(history.jsonl), a save cut off mid-line by the kill is dropped, and ``--resume`` goes on from the
log to the same decisions as a run never killed; a process that ends writes history.json whole
and removes the log.  The gate is the scripted one (tests/support/fakes.py); the kill is a real one
(``os._exit`` in a forked child, so no ``finally`` runs)."""
from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest

from kernel_forge.app.run_setup import resume_run
from kernel_forge.evidence.history_log import LOG, read_history
from kernel_forge.model.task import load_task

from tests.support.fakes import ScriptedGate
from tests.support.loop_runs import MANIFEST, RESUME_PROPS, new_run, outline, read

KILLED = 17


class DiesAt(ScriptedGate):
    """Kills its process (no clean-up, no ``finally``) as the ``at``-th evaluation starts."""

    def __init__(self, task, at: int):
        super().__init__(task)
        self.at = at

    def evaluate(self, candidate, **kw):
        if self.counts["evaluate"] + 1 == self.at:
            os._exit(KILLED)
        return super().evaluate(candidate, **kw)


def killed_run(tmp_path, at: int):
    """A run (the RESUME_PROPS replay, two candidates an iteration) killed hard at the ``at``-th
    evaluation; its folder."""
    task = load_task(MANIFEST)
    found = multiprocessing.get_context("fork").SimpleQueue()

    def child():
        opt = new_run(tmp_path, RESUME_PROPS, gate=DiesAt(task, at), max_iterations=9, candidates=2)
        found.put(str(opt.run_dir.path))
        opt.run()

    proc = multiprocessing.get_context("fork").Process(target=child)
    proc.start()
    proc.join(60)
    assert proc.exitcode == KILLED
    return Path(found.get())


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    opt = new_run(tmp_path_factory.mktemp("ref"), RESUME_PROPS, max_iterations=9, candidates=2)
    opt.run()
    return read(opt.run_dir, "history.json")


def test_a_finished_process_leaves_history_json_whole_and_no_log(reference, tmp_path):
    opt = new_run(tmp_path, RESUME_PROPS, max_iterations=9, candidates=2)
    opt.run()
    assert not (opt.run_dir.path / LOG).exists()
    assert outline(read(opt.run_dir, "history.json")) == outline(reference)
    assert read_history(opt.run_dir) == read(opt.run_dir, "history.json")


def test_a_run_killed_hard_keeps_its_saves_in_the_log_and_resumes_from_it(reference, tmp_path):
    # evaluations: initial, 01, 02, 01's holdout, 03 -- killed as 04 starts (iteration 2)
    path = killed_run(tmp_path, at=6)
    assert (path / LOG).is_file() and not (path / "history.json").exists()
    hist = read_history(path)                      # checked against history.schema.json
    assert hist["state"]["iteration"] == 2 and hist["state"]["settled"] is False
    assert [(a["label"], a["best"]) for a in hist["attempts"][:3]] == \
        [("vector_add.cu", True), ("01_fast.cu", True), ("02_wrong.cu", False)]
    assert [a["status"] for a in hist["attempts"][3:]] == ["pending", "pending"]   # gated after the last save

    gate = ScriptedGate(load_task(MANIFEST))
    summary = resume_run(path, gate=gate).run()
    assert [c[1] for c in gate.calls if c[0] == "evaluate"][:2] == ["a0003.cu", "a0004.cu"]   # nothing asked again
    final = read(path, "history.json")
    assert outline(final) == outline(reference) and summary["best"]["id"] == "a0003"
    assert not (path / LOG).exists()


def test_a_save_the_kill_cut_mid_line_is_dropped_and_the_run_resumes_from_the_one_before(reference, tmp_path):
    path = killed_run(tmp_path, at=6)
    data = (path / LOG).read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1       # the last save: iteration 2's two proposals
    assert b'"03_faster.cu"' in data[last:]
    (path / LOG).write_bytes(data[:last + (len(data) - last) // 2])     # cut in the middle of that line

    hist = read_history(path)
    assert hist["state"] == {**hist["state"], "iteration": 1, "settled": True}
    assert [a["label"] for a in hist["attempts"]] == ["vector_add.cu", "01_fast.cu", "02_wrong.cu"]

    summary = resume_run(path, gate=ScriptedGate(load_task(MANIFEST))).run()
    final = read(path, "history.json")
    assert outline(final) == outline(reference) and summary["best"]["id"] == "a0003"
    assert json.loads((path / "summary.json").read_text())["iterations"] == 2


def test_every_line_of_the_log_matches_its_schema(tmp_path):
    import jsonschema

    from kernel_forge.evidence.run_dir import schema

    path = killed_run(tmp_path, at=6)
    lines = [json.loads(x) for x in (path / LOG).read_text().splitlines()]
    assert len(lines) > 3 and set(lines[0]) == {"task", "kernel_forge", "state", "baselines", "attempts"}
    assert all(len(x["attempts"]) <= 2 for x in lines[1:])        # a save holds only what changed
    for x in lines:
        jsonschema.validate(x, schema("history_log.schema.json"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**lines[1], "attempt": []}, schema("history_log.schema.json"))
