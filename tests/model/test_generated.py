"""kernel_forge/model/generated.py: a generated task's block, its file hashes and its review state."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import socket
from pathlib import Path

from kernel_forge.model.generated import Review, body_hash, file_hashes, now, review, who
from kernel_forge.model.task import load_task

ROOT = Path(__file__).resolve().parents[2]
BODY = {"name": "relu_like", "args": {"x": {"shape": ["n"]}}, "tolerance": {"atol": 1e-6, "rtol": 0}}


def generated(tmp_path: Path, **block):
    """A task as ``init --describe`` leaves it in tmp_path: t.json (BODY) and ref.py, their hashes in its block."""
    (tmp_path / "ref.py").write_text("def reference(x, y, n):\n    y[...] = x\n")
    manifest = tmp_path / "t.json"
    block = {"files": file_hashes(manifest, BODY, ["t.json", "ref.py"]), "model": "claude-x",
             "created": "2026-01-02T03:04:05Z", **block}
    task = load_task(ROOT / "manifests" / "vector_add.json")        # only its path and raw are read here
    return dataclasses.replace(task, path=manifest, raw={**BODY, "$schema": "s.json", "generated": block})


def test_the_body_hash_leaves_out_the_generated_block_the_schema_key_order_and_spacing():
    want = hashlib.sha256(b'{"a":1,"b":[1,2]}').hexdigest()
    assert body_hash({"b": [1, 2], "a": 1}) == want
    assert body_hash({"a": 1, "$schema": "x.json", "generated": {"accepted": True}, "b": [1, 2]}) == want
    assert body_hash({"a": 2, "b": [1, 2]}) != want


def test_file_hashes_hash_the_manifest_s_body_and_every_other_file_s_bytes(tmp_path):
    (tmp_path / "ref.py").write_bytes(b"pass\n")
    got = file_hashes(tmp_path / "t.json", {"a": 1, "generated": {}}, ["t.json", "ref.py"])
    assert got == {"t.json": body_hash({"a": 1}), "ref.py": hashlib.sha256(b"pass\n").hexdigest()}


def test_review_names_every_generated_file_edited_or_gone_since(tmp_path):
    task = generated(tmp_path)
    assert review(task).edited == [] and review(dataclasses.replace(task, raw=BODY)) is None   # no block: not generated
    (tmp_path / "ref.py").write_text("def reference(x, y, n):\n    y[...] = 2 * x\n")
    assert review(task).edited == ["ref.py"]
    (tmp_path / "ref.py").unlink()
    edited_body = dataclasses.replace(task, raw={**task.raw, "tolerance": {"atol": 1.0, "rtol": 0}})
    assert review(edited_body).edited == ["t.json", "ref.py"]


def test_a_generated_task_is_usable_once_accepted_or_edited_after_a_cross_check_that_did_not_disagree():
    assert Review({"accepted": True}).usable
    assert not Review({"accepted": False}).usable                                    # neither accepted nor edited
    assert Review({}, edited=["ref.py"]).usable and Review({}, edited=["ref.py"]).crosscheck == "pending"
    for status in ("disagreed", "failed"):
        assert not Review({"crosscheck": {"status": status}}, edited=["ref.py"]).usable
    assert Review({"crosscheck": {"status": "agreed"}}, edited=["ref.py"]).usable


def test_the_evidence_says_who_accepted_or_which_files_were_edited(tmp_path):
    task = generated(tmp_path, accepted=True, accepted_by="alice@lab", accepted_at="2026-01-03T00:00:00Z",
                     crosscheck={"status": "agreed"})
    assert review(task).evidence() == {
        "model": "claude-x", "replayed_from": None, "created": "2026-01-02T03:04:05Z", "accepted": True,
        "accepted_by": "alice@lab", "accepted_at": "2026-01-03T00:00:00Z", "review": "accepted", "edited": [],
        "crosscheck": "agreed"}
    assert Review({}, edited=["t.json"]).evidence()["review"] == "edited"
    assert json.loads(json.dumps(review(task).evidence())) == review(task).evidence()


def test_who_is_user_at_this_host_and_now_is_utc_to_the_second():
    assert re.fullmatch(r"[^@]+@" + re.escape(socket.gethostname()), who())
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", now())
