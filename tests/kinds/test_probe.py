"""kernel_forge/kinds/probe.py: the reference on one small case, and who is who among its parameters."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from kernel_forge.kinds.probe import Probe, pick_case, take
from kernel_forge.model.inputs import CaseInputs
from kernel_forge.model.task import Case, load_task

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"


def probe(name: str, **vars) -> Probe:
    """A probe of a bundled task on a case with ``vars`` (values do not matter here: only who is who)."""
    task = load_task(MANIFESTS / f"{name}.json")
    case = Case("probe", "correctness", vars, 0)
    scalars = {a.name: task.scalar(a, case) for a in task.args if not a.is_buffer}
    sizes = {a.name: math.prod(task.shape(a, case)) for a in task.args if a.is_buffer}
    return Probe(task=task, inputs=CaseInputs(case, 0, {}, scalars), values={n: np.zeros(s) for n, s in sizes.items()},
                 scalars=scalars, outputs={}, sizes=sizes)


def test_the_probe_tells_outputs_inputs_and_scalars_apart_in_signature_order():
    p = probe("layernorm", rows=3, cols=4)         # (x, gamma, beta, y, rows, cols, eps)
    assert p.buffers(output=True) == ["y"] and p.buffers(output=False) == ["x", "gamma", "beta"]
    assert p.inputs_of() == ["x", "gamma", "beta"] and p.inputs_of(4) == ["gamma", "beta"] and p.inputs_of(12) == ["x"]
    assert p.int_scalars() == {"rows": 3, "cols": 4} and p.float_scalars() == {"eps": 1e-5}
    assert p.params_of(4) == ["cols"] and p.params_of(5) == []


def test_an_output_that_starts_from_values_is_also_an_input_and_integers_are_told_from_floats():
    p = probe("histogram", n=6, nbins=4)            # bins starts from zeros: an input too
    assert p.buffers(output=True) == ["bins"] and p.buffers(floating=True) == []
    assert p.inputs_of(floating=False) == ["x", "bins"] and p.inputs_of() == []
    assert p.inputs_of(4, floating=None) == ["bins"]


def test_the_case_probed_is_the_smallest_whose_sizes_differ_and_exceed_one():
    task = load_task(MANIFESTS / "softmax_rows.json")
    cases = {"big": {"rows": 64, "cols": 64}, "square": {"rows": 4, "cols": 4}, "one_row": {"rows": 1, "cols": 8},
             "small": {"rows": 3, "cols": 5}}
    mine = dataclasses.replace(task, cases=tuple(Case(n, "correctness", v, i) for i, (n, v) in enumerate(cases.items())))
    assert pick_case(mine).name == "small"                          # 30 elements, though one_row has 16
    no_small = dataclasses.replace(mine, cases=tuple(c for c in mine.cases if c.name != "small"))
    assert pick_case(no_small).name == "one_row"                    # distinct sizes first, then none of 1
    huge = dataclasses.replace(task, cases=(Case("huge", "correctness", {"rows": 4096, "cols": 1024}, 0),))
    assert pick_case(huge) is None                                  # 2 * 4M values: over MAX_ELEMENTS


def test_take_runs_the_reference_on_the_smallest_case_and_rerun_on_changed_inputs():
    p = take(load_task(MANIFESTS / "vector_add.json"), seed=7)
    assert p.inputs.case.name == "tiny" and p.scalars == {"n": 37} and p.sizes == {"a": 37, "b": 37, "c": 37}
    assert np.isnan(p.values["c"]).all()                           # a pure output has no initial values
    np.testing.assert_allclose(p.outputs["c"], p.values["a"] + p.values["b"], rtol=1e-6)
    again = p.rerun({"a": np.zeros(37)})
    np.testing.assert_allclose(again["c"], p.values["b"], rtol=1e-6)


def test_a_strided_view_sees_each_row_s_first_cols_values_and_a_rerun_writes_them_back_in_place():
    """layernorm_ld's x is M x ldx, of which each row's first N values are normed: the view of x holds
    those (M * N values); a rerun on changed view values puts them back at ldx apart, so the reference
    sees them where it reads, and the padding as it was."""
    from kernel_forge.kinds.probe import strided_views

    task = load_task(Path(__file__).resolve().parents[2] / "tests" / "data" / "kinds" / "layernorm_ld.json")
    p = take(task)
    M, N, ldx = (int(p.scalars[k]) for k in ("M", "N", "ldx"))
    views = list(strided_views(p))
    assert [(x, ld, v.cols) for v, x, ld in views] == [("x", "ldx", c) for c in sorted({M, N}, reverse=True) if c < ldx]
    view = next(v for v, _, _ in views if v.cols == N)
    assert view.sizes["x"] == M * N and np.array_equal(view.values["x"], p.values["x"].reshape(M, ldx)[:, :N].reshape(-1))
    doubled = view.rerun({"x": 2.0 * view.values["x"] + 1.0})["y"]          # a layernorm: the same rows normed
    assert np.allclose(doubled, p.outputs["y"], atol=1e-4)
    shifted = view.rerun({"x": view.values["x"] * np.tile(np.r_[1.0, np.zeros(N - 1)], M)})["y"]
    assert not np.allclose(shifted, p.outputs["y"], atol=1e-2)             # the changed values did reach it
