"""What the loop needs from a gate: the :class:`GateLike` protocol.

The real :class:`~kernel_forge.gate.gate.Gate`, the :class:`~kernel_forge.gate.recorded.RecordedGate`
that answers from an earlier run's verdicts, and the test suite's scripted gate all implement it,
so the loop, the prompt and the evidence run without a GPU.  Nothing in the loop probes a gate
with ``hasattr``: a method a gate cannot do meaningfully still exists and says so in its answer
(``precompile`` does nothing, ``profile`` returns ``{"available": False, "reason": ...}``).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from kernel_forge.model.candidate import Candidate
from kernel_forge.model.verdict import Evaluation


@runtime_checkable
class GateLike(Protocol):
    def evaluate(self, candidate: Candidate, *, roles: tuple[str, ...] = ("correctness", "performance"),
                 kind: str = "candidate") -> Evaluation:
        """Gate one candidate on the cases of the given roles."""

    def evaluate_many(self, candidates: Sequence[Candidate], *, roles: tuple[str, ...] = ("correctness", "performance"),
                      should_stop: Callable[[], bool] = lambda: False,
                      on_result: Callable[[int, Evaluation], None] = lambda i, ev: None) -> list[Evaluation | None]:
        """Gate several candidates (in parallel where the gate has several GPUs); ``on_result(i, ev)``
        as each verdict arrives; ``should_stop`` is asked before each candidate starts, and the ones
        not started come back as None.  One device: :class:`InTurn`."""

    def retime(self, candidates: list[Candidate], rounds: int = 2) -> list[Evaluation]:
        """Measure candidates side by side (interleaved rounds, samples pooled per case)."""

    def evaluate_baseline(self, name: str) -> Evaluation:
        """Time (and verify) the task's vendor baseline ``name`` like a candidate."""

    def device_info(self) -> dict | None:
        """The device description (``DeviceInfo.to_json()``), or None where unknown."""

    def calibrate(self) -> dict | None:
        """Measured copy bandwidth and FLOP/s peaks, or None where unknown."""

    def precompile(self, candidates: list[Candidate]) -> None:
        """Compile candidates ahead of their evaluation (may do nothing)."""

    def profile(self, candidate: Candidate, cases: list[str]) -> dict:
        """A profiler summary of ``candidate`` on ``cases``: ``{"available": bool, "reason": str,
        "tool": str, "seconds": float, "cases": {name: {...metrics...}}}``."""

    def close(self) -> None:
        """Release workers and devices."""


class InTurn:
    """``evaluate_many`` for a gate with one device: one candidate after another.  The real gate,
    the recorded gate and the test and benchmark gates take it by inheriting from this class."""

    def evaluate_many(self, candidates: Sequence[Candidate], *, roles=("correctness", "performance"),
                      should_stop: Callable[[], bool] = lambda: False,
                      on_result: Callable[[int, Evaluation], None] = lambda i, ev: None) -> list[Evaluation | None]:
        out: list[Evaluation | None] = [None] * len(candidates)
        for i, cand in enumerate(candidates):
            if should_stop():
                break
            out[i] = self.evaluate(cand, roles=roles)
            on_result(i, out[i])
        return out
