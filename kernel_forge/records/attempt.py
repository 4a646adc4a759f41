"""One proposal's record in a run (:class:`Attempt`, a row of history.json): the plain data every
part of the search passes around, and the evidence and the reports read back."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

#: reasons the loop gives an attempt before any GPU time (it has no evaluation)
NOT_GATED = ("duplicate", "launch_conflict", "bad_candidate")

@dataclass
class Attempt:
    id: str
    iteration: int
    proposer: str
    label: str = ""
    parent: str | None = None
    rationale: str = ""
    source_file: str = ""
    sha256: str = ""
    defines: dict = field(default_factory=dict)
    launch: dict | None = None
    tunables: dict = field(default_factory=dict)
    status: str = "pending"           # pending | passed | failed
    reason: str = ""
    message: str = ""
    score_us: float | None = None
    evaluation: dict | None = None
    holdout: dict | None = None
    retimed: dict | None = None
    best: bool = False
    model_calls: list[str] = field(default_factory=list)   # the calls that produced this proposal
    direction: str = ""               # the direction its prompt asked for
    fix_of: str | None = None         # the failed attempt its prompt asked to fix
    cost_usd: float = 0.0             # of its model calls (on the first attempt of a proposal)
    tokens: dict = field(default_factory=lambda: {"input": 0, "output": 0})
    profile: str | None = None        # profiles/<id>.json when profiled (as a best)
    baseline: bool = False            # the run's baseline: the initial kernel, or the first passing translation
    created: float = field(default_factory=time.time)
    dispatch: list | None = None      # its dispatch rule (settings per shape, dispatch.py), when it has one
    technique: str = ""               # the technique tag of its direction ("cmp:regblock", "crossover", "tune:FILE")
    second_parent: str | None = None  # a crossover's other parent
    predicted_speedup: float | None = None   # the proposer's expected speedup over its parent

    def __setattr__(self, name: str, value) -> None:
        object.__setattr__(self, name, value)
        changed = self.__dict__.get("_changed")
        if changed is not None:
            changed[self.id] = self

    def watch(self, changed: dict) -> None:
        """From now on, a field set on this attempt puts it in ``changed`` (``{id: attempt}``), so
        the run's evidence writes what changed without looking at every attempt
        (:meth:`~kernel_forge.records.run_state.RunState.take_changes`).  Every field is set, never
        changed in place."""
        object.__setattr__(self, "_changed", changed)

    def to_json(self) -> dict:
        """Its fields as a new dict; the values are shared, not copied (they are plain JSON values,
        and the history is written after every verdict: a deep copy of a long run's samples each
        time cost most of the loop's own time)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_json(cls, d: dict) -> "Attempt":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

