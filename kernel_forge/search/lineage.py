"""What the run's records say about the lines of kernels a strategy plans from: what a strategy
may read (:class:`PlanContext`) and what it plans (:class:`SlotPlan`), each attempt's technique and
the kernel it is measured against, which cases one kernel wins over another, which pairs of
parent and technique were tried, and which techniques gained or keep failing."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kernel_forge.records.attempt import Attempt

@dataclass
class SlotPlan:
    """One proposal of an iteration: where it starts and what it is asked to try."""

    parent: Attempt
    direction: str = ""
    technique: str = ""
    second: Attempt | None = None          # the other parent of a crossover


@dataclass
class PlanContext:
    """What a strategy may read to plan an iteration (the loop fills it)."""

    attempts: list[Attempt]
    best: Attempt
    initial: Attempt | None
    iteration: int
    body: Callable[[Attempt], str]                        # the kernel an attempt's settings share
    options: Callable[[Attempt, int], list[tuple[str, str]]]  # (technique, direction) for a parent
    crossover_every: int = 3
    min_improvement: float = 0.01
    seed: int = 0


def distinct_passed(ctx: PlanContext) -> list[Attempt]:
    """The fastest setting of every distinct kernel that passed, fastest first."""
    fastest: dict[str, Attempt] = {}
    for a in sorted((a for a in ctx.attempts if a.status == "passed" and a.score_us),
                    key=lambda a: (a.score_us, a.id)):
        fastest.setdefault(ctx.body(a), a)
    return list(fastest.values())


def technique_of(a: Attempt, by_id: dict[str, Attempt] | None = None) -> str:
    """An attempt's technique: its own tag, else the tag of the fix chain's root, else what made it
    (``initial``, ``tune:TEMPLATE``)."""
    seen = 0
    x = a
    while x is not None and seen < 64:
        if x.technique:
            return x.technique
        if x.fix_of and by_id:
            x = by_id.get(x.fix_of)
            seen += 1
            continue
        break
    if a.proposer == "initial":
        return "initial"
    if a.proposer == "tune":
        return f"tune:{a.label}"
    return "untagged"


#: attempts no model was asked for: the tuner's settings, the task's kernel, the bound pattern
_NOT_ASKED = ("tune", "initial", "bound")


def proposals_from(attempts: list[Attempt], parent: Attempt) -> int:
    """How many proposals started from ``parent``: distinct proposals (a proposal's settings share
    its label) a proposer was asked for; the tuner's gated settings, dispatch rules fitted over
    them and a proposal's further settings of itself are not children of it."""
    labels = {a.label for a in attempts if a.parent == parent.id and a.proposer not in _NOT_ASKED
              and not a.label.endswith("+dispatch") and a.label != parent.label}
    return len(labels)


def best_share(n: int) -> int:
    """Proposals of an iteration of ``n`` that start from the best at least: half, rounded up."""
    return (n + 1) // 2


def case_times(a: Attempt) -> dict[str, float]:
    """The performance cases' medians of a passed attempt."""
    ev = a.evaluation or {}
    return {c["name"]: c["timing"]["median"] for c in ev.get("cases", [])
            if c.get("role") == "performance" and (c.get("timing") or {}).get("median")}


def wins_over(a: Attempt, b: Attempt, noise: float = 0.01) -> list[str]:
    """The performance cases on which ``a`` is faster than ``b`` beyond ``noise``."""
    ta, tb = case_times(a), case_times(b)
    return sorted(n for n in ta if n in tb and ta[n] * (1 + noise) < tb[n])


def tried_pairs(ctx: PlanContext) -> set[tuple[str, str]]:
    """(parent kernel, technique) pairs already asked for."""
    by_id = {a.id: a for a in ctx.attempts}
    out = set()
    for a in ctx.attempts:
        if a.parent and a.parent in by_id and a.technique:
            out.add((ctx.body(by_id[a.parent]), a.technique.split("#")[0]))
    return out


