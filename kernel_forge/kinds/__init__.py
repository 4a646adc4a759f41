"""The kind of operation a task is, read from its reference: which kind, which kernel parameter
plays which part (the binding), and the kind's parameters (epsilon, function, edge mode ...).

:func:`identify` runs the task's reference once on its smallest case (in the reference process:
:mod:`kernel_forge.kinds.probe`) and tests one hypothesis after another, in :data:`FINDERS` order,
with NumPy on the probe's values: the first that reproduces every output is the task's kind --
the first that can also be bound, when one that leaves a size unbound comes before it.  A
manifest may state the kind (``"kind": "row_norm"`` or ``"kind": {"name": ..., "binding": {...},
"params": {...}}``): that skips the guess, and is still checked against the reference -- a
stated kind the reference does not bear out is an error naming ``$.kind``.

The binding is what :mod:`kernel_forge.kinds.bind` instantiates the kind's patterns with.
Identification never runs user code in kforge's own process and never fails on a reference that
does something else: nothing matched is an answer (None), not an error.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from kernel_forge.kinds.linalg import find_gemm, find_histogram
from kernel_forge.kinds.maps import find_elementwise
from kernel_forge.kinds.match import Match
from kernel_forge.kinds.onehot import find_onehot_grad
from kernel_forge.kinds.optim import find_optimizer_step
from kernel_forge.kinds.rotary import find_rope
from kernel_forge.kinds.rows import find_reductions, find_row_norm, find_row_softmax, find_scan
from kernel_forge.kinds.spatial import (find_box_filter, find_gather, find_pool2d, find_resample, find_row_pick,
                                        find_stencil, find_stencil1d, find_transpose)

#: (kinds a finder can name, finder), most specific first
FINDERS: tuple[tuple[tuple[str, ...], Callable], ...] = (
    (("gemm",), find_gemm),
    (("row_norm",), find_row_norm),
    (("row_softmax",), find_row_softmax),
    (("reduction", "row_reduction", "column_reduction"), find_reductions),
    (("scan",), find_scan),
    (("transpose",), find_transpose),
    (("gather",), find_gather),
    (("row_pick",), find_row_pick),
    (("histogram",), find_histogram),
    (("optimizer_step",), find_optimizer_step),
    (("rope",), find_rope),
    (("onehot_grad",), find_onehot_grad),
    (("elementwise",), find_elementwise),
    (("stencil2d",), find_stencil),
    (("box_filter",), find_box_filter),
    (("pool2d",), find_pool2d),
    (("resample",), find_resample),
    (("stencil1d",), find_stencil1d),
)

#: every kind identification can name, with one line each
KINDS = {
    "gemm": "a matrix product C = alpha * op(A) @ op(B) + beta * C (+ bias)",
    "row_norm": ("layer, RMS or L2 norm of each row (or of x + a residual, the sum kept: fused_add_rms_norm), "
                 "affine or not, with mean / rstd / variance outputs"),
    "row_softmax": "softmax or log-softmax of each row, or of scale * the row (attention's scores)",
    "reduction": "sum / max / min / mean of all values, or the sum of x * w (a dot product)",
    "row_reduction": "sum / max / min / mean of each row, or of each row times w (a matrix-vector product)",
    "column_reduction": "sum / max / min / mean of each column (a bias gradient)",
    "scan": "inclusive or exclusive prefix sum (of the whole array or of each row)",
    "transpose": "a matrix with its axes swapped, or two axes of an N-D array (a batched transpose, a 0213 permute)",
    "gather": "rows of a table picked by integer indices (an embedding lookup), or written to the rows they name (a scatter)",
    "row_pick": "one element of each row picked by an integer index, then mapped: -log(probs[r, target[r]]) ...",
    "histogram": "counts of integer values into bins, or of real values in equal bins of a range",
    "optimizer_step": "an optimizer's in-place update of every parameter: Adam / AdamW, SGD with momentum",
    "rope": ("rotary position embeddings: each row's pairs (interleaved or halves) rotated by its position's "
             "angle, from cos / sin tables or (cos, sin) pairs, rows [.., T, d] or [B, T, heads, d], in place or not"),
    "onehot_grad": ("cross-entropy's gradient through a softmax: (probs - onehot(target)) * the row's dloss (or a "
                    "scalar), added or written"),
    "elementwise": ("a map of every element, or a fused chain: act(x + bias) + residual, alpha * x + z, act(x) * z "
                    "(also on the two halves of each row: act_and_mul) ..."),
    "stencil2d": "a K x K stencil or small convolution over a 2-D image (clamped or zero edges)",
    "box_filter": "the mean or sum of the 2r+1 values around each pixel along a row or a column, r a parameter",
    "pool2d": "max, mean or sum pooling of S x S windows with stride S over the planes of an image batch",
    "resample": "nearest-neighbour upsampling by an integer factor (2, 3 or 4) of the planes of an image batch",
    "stencil1d": ("a 1-D convolution or stencil along each row or down each column (a mask of k taps; edges clamped, "
                  "zero, reflected, periodic, valid, or a border kept or zeroed)"),
}


@dataclass(frozen=True)
class Identified:
    """What :func:`identify` found: the match (None: nothing matched) and why."""

    match: Match | None
    why: str                 #: one phrase: what was probed, or why nothing was
    seconds: float = 0.0

    def line(self) -> str:
        """What ``kforge validate`` prints."""
        if self.match is None:
            return f"kind: nothing matched ({self.why})"
        how = "stated by the manifest, checked against the reference" if self.match.source == "manifest" \
            else "read from the reference"
        return f"kind: {self.match.describe()}  ({how}, {self.seconds:.2f} s)"


class KindMismatch(Exception):
    """The manifest states a kind the reference does not bear out."""


def stated(task) -> dict | None:
    """The manifest's ``kind`` as ``{"name", "binding", "params"}`` (None when it states none, or
    states one identification does not know: the classifier's kinds such as ``other``)."""
    raw = (getattr(task, "raw", None) or {}).get("kind")
    if isinstance(raw, str):
        raw = {"name": raw}
    if not isinstance(raw, dict) or raw.get("name") not in KINDS:
        return None
    return {"name": raw["name"], "binding": dict(raw.get("binding") or {}), "params": dict(raw.get("params") or {})}


