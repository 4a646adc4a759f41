"""Evidence costs no more per attempt at a run's end than at its start (bench/evidence_cost.py):
counted in bytes written through kernel_forge.common.writes, not in seconds, over a scripted tuner
run; the same count on the whole-file rewrite of earlier releases shows the growth it catches."""
from __future__ import annotations

import pytest

from tests.support.bench_scripts import bench_script

evidence_cost = bench_script("evidence_cost")


class NoSyncFS(evidence_cost.CountingFS):
    """Counts the bytes; skips fsync, which only costs this test time (the bytes are the same)."""

    def fsync(self, fd):
        pass


@pytest.fixture(scope="module")
def log_run(tmp_path_factory):
    return evidence_cost.run(300, "log", tmp_path_factory.mktemp("log"), fs=NoSyncFS())


@pytest.mark.slow
def test_bytes_per_attempt_do_not_grow_with_the_run(log_run):
    r = evidence_cost.report(log_run, 100)
    assert r["attempts"] >= 300 and r["stop"].startswith("proposer_exhausted")
    first, last = r["first"]["bytes_per_attempt"], r["last"]["bytes_per_attempt"]
    assert first > 1000 and r["first"]["writes"] > 50                  # it counted something
    assert last <= 1.25 * first, f"evidence per attempt grew from {first:.0f} B to {last:.0f} B"


def test_the_history_is_written_whole_once_at_the_end(log_run):
    r = evidence_cost.report(log_run, 100)
    assert r["history_bytes"] <= r["final_bytes"] < 2 * r["history_bytes"]


@pytest.mark.slow
def test_the_count_catches_a_history_rewritten_whole_at_every_save(tmp_path):
    r = evidence_cost.report(evidence_cost.run(100, "whole", tmp_path, fs=NoSyncFS()), 30)
    assert r["last"]["bytes_per_attempt"] > 3 * r["first"]["bytes_per_attempt"]
