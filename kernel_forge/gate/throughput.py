"""A timed case's rates: bytes and FLOPs per second from the task's cost expressions, and their
share of the device's measured bandwidth and FP32 peak."""
from __future__ import annotations

from collections.abc import Callable

from kernel_forge.model.task import Case, Task
from kernel_forge.model.verdict import CaseResult

__all__ = ["fill_throughput"]


def fill_throughput(task: Task, case: Case, res: CaseResult, calibrate: Callable[[], dict]) -> None:
    """``res``'s cost and rates from its median; ``calibrate`` is asked only for a positive time."""
    flops, nbytes = task.cost(case)
    res.flops, res.bytes = flops, nbytes
    secs = res.timing.median * 1e-6
    if secs <= 0:
        return
    cal = calibrate()
    if nbytes is not None:
        res.gbps = nbytes / secs / 1e9
        if cal.get("bandwidth"):
            res.pct_peak_bw = 100.0 * nbytes / secs / cal["bandwidth"]
    if flops is not None:
        res.tflops = flops / secs / 1e12
        if cal.get("fp32_peak"):
            res.pct_peak_flops = 100.0 * flops / secs / cal["fp32_peak"]
