"""kernel_forge/model/weak_cases.py: warnings about cases a wrong kernel could pass."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_forge.model.task import Case, load_task
from kernel_forge.model.weak_cases import case_size, input_warnings, output_warnings, weak_case_warnings

ROOT = Path(__file__).resolve().parents[2]


def vector_add(tmp_path: Path, inits: dict | None = None, body: str | None = None):
    """vector_add (a, b, c, n) with ``inits`` for its inputs and, when given, its reference's ``body``."""
    data = json.loads((ROOT / "manifests" / "vector_add.json").read_text())
    data.pop("$schema")
    data.pop("templates")
    data.update(baselines={}, initial=str(ROOT / "manifests" / "vector_add.cu"),
                reference={"python": str(ROOT / "references" / "vector_add.py") + ":reference"})
    for name, init in (inits or {}).items():
        data["args"][name]["init"] = init
    if body is not None:
        (tmp_path / "ref.py").write_text("def reference(a, b, c, n):\n" + body)
        data["reference"] = {"python": "ref.py:reference"}
    (tmp_path / "t.json").write_text(json.dumps(data))
    return load_task(tmp_path / "t.json")


def test_a_case_s_size_is_all_its_buffer_elements():
    task = load_task(ROOT / "manifests" / "vector_add.json")
    assert case_size(task, task.case("tiny")) == 3 * 37 and case_size(task, task.case("odd")) == 3 * 1000003


@pytest.mark.parametrize("init, warned", [
    ({"kind": "uniform", "low": 0.0, "high": 1.0}, ["never negative"]),
    ({"kind": "uniform", "low": -1.0, "high": 1.0}, []),
    ({"kind": "constant", "value": -2.0}, ["constant"]),
    ("ones", ["never negative", "constant"]),
    ({"kind": "arange", "start": 0, "step": 1}, ["never negative"]),
    ({"kind": "arange", "start": 0, "step": -1}, []),
    ({"kind": "normal", "mean": 10.0, "std": 1.0}, ["never negative"]),       # 6 sigma stay above 0
    ({"kind": "normal", "mean": 5.0, "std": 1.0}, []),
    ({"kind": "normal", "mean": 1.0, "std": 0.0}, ["never negative", "constant"]),
])
def test_inputs_that_never_go_negative_or_never_change_are_named_from_their_init(tmp_path, init, warned):
    task = vector_add(tmp_path, {"a": init})
    got = input_warnings(task, task.case("tiny"))
    assert [w for w in ("never negative", "constant") if any(w in g for g in got)] == warned
    assert all(g.startswith("case tiny: input a ") for g in got)


def test_the_warnings_say_what_would_pass_and_a_single_value_is_never_warned_about(tmp_path):
    task = vector_add(tmp_path, {"a": "ones"})
    assert input_warnings(task, task.case("tiny")) == [
        "case tiny: input a (float32) is never negative; a kernel that mishandles signs would pass (use a signed init "
        "such as normal)",
        "case tiny: input a is constant; indexing bugs would pass"]
    assert input_warnings(task, Case("one", "correctness", {"n": 1}, 0)) == []


@pytest.mark.parametrize("body, warning", [
    ("    c = a + b\n", "case tiny: output c is all zeros, as it was before the reference ran: does the reference "
                      "write it in place (c[...] = ...)? Rebinding the name (c = ...) writes nothing, and a kernel "
                      "writing zeros passes"),
    ("    c[...] = 1e-7\n", "case tiny: output c is within tolerance of all zeros (max |ref| 1e-07 vs atol 1e-06); "
                          "a kernel writing zeros passes"),
    ("    c[...] = 3.0\n", "case tiny: output c is within tolerance of the constant 3; a kernel writing one value "
                         "passes"),
    ("    c[...] = a + b\n", None),
], ids=["rebound", "near_zero", "constant", "written"])
def test_outputs_that_zeros_or_a_constant_would_match_are_named(tmp_path, body, warning):
    task = vector_add(tmp_path, body=body)
    assert output_warnings(task, task.case("tiny")) == ([warning] if warning else [])


def test_cases_too_large_are_skipped_with_the_reason_and_none_runs_the_reference_when_told(tmp_path):
    task = vector_add(tmp_path, {"b": {"kind": "uniform", "low": 0.0, "high": 2.0}}, body="    raise ValueError\n")
    skipped = []
    warnings = weak_case_warnings(task, max_elements=200, fits=lambda case: case.name != "tiny", skipped=skipped)
    assert [(c.name, why) for c, why in skipped] == [
        ("odd", "over 200 elements (--deep runs them)"), ("tiny", "too large for this host's memory"),
        ("n16M", "over 200 elements (--deep runs them)"), ("n64M", "over 200 elements (--deep runs them)"),
        ("holdout", "over 200 elements (--deep runs them)")]
    assert len(warnings) == 5 and all("input b (float32) is never negative" in w for w in warnings)
    assert weak_case_warnings(task, run_reference=False) == warnings          # the raising reference never ran
