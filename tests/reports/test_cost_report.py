"""kernel_forge.reports.cost_report: report.md's "Model cost" section, summed per model and per iteration
from a run's model-NNN.json files."""
from __future__ import annotations

import json

import pytest

from kernel_forge.reports.cost_report import cost_lines, cost_rows

CALLS = [
    {"provider": "anthropic", "model": "claude-x", "iteration": 1, "input_tokens": 1000, "cache_read_tokens": 800,
     "cache_write_tokens": 100, "output_tokens": 200, "reasoning_tokens": 50, "cost_usd": 0.01, "error": None},
    {"provider": "openai", "model": "gpt-y", "iteration": 1, "input_tokens": 500, "cache_read_tokens": 0,
     "cache_write_tokens": 0, "output_tokens": 100, "reasoning_tokens": 0, "cost_usd": 0.002,
     "error": "invalid answer: $: missing required field 'source'"},
    {"provider": "anthropic", "model": "claude-x", "iteration": 2, "input_tokens": 2000, "cache_read_tokens": 1500,
     "cache_write_tokens": 0, "output_tokens": 300, "reasoning_tokens": 100, "cost_usd": 0.02, "error": None},
]


def test_rows_sum_tokens_and_cost_and_count_the_calls_whose_answer_was_not_used():
    rows = cost_rows(CALLS, lambda c: c["iteration"])
    assert rows[1] == {"calls": 2, "input_tokens": 1500, "cache_read_tokens": 800, "cache_write_tokens": 100,
                       "output_tokens": 300, "reasoning_tokens": 50, "cost_usd": pytest.approx(0.012), "errors": 1}
    assert rows[2]["calls"] == 1 and rows[2]["errors"] == 0 and rows[2]["cost_usd"] == pytest.approx(0.02)
    # a call of a model the table does not price has no cost: it counts 0
    unpriced = cost_rows([{"provider": "openai", "model": "local", "input_tokens": 7, "cost_usd": None}], lambda c: 0)
    assert unpriced[0]["cost_usd"] == 0.0 and unpriced[0]["input_tokens"] == 7 and unpriced[0]["output_tokens"] == 0


def test_the_section_has_a_table_per_model_and_per_iteration_with_totals(tmp_path):
    for i, call in enumerate(CALLS, 1):
        (tmp_path / f"model-{i:03d}.json").write_text(json.dumps(call))
    (tmp_path / "model-004.json").write_text("{ damaged")          # the evidence checks report it, not this
    (tmp_path / "summary.json").write_text(json.dumps({"cost_usd": 99}))
    lines = cost_lines(tmp_path)
    assert lines[:3] == ["## Model cost", "",
                         "3 model call(s); 2300 of 3500 input tokens read from the prompt cache. Costs at the capability "
                         "table's prices (kernel_forge/data/models.json), each call's in its model-NNN.json."]
    per_model = lines[lines.index("### Per model"):lines.index("### Per iteration")]
    assert per_model[2:] == [
        "| model | calls | input tokens | cache read | cache written | output tokens | of which reasoning | cost $ |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        "| anthropic:claude-x | 2 | 3000 | 2300 | 100 | 500 | 150 | 0.0300 |",
        "| openai:gpt-y | 1 (1 not used) | 500 | 0 | 0 | 100 | 0 | 0.0020 |",
        "| total | 3 | | | | | | 0.0320 |", ""]
    per_iteration = lines[lines.index("### Per iteration"):]
    assert per_iteration[4:] == ["| 1 | 2 (1 not used) | 1500 | 800 | 100 | 300 | 50 | 0.0120 |",
                                 "| 2 | 1 | 2000 | 1500 | 0 | 300 | 100 | 0.0200 |",
                                 "| total | 3 | | | | | | 0.0320 |", ""]


def test_a_run_that_asked_no_model_has_no_cost_section(tmp_path):
    assert cost_lines(tmp_path) == []
