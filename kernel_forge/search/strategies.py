"""Search strategies: which kernels to start from, and which settings of a tunable kernel to gate.

A :class:`Strategy` has two faces, used by the loop for the built-in tuner and for model
proposers alike:

* :meth:`Strategy.plan` chooses, for the ``n`` proposals of an iteration, each one's parent (the
  attempt to start from), its direction and technique (from the diagnosis of that parent:
  :func:`kernel_forge.analysis.directions.direction_items`) and, for a crossover, a second parent.
* :meth:`Strategy.pick` chooses the next settings of one tunable kernel (a
  :class:`~kernel_forge.search.setting_space.Space`: a template's or a proposal's
  ``// kforge: tune`` space and what the run measured of it), and
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
from typing import TYPE_CHECKING

from kernel_forge.search.lineage import (PlanContext, SlotPlan, avoid_techniques, best_share, crossover_direction,
                                         directions_for, distinct_passed, gained_techniques, proposals_from,
                                         technique_of, tried_pairs, wins_over)
from kernel_forge.search.setting_space import Space, Trial, setting_key

if TYPE_CHECKING:
    from kernel_forge.records.attempt import Attempt

#: the strategies ``--search`` takes
NAMES = ("greedy", "population", "anneal", "brute")
#: the default (the offline benchmark's winner on proposals to within 5 % of the best: bench/SEARCH.md)
DEFAULT = "population"


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
        dirs = directions_for(ctx, ctx.best, n, used)
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
                if len(out) < k and not space.tried(d) and setting_key(d) not in seen:
                    out.append((d, f"{radius} step{'s' if radius > 1 else ''} from the best setting ({best.attempt})"))
                    seen.add(setting_key(d))
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
            for t, d in directions_for(ctx, p, s, used, avoid, prefer):
                out.append(SlotPlan(parent=p, direction=(d if p is ctx.best else
                                                         f"start from {p.id} (not the best: a different line worth "
                                                         f"developing): {d}"), technique=t))
        if pair:
            a, b = pair
            ta, tb = technique_of(a, by_id), technique_of(b, by_id)
            out.append(SlotPlan(parent=a, second=b, technique="crossover",
                                direction=crossover_direction(a, b, ta, tb)))
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
            if space.valid(d) and not space.tried(d) and setting_key(d) not in seen:
                out.append((d, f"child of {a.attempt} x {b.attempt}"))
                seen.add(setting_key(d))
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
                                                                   avoid={setting_key(d) for d in first})]
        out: list[tuple[dict, str]] = []
        seen: set = set()

        def take(items, n):
            for d, w in items:
                if len(out) >= n:
                    return
                if not space.tried(d) and setting_key(d) not in seen:
                    out.append((d, w))
                    seen.add(setting_key(d))

        best = pop[0]
        local = space.neighbours(best.defines, kind="hamming")
        rng.shuffle(local)
        take([(d, f"neighbour of the best {best.attempt}") for d in local], round(self.local * k))
        brood = self.breed(space, pop, self.brood * k, rng, set(seen) | set(space.trials))
        if brood and self.exploit > 0:
            predict = space.model()
            ranked = sorted(brood, key=lambda x: (predict(x[0]), setting_key(x[0])))
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
            for tech, d in directions_for(ctx, p, counts[p.id], used, avoid, prefer):
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
            if len(out) < k and not space.tried(d) and setting_key(d) not in seen:
                out.append((d, f"annealing move from {cur.attempt} (T {temp:.3f})"))
                seen.add(setting_key(d))
        if len(out) < k and best is not None and best is not cur:
            for d in space.neighbours(best.defines, kind="hamming"):
                if len(out) < k and not space.tried(d) and setting_key(d) not in seen:
                    out.append((d, f"annealing move from the best {best.attempt}"))
                    seen.add(setting_key(d))
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
