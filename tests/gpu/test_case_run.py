"""What the stages of one worker run share (gpu/case_run.py): no GPU."""
from __future__ import annotations

import types

import kernel_forge.gpu.case_run as case_run_mod
from kernel_forge.gpu.case_run import Laps


def test_the_laps_add_up_the_time_of_each_named_part(monkeypatch):
    clock = iter([10.0, 10.5, 12.0, 12.25, 13.0])
    monkeypatch.setattr(case_run_mod, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    laps = Laps()
    for part in ("upload", "launches", "upload", "compare"):
        laps.lap(part)
    assert laps.secs == {"upload": 0.5 + 0.25, "launches": 1.5, "compare": 0.75}
    assert list(laps.secs) == ["upload", "launches", "compare"]       # the order the parts first ran
