"""Search strategies: which kernels to start from, and which settings of a tunable kernel to gate.

A :class:`Strategy` has two faces, used by the loop for the built-in tuner and for model
proposers alike:

* :meth:`Strategy.plan` chooses, for the ``n`` proposals of an iteration, each one's parent (the
  attempt to start from), its direction and technique (from the diagnosis of that parent:
  :func:`kernel_forge.gate.diagnosis.direction_items`) and, for a crossover, a second parent.
* :meth:`Strategy.pick` chooses the next settings of one tunable kernel (a :class:`Space`: a
  template's or a proposal's ``// kforge: tune`` space and what the run measured of it), and
  :meth:`Strategy.allocate` splits the tuner's settings budget of an iteration between templates.

The strategies (``--search NAME``):

``greedy``
    Today's chain: every proposal starts from the best; settings are a seeded sample (declared
    defaults and extremes first), then the untried neighbours of the best setting, widening.
``population``
    While the best keeps improving, every proposal starts from it; once it stalls, the fastest
    distinct kernel of each technique joins as a parent, but half the proposals (rounded up)
    still start from the best; the others are shared by promise and by how many proposals each
    line was already given (the tuner's settings are not proposals), each parent is given
    directions it has not tried (those that gained first), and one proposal is a crossover of two
    lines not combined before, each faster than the other on some case.
    Settings by a memetic genetic search: one-tunable moves from the fastest setting, and children
    of the fastest settings (tournament selection, uniform crossover, mutation) ranked by an
    additive surrogate model of log time, in rounds.
``anneal``
    Simulated annealing: settings along a chain that accepts a slower setting with probability
    ``exp(-ln(new/old) / T)``, ``T`` cooling with every setting gated; parents drawn with
    Boltzmann weights at a temperature that cools with the iterations.
``brute``
    Every setting in declared order (Kernel Tuner's default); parents as ``greedy``.

Every strategy is a pure function of the run's records and its seed (no hidden state), so a
resumed run continues the same search.  Settings a strategy returns are valid (constraints hold)
and untried; it returns fewer only when fewer are left.
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kernel_forge.model.candidate import Candidate

if TYPE_CHECKING:
    from kernel_forge.records.attempt import Attempt

#: the strategies ``--search`` takes
NAMES = ("greedy", "population", "anneal", "brute")
#: the default (the offline benchmark's winner on proposals to within 5 % of the best: bench/SEARCH.md)
DEFAULT = "population"
#: a space is listed (every valid setting enumerated) when its tunables have at most this many combinations
LIST_LIMIT = 50_000


#: which record of a setting tried more than once the space keeps: a verdict over a wait, a wait
#: over a refusal (a duplicate proposed after its setting was gated must not undo the verdict)
_RANK = {"ruled_out": 0, "pending": 1, "failed": 2, "passed": 2}


def _key(d: dict) -> tuple:
    return tuple(sorted(d.items()))


# ------------------------------------------------------------------------------ the space

@dataclass
class Trial:
    """One setting the run has recorded for a space: its score (None: it failed or is pending)."""

    defines: dict
    attempt: str
    score: float | None = None
    status: str = "passed"            # passed | failed | pending | ruled_out


class Space:
    """The settings of one tunable kernel (a body shared by all its settings) and what the run
    knows of them.  ``cand`` is the kernel with its tunables; ``label`` names it (a template's
    file name, a proposal's label)."""

    def __init__(self, cand: Candidate, label: str = ""):
        self.cand = cand
        self.label = label or cand.name
        self.names = sorted(cand.tunables)
        self.values = {k: list(dict.fromkeys(cand.tunables[k])) for k in self.names}
        product = math.prod(len(v) for v in self.values.values())
        self._valid: list[dict] | None = cand.configurations() if product <= LIST_LIMIT else None
        self.count = len(self._valid) if self._valid is not None else cand.count_configurations()
        self._ok: dict[tuple, bool] = {_key(d): True for d in self._valid or ()}
        self.trials: dict[tuple, Trial] = {}
        self.order: list[tuple] = []          # trial keys in the order they were recorded
        self.seed = 0                         # the run's seed (annealing replays its chain with it)

    # -- what is known ---------------------------------------------------------------------
    def add(self, defines: dict, attempt: str, score: float | None, status: str) -> None:
        k = _key(defines)
        if k not in self.trials:
            self.order.append(k)
        elif _RANK[self.trials[k].status] > _RANK[status]:
            return      # a later duplicate or refused copy of a setting keeps the setting's verdict
        self.trials[k] = Trial(dict(defines), attempt, score, status)

    def tried(self, d: dict) -> bool:
        return _key(d) in self.trials

    def passed(self) -> list[Trial]:
        """Settings that passed, fastest first (ties by the order they were recorded)."""
        idx = {k: i for i, k in enumerate(self.order)}
        ok = [t for t in self.trials.values() if t.status == "passed" and t.score]
        return sorted(ok, key=lambda t: (t.score, idx[_key(t.defines)]))

    def best(self) -> Trial | None:
        p = self.passed()
        return p[0] if p else None

    def valid(self, d: dict) -> bool:
        k = _key(d)
        if k not in self._ok:
            self._ok[k] = (self._valid is None and all(d.get(n) in self.values[n] for n in self.names)
                           and self.cand.with_defines(d).satisfies_constraints())
        return self._ok[k]

    @property
    def listed(self) -> bool:
        return self._valid is not None

    def untried(self) -> list[dict]:
        """Every valid untried setting, in declared order (listed spaces only; else [])."""
        return [d for d in (self._valid or []) if _key(d) not in self.trials]

    def remaining(self) -> int | None:
        """Valid settings not tried yet (None where the space is too large to list)."""
        if self._valid is None:
            return None
        return sum(1 for d in self._valid if _key(d) not in self.trials)

    def exhausted(self) -> bool:
        """Every valid setting was gated or ruled out (never true for a space too large to list)."""
        return self._valid is not None and self.remaining() == 0

    def counts(self) -> dict:
        """What the stop reason and the summary say about this space."""
        st = [t.status for t in self.trials.values()]
        return {"label": self.label, "settings": int(self.count), "exact": self._valid is not None,
                "gated": sum(s in ("passed", "failed") for s in st), "passed": st.count("passed"),
                "failed": st.count("failed"), "ruled_out": st.count("ruled_out"), "pending": st.count("pending"),
                "best": (self.best().attempt if self.best() else None),
                "best_us": (self.best().score if self.best() else None)}

    def model(self, ridge: float = 0.3) -> Callable[[dict], float]:
        """An additive model of log time over the tunables' values (one weight per value, ridge
        regularised), fitted to every setting measured so far; a failed setting counts as slower
        than the slowest that passed (by ``e^0.7``).  Returns ``setting -> predicted log time``."""
        import numpy as np

        cols = {(n, v): i for i, (n, v) in enumerate((n, v) for n in self.names for v in self.values[n])}
        ok = [t for t in self.trials.values() if t.status == "passed" and t.score]
        if not ok:
            return lambda d: 0.0
        worst = max(math.log(t.score) for t in ok) + 0.7
        rows = [t for t in self.trials.values() if t.status in ("passed", "failed")]
        X = np.zeros((len(rows), len(cols) + 1))
        y = np.zeros(len(rows))
        for r, t in enumerate(rows):
            X[r, -1] = 1.0
            for n in self.names:
                i = cols.get((n, t.defines.get(n)))
                if i is not None:
                    X[r, i] = 1.0
            y[r] = math.log(t.score) if t.status == "passed" and t.score else worst
        reg = ridge * np.eye(X.shape[1])
        reg[-1, -1] = 0.0
        w = np.linalg.solve(X.T @ X + reg, X.T @ y)

        def predict(d: dict) -> float:
            return float(w[-1] + sum(w[cols[(n, d.get(n))]] for n in self.names if (n, d.get(n)) in cols))
        return predict

    # -- moves -----------------------------------------------------------------------------
    def setting(self, d: dict) -> dict:
        """``d`` completed with the kernel's other defines."""
        out = dict(self.cand.defines)
        out.update(d)
        return out

    def neighbours(self, d: dict, *, kind: str = "adjacent") -> list[dict]:
        """Valid settings one move from ``d``: the next value up or down of one tunable in sorted
        order (``adjacent``) or any other value of one tunable (``hamming``)."""
        out = []
        for name in self.names:
            vals = sorted(self.values[name])
            if d.get(name) not in vals:
                continue
            i = vals.index(d[name])
            others = ([vals[j] for j in (i - 1, i + 1) if 0 <= j < len(vals)] if kind == "adjacent"
                      else [v for v in vals if v != d[name]])
            for v in others:
                n = dict(d)
                n[name] = v
                if self.valid(n):
                    out.append(n)
        return out

    def ring(self, d: dict, radius: int) -> list[dict]:
        """Valid settings exactly ``radius`` adjacent moves away from ``d`` (breadth first)."""
        seen = {_key(d)}
        frontier = [d]
        for _ in range(radius):
            nxt = []
            for x in frontier:
                for n in self.neighbours(x):
                    if _key(n) not in seen:
                        seen.add(_key(n))
                        nxt.append(n)
            frontier = nxt
        return frontier

    def random_untried(self, k: int, rng: random.Random, *, avoid: set[tuple] = frozenset()) -> list[dict]:
        """Up to ``k`` valid untried settings drawn with ``rng``."""
        if k <= 0:
            return []
        if self._valid is not None:
            pool = [d for d in self._valid if _key(d) not in self.trials and _key(d) not in avoid]
            rng.shuffle(pool)
            return pool[:k]
        drawn = self.cand.sample_configurations(k + len(self.trials) + len(avoid) + 8, seed=rng.randrange(1 << 30))
        out = [d for d in drawn if _key(d) not in self.trials and _key(d) not in avoid]
        return out[:k]

    def first_sample(self, k: int, rng: random.Random) -> list[dict]:
        """A first look at an untouched space: the declared defaults and each tunable's extremes,
        then a seeded random sample."""
        must = [dict(self.cand.defines)]
        for name in self.names:
            for v in (min(self.values[name]), max(self.values[name])):
                d = dict(self.cand.defines)
                d[name] = v
                must.append(d)
        out, seen = [], set()
        for d in must:
            if len(out) < k and self.valid(d) and not self.tried(d) and _key(d) not in seen:
                out.append(d)
                seen.add(_key(d))
        return out + self.random_untried(k - len(out), rng, avoid=seen)


# ------------------------------------------------------------------------------ model plans

@dataclass
class SlotPlan:
    """One proposal of an iteration: where it starts and what it is asked to try."""

    parent: "Attempt"
    direction: str = ""
    technique: str = ""
    second: "Attempt | None" = None          # the other parent of a crossover


@dataclass
class PlanContext:
    """What a strategy may read to plan an iteration (the loop fills it)."""

    attempts: list["Attempt"]
    best: "Attempt"
    initial: "Attempt | None"
    iteration: int
    body: Callable[["Attempt"], str]                        # the kernel an attempt's settings share
    options: Callable[["Attempt", int], list[tuple[str, str]]]  # (technique, direction) for a parent
    crossover_every: int = 3
    min_improvement: float = 0.01
    seed: int = 0


def distinct_passed(ctx: PlanContext) -> list["Attempt"]:
    """The fastest setting of every distinct kernel that passed, fastest first."""
    fastest: dict[str, "Attempt"] = {}
    for a in sorted((a for a in ctx.attempts if a.status == "passed" and a.score_us),
                    key=lambda a: (a.score_us, a.id)):
        fastest.setdefault(ctx.body(a), a)
    return list(fastest.values())


def technique_of(a: "Attempt", by_id: dict[str, "Attempt"] | None = None) -> str:
    """An attempt's technique: its own tag, else the tag of the fix chain's root, else what made it
    (``initial``, ``tune:TEMPLATE``)."""
    seen = 0
    x = a
    while x is not None and seen < 64:
        if getattr(x, "technique", ""):
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


def proposals_from(attempts: list["Attempt"], parent: "Attempt") -> int:
    """How many proposals started from ``parent``: distinct proposals (a proposal's settings share
    its label) a proposer was asked for; the tuner's gated settings, dispatch rules fitted over
    them and a proposal's further settings of itself are not children of it."""
    labels = {a.label for a in attempts if a.parent == parent.id and a.proposer not in _NOT_ASKED
              and not a.label.endswith("+dispatch") and a.label != parent.label}
    return len(labels)


def best_share(n: int) -> int:
    """Proposals of an iteration of ``n`` that start from the best at least: half, rounded up."""
    return (n + 1) // 2


def case_times(a: "Attempt") -> dict[str, float]:
    """The performance cases' medians of a passed attempt."""
    ev = getattr(a, "evaluation", None) or {}
    return {c["name"]: c["timing"]["median"] for c in ev.get("cases", [])
            if c.get("role") == "performance" and (c.get("timing") or {}).get("median")}


def wins_over(a: "Attempt", b: "Attempt", noise: float = 0.01) -> list[str]:
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


def _directions_for(ctx: PlanContext, parent: "Attempt", k: int, used: set[str],
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


def _crossover_direction(a: "Attempt", b: "Attempt", ta: str, tb: str) -> str:
    return (f"crossover: combine {a.id} ({ta}) and {b.id} ({tb}) — keep the structure of the faster one and "
            "bring in what makes the other fast on the cases where it wins")


# ------------------------------------------------------------------------------ strategies

class Strategy:
    """The greedy chain; the other strategies override what differs."""

    name = "greedy"

    # -- parents and directions ------------------------------------------------------------
    def plan(self, ctx: PlanContext, n: int) -> list[SlotPlan]:
        """Every proposal starts from the best, each with its own direction (those not given
        since the best last changed first)."""
        if n <= 0:
            return []
        used = {a.technique.split("#")[0] for a in ctx.attempts
                if a.iteration > ctx.best.iteration and a.technique}
        used |= {a.direction for a in ctx.attempts if a.iteration > ctx.best.iteration and a.direction
                 and not a.technique}
        dirs = _directions_for(ctx, ctx.best, n, used)
        return [SlotPlan(parent=ctx.best, direction=d, technique=t) for t, d in dirs]

    #: whether every prompt of an iteration shows the crossover pair (greedy's ``crossover_every``)
    crossover_in_prompt = True

    # -- settings --------------------------------------------------------------------------
    def round_size(self, budget: int, refine: bool) -> int:
        """How many of one proposal's ``budget`` settings of an iteration are picked at once; the
        loop picks the next round from what the rounds before measured until the budget is spent
        (greedy: everything at once, then ``refine``'s one step of neighbours)."""
        return budget

    def pick(self, space: Space, k: int, rng: random.Random) -> list[tuple[dict, str]]:
        """Up to ``k`` untried valid settings of ``space`` to gate next, each with why."""
        if k <= 0:
            return []
        best = space.best()
        if best is None:
            return [(d, "first sample") for d in space.first_sample(k, rng)]
        out, seen = [], set()
        for radius in range(1, 4):
            for d in space.ring(best.defines, radius):
                if len(out) < k and not space.tried(d) and _key(d) not in seen:
                    out.append((d, f"{radius} step{'s' if radius > 1 else ''} from the best setting ({best.attempt})"))
                    seen.add(_key(d))
            if len(out) >= k:
                return out
        return out + [(d, "random untried setting") for d in space.random_untried(k - len(out), rng, avoid=seen)]

    def allocate(self, spaces: list[Space], per_space: int) -> list[int]:
        """The settings each of the tuner's templates gets this iteration: ``per_space`` each."""
        return [min(per_space, r) if (r := s.remaining()) is not None else per_space for s in spaces]


class Population(Strategy):
    """Diverse parents, crossover, and a genetic search over settings."""

    name = "population"
    crossover_in_prompt = False
    #: parents of one iteration at most
    parents_max = 4
    #: a parent slower than the best by more than this factor is not used
    parent_spread = 2.0

    def parents(self, ctx: PlanContext, k: int) -> list["Attempt"]:
        """Up to ``k`` parents: the best, then the fastest distinct kernel of each other technique;
        only when there are fewer techniques than places, further kernels of one technique (the
        initial kernel only while nothing else passed; none slower than ``parent_spread`` x the
        best)."""
        by_id = {a.id: a for a in ctx.attempts}
        pool = [a for a in distinct_passed(ctx)
                if ctx.best.score_us and a.score_us <= ctx.best.score_us * self.parent_spread]
        if ctx.best not in pool:
            pool.insert(0, ctx.best)
        pool.sort(key=lambda a: (a is not ctx.best, a.score_us or 9e99, a.id))
        if len(pool) > 1 and ctx.initial is not None and ctx.initial is not ctx.best:
            pool = [a for a in pool if a is not ctx.initial] or pool
        cap = 1                           # one line per technique while there are other techniques
        chosen: list = []
        per: dict[str, int] = {}
        for a in pool:
            t = technique_of(a, by_id).split("#")[0]
            if len(chosen) < k and (per.get(t, 0) < cap or a is ctx.best):
                chosen.append(a)
                per[t] = per.get(t, 0) + 1
        for a in pool:                    # too few techniques: fill with the next fastest
            if len(chosen) < min(k, len(pool)) and a not in chosen:
                chosen.append(a)
        return chosen

    #: how much slower (in ln time) a parent may be for each child fewer that it has had
    child_cost = 0.03

    def shares(self, ctx: PlanContext, parents: list["Attempt"], m: int, reserve: int = 0) -> list[int]:
        """Proposals per parent: ``reserve`` go to the best first; each other goes to the parent
        with the lowest ``ln(score / best) + child_cost x load``, the load being the proposals
        already asked of every parent of its technique (:func:`proposals_from`: the tuner's settings
        are not children; this iteration's included): a line searched without gain yields to the
        next, and no technique takes every proposal while another is close."""
        by_id = {a.id: a for a in ctx.attempts}
        tech = [technique_of(p, by_id).split("#")[0] for p in parents]
        load: dict[str, int] = {}
        for p, t in zip(parents, tech):
            load[t] = load.get(t, 0) + proposals_from(ctx.attempts, p)
        gap = [math.log(p.score_us / ctx.best.score_us) if p.score_us and ctx.best.score_us else 0.0 for p in parents]
        share = [0] * len(parents)
        if reserve and ctx.best in parents:       # the best is never starved: its share comes first
            i = parents.index(ctx.best)
            share[i] = min(m, reserve)
            load[tech[i]] += share[i]
        for _ in range(m - sum(share)):
            i = min(range(len(parents)), key=lambda j: (gap[j] + self.child_cost * load[tech[j]], j))
            share[i] += 1
            load[tech[i]] += 1
        return share

    def crossover_pair(self, ctx: PlanContext, by_id: dict) -> tuple | None:
        """Two parents to combine: of different kernels, each faster than the other on some
        performance case (:func:`wins_over`), of different techniques where possible, a pair not
        combined before; the fastest such pair first."""
        ranked = self.parents(ctx, self.parents_max + 2)
        done = {frozenset((a.parent, a.second_parent)) for a in ctx.attempts if a.second_parent}
        # each brings something: faster than the other on some performance case (a kernel slower
        # everywhere has no strength to take)
        pairs = [(x, y) for i, x in enumerate(ranked) for y in ranked[i + 1:] if ctx.body(x) != ctx.body(y)
                 and frozenset((x.id, y.id)) not in done
                 and wins_over(x, y, ctx.min_improvement) and wins_over(y, x, ctx.min_improvement)]
        tech = lambda a: technique_of(a, by_id).split("#")[0]  # noqa: E731
        pairs.sort(key=lambda p: (tech(p[0]) == tech(p[1]), ranked.index(p[0]) + ranked.index(p[1])))
        return pairs[0] if pairs else None

    def plan(self, ctx: PlanContext, n: int) -> list[SlotPlan]:
        if n <= 0:
            return []
        by_id = {a.id: a for a in ctx.attempts}
        out: list[SlotPlan] = []
        # exploit while the best climbs (it changed in the last iteration): every proposal starts
        # from it; once it stalls, diversify: more parents and a crossover
        stalled = ctx.iteration - ctx.best.iteration > 1
        cross = stalled and ctx.crossover_every > 0 and (n >= 2 or ctx.iteration % ctx.crossover_every == 0)
        pair = None
        if cross:
            pair = self.crossover_pair(ctx, by_id)
        m = n - (1 if pair else 0)
        parents = (self.parents(ctx, self.parents_max) if stalled else [ctx.best]) or [ctx.best]
        tried = tried_pairs(ctx)
        avoid = avoid_techniques(ctx)
        prefer = gained_techniques(ctx)
        reserve = best_share(n) - (1 if pair and pair[0] is ctx.best else 0)
        share = self.shares(ctx, parents, m, reserve=reserve)
        for p, s in zip(parents, share):
            if s == 0:
                continue
            used = {t for body, t in tried if body == ctx.body(p)}
            for t, d in _directions_for(ctx, p, s, used, avoid, prefer):
                out.append(SlotPlan(parent=p, direction=(d if p is ctx.best else
                                                         f"start from {p.id} (not the best: a different line worth "
                                                         f"developing): {d}"), technique=t))
        if pair:
            a, b = pair
            ta, tb = technique_of(a, by_id), technique_of(b, by_id)
            out.append(SlotPlan(parent=a, second=b, technique="crossover",
                                direction=_crossover_direction(a, b, ta, tb)))
        return out

    def round_size(self, budget: int, refine: bool) -> int:
        """A third of the budget (at least 4) when ``refine``, else all of it."""
        return budget if not refine or budget <= 4 else max(4, math.ceil(budget / 3))

    #: children bred per setting picked; the surrogate keeps the most promising
    brood = 8
    #: share of a round from the untried one-tunable moves of the fastest setting (local search)
    local = 0.5
    #: share of a round picked by the surrogate from the brood (the rest: children as bred)
    exploit = 0.25

    def breed(self, space: Space, pop: list[Trial], n: int, rng: random.Random, seen: set) -> list[tuple[dict, str]]:
        """Up to ``n`` untried valid children: tournament selection (size 2) from ``pop``, uniform
        crossover, each tunable mutated with probability 1/len(tunables)."""
        out = []
        pm = 1.0 / max(1, len(space.names))
        tries = 0
        while len(out) < n and tries < 30 * n:
            tries += 1
            a = min(rng.sample(pop, 2), key=lambda t: t.score)
            b = min(rng.sample(pop, 2), key=lambda t: t.score)
            child = {x: (a.defines[x] if rng.random() < 0.5 else b.defines[x]) for x in space.names}
            for x in space.names:
                if rng.random() < pm:
                    child[x] = rng.choice(space.values[x])
            d = space.setting(child)
            if space.valid(d) and not space.tried(d) and _key(d) not in seen:
                out.append((d, f"child of {a.attempt} x {b.attempt}"))
                seen.add(_key(d))
        return out

    def pick(self, space: Space, k: int, rng: random.Random) -> list[tuple[dict, str]]:
        """A memetic, surrogate-assisted genetic search: a first space-filling sample (the
        declared defaults, then seeded random settings); after it, each round takes ``local`` of
        its settings from the untried one-tunable moves of the fastest setting (in random order),
        ``exploit`` from a brood of children of the fastest settings (:meth:`breed`) ranked by an
        additive model of log time over the tunables' values fitted to every setting measured so
        far (:meth:`Space.model`), and the rest from the brood as bred (exploration)."""
        if k <= 0:
            return []
        pop = space.passed()[:max(4, k)]
        if len(pop) < 4:
            first = [dict(space.cand.defines)] if not space.trials and space.valid(dict(space.cand.defines)) else []
            return [(d, "first sample") for d in first] + \
                [(d, "first sample") for d in space.random_untried(k - len(first), rng,
                                                                   avoid={_key(d) for d in first})]
        out: list[tuple[dict, str]] = []
        seen: set = set()

        def take(items, n):
            for d, w in items:
                if len(out) >= n:
                    return
                if not space.tried(d) and _key(d) not in seen:
                    out.append((d, w))
                    seen.add(_key(d))

        best = pop[0]
        local = space.neighbours(best.defines, kind="hamming")
        rng.shuffle(local)
        take([(d, f"neighbour of the best {best.attempt}") for d in local], round(self.local * k))
        brood = self.breed(space, pop, self.brood * k, rng, set(seen) | set(space.trials))
        if brood and self.exploit > 0:
            predict = space.model()
            ranked = sorted(brood, key=lambda x: (predict(x[0]), _key(x[0])))
            take([(d, f"{w}; predicted {math.exp(predict(d)):.4g} µs") for d, w in ranked],
                 len(out) + round(self.exploit * k))
        take(brood, k)
        if len(out) < k:
            take(Strategy.pick(self, space, k - len(out), rng), k)
        return out[:k]

    def allocate(self, spaces: list[Space], per_space: int) -> list[int]:
        """The settings equal shares of ``per_space`` would gate this iteration, split by promise:
        every template gets ``per_space`` until it has been sampled, then shares fall with how far
        its best is from the best of all (weight ``exp(-ln(best_t / best) / 0.15)``), at least 2
        each, never more than a template has left."""
        return _allocate_by_promise(spaces, per_space)


class Anneal(Strategy):
    """Simulated annealing over settings; Boltzmann-chosen parents for models."""

    name = "anneal"
    crossover_in_prompt = False
    t_start = 0.5        #: start temperature, in ln(time ratio): a 10 % slower move is accepted 83 % of the time
    t_end = 0.01         #: temperature after ``cooling_steps`` settings
    cooling_steps = 100

    def temperature(self, step: int) -> float:
        alpha = (self.t_end / self.t_start) ** (1.0 / self.cooling_steps)
        return max(self.t_end, self.t_start * alpha ** step)

    def plan(self, ctx: PlanContext, n: int) -> list[SlotPlan]:
        if n <= 0:
            return []
        rng = random.Random(f"{ctx.seed}:{ctx.iteration}:anneal")
        pool = distinct_passed(ctx)
        if len(pool) > 1 and ctx.initial is not None:
            pool = [a for a in pool if a is not ctx.initial] or pool
        if ctx.best not in pool:
            pool.insert(0, ctx.best)
        t = 0.3 * 0.7 ** max(0, ctx.iteration - 1)
        weights = [math.exp(-math.log(a.score_us / ctx.best.score_us) / t) if a.score_us and ctx.best.score_us
                   else (1.0 if a is ctx.best else 0.0) for a in pool]
        tried = tried_pairs(ctx)
        avoid = avoid_techniques(ctx)
        prefer = gained_techniques(ctx)
        out = []
        counts: dict[str, int] = {}
        keep = best_share(n)                 # the best is never starved
        picks = [ctx.best] * keep + [rng.choices(pool, weights)[0] for _ in range(n - keep)]
        for p in picks:
            counts[p.id] = counts.get(p.id, 0) + 1
        for p in {x.id: x for x in picks}.values():
            used = {tt for body, tt in tried if body == ctx.body(p)}
            for tech, d in _directions_for(ctx, p, counts[p.id], used, avoid, prefer):
                out.append(SlotPlan(parent=p, technique=tech, direction=d if p is ctx.best else
                                    f"start from {p.id} (not the best, chosen to explore): {d}"))
        return out

    def round_size(self, budget: int, refine: bool) -> int:
        return Population.round_size(self, budget, refine)

    def chain(self, space: Space, rng: random.Random) -> Trial | None:
        """Replay the annealing chain over the space's trials in the order they were recorded:
        each passed setting is accepted as the current one with probability
        ``min(1, exp(-ln(new/current) / T))``; the current setting at the end."""
        cur: Trial | None = None
        step = 0
        for k in space.order:
            t = space.trials[k]
            if t.status != "passed" or not t.score:
                continue
            if cur is None or t.score <= cur.score or \
                    rng.random() < math.exp(-math.log(t.score / cur.score) / self.temperature(step)):
                cur = t
            step += 1
        return cur

    def pick(self, space: Space, k: int, rng: random.Random) -> list[tuple[dict, str]]:
        """Moves from the chain's current setting (one tunable to another value, nearest first),
        restarting from a random untried setting where the neighbourhood is used up."""
        if k <= 0:
            return []
        cur = self.chain(space, random.Random(f"{space.seed}:{space.label}:chain"))
        if cur is None:
            return [(d, "first sample") for d in space.first_sample(min(k, 4), rng)]
        best = space.best()
        out, seen = [], set()
        temp = self.temperature(len(space.passed()))
        moves = space.neighbours(cur.defines, kind="hamming")
        rng.shuffle(moves)
        moves.sort(key=lambda d: sum(abs(sorted(space.values[n]).index(d[n]) - sorted(space.values[n]).index(cur.defines[n]))
                                     for n in space.names))
        for d in moves:
            if len(out) < k and not space.tried(d) and _key(d) not in seen:
                out.append((d, f"annealing move from {cur.attempt} (T {temp:.3f})"))
                seen.add(_key(d))
        if len(out) < k and best is not None and best is not cur:
            for d in space.neighbours(best.defines, kind="hamming"):
                if len(out) < k and not space.tried(d) and _key(d) not in seen:
                    out.append((d, f"annealing move from the best {best.attempt}"))
                    seen.add(_key(d))
        if len(out) < k:
            out += [(d, "annealing restart") for d in space.random_untried(k - len(out), rng, avoid=seen)]
        return out

    def allocate(self, spaces: list[Space], per_space: int) -> list[int]:
        return _allocate_by_promise(spaces, per_space)


class Brute(Strategy):
    """Every setting in declared order."""

    name = "brute"

    def pick(self, space: Space, k: int, rng: random.Random) -> list[tuple[dict, str]]:
        if space.listed:
            return [(d, "next in declared order") for d in space.untried()[:k]]
        return [(d, "random untried setting (the space is too large to list)") for d in space.random_untried(k, rng)]


def _allocate_by_promise(spaces: list[Space], per_space: int, tau: float = 0.15, floor: int = 2) -> list[int]:
    rem = [s.remaining() for s in spaces]
    total = sum(min(per_space, r) if r is not None else per_space for r in rem)   # what equal shares would gate
    cap = [r if r is not None else total for r in rem]
    bests = [s.best() for s in spaces]
    if any(b is None and c > 0 for b, c in zip(bests, cap)) or not any(bests):
        return [min(per_space, c) for c in cap]
    top = min(b.score for b in bests if b is not None)
    w = [math.exp(-math.log(b.score / top) / tau) if b is not None else 0.0 for b in bests]
    out = [min(c, floor) for c in cap]
    left = total - sum(out)
    while left > 0:
        room = [i for i in range(len(spaces)) if out[i] < cap[i]]
        if not room:
            break
        wsum = sum(w[i] for i in room) or float(len(room))
        gave = 0
        for i in room:
            give = min(cap[i] - out[i], max(0, int(left * ((w[i] / wsum) if wsum else 1 / len(room)))))
            out[i] += give
            gave += give
        if gave == 0:                      # rounding left a few: to the most promising with room
            i = max(room, key=lambda i: (w[i], -i))
            out[i] += 1
            gave = 1
        left -= gave
    return out


_ALL = {"greedy": Strategy, "population": Population, "anneal": Anneal, "brute": Brute}


def get(name: str) -> Strategy:
    """The strategy called ``name`` (one of :data:`NAMES`)."""
    from kernel_forge.common.errors import InputError

    try:
        return _ALL[name]()
    except KeyError:
        raise InputError(f"--search {name!r}: no such search strategy", hint=f"one of {', '.join(NAMES)}") from None


# ------------------------------------------------------------------------------ reflection

def comparable_parent(a: "Attempt", by_id: dict[str, "Attempt"]) -> "Attempt | None":
    """The kernel ``a`` is measured against: its parent, or where that failed (a fix turn), the
    nearest ancestor that passed."""
    p = by_id.get(a.parent) if a.parent else None
    hops = 0
    while p is not None and p.status != "passed" and hops < 64:
        p = by_id.get(p.parent) if p.parent else None
        hops += 1
    return p


def ratio_to_parent(a: "Attempt", parent: "Attempt | None") -> float | None:
    """parent score / attempt score (>1: faster than its parent), where both passed."""
    if parent is None or not a.score_us or not parent.score_us or a.status != "passed":
        return None
    return parent.score_us / a.score_us


def outcomes(ctx_attempts: list["Attempt"], noise: float) -> dict[str, list[tuple[str, str]]]:
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
