"""A kernel with a dispatch rule as the gate runs it: one variant per distinct setting of the rule
(the same source with that setting and no rule: one compile each), and the cases grouped by the
setting the rule picks for them.  :mod:`kernel_forge.gate.dispatch_rule` evaluates each variant on
its cases and merges the verdicts; :func:`variants` is what ``Gate.precompile`` compiles ahead.
"""
from __future__ import annotations

from dataclasses import replace

from kernel_forge.model.candidate import Candidate


def variant(candidate: Candidate, defines: dict) -> Candidate:
    """``candidate`` with one setting of its rule and no rule: what the gate compiles and runs."""
    return replace(candidate, dispatch=None, defines=dict(defines))


def variants(candidates: list[Candidate]) -> list[Candidate]:
    """Each candidate, or for one with a rule each of its distinct settings (one compile each)."""
    out: list[Candidate] = []
    for cand in candidates:
        if cand.dispatch is None:
            out.append(cand)
        else:
            out.extend(variant(cand, d) for d in cand.dispatch.settings())
    return out


def plan(task, candidate: Candidate, cases) -> tuple[dict[str, int], list[tuple[dict, list[str]]]]:
    """(case -> branch index, [(setting, case names)]): the cases grouped by the setting the rule
    picks for them, groups in the order of their first case."""
    rule = candidate.dispatch
    picks = {c.name: rule.pick(c.vars) for c in cases}
    groups: list[tuple[dict, list[str]]] = []
    for c in cases:
        setting = rule.branches[picks[c.name]].defines
        group = next((g for g in groups if g[0] == setting), None)
        if group is None:
            groups.append((setting, [c.name]))
        else:
            group[1].append(c.name)
    return picks, groups
