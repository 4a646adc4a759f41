"""The settings of one tunable kernel and what the run knows of them (:class:`Space`): which
settings are valid, which were tried and how they did, a surrogate model of their times, and the
neighbourhoods and samples the strategies (:mod:`kernel_forge.search.strategies`) pick from."""
from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from kernel_forge.model.candidate import Candidate

#: a space is listed (every valid setting enumerated) when its tunables have at most this many combinations
LIST_LIMIT = 50_000


#: which record of a setting tried more than once the space keeps: a verdict over a wait, a wait
#: over a refusal (a duplicate proposed after its setting was gated must not undo the verdict)
_RANK = {"ruled_out": 0, "pending": 1, "failed": 2, "passed": 2}


def setting_key(d: dict) -> tuple:
    """A setting as a hashable key (its defines, sorted)."""
    return tuple(sorted(d.items()))


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
        self._ok: dict[tuple, bool] = {setting_key(d): True for d in self._valid or ()}
        self.trials: dict[tuple, Trial] = {}
        self.order: list[tuple] = []          # trial keys in the order they were recorded
        self.seed = 0                         # the run's seed (annealing replays its chain with it)

    # -- what is known ---------------------------------------------------------------------
    def add(self, defines: dict, attempt: str, score: float | None, status: str) -> None:
        k = setting_key(defines)
        if k not in self.trials:
            self.order.append(k)
        elif _RANK[self.trials[k].status] > _RANK[status]:
            return      # a later duplicate or refused copy of a setting keeps the setting's verdict
        self.trials[k] = Trial(dict(defines), attempt, score, status)

    def tried(self, d: dict) -> bool:
        return setting_key(d) in self.trials

    def passed(self) -> list[Trial]:
        """Settings that passed, fastest first (ties by the order they were recorded)."""
        idx = {k: i for i, k in enumerate(self.order)}
        ok = [t for t in self.trials.values() if t.status == "passed" and t.score]
        return sorted(ok, key=lambda t: (t.score, idx[setting_key(t.defines)]))

    def best(self) -> Trial | None:
        p = self.passed()
        return p[0] if p else None

    def valid(self, d: dict) -> bool:
        k = setting_key(d)
        if k not in self._ok:
            self._ok[k] = (self._valid is None and all(d.get(n) in self.values[n] for n in self.names)
                           and self.cand.with_defines(d).satisfies_constraints())
        return self._ok[k]

    @property
    def listed(self) -> bool:
        return self._valid is not None

    def untried(self) -> list[dict]:
        """Every valid untried setting, in declared order (listed spaces only; else [])."""
        return [d for d in (self._valid or []) if setting_key(d) not in self.trials]

    def remaining(self) -> int | None:
        """Valid settings not tried yet (None where the space is too large to list)."""
        if self._valid is None:
            return None
        return sum(1 for d in self._valid if setting_key(d) not in self.trials)

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
        seen = {setting_key(d)}
        frontier = [d]
        for _ in range(radius):
            nxt = []
            for x in frontier:
                for n in self.neighbours(x):
                    if setting_key(n) not in seen:
                        seen.add(setting_key(n))
                        nxt.append(n)
            frontier = nxt
        return frontier

    def random_untried(self, k: int, rng: random.Random, *, avoid: set[tuple] = frozenset()) -> list[dict]:
        """Up to ``k`` valid untried settings drawn with ``rng``."""
        if k <= 0:
            return []
        if self._valid is not None:
            pool = [d for d in self._valid if setting_key(d) not in self.trials and setting_key(d) not in avoid]
            rng.shuffle(pool)
            return pool[:k]
        drawn = self.cand.sample_configurations(k + len(self.trials) + len(avoid) + 8, seed=rng.randrange(1 << 30))
        out = [d for d in drawn if setting_key(d) not in self.trials and setting_key(d) not in avoid]
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
            if len(out) < k and self.valid(d) and not self.tried(d) and setting_key(d) not in seen:
                out.append(d)
                seen.add(setting_key(d))
        return out + self.random_untried(k - len(out), rng, avoid=seen)
