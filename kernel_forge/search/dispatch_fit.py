"""Settings per shape, fitted: the simplest dispatch rule that keeps every performance case
within noise of its own best setting.

The tuner gates many settings of one kernel on every case, so each attempt's evaluation holds
the per-case medians.  From them:

* **best of a case**: the least median any setting reached on it;
* **within noise**: setting *s* is within noise of the best *b* on case *c* when
  ``t(s, c) <= t(b, c) * (1 + band)``, ``band`` the wider relative p20-p80 half-band of the two
  timings, and never less than ``floor`` (the loop's ``min_improvement``);
* **a rule on a feature** *f* (a case variable, or a product of them such as ``m*n*k``) with
  thresholds ``f >= t1``, ``f >= t2`` ... and a default cuts the cases, sorted by *f*, into
  contiguous segments; each segment runs the setting that is within noise on all its cases and
  has the least geometric mean over them.

:func:`fit` finds, for every feature, the fewest segments (dynamic programming over the distinct
values of *f*, largest first; cases with equal values stay together), then the least predicted
geometric mean; across features it takes the fewest branches, then (among those whose predicted
geometric mean is within ``floor`` of the least) the widest gap between neighbouring branches —
the ratio of the least feature value above a threshold to the largest below it, so a shape near a
case still takes that case's setting — then the fewest factors.  A threshold is the power of two between two segments nearest
their geometric middle (else the upper segment's least value), so it reads well and does not sit
on a case.  One branch means one setting suffices: no rule is proposed.

:func:`propose_rules` is what the loop calls once a tuned proposal's settings are gated: a
:class:`~kernel_forge.proposers.base.Proposal` per group whose fitted rule has two or more
branches, gated like any other candidate (full gate, side-by-side re-timing, holdout with the
rule's pick).
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kernel_forge.common import expressions
from kernel_forge.model.dispatch import Branch, Rule, problem
from kernel_forge.common.errors import ExpressionError, KForgeError

if TYPE_CHECKING:
    from kernel_forge.model.candidate import Candidate
    from kernel_forge.proposers.base import Proposal

#: the direction recorded on a proposed rule
DIRECTION = "settings per shape (dispatch rule)"
#: the most variables multiplied into one feature (m*n*k)
MAX_FACTORS = 3


@dataclass(frozen=True)
class Measured:
    """One gated setting: its defines and, per performance case, the median and relative noise band."""

    id: str
    defines: dict
    median: dict[str, float]
    band: dict[str, float]

    @classmethod
    def from_evaluation(cls, id: str, defines: dict, evaluation: dict | None, cases: Sequence[str]) -> "Measured | None":
        """From an evaluation JSON; None unless it passed with a timing on every one of ``cases``."""
        if not evaluation or not evaluation.get("passed"):
            return None
        med, band = {}, {}
        for c in evaluation.get("cases", []):
            t = c.get("timing")
            if c.get("name") in cases and t and t.get("median", 0) > 0:
                med[c["name"]] = float(t["median"])
                band[c["name"]] = max(0.0, (float(t["p80"]) - float(t["p20"])) / (2 * float(t["median"])))
        if set(med) != set(cases):
            return None
        return cls(id, dict(defines), med, band)


def within_noise(s: Measured, best: Measured, case: str, floor: float) -> bool:
    """Whether ``s`` is within noise of ``best`` on ``case`` (see the module)."""
    band = max(s.band[case], best.band[case], floor)
    return s.median[case] <= best.median[case] * (1.0 + band)


@dataclass
class FitBranch:
    threshold: float | int | None      # None: the default (the last branch)
    setting: Measured
    cases: list[str]


@dataclass
class Fit:
    """A fitted rule: ``feature`` (None with one branch), branches from the largest values down."""

    feature: str | None
    branches: list[FitBranch]
    best: dict[str, Measured]          # per case: the setting with the least median
    floor: float
    #: the narrowest gap between neighbouring branches, log2(least value above / largest below)
    margin: float = math.inf

    @property
    def n_branches(self) -> int:
        return len(self.branches)

    def setting_of(self, case: str) -> Measured:
        return next(b.setting for b in self.branches if case in b.cases)

    def predicted(self) -> dict[str, float]:
        """Per case: the median of the setting the rule gives it (as measured on its own)."""
        return {c: self.setting_of(c).median[c] for c in self.best}

    def geomean(self) -> float:
        p = self.predicted()
        return math.exp(sum(math.log(v) for v in p.values()) / len(p))

    def rule(self) -> Rule:
        out = []
        for b in self.branches:
            when = None if b.threshold is None else f"{self.feature} >= {b.threshold}"
            out.append(Branch(when, dict(b.setting.defines)))
        return Rule(tuple(out))

    def describe(self) -> str:
        parts = []
        for b in self.branches:
            cond = "default" if b.threshold is None else f"{self.feature} >= {b.threshold}"
            parts.append(f"{cond} -> {b.setting.id} ({', '.join(b.cases)})")
        return "; ".join(parts)


# ------------------------------------------------------------------------------ fitting

def features(cases) -> list[str]:
    """Candidate features: each numeric case variable, and products of up to MAX_FACTORS of them
    (in the order the manifest gives the variables)."""
    shared = set.intersection(*(set(c.vars) for c in cases)) if cases else set()
    common = [n for n in cases[0].vars if n in shared] if cases else []    # the manifest's order: m*n*k
    names = [n for n in common if all(isinstance(c.vars[n], (int, float)) and not isinstance(c.vars[n], bool)
                                      for c in cases)]
    out = []
    for r in range(1, min(MAX_FACTORS, len(names)) + 1):
        out.extend("*".join(combo) for combo in itertools.combinations(names, r))
    return out


def _segment(settings: Sequence[Measured], best: dict[str, Measured], cases: list[str],
             floor: float) -> tuple[float, Measured] | None:
    """The setting within noise on every one of ``cases`` with the least sum of log medians, or None."""
    top = None
    for s in settings:
        if all(within_noise(s, best[c], c, floor) for c in cases):
            cost = sum(math.log(s.median[c]) for c in cases)
            if top is None or cost < top[0] - 1e-12:
                top = (cost, s)
    return top


def threshold(lo: float, hi: float) -> float | int:
    """A readable threshold t with lo < t <= hi: the power of two nearest sqrt(lo*hi), else hi."""
    if lo > 0:
        mid = 0.5 * (math.log2(lo) + math.log2(hi))
        lo_e, hi_e = math.floor(math.log2(lo)) + 1, math.floor(math.log2(hi))
        exps = [e for e in range(lo_e - 1, hi_e + 2) if lo < 2.0 ** e <= hi]
        if exps:
            e = min(exps, key=lambda x: (abs(x - mid), x))
            return int(2 ** e) if e >= 0 else 2.0 ** e
    return int(hi) if float(hi).is_integer() else hi


def _fit_feature(feature: str, cases, settings: Sequence[Measured], best: dict[str, Measured],
                 floor: float) -> Fit | None:
    try:
        values = {c.name: expressions.evaluate(feature, c.vars) for c in cases}
    except ExpressionError:
        return None
    distinct = sorted(set(values.values()), reverse=True)
    groups = [[c.name for c in cases if values[c.name] == v] for v in distinct]
    g = len(groups)
    # dp[i]: (branches, cost, j, setting) covering groups[0:i]
    dp: list[tuple[int, float, int, Measured] | None] = [None] * (g + 1)
    dp[0] = (0, 0.0, -1, None)
    for i in range(1, g + 1):
        for j in range(i):
            if dp[j] is None:
                continue
            seg = [n for grp in groups[j:i] for n in grp]
            found = _segment(settings, best, seg, floor)
            if found is None:
                continue
            cand = (dp[j][0] + 1, dp[j][1] + found[0], j, found[1])
            if dp[i] is None or (cand[0], cand[1]) < (dp[i][0], dp[i][1] - 1e-12):
                dp[i] = cand
    if dp[g] is None:
        return None
    cuts, i = [], g
    while i > 0:
        _, _, j, s = dp[i]
        cuts.append((j, i, s))
        i = j
    cuts.reverse()                      # from the largest values down
    branches, margin = [], math.inf
    for k, (j, i, s) in enumerate(cuts):
        names = [n for grp in groups[j:i] for n in grp]
        if k == len(cuts) - 1:
            t = None
        else:
            lo, hi = distinct[i], distinct[i - 1]     # the lower segment's largest, this one's least
            t = threshold(lo, hi)
            margin = min(margin, math.log2(hi / lo) if lo > 0 else math.inf)
        branches.append(FitBranch(t, s, names))
    return Fit(feature, branches, best, floor, margin)


def fit(settings: Sequence[Measured], cases, *, floor: float = 0.01) -> Fit | None:
    """The simplest rule over ``settings`` (each measured on every one of ``cases``, the task's
    performance cases) that keeps every case within noise of its best; None without settings."""
    settings = list(settings)
    if not settings or not cases:
        return None
    names = [c.name for c in cases]
    best = {n: min(settings, key=lambda s: (s.median[n], s.id)) for n in names}
    one = _segment(settings, best, names, floor)
    if one is not None:
        return Fit(None, [FitBranch(None, one[1], names)], best, floor)
    fits = [f for f in (_fit_feature(feat, cases, settings, best, floor) for feat in features(cases)) if f]
    if not fits:
        return None
    fewest = min(f.n_branches for f in fits)
    fits = [f for f in fits if f.n_branches == fewest]
    g0 = min(f.geomean() for f in fits)
    near = [f for f in fits if f.geomean() <= g0 * (1.0 + floor)]     # within noise of the best prediction
    return min(near, key=lambda f: (-f.margin, f.feature.count("*"), f.feature))


def check_fit(f: Fit, settings: Sequence[Measured], cases) -> list[str]:
    """Every one of ``cases`` where the rule's setting is not within noise of that case's best
    (empty: the rule keeps every case within noise).  Computed from the rule as it runs, not from
    the fit's bookkeeping: each case's setting is the one ``Rule.pick`` gives its variables."""
    rule = f.rule()
    by_defines = {tuple(sorted(s.defines.items())): s for s in settings}
    bad = []
    for case in cases:
        branch = rule.branches[rule.pick(case.vars)]
        s = by_defines[tuple(sorted(branch.defines.items()))]
        if not within_noise(s, f.best[case.name], case.name, f.floor):
            bad.append(case.name)
    return bad


# ------------------------------------------------------------------------------ the loop's hook

def _passed_tuned(a) -> bool:
    return a.status == "passed" and bool(a.tunables) and not getattr(a, "dispatch", None) and a.evaluation


def propose_rules(batch, attempts, task, *, candidate: Callable[[object], "Candidate"],
                  floor: float = 0.01) -> list["Proposal"]:
    """For each tuned proposal of ``batch`` (its label), the rule fitted over every passed setting
    of the same source in the run (``attempts``), as a Proposal, when it needs two or more
    branches and was not proposed before.  ``candidate(attempt)`` reads an attempt's kernel."""
    from kernel_forge.proposers.base import Proposal
    from kernel_forge.search.spaces import body_key

    perf = list(task.cases_with("performance"))
    names = [c.name for c in perf]
    if len(perf) < 2:
        return []
    out = []
    labels = list(dict.fromkeys(a.label for a in batch if _passed_tuned(a)))
    proposed = [a.dispatch for a in attempts if getattr(a, "dispatch", None)]
    for label in labels:
        members = [a for a in attempts if a.label == label and _passed_tuned(a)]
        top = min((a for a in members if a.score_us), key=lambda a: a.score_us, default=None)
        if top is None:
            continue
        try:
            base = candidate(top)
            body = body_key(base)
            same = [a for a in members if a is top or body_key(candidate(a)) == body]
        except (KForgeError, OSError):
            continue
        measured = [m for m in (Measured.from_evaluation(a.id, a.defines, a.evaluation, names) for a in same) if m]
        fitted = fit(measured, perf, floor=floor)
        if fitted is None or fitted.n_branches < 2:
            continue
        rule = fitted.rule()
        if rule.to_json() in proposed or problem(task, rule) is not None:
            continue
        source = replace(base, dispatch=rule, defines=dict(rule.default.defines)).render()
        single = next(m for m in measured if m.id == top.id)
        g_single = math.exp(sum(math.log(v) for v in single.median.values()) / len(names))
        rationale = (f"settings per shape from {len(measured)} gated settings of {label}: {fitted.describe()}; "
                     f"predicted geomean {fitted.geomean():.2f} µs vs {g_single:.2f} µs for the best single "
                     f"setting {top.id}; every performance case within noise of its own best")
        out.append(Proposal(source=source, rationale=rationale, proposer=top.proposer, parent=top.id,
                            label=f"{label}+dispatch", direction=DIRECTION))
        proposed.append(rule.to_json())
    return out


