"""The state of one run of the loop (:class:`RunState`): what history.json keeps and ``--resume``
reads back, plus the outcome of this process (why it stopped).

The state is saved and restored whole: :meth:`RunState.to_json` writes every field that is not
marked otherwise, :meth:`RunState.from_json` reads every one back, so a field added here is
resumed without a change anywhere else (history.schema.json describes the file, so a new saved
field goes into the schema too).  Where a field lives in history.json:

* ``attempts`` and ``baselines``: top-level keys of their own;
* every other field: a key of ``$.state`` (its own name unless its metadata says ``key``);
* ``best`` and ``initial``: not written, found again among the attempts (their ``best`` and
  ``baseline`` flags) when the state is read back;
* ``stop_reason``, ``stop_detail`` and ``started``: this process's only (the summary has them).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields

from kernel_forge.records.attempt import Attempt

#: history.json's top-level keys that hold a field of their own (the rest live under $.state)
TOP_LEVEL = ("baselines", "attempts")


def _in_state(*, key: str | None = None, value: Callable[["RunState"], object] | None = None,
              digits: int | None = None) -> dict:
    """Metadata of a field saved under ``$.state``: its ``key`` there (default: its name), the
    ``value`` saved (default: the field's own), rounded to ``digits`` where given."""
    return {"key": key, "value": value, "digits": digits}


#: metadata of a field that is not written: found again among the attempts on reading back
DERIVED = {"saved": False, "derived": True}
#: metadata of a field that lasts as long as this process (never written, never read back)
THIS_PROCESS = {"saved": False}


@dataclass
class RunState:
    """Everything one run of the loop has found and spent so far, apart from its collaborators
    (task, gate, proposer, run folder, settings) and the indexes and caches the loop derives."""

    baselines: dict[str, dict] = field(default_factory=dict)     #: vendor baseline name -> its evaluation
    attempts: list[Attempt] = field(default_factory=list)        #: every proposal's attempts, in order
    iteration: int = 0                 #: the last iteration asked for
    since_improvement: int = 0         #: iterations since the best last moved (--patience)
    settled: bool = True               #: False between recording an iteration's proposals and deciding its best
    tokens: dict = field(default_factory=lambda: {"input": 0, "output": 0})   #: model tokens spent
    cost_usd: float = field(default=0.0, metadata=_in_state(digits=6))        #: model calls' cost
    per_model: dict[str, dict] = field(default_factory=dict)   #: "provider:model" -> calls, tokens, cost
    profile_seconds: dict[str, float] = field(default_factory=dict)   #: attempt id -> seconds its profile took
    #: wall seconds of the run's earlier processes (before a --resume); saved as the run's whole
    #: wall time so far, which is what the next process starts from
    elapsed_before: float = field(default=0.0, metadata=_in_state(key="elapsed_s", value=lambda s: s.elapsed(),
                                                                  digits=3))
    best: Attempt | None = field(default=None, metadata=DERIVED)      #: the current best
    initial: Attempt | None = field(default=None, metadata=DERIVED)   #: the baseline every speedup is against
    stop_reason: str = field(default="", metadata=THIS_PROCESS)       #: the stop rule that fired ("error", ...)
    stop_detail: str = field(default="", metadata=THIS_PROCESS)       #: what it saw
    started: float = field(default_factory=time.time, metadata=THIS_PROCESS)   #: when this process started

    # -- the figures the stop rules and the summary read -----------------------------------------
    def elapsed(self) -> float:
        """The run's wall time: its earlier processes' and this one's so far."""
        return self.elapsed_before + (time.time() - self.started)

    def speedup(self) -> float:
        """The initial kernel's score over the best's (1.0 while either is unmeasured)."""
        if self.best and self.initial and self.best.score_us and self.initial.score_us:
            return self.initial.score_us / self.best.score_us
        return 1.0

    # -- what changed since the last save ---------------------------------------------------------
    def take_changes(self) -> list[Attempt]:
        """The attempts added or changed since the last call, in order (the first call: every
        attempt), so that saving a step costs what the step changed, not the run's length.  Attempts
        are only ever appended to ``attempts``; each is watched from the call that first returns it."""
        seen = self.__dict__.setdefault("_seen", 0)
        changed: dict = self.__dict__.setdefault("_changed", {})
        new = self.attempts[seen:]
        out = [*changed.values(), *new]         # a new attempt is watched only from here on
        changed.clear()
        for a in new:
            a.watch(changed)
        self.__dict__["_seen"] = len(self.attempts)
        return out

    # -- history.json ------------------------------------------------------------------------------
    @classmethod
    def saved_fields(cls) -> list:
        """The fields written to history.json (every one not marked :data:`DERIVED` or
        :data:`THIS_PROCESS`)."""
        return [f for f in fields(cls) if f.metadata.get("saved", True)]

    def to_json(self, attempts: list[Attempt] | None = None) -> dict:
        """``{"state": {...}, "baselines": {...}, "attempts": [...]}``, history.json's part that
        is the run's state (the values are shared, not copied: they are written at once);
        ``attempts``: these instead of every attempt (a line of the attempt log)."""
        state, top = {}, {}
        for f in self.saved_fields():
            if f.name == "attempts":
                top[f.name] = [a.to_json() for a in (self.attempts if attempts is None else attempts)]
            elif f.name in TOP_LEVEL:
                top[f.name] = getattr(self, f.name)
            else:
                value = f.metadata["value"](self) if f.metadata.get("value") else getattr(self, f.name)
                if f.metadata.get("digits") is not None:
                    value = round(value, f.metadata["digits"])
                state[f.metadata.get("key") or f.name] = value
        return {"state": state, **{k: top[k] for k in TOP_LEVEL if k in top}}

    @classmethod
    def from_json(cls, doc: dict, **this_process) -> "RunState":
        """The state history.json ``doc`` records (``doc["attempts"]`` is required; any other
        missing value takes its default), with ``best`` and ``initial`` found again among the
        attempts; ``this_process`` sets fields that are not saved (``started=...``)."""
        values: dict = {}
        recorded = doc.get("state", {})
        for f in cls.saved_fields():
            if f.name == "attempts":
                values[f.name] = [Attempt.from_json(a) for a in doc["attempts"]]
            elif f.name in TOP_LEVEL:
                if f.name in doc:
                    values[f.name] = doc[f.name]
            else:
                key = f.metadata.get("key") or f.name
                if key in recorded:
                    values[f.name] = recorded[key]
        state = cls(**values, **this_process)
        state.initial, state.best = find_initial_and_best(state.attempts)
        return state


def find_initial_and_best(attempts: list[Attempt]) -> tuple[Attempt | None, Attempt | None]:
    """The run's baseline (the task's initial kernel, or the attempt marked ``baseline``) and its
    best (the last attempt marked ``best``, else the baseline), as history.json records them."""
    initial = next((a for a in attempts if a.proposer == "initial" or a.baseline), None)
    bests = [a for a in attempts if a.best]
    return initial, (bests[-1] if bests else initial)
