"""Optional request parameters a model may reject (:class:`Relaxation`): found in an HTTP 400's
message, the request sent again without them, and what was learned applied to every later
request of the run (:class:`Learned`)."""
from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from dataclasses import dataclass

from kernel_forge.proposers.retry import Failure


@dataclass(frozen=True)
class Relaxation:
    """An optional request parameter a model may reject with an HTTP 400 naming it."""

    name: str                                       # e.g. "temperature"
    sent: Callable[[dict], bool]                    # the body carries it
    named: Callable[[str], bool]                    # the (lower-cased) error message names it
    apply: Callable[[dict], dict]                   # the body without it
    note: str                                       # what was done, for the call's error text
    learn: bool = True                              # remember it for later requests of the run
    adapt: Callable[[dict, str], dict] | None = None  # apply, given the error message (e.g. the values it lists)


#: the relaxation both providers try first: a temperature the model does not take
WITHOUT_TEMPERATURE = Relaxation("temperature", sent=lambda b: "temperature" in b,
                                 named=lambda m: "temperature" in m,
                                 apply=lambda b: {k: v for k, v in b.items() if k != "temperature"},
                                 note="sent again without temperature")


class Learned:
    """The relaxations one model needed in this run, applied to every later request (thread-safe)."""

    def __init__(self):
        #: names of the relaxations learned
        self.names: set[str] = set()
        self._bodies: dict[str, Callable[[dict], dict]] = {}
        self._lock = threading.Lock()

    def apply(self, body: dict, relaxations: list[Relaxation]) -> dict:
        """``body`` with every relaxation learned so far that it still carries."""
        with self._lock:
            learned = dict(self._bodies)
        for r in relaxations:
            if r.name in learned and r.sent(body):
                body = learned[r.name](body)
        return body

    def learn(self, relaxation: Relaxation, body: dict, relaxed: dict) -> None:
        """Remember what ``relaxation`` changed (``body`` -> ``relaxed``), for later requests."""
        with self._lock:
            self.names.add(relaxation.name)
            fixed = _diff_fields(body, relaxed)
            self._bodies[relaxation.name] = lambda b, f=fixed: _patch(b, f)


def relaxation_for(relaxations: list[Relaxation], failure: Failure | None, body: dict,
                   used: set[str]) -> Relaxation | None:
    """The first of ``relaxations`` not yet ``used`` that ``body`` carries and an HTTP 400 names."""
    if failure is None or failure.status != 400:
        return None
    message = failure.message.lower()
    for r in relaxations:
        if r.name not in used and r.sent(body) and r.named(message):
            return r
    return None


def _diff_fields(old: dict, new: dict) -> dict:
    """Top-level fields a relaxation changed or removed (removed: a marker)."""
    out = {}
    for k in set(old) | set(new):
        if k not in new:
            out[k] = _REMOVED
        elif old.get(k) != new[k]:
            out[k] = copy.deepcopy(new[k])
    return out


_REMOVED = object()


def _patch(body: dict, fields: dict) -> dict:
    new = copy.deepcopy(body)
    for k, v in fields.items():
        if v is _REMOVED:
            new.pop(k, None)
        elif k in new or k not in ("messages", "input"):
            new[k] = copy.deepcopy(v)
    return new

