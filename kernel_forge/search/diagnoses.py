"""The diagnoses a run's prompts and stop rules read (:class:`Diagnoses`): of the current best
and of any passed kernel a proposal starts from, each computed once per attempt and profile, and
the directions a diagnosis offers."""
from __future__ import annotations

from typing import TYPE_CHECKING

from kernel_forge.analysis.diagnosis import diagnose
from kernel_forge.analysis.directions import direction_items
from kernel_forge.records.attempt import Attempt
from kernel_forge.records.run_state import RunState

if TYPE_CHECKING:
    from kernel_forge.analysis.diagnosis import Diagnosis
    from kernel_forge.gate.gatelike import GateLike
    from kernel_forge.model.task import Task
    from kernel_forge.search.kernel_index import KernelIndex


class Diagnoses:
    """Derived from the attempts and their profiles (never saved)."""

    def __init__(self, task: Task, gate: GateLike, kernels: KernelIndex):
        self.task, self.gate, self.kernels = task, gate, kernels
        self._best: tuple | None = None         # (best id, profile file, Diagnosis) of the current best
        self._of: dict[tuple, Diagnosis] = {}   # (attempt id, profile) -> Diagnosis of a parent

    def profile_of(self, a: Attempt) -> dict | None:
        """The attempt's saved profile (profiles/<id>.json), or None when it has none."""
        return self.kernels.run_dir.read_json(a.profile) if a.profile else None

    def _diagnose(self, a: Attempt, state: RunState) -> Diagnosis:
        return diagnose(self.task, a.evaluation or {},
                        initial=state.initial.evaluation if state.initial else None,
                        baselines=state.baselines, device=self.gate.device_info(),
                        calibration=self.gate.calibrate(), profile=self.profile_of(a),
                        source=self.kernels.source_or_none(a))

    def of_best(self, state: RunState) -> Diagnosis:
        """The diagnosis of the current best (computed once per best and profile)."""
        best = state.best
        if self._best is None or self._best[:2] != (best.id, best.profile):
            self._best = (best.id, best.profile, self._diagnose(best, state))
        return self._best[2]

    def of(self, a: Attempt, state: RunState) -> Diagnosis:
        """The diagnosis of any passed attempt (a parent the strategy starts from), cached."""
        key = (a.id, a.profile)
        if key not in self._of:
            self._of[key] = self._diagnose(a, state)
        return self._of[key]

    def options(self, parent: Attempt, k: int, state: RunState) -> list[tuple[str, str]]:
        """(technique, direction) pairs from the diagnosis of ``parent``."""
        return direction_items(self.of_best(state) if parent is state.best else self.of(parent, state), k)