# ------------------------------------------------------------------------------ across kernels

#: the most kernels one composite holds
MAX_MEMBERS = 4
#: the direction recorded on a proposed composite
COMPOSITE_DIRECTION = "a kernel per shape (composite of kernels)"


def _passed_timed(a) -> bool:
    return a.status == "passed" and not getattr(a, "dispatch", None) and bool(a.evaluation)


def propose_composite(attempts, task, *, candidate: Callable[[object], "Candidate"],
                      floor: float = 0.01) -> "Proposal | None":
    """A composite (:mod:`kernel_forge.model.composite`) of the kernels that are each the fastest
    on some performance case, with the rule fitted over all their gated settings, when the rule
    needs two or more of the kernels and predicts a geometric mean below that of every attempt
    that passed (a rule over one kernel's settings included) by more than ``floor``; else None.
    Each kernel's settings are those of one source (``body_key``); ``candidate(attempt)`` reads one."""
    from kernel_forge.model.candidate import parse_candidate
    from kernel_forge.model.composite import IMPL, compose, member_defines
    from kernel_forge.proposers.base import Proposal
    from kernel_forge.search.spaces import body_key

    perf = list(task.cases_with("performance"))
    names = [c.name for c in perf]
    if len(perf) < 2:
        return None
    groups: dict[str, list[tuple[object, Measured]]] = {}
    tops: dict[str, object] = {}
    for a in attempts:
        if not _passed_timed(a):
            continue
        m = Measured.from_evaluation(a.id, a.defines, a.evaluation, names)
        if m is None:
            continue
        try:
            key = body_key(candidate(a))
        except (KForgeError, OSError):
            continue
        groups.setdefault(key, []).append((a, m))
    if len(groups) < 2:
        return None
    best = {n: min(((k, m) for k, ms in groups.items() for _, m in ms), key=lambda km: (km[1].median[n], km[1].id))
            for n in names}
    winners = list(dict.fromkeys(k for k, _ in best.values()))[:MAX_MEMBERS]
    if len(winners) < 2:
        return None
    measured = []
    for i, key in enumerate(winners):
        for _, m in groups[key]:
            measured.append(Measured(m.id, member_defines(i, m.defines), m.median, m.band))
        tops[key] = min((a for a, _ in groups[key]), key=lambda a: a.score_us or math.inf)
    fitted = fit(measured, perf, floor=floor)
    if fitted is None or len({b.setting.defines[IMPL] for b in fitted.branches}) < 2:
        return None
    scores = [a.score_us for a in attempts if a.status == "passed" and a.score_us]
    if not scores or fitted.geomean() >= min(scores) * (1.0 - floor):
        return None
    rule = fitted.rule()
    if problem(task, rule) is not None:
        return None
    try:
        comp = compose([candidate(tops[k]) for k in winners], task.launch, name="composite")
        source = replace(comp, dispatch=rule, defines=dict(rule.default.defines)).render()
        written = parse_candidate(source, name="composite").dispatch     # each line's setting made whole
    except KForgeError:
        return None
    if any(getattr(a, "dispatch", None) == written.to_json() for a in attempts):
        return None
    labels = [tops[k].label for k in winners]
    lead = min((tops[k] for k in winners), key=lambda a: a.score_us or math.inf)
    rationale = (f"a kernel per shape from {len(measured)} gated settings of {', '.join(labels)} "
                 f"({IMPL} = {', '.join(f'{i}: {lab}' for i, lab in enumerate(labels))}): {fitted.describe()}; "
                 f"predicted geomean {fitted.geomean():.2f} µs vs {min(scores):.2f} µs for the best kernel so far; "
                 "every performance case within noise of its own best")
    return Proposal(source=source, rationale=rationale, proposer=lead.proposer, parent=lead.id,
                    label="composite(" + ", ".join(labels) + ")+dispatch", direction=COMPOSITE_DIRECTION)
