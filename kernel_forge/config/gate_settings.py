"""The gate's settings: how strictly and how long candidates are checked, and how they are timed.

:class:`TimingOptions` are the timing knobs; :class:`GateOptions` has them as its own fields (flat:
``--warmup``, ``gate.warmup`` in a config file and in ``run.json``) and hands them to the GPU
worker whole (``GateOptions.timing`` -> ``RunPlan.timing``), so a knob declared here reaches
the worker without being copied field by field."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import ClassVar, Literal

from kernel_forge.common.setting import DAY_S, MAX_LAUNCHES, MAX_SEED, setting

#: ``--quick``: one input draw, no repeat launch, no kept copy of a chosen timed launch (the last
#: timed launch's outputs are checked in every mode)
QUICK = {"extra_draws": 0, "repeat_check": False, "check_after_timing": False}


def devices_syntax(spec: str) -> list[int] | str | None:
    """A ``--devices`` value read without a GPU: the ordinals, ``"all"``, ``[]`` for none given,
    or None when it is not ordinals like ``0,1`` (each once) or ``all``."""
    if not isinstance(spec, str):
        return None
    text = spec.strip().lower()
    if text in ("", "all"):
        return text or []
    parts = [x.strip() for x in text.split(",")]
    if not all(re.fullmatch(r"\d+", x) for x in parts):
        return None
    ids = [int(x) for x in parts]
    return ids if len(set(ids)) == len(ids) else None


def check_arch(arch, *, where: str = "--arch") -> None:
    """An arch before anything uses it, by the gate's own rule (``--arch`` of optimize, eval,
    validate and compile, the ``arch`` of MCP's tools): every entry point refuses a bad one in the
    same words, naming its place as ``where`` spells it (an option with its value, or a tool's
    argument name)."""
    from kernel_forge.config.build import AsArguments, OnCommandLine, check_values

    line = OnCommandLine({("gate", "arch"): where})
    check_values(GateOptions, {"arch": arch}, line if where.startswith("-") else AsArguments({("gate", "arch"): where}, line))


@dataclass
class TimingOptions:
    """How the timed launches of a performance case are made (the worker follows these)."""

    warmup: int = setting(10, min=0, max=MAX_LAUNCHES, flag="--warmup",
                          help="most untimed launches before timing each performance case")
    reps: int = setting(100, min=1, max=MAX_LAUNCHES, flag="--reps",
                        help="most timed launches per performance case (every sample kept; fewer once the "
                             "median is tight: --max-noise)")
    min_reps: int = setting(10, min=1, max=MAX_LAUNCHES, help="fewest timed launches per performance case")
    min_warmup: int = setting(2, min=0, max=MAX_LAUNCHES, help="fewest untimed launches before timing")
    max_noise: float = setting(0.005, min=0, max=1,
                               help="stop a case's timed launches once the median's 95 % confidence half-width is "
                                    "within this fraction of it, checked after min_reps, 2*min_reps, 4*min_reps... "
                                    "(0: always reps)")
    timing_budget_s: float = setting(0.25, above=0, max=DAY_S,
                                     help="GPU time the timed launches of a case may take: reps = budget / launch "
                                          "time, within [min_reps, reps]")
    warmup_budget_s: float = setting(0.025, min=0, max=DAY_S,
                                     help="GPU time the warm-up launches may take, within [min_warmup, warmup]")
    flush_l2: bool = setting(True, flag="--flush",
                             help="flush the L2 before each timed launch (outside the window); --no-flush keeps it warm")
    timing_timeout_s: float = setting(120.0, above=0, max=DAY_S, help="wall time allowed for the timed launches of one case")


@dataclass
class GateOptions(TimingOptions):
    """How strictly and how long the gate checks. The CLI and the loop fill this in."""

    SECTION: ClassVar[str] = "gate"

    seed: int = setting(0, min=0, max=MAX_SEED, flag="--seed", help="seed of the first input draw of every case")
    extra_draws: int = setting(1, min=0, max=1000, help="further draws with fresh seeds per case (catches memoisation)")
    repeat_check: bool = setting(True, help="launch twice on the same inputs; outputs must agree")
    check_after_timing: bool = setting(True, help="also keep and re-verify the outputs of one randomly chosen timed launch "
                                                   "(the last timed launch's are re-verified in every mode)")
    plausibility: bool = setting(True, help="flag times faster than the GPU's bandwidth/FLOP rate allow")
    fail_fast: bool = setting(False, help="stop at the first failing case")
    launch_timeout_s: float = setting(10.0, above=0, max=DAY_S, flag="--timeout", help="wall time allowed for one checked launch")
    arch: str | None = setting(None, pattern=r"^sm_[0-9]+[af]?$", must="like sm_90", flag="--arch",
                               help="compile for this arch instead of the GPU's")
    device: int = setting(0, min=0, max=1023, flag="--cuda-device", help="CUDA device ordinal")
    sanitize: bool = setting(False, flag="--sanitize",
                             help="run compute-sanitizer (memcheck, racecheck) before accepting (see sanitizer.py)")
    plausible_margin: float = setting(1.25, min=1, max=1000,
                                      help="allowed excess over measured bandwidth before \"implausible\" (1: none)")
    fresh_seeds: list[int] = setting(factory=list, min=0, max=MAX_SEED, flag="--fresh-seed",
                                     help="seeds of the extra draws (chosen if empty)")
    compare: Literal["gpu", "cpu"] = setting("gpu", help="where outputs are compared: \"gpu\" (summaries and a "
                                                        "sampled re-check) or \"cpu\" (all values sent back)")
    sample_size: int = setting(64, min=1, max=10**9, help="elements of every compared output re-checked here after each run")
    resident_bytes: int = setting(0, min=0, max=2**50, help="GPU memory the worker keeps inputs and expected outputs in "
                                                 "(0: a quarter of the free memory, at most 16 GiB)")
    compile_threads: int = setting(2, min=1, max=1024, help="NVRTC compiles running ahead of the gate (Gate.precompile)")
    devices: str = setting("", pattern=r"^\s*(all|[0-9]+(\s*,\s*[0-9]+)*)?\s*$",
                           valid=lambda v: devices_syntax(v) is not None,
                           must="GPU ordinals like 0,1 (each once) or all",
                           help="GPUs that gate an iteration's candidates in parallel: \"0,1\" or \"all\" "
                                "(default: --cuda-device alone)")

    @property
    def strict(self) -> bool:
        return self.extra_draws > 0 and self.repeat_check and self.check_after_timing

    @property
    def timing(self) -> TimingOptions:
        """The timing knobs, whole, for the worker's plan."""
        return TimingOptions(**{f.name: getattr(self, f.name) for f in dataclasses.fields(TimingOptions)})

    @classmethod
    def quick(cls, **kw) -> "GateOptions":
        """One draw, no repeat launch, the last timed launch checked (not a chosen one as well)."""
        return cls(**{**QUICK, **kw})
