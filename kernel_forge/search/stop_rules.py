"""When a run stops: the iteration and time limits, the budgets, patience, the target speedup and
the roof, each a :class:`StopRun` raised with the figures it saw."""
from __future__ import annotations

from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.search.run_context import RunContext

#: --max-iterations when it is not given, for models and replays (the tuner has none)
DEFAULT_ITERATIONS = 7


class StopRun(Exception):
    """A stop rule fired; ``reason`` is recorded in the summary."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


def iteration_limit(config: LoopConfig, proposer: str) -> int | None:
    """The iterations a run may take: ``config.max_iterations``, else 7 (none for the tuner)."""
    if config.max_iterations is not None:
        return config.max_iterations
    return None if proposer == "tune" else DEFAULT_ITERATIONS


def time_limit(run: RunContext) -> tuple[float | None, str]:
    """The run's time limit and where it comes from: --time-limit, else the built-in tuner's
    default (--tune-time-limit), else none."""
    c = run.config
    if c.time_limit_s is not None:
        return c.time_limit_s, "--time-limit"
    if run.is_tuner and c.tune_time_limit_s:
        return c.tune_time_limit_s, "the built-in tuner's default time limit (--tune-time-limit; --time-limit sets any run's)"
    return None, ""


def time_up(run: RunContext) -> bool:
    """The time limit is checked before every candidate, not only between iterations."""
    limit, _ = time_limit(run)
    return limit is not None and run.state.elapsed() >= limit


def _search_so_far(run: RunContext) -> str:
    return f"; search so far: {run.spaces.line(run.state.attempts)}" if run.is_tuner else ""


def time_stop(run: RunContext) -> StopRun:
    limit, source = time_limit(run)
    return StopRun("time_limit", f"{run.state.elapsed():.0f} s of {limit:g} s ({source})" + _search_so_far(run))


def check_stop(run: RunContext) -> None:
    """Raise the first stop rule that fires before the next iteration."""
    c, state = run.config, run.state
    limit = iteration_limit(c, run.proposer.name)
    if limit is not None and state.iteration >= limit:
        raise StopRun("max_iterations", f"{state.iteration} of --max-iterations {limit}" + _search_so_far(run))
    if c.budget_limit is not None and state.cost_usd >= c.budget_limit:
        raise StopRun("budget_usd")
    if c.max_tokens is not None and state.tokens["input"] + state.tokens["output"] >= c.max_tokens:
        raise StopRun("max_tokens")
    if time_up(run):
        raise time_stop(run)
    if c.patience is not None and state.since_improvement >= c.patience:
        raise StopRun("patience")
    if c.target_speedup is not None and state.speedup() >= c.target_speedup:
        raise StopRun("target_speedup")
    if c.roof_stop and not bound_not_gated(run):
        reached, detail = roof_reached(run, c.roof_stop)
        if reached:
            raise StopRun("roof_stop", detail)


def bound_not_gated(run: RunContext) -> list[str]:
    """The gate labels of the tuner's bound patterns not gated yet.  The roof does not stop a run
    before each has had its gate: a kernel "at the roof" can still be beaten (on the H100 the wild
    residual add stopped at 97 % of copy bandwidth, 25.7 us, while llm.c's own kernel ran 20.6 us)."""
    from kernel_forge.search.bound import gate_label

    seen = {a.label for a in run.state.attempts}
    return [gate_label(p) for p in getattr(run.proposer, "bound", None) or () if gate_label(p) not in seen]


def roof_reached(run: RunContext, share: float) -> tuple[bool, str]:
    """Whether the best is at ``share`` or more of the roof that applies on every performance
    case (the larger of its share of the measured bandwidth and of the compute peak: the
    roofline's attainable time over the measured one), and the figures."""
    if run.state.best is None or not run.state.best.evaluation:
        return False, ""
    diag = run.diagnoses.of_best(run.state)
    parts = []
    for case in run.task.cases_with("performance"):
        d = diag.case(case.name)
        if d is None:
            return False, f"case {case.name} has no timing"
        figs = [(p, what) for p, what in ((d.pct_bandwidth, "of the measured bandwidth"),
                                         (d.pct_compute, f"of the {diag.peak['label'] if diag.peak else 'compute'} peak"))
                if p is not None]
        if not figs:
            return False, f"case {case.name} has no roof (no cost model or no device figures)"
        pct, what = max(figs)
        if pct < 100.0 * share:
            return False, f"case {case.name} at {pct:.1f}% {what}"
        parts.append(f"{case.name} {pct:.1f}% {what}")
    return True, (f"the best ({run.state.best.id}) is at >= {100 * share:.0f}% of its roof on every "
                  "performance case: "
                  + "; ".join(parts))
