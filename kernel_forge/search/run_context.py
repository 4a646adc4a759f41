"""What every part of one run's loop reads and changes (:class:`RunContext`): its collaborators
(task, gate, proposer, run folder, settings), its records (``state``, what history.json keeps)
and the indexes derived from them, plus the four things the loop does for its parts: save the
history, write the best, profile a kernel.

The parts of the search (:mod:`~kernel_forge.search.slots`, :mod:`~kernel_forge.search.request_build`,
:mod:`~kernel_forge.search.recording`, :mod:`~kernel_forge.search.gating`,
:mod:`~kernel_forge.search.stop_rules`, :mod:`~kernel_forge.search.run_start`,
:mod:`~kernel_forge.search.run_evidence`) are plain functions of a run context; the loop itself
(:class:`kernel_forge.search.loop.Optimizer`) is one.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kernel_forge.records.attempt import Attempt
from kernel_forge.records.run_state import RunState

if TYPE_CHECKING:
    from kernel_forge.config.loop_settings import LoopConfig
    from kernel_forge.evidence.run_dir import RunDir
    from kernel_forge.gate.gatelike import GateLike
    from kernel_forge.model.task import Task
    from kernel_forge.proposers.base import Proposer


class RunContext:
    """One run: ``gate`` and ``proposer`` are swapped by interface (tests use fakes);
    ``retrieved`` is what the archive gave the run (a
    :class:`~kernel_forge.search.retrieval.Retrieved`, none by default)."""

    def __init__(self, task: Task, gate: GateLike, proposer: Proposer, run: RunDir, config: LoopConfig, *,
                 progress: Callable[[str], None], retrieved=None):
        # every part of the loop imports this module: what it builds is imported here, not at
        # the top, so that the search's chains of imports stay short (tests/test_layers.py)
        from kernel_forge.evidence.history_log import HistoryLog
        from kernel_forge.search import selection, strategies
        from kernel_forge.search.diagnoses import Diagnoses
        from kernel_forge.search.kernel_index import KernelIndex
        from kernel_forge.search.retrieval import Retrieved
        from kernel_forge.search.run_spaces import RunSpaces

        self.task, self.gate, self.proposer, self.run_dir, self.config = task, gate, proposer, run, config
        self.progress = progress
        self.retrieved = retrieved if retrieved is not None else Retrieved()
        self.state = RunState()            #: what history.json keeps, and this process's outcome
        self.strategy = strategies.get(config.search)
        self.rules = selection.Rules(rounds=config.retime_rounds, min_improvement=config.min_improvement)
        self.kernels = KernelIndex(task, run)                        #: the de-duplication index
        self.spaces = RunSpaces(config, self.strategy, self.kernels)   #: the spaces of tunable kernels
        self.diagnoses = Diagnoses(task, gate, self.kernels)           #: of bests and parents
        self.history_log = HistoryLog(run)  #: the run's history as it happens (history.jsonl)
        self.manifest_sha256: str | None = None   #: read once, by the first best written ("": unreadable)

    @property
    def is_tuner(self) -> bool:
        return self.proposer.name == "tune"

    # -- what the loop does for its parts ---------------------------------------------------------
    def save(self) -> None:
        """Save the history now."""
        raise NotImplementedError

    def save_soon(self) -> None:
        """Save the history unless it was saved a moment ago (the end of a batch saves it)."""
        raise NotImplementedError

    def write_best(self) -> None:
        """Write best.cu and the best's replay requests."""
        raise NotImplementedError

    def profile(self, a: Attempt | None, *, final: bool = False) -> None:
        """Profile a kernel once (``final``: the run's best at its end)."""
        raise NotImplementedError