def directions_for(ctx: PlanContext, parent: Attempt, k: int, used: set[str],
                    avoid: set[str] = frozenset(), prefer: set[str] = frozenset()) -> list[tuple[str, str]]:
    """``k`` (technique, direction) pairs for ``parent``: those not in ``used`` first (those in
    ``prefer`` — they gained before — ahead of the others), those in ``avoid`` last, repeats
    marked as variants."""
    if k <= 0:
        return []
    pool = list(dict.fromkeys(ctx.options(parent, k + len(used) + len(avoid) + len(prefer))))
    if not pool:
        return [("", "")] * k
    base = lambda t: t.split("#")[0]  # noqa: E731
    fresh = [p for p in pool if base(p[0]) not in used and base(p[0]) not in avoid]
    fresh.sort(key=lambda p: base(p[0]) not in prefer)      # stable: the diagnosis order otherwise
    late = [p for p in pool if base(p[0]) in avoid and base(p[0]) not in used]
    again = [p for p in pool if base(p[0]) in used]
    picked = (fresh + late + again)[:k]
    i = 0
    while len(picked) < k:
        t, text = pool[i % len(pool)]
        picked.append((f"{base(t)}#{len(picked) + 1}", f"{text} (variant {len(picked) + 1})"))
        i += 1
    return picked


def crossover_direction(a: Attempt, b: Attempt, ta: str, tb: str) -> str:
    return (f"crossover: combine {a.id} ({ta}) and {b.id} ({tb}) — keep the structure of the faster one and "
            "bring in what makes the other fast on the cases where it wins")


# -- what each technique did ----------------------------------------------------------------------
def comparable_parent(a: Attempt, by_id: dict[str, Attempt]) -> Attempt | None:
    """The kernel ``a`` is measured against: its parent, or where that failed (a fix turn), the
    nearest ancestor that passed."""
    p = by_id.get(a.parent) if a.parent else None
    hops = 0
    while p is not None and p.status != "passed" and hops < 64:
        p = by_id.get(p.parent) if p.parent else None
        hops += 1
    return p


def ratio_to_parent(a: Attempt, parent: Attempt | None) -> float | None:
    """parent score / attempt score (>1: faster than its parent), where both passed."""
    if parent is None or not a.score_us or not parent.score_us or a.status != "passed":
        return None
    return parent.score_us / a.score_us


def outcomes(ctx_attempts: list[Attempt], noise: float) -> dict[str, list[tuple[str, str]]]:
    """Per technique, what its attempts did: ``(attempt id, "gain" | "slower" | "noise" | "failed")``."""
    by_id = {a.id: a for a in ctx_attempts}
    out: dict[str, list[tuple[str, str]]] = {}
    for a in ctx_attempts:
        t = (a.technique or "").split("#")[0]
        if not t or a.status == "pending" or a.reason == "duplicate":
            continue
        r = ratio_to_parent(a, comparable_parent(a, by_id))
        if a.status != "passed":
            what = "failed"
        elif r is None:
            what = "noise"
        elif r > 1 + noise:
            what = "gain"
        elif r < 1 - noise:
            what = "slower"
        else:
            what = "noise"
        out.setdefault(t, []).append((a.id, what))
    return out


def gained_techniques(ctx: PlanContext) -> set[str]:
    """Techniques that made a kernel faster than its parent beyond the noise at least once."""
    return {t for t, res in outcomes(ctx.attempts, ctx.min_improvement).items() if any(w == "gain" for _, w in res)}


def avoid_techniques(ctx: PlanContext) -> set[str]:
    """Techniques that never gained and failed or slowed down at least twice."""
    out = set()
    for t, res in outcomes(ctx.attempts, ctx.min_improvement).items():
        kinds = [w for _, w in res]
        if "gain" not in kinds and sum(w in ("failed", "slower") for w in kinds) >= 2:
            out.add(t)
    return out
