"""One slot of an iteration's request (:class:`Slot`): what one of the ``candidates`` proposals
is asked to do."""
from __future__ import annotations

from dataclasses import dataclass

from kernel_forge.records.attempt import Attempt


@dataclass
class Slot:
    """One of the ``candidates`` proposals an iteration asks for."""

    direction: str = ""
    fix: Attempt | None = None
    parent: Attempt | None = None     # where the strategy starts it (None: the best)
    second: Attempt | None = None     # a crossover's other parent
    technique: str = ""
