"""What the stages of one worker run share (:class:`CaseRun`), and what a stage records of itself:
its outputs' fingerprints and a copy of its values (masked: invariant 11), the module globals
and const inputs its launches changed.  The wall time of each part of the run (:class:`Laps`).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kernel_forge.gpu import mask
from kernel_forge.gpu.fingerprint import fingerprint_named
from kernel_forge.gpu.resident import CaseBuffers, copy
from kernel_forge.model.worker_protocol import Expected, KernelSpec, Need, Observation, Progress, RunPlan, StageObservation

__all__ = ["CaseRun", "Laps", "Snapshot", "masked_copy"]


class Laps:
    """Wall seconds of one run by named part (``Observation.seconds``): each :meth:`lap` adds the
    time since the one before to its part."""

    def __init__(self):
        self.secs: dict[str, float] = {}
        self.tick = time.perf_counter()

    def lap(self, part: str) -> None:
        now = time.perf_counter()
        self.secs[part] = self.secs.get(part, 0.0) + now - self.tick
        self.tick = now


@dataclass
class Snapshot:
    """The outputs of the one timed launch whose values are kept for the checks after timing:
    copies (masked with the run's key) and their fingerprints, taken as it ends."""

    arrays: dict[str, object] = field(default_factory=dict)
    fingerprints: dict[str, int] = field(default_factory=dict)


def masked_copy(dst, src, key: int | None, stream) -> None:
    """``dst`` = ``src`` masked with ``key`` (a plain copy when masking is off)."""
    if key is None:
        copy(dst, src, stream.ptr)
    else:
        mask.mask_copy(dst, src, key, stream)


@dataclass(eq=False)
class CaseRun:
    """What the stages of one :meth:`~kernel_forge.gpu.runner.CaseRunner.run` share."""

    spec: KernelSpec
    plan: RunPlan
    obs: Observation                         #: what the run reports (its ``seconds`` are ``laps.secs``)
    bufs: CaseBuffers                        #: (case, seed)'s buffers on the GPU
    laps: Laps
    progress: Callable[[Progress], None]
    need: Callable[[Need], Expected] | None  #: asks the parent for the expected outputs
    outputs: list[str]                       #: the task's outputs, in order
    out_arrays: dict[str, object]            #: output -> the work buffer the launches write
    run_key: int                             #: drawn for every run; only the fingerprint kernel is ever given it
    mask_key: int | None                     #: the kept copies of this run's outputs are masked with it (None: off)
    stream: object                           #: the worker's stream every launch and copy of the run goes to
    launch: Callable[[], None] | None = None   #: one launch of the kernel or baseline
    loaded: object | None = None             #: the kernel's module, a launch.LoadedModule (None: a Python baseline)
    estimate: float | None = None            #: GPU seconds of the first checked launch
    #: the stages so far, each with the arrays holding its values
    stages: list[tuple[StageObservation, dict]] = field(default_factory=list)
    masked: set[str] = field(default_factory=set)   #: stages whose arrays are masked copies

    def lap(self, part: str) -> None:
        self.laps.lap(part)

    def output_fingerprints(self) -> dict[str, int]:
        """The outputs' fingerprints now, with the run's key."""
        return fingerprint_named(self.out_arrays, self.run_key, self.stream)

    def keep_copy(self) -> dict[str, object]:
        """The outputs now, kept masked with the run's key (invariant 11)."""
        import cupy

        kept = {}
        with self.stream:
            for n in self.outputs:
                kept[n] = cupy.empty_like(self.out_arrays[n])
                masked_copy(kept[n], self.out_arrays[n], self.mask_key, self.stream)
        return kept

    def add_stage(self, name: str, fps: dict[str, int], later: bool) -> None:
        """A stage of the run: its outputs' fingerprints, and unless an earlier stage left the same
        outputs, the arrays holding its values (``later``: more launches follow, so a masked copy;
        else the work buffers themselves)."""
        same = next((s.stage for s, _ in self.stages if s.fingerprints == fps), None)
        stage = StageObservation(stage=name, fingerprints=fps, same_as=same)
        arrays = {} if same else (self.keep_copy() if later else dict(self.out_arrays))
        if arrays and later and self.mask_key is not None:
            self.masked.add(name)
        self.stages.append((stage, arrays))

    def note_globals(self, stage_name: str) -> None:
        """The module globals and __constant__ variables the stage's launches changed, and whether
        the image they are restored from was written to (a CUDA module with globals only)."""
        loaded, obs = self.loaded, self.obs
        if loaded is not None and loaded.state.ranges:
            names = loaded.state.changed(self.stream)
            if names:
                obs.globals_changed[stage_name] = list(names)
            consts = loaded.state.changed(self.stream, constants=True)
            if consts:
                obs.constants_changed[stage_name] = list(consts)
            if not loaded.state.image_intact(self.stream):
                obs.state_image_changed = True

    def note_const_inputs(self, stage_name: str) -> None:
        """The const inputs' fingerprints after the stage (one that changed is the kernel's write)."""
        if self.bufs.const:
            self.obs.inputs_after[stage_name] = fingerprint_named(self.bufs.const, self.bufs.key, self.stream)
