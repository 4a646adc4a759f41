"""Fitting settings per shape: the simplest dispatch rule that keeps every performance case within
noise of its own best, on per-case timings the tuner recorded on the H200 (tests/data/dispatch,
written by make_measured.py from bench/evidence) and on small made-up tables."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kernel_forge.model.candidate import load_candidate, parse_candidate
from kernel_forge.model.dispatch import problem
from kernel_forge.search.dispatch_fit import DIRECTION, Measured, check_fit, features, fit, propose_rules, threshold, within_noise
from kernel_forge.records.attempt import Attempt
from kernel_forge.common.stats import geomean
from kernel_forge.model.task import Case, load_task

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "dispatch"


def recorded(name: str):
    """(performance cases, measured settings, the file's data) of one recorded tuning."""
    d = json.loads((DATA / name).read_text())
    perf = [Case(c["name"], c["role"], c["vars"], i) for i, c in enumerate(d["cases"]) if c["role"] == "performance"]
    names = [c.name for c in perf]
    settings = [Measured.from_evaluation(s["id"], s["defines"], _evaluation(s), names) for s in d["settings"]]
    assert all(settings)
    return perf, settings, d


def _evaluation(s: dict) -> dict:
    return {"passed": True, "cases": [{"name": k, "timing": v} for k, v in s["cases"].items()]}


def independently_within_noise(f, settings, cases, floor=0.01) -> dict[str, bool]:
    """Per case, recomputed from the raw table: does the setting the rule picks for the case's
    variables sit within the noise band of that case's fastest setting?"""
    rule = f.rule()
    out = {}
    for case in cases:
        chosen = rule.branches[rule.pick(case.vars)].defines
        s = next(x for x in settings if x.defines == chosen)
        best = min(settings, key=lambda x: x.median[case.name])
        band = max((s.band[case.name]), best.band[case.name], floor)
        out[case.name] = s.median[case.name] <= best.median[case.name] * (1 + band)
    return out


def no_single_setting_suffices(settings, cases, floor=0.01) -> bool:
    best = {c.name: min(settings, key=lambda x: x.median[c.name]) for c in cases}
    return all(any(not within_noise(s, best[c.name], c.name, floor) for c in cases) for s in settings)


# ------------------------------------------------------------------------------ recorded data

def test_on_the_recorded_matmul_regblock_tuning_two_branches_keep_every_case_within_noise():
    perf, settings, _ = recorded("matmul_regblock_h200.json")
    f = fit(settings, perf)
    assert f.n_branches == 2
    assert no_single_setting_suffices(settings, perf)          # so one branch could not do it
    assert independently_within_noise(f, settings, perf) == {"sq256": True, "rect": True, "large": True}
    assert check_fit(f, settings, perf) == []
    rule = f.rule()
    assert rule.describe() == ("m*n*k >= 1073741824 -> BK=16, BM=128, BN=128, MINB=1, TM=8, TN=8; "
                               "default -> BK=32, BM=32, BN=32, MINB=1, TM=4, TN=4")
    # the 4096^3 case gets the setting that was fastest on it (3,098 µs), not the best-geomean pick (4,884 µs)
    large = f.predicted()["large"]
    assert large == pytest.approx(3097.68, abs=0.01)
    tuners_pick = min(settings, key=lambda s: geomean(s.median.values()))
    assert tuners_pick.median["large"] == pytest.approx(4883.72, abs=0.01)
    assert f.geomean() < geomean(tuners_pick.median.values()) * 0.9


@pytest.mark.parametrize("name, rule", [
    ("layernorm_group_h200.json", "cols >= 2048 -> GROUP=256, ITEMS=8, RPB=1; default -> GROUP=128, ITEMS=2, RPB=1"),
    ("softmax_rows_group_h200.json", "cols >= 2048 -> GROUP=128, ITEMS=8, RPB=1; default -> GROUP=128, ITEMS=2, RPB=1"),
    ("matmul_tiled_h200.json", "m*n*k >= 1073741824 -> RPT=8, TILE=32; default -> RPT=2, TILE=16"),
])
def test_other_recorded_tunings_that_need_two_settings(name, rule):
    perf, settings, _ = recorded(name)
    f = fit(settings, perf)
    assert f.rule().describe() == rule
    assert no_single_setting_suffices(settings, perf)
    assert all(independently_within_noise(f, settings, perf).values())


@pytest.mark.parametrize("name, setting", [
    ("transpose_tiled_h200.json", {"BLOCK_ROWS": 4, "TILE": 32}),
    ("vector_add_vec4_h200.json", {"BLOCK": 256, "ITEMS": 1, "STREAM": 0}),
])
def test_where_one_setting_is_within_noise_everywhere_the_fit_has_one_branch(name, setting):
    perf, settings, _ = recorded(name)
    f = fit(settings, perf)
    assert f.n_branches == 1 and f.feature is None
    assert f.rule().default.defines == setting
    assert all(independently_within_noise(f, settings, perf).values())


# ------------------------------------------------------------------------------ made-up tables

def table(vars_by_case: dict[str, dict], times: dict[str, dict[str, float]], band: float = 0.005):
    """Cases with variables; settings named by their BLOCK value: {"128": {"a": 10.0, ...}}."""
    cases = [Case(n, "performance", v, i) for i, (n, v) in enumerate(vars_by_case.items())]
    settings = [Measured(f"s{b}", {"BLOCK": int(b)}, dict(t), {c: band for c in t}) for b, t in times.items()]
    return cases, settings


def test_three_classes_of_shape_need_three_branches_in_order_of_the_feature():
    cases, settings = table({"s": {"n": 1000}, "m": {"n": 100_000}, "l": {"n": 10_000_000}},
                            {"128": {"s": 10, "m": 50, "l": 900}, "256": {"s": 14, "m": 40, "l": 800},
                             "512": {"s": 20, "m": 60, "l": 500}})
    f = fit(settings, cases)
    assert f.rule().describe() == "n >= 1048576 -> BLOCK=512; n >= 8192 -> BLOCK=256; default -> BLOCK=128"
    assert check_fit(f, settings, cases) == []


def test_the_fewest_branches_win_over_a_slightly_better_prediction():
    # on x, two branches keep every case within noise; on y, three would be a little faster on b
    cases, settings = table({"a": {"x": 1, "y": 1}, "b": {"x": 2, "y": 100}, "c": {"x": 100, "y": 10}},
                            {"1": {"a": 10, "b": 10.04, "c": 30}, "2": {"a": 30, "b": 10.0, "c": 30},
                             "3": {"a": 30, "b": 30, "c": 10}})
    f = fit(settings, cases)
    assert f.n_branches == 2 and f.feature == "x"
    assert f.rule().describe() == "x >= 16 -> BLOCK=3; default -> BLOCK=1"


def test_cases_with_equal_values_of_a_feature_stay_on_one_branch():
    # on n alone a and b are one shape class; they need different settings, so the fit uses m
    cases, settings = table({"a": {"m": 4, "n": 8}, "b": {"m": 64, "n": 8}},
                            {"1": {"a": 10, "b": 30}, "2": {"a": 30, "b": 10}})
    f = fit(settings, cases)
    assert f.feature == "m" and f.n_branches == 2
    assert f.rule().describe() == "m >= 16 -> BLOCK=2; default -> BLOCK=1"


def test_two_cases_of_one_shape_that_disagree_give_no_rule():
    cases, settings = table({"a": {"n": 8}, "b": {"n": 8}}, {"1": {"a": 10, "b": 30}, "2": {"a": 30, "b": 10}})
    assert fit(settings, cases) is None


def test_the_noise_band_of_either_timing_and_the_floor_decide_within_noise():
    best = Measured("b", {}, {"c": 100.0}, {"c": 0.002})
    assert within_noise(Measured("s", {}, {"c": 100.9}, {"c": 0.002}), best, "c", 0.01)        # the 1 % floor
    assert not within_noise(Measured("s", {}, {"c": 101.1}, {"c": 0.002}), best, "c", 0.01)
    assert within_noise(Measured("s", {}, {"c": 102.9}, {"c": 0.03}), best, "c", 0.01)         # its own band
    assert within_noise(Measured("s", {}, {"c": 102.9}, {"c": 0.0}), Measured("b", {}, {"c": 100.0}, {"c": 0.03}),
                        "c", 0.01)                                                               # the best's band


@pytest.mark.parametrize("lo, hi, t", [
    (384 * 256 * 320, 4096 ** 3, 1 << 30),     # the matmul cases: a power of two, not a case's value
    (1024, 8192, 2048),                        # 2048 and 4096 are as near sqrt(lo * hi): the lower
    (100, 127, 127),                           # no power of two in (100, 127]: the upper value
    (3, 4, 4),
    (0, 5, 5),                                 # no geometric middle with 0: the upper value
])
def test_thresholds_are_readable_and_sit_between_the_branches(lo, hi, t):
    got = threshold(lo, hi)
    assert got == t and lo < got <= hi


def test_features_are_the_case_variables_and_their_products_in_manifest_order():
    cases = [Case("a", "performance", {"m": 1, "n": 2, "k": 3}, 0)]
    assert features(cases) == ["m", "n", "k", "m*n", "m*k", "n*k", "m*n*k"]


# ------------------------------------------------------------------------------ the loop's hook

def _attempts_from(name: str, template: str):
    perf, _, d = recorded(name)
    attempts = []
    for i, s in enumerate(d["settings"]):
        ev = _evaluation(s)
        a = Attempt(id=s["id"], iteration=1, proposer="tune", label=Path(template).name, status="passed",
                    defines=s["defines"], tunables={"x": [1]}, evaluation=ev,
                    score_us=geomean(v["median"] for v in s["cases"].values()))
        attempts.append(a)
    base = load_candidate(ROOT / template)
    return attempts, (lambda a: base.with_defines(a.defines))


def test_the_loop_hook_proposes_the_fitted_rule_on_the_template_once():
    task = load_task(ROOT / "manifests" / "matmul_f32.json")
    attempts, candidate = _attempts_from("matmul_regblock_h200.json", "kernel_forge/kernels/gemm/matmul_f32_regblock.cu")
    props = propose_rules(attempts, attempts, task, candidate=candidate)
    assert len(props) == 1
    p = props[0]
    cand = parse_candidate(p.source, name="rule.cu")
    assert cand.dispatch.describe().startswith("m*n*k >= 1073741824 -> BK=16, BM=128, BN=128")
    assert problem(task, cand.dispatch) is None
    top = min(attempts, key=lambda a: a.score_us)
    assert p.parent == top.id and p.label == "matmul_f32_regblock.cu+dispatch" and p.direction == DIRECTION
    assert "every performance case within noise of its own best" in p.rationale
    assert cand.tunables == load_candidate(ROOT / "kernel_forge/kernels/gemm/matmul_f32_regblock.cu").tunables
    # once an attempt carries this rule, it is not proposed again (a resumed or later iteration)
    rule_attempt = Attempt(id="a0099", iteration=1, proposer="tune", label=p.label, dispatch=cand.dispatch.to_json())
    assert propose_rules(attempts, attempts + [rule_attempt], task, candidate=candidate) == []


def test_the_loop_hook_proposes_nothing_where_one_setting_suffices():
    task = load_task(ROOT / "manifests" / "vector_add.json")
    attempts, candidate = _attempts_from("vector_add_vec4_h200.json", "kernel_forge/kernels/elementwise/vector_add_vec4.cu")
    assert propose_rules(attempts, attempts, task, candidate=candidate) == []


def test_the_geomean_a_rule_predicts_is_that_of_the_per_case_settings():
    perf, settings, _ = recorded("matmul_regblock_h200.json")
    f = fit(settings, perf)
    by = {c: f.setting_of(c).median[c] for c in ("sq256", "rect", "large")}
    assert f.geomean() == pytest.approx(math.exp(sum(math.log(v) for v in by.values()) / 3))


def _feasible(settings, best, names, floor=0.01) -> bool:
    return any(all(within_noise(s, best[c], c, floor) for c in names) for s in settings)


def _fewest_by_brute_force(feature, cases, settings, best) -> int | None:
    """The fewest contiguous segments (cases sorted by the feature, equal values together) each with
    a setting within noise on all its cases, by trying every set of cut points."""
    import itertools
    from kernel_forge.common import expressions
    values = {c.name: expressions.evaluate(feature, c.vars) for c in cases}
    distinct = sorted(set(values.values()), reverse=True)
    groups = [[n for n in values if values[n] == v] for v in distinct]
    for k in range(1, len(groups) + 1):
        for cuts in itertools.combinations(range(1, len(groups)), k - 1):
            bounds = [0, *cuts, len(groups)]
            segs = [[n for g in groups[a:b] for n in g] for a, b in zip(bounds, bounds[1:])]
            if all(_feasible(settings, best, seg) for seg in segs):
                return k
    return None


@pytest.mark.parametrize("seed", range(40))
def test_on_random_tables_the_fit_keeps_every_case_within_noise_with_the_fewest_branches(seed):
    import random
    rng = random.Random(seed)
    n_cases, n_settings = rng.randint(2, 5), rng.randint(2, 6)
    cases = [Case(f"c{i}", "performance", {"m": rng.choice([8, 64, 512, 4096]), "n": rng.choice([16, 256, 2048])}, i)
             for i in range(n_cases)]
    settings = [Measured(f"s{j}", {"BLOCK": j}, {c.name: rng.uniform(10, 20) for c in cases},
                         {c.name: rng.uniform(0.0, 0.02) for c in cases}) for j in range(n_settings)]
    best = {c.name: min(settings, key=lambda s: s.median[c.name]) for c in cases}
    f = fit(settings, cases)
    fewest = [k for k in (_fewest_by_brute_force(feat, cases, settings, best) for feat in features(cases)) if k]
    if _feasible(settings, best, [c.name for c in cases]):
        fewest.append(1)
    if f is None:
        assert not fewest                  # no feature separates the cases that disagree
        return
    assert check_fit(f, settings, cases) == []
    assert all(independently_within_noise(f, settings, cases).values())
    assert f.n_branches == min(fewest)
