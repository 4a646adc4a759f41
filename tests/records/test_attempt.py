"""One proposal's record (records/attempt.py): a row of history.json read back field for field,
keys of a newer release ignored, and every field set after watching marks it changed."""
from __future__ import annotations

from dataclasses import fields

from kernel_forge.records.attempt import Attempt


def test_an_attempt_reads_back_what_it_wrote_and_ignores_keys_it_does_not_know():
    a = Attempt(id="a0003", iteration=2, proposer="tune", label="t.cu", defines={"BLOCK": 256}, score_us=12.5)
    row = a.to_json()
    assert set(row) == {f.name for f in fields(Attempt)}
    assert Attempt.from_json({**row, "from_a_newer_release": 1}) == a


def test_a_field_set_on_a_watched_attempt_puts_it_among_the_changed():
    a = Attempt(id="a0001", iteration=1, proposer="scripted")
    changed: dict = {}
    a.status = "passed"
    assert changed == {}
    a.watch(changed)
    a.score_us = 40.0
    assert changed == {"a0001": a} and "_changed" not in a.to_json()