def _agrees(m: Match, want: dict) -> bool:
    if m.kind != want["name"]:
        return False
    for role, name in want["binding"].items():
        if m.binding.get(role) != name:
            return False
    for key, value in want["params"].items():
        have = m.params.get(key)
        if isinstance(value, (int, float)) and isinstance(have, (int, float)) and not isinstance(value, bool):
            if abs(have - value) > 1e-6 * max(abs(value), 1e-30) + 1e-30 and key != "eps":
                return False
        elif key == "taps" and isinstance(value, list) and isinstance(have, list):
            if len(value) != len(have) or any(abs(a - b) > 1e-4 for a, b in zip(value, have)):
                return False
        elif have != value:
            return False
    return True


def _tried(finder, probe):
    """The finder's matches; a hypothesis the probe's values break (shapes, overflow, a singular
    fit) ends that finder, never identification."""
    import numpy as np

    it = finder(probe)
    while True:
        try:
            with np.errstate(all="ignore"):
                m = next(it)
        except StopIteration:
            return
        except (ValueError, ArithmeticError, IndexError, TypeError, KeyError, MemoryError, np.linalg.LinAlgError):
            return
        yield m


def _binds(task, m: Match) -> bool:
    """Whether a bound pattern can be written for ``m`` (a kind with none yet counts as binding:
    its match is the answer).  Identification prefers a match that binds, so that a hypothesis
    that holds but leaves a size unbound (a product whose rows only the launch carries) does not
    hide a later one that binds (the same values read as a matrix-vector product)."""
    from kernel_forge.kinds.bind import Unbindable, instantiate

    try:
        instantiate(task, m)
    except Unbindable as exc:
        return str(exc).startswith("no bound pattern for kind")
    return True


#: the kinds tried on a strided view of an input (kinds.probe.strided_views), with their finders
STRIDED_KINDS = ("row_norm", "row_softmax", "row_reduction")


def _strided(task, probe) -> Match | None:
    """A row kind of x read as a strided view (the rows' first cols values, rows ld apart: a BLAS
    ``ld``, vLLM's ``input_stride``, a padded vocabulary), bound with x's stride as ``ldx``."""
    from kernel_forge.kinds.probe import strided_views

    for view, x, ld in strided_views(probe):
        for kinds, finder in FINDERS:
            if not set(kinds) & set(STRIDED_KINDS):
                continue
            for m in _tried(finder, view):
                if m.kind in STRIDED_KINDS and m.binding.get("x") == x and ld not in m.binding.values():
                    m = Match(m.kind, {**m.binding, "ldx": ld}, m.params)
                    if _binds(task, m):
                        return m
    return None


def _may_run_reference(task) -> bool:
    """False for a generated task whose files are neither accepted nor edited by a person since."""
    from kernel_forge.model.generated import review

    r = review(task) if getattr(task, "generated", None) is not None else None
    return r is None or r.usable


#: scalar values that may hide a role: a factor of 1 or an addend of 0 changes nothing, so a match that
#: leaves such a scalar out still reproduces the reference (a softmax's inv_temperature left at 1.0)
NEUTRAL = (0.0, 1.0, -1.0)
#: what such a scalar is set to, to tell whether it plays a part
TELLING = 0.6180339887


def _telling_probe(probe, m: Match | None):
    """The probe with every float scalar ``m`` does not bind (None: every one) whose value is neutral
    (:data:`NEUTRAL`) set to :data:`TELLING`, when that changes the reference's outputs (the scalar
    plays a part the match missed, or hid the kind: a softmax of 0 * x is uniform); None when no such
    scalar does, or the reference cannot be rerun."""
    import numpy as np

    from kernel_forge.common.errors import KForgeError
    from kernel_forge.kinds.match import close

    bound = {v for v in m.binding.values() if isinstance(v, str)} if m is not None else set()
    hidden = {n: TELLING for n, v in probe.float_scalars().items() if n not in bound and v in NEUTRAL}
    if not hidden:
        return None
    try:
        telling = probe.with_scalars(hidden)
    except (KForgeError, ValueError, KeyError):
        return None
    same = all(close(telling.outputs[k], v) or np.array_equal(telling.outputs[k], v, equal_nan=True)
               for k, v in probe.outputs.items())
    return None if same else telling


def _first_binding(task, probe) -> Match | None:
    """The first match on ``probe`` that binds (the search identify makes, on another probe)."""
    for _kinds, finder in FINDERS:
        for m in _tried(finder, probe):
            if _binds(task, m):
                return m
    return None


def identify(task, seed: int = 1234) -> Identified:
    """The task's kind (see the module docstring).  Raises :class:`KindMismatch` when the manifest
    states a kind the reference does not bear out; a reference that fails raises as it does for
    ``validate`` (a ReferenceError_)."""
    from kernel_forge.kinds.probe import take

    t0 = time.monotonic()
    want = stated(task)
    if getattr(task.reference, "kind", "python") != "python":
        return Identified(None, "the reference is a CUDA kernel, not a Python callable")
    if not _may_run_reference(task):
        return Identified(None, "the reference was written by a model and has not been accepted (kforge validate "
                                "--accept runs it first, in a sandbox); it is not run to read the kind")
    probe = take(task, seed)
    if probe is None:
        return Identified(None, "no case is small enough to probe")
    unbound = None              # the first match no pattern could be bound for: the answer if no later one binds
    for kinds, finder in FINDERS:
        if want is not None and want["name"] not in kinds:
            continue
        for m in _tried(finder, probe):
            if want is None:
                if _binds(task, m):
                    telling = _telling_probe(probe, m)
                    if telling is not None:          # a scalar the match leaves out matters: find it there
                        again = _first_binding(task, telling)
                        if again is not None:
                            m = again
                    return Identified(m, f"case {probe.inputs.case.name}", time.monotonic() - t0)
                unbound = unbound or m
                continue
            if _agrees(m, want):
                m = Match(m.kind, m.binding, {**m.params, **want["params"]}, source="manifest")
                return Identified(m, f"case {probe.inputs.case.name}", time.monotonic() - t0)
    if want is None and unbound is None:
        strided = _strided(task, probe)
        if strided is not None:
            return Identified(strided, f"case {probe.inputs.case.name}", time.monotonic() - t0)
        telling = _telling_probe(probe, None)
        found = _first_binding(task, telling) if telling is not None else None
        if found is not None:
            return Identified(found, f"case {probe.inputs.case.name}, its neutral scalars at {TELLING:.3f}",
                              time.monotonic() - t0)
    if unbound is not None:
        return Identified(unbound, f"case {probe.inputs.case.name}", time.monotonic() - t0)
    if want is not None:
        raise KindMismatch(f"the manifest states kind {want['name']}"
                           + (f" with binding {want['binding']}" if want["binding"] else "")
                           + (f" and params {want['params']}" if want["params"] else "")
                           + f", but the reference does not compute that on case {probe.inputs.case.name}")
    return Identified(None, f"no kind's hypothesis reproduces the reference's outputs on case "
                            f"{probe.inputs.case.name}", time.monotonic() - t0)
