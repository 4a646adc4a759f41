"""The kind of operation a task is, read from its reference: which kind, which kernel parameter
plays which part (the binding), and the kind's parameters (epsilon, function, edge mode ...).

:func:`identify` runs the task's reference on its smallest case (in the reference process:
:mod:`kernel_forge.kinds.probe`) and tests one hypothesis after another, in :data:`FINDERS` order,
with NumPy on the probe's values: the first that reproduces every output, and holds again on a
second case of other sizes, is the task's kind -- the first that can also be bound, when one that
leaves a size unbound comes before it.  A
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
    "row_norm": ("layer, RMS or L2 norm of each row (or of x + a residual, the sum kept: fused_add_rms_norm; "
                 "+ a bias of one value a column: BERT's post-LN), "
                 "affine or not, with mean / rstd / variance outputs"),
    "row_softmax": ("softmax or log-softmax of each row, or of scale * the row (attention's scores), plus a mask "
                    "(added, a keep-mask, or flags giving -inf); the gradient through either, from its output and "
                    "the output's gradient"),
    "reduction": "sum / max / min / mean of all values, or the sum of x * w (a dot product)",
    "row_reduction": ("sum / max / min / mean of each row, or of each row times w (a matrix-vector product); each "
                      "row's argmax (with its value); per-row int8 quantization with the row's scale"),
    "column_reduction": "sum / max / min / mean of each column (a bias gradient)",
    "scan": ("inclusive or exclusive prefix sum (of the whole array or of each row, or from the end), with the "
             "total or each tile's total where an output holds it"),
    "transpose": ("a matrix with its axes swapped, or two axes of an N-D array (a batched transpose, a 0213 permute), "
                  "a bias added as values move"),
    "gather": ("rows of a table picked by integer indices (an embedding lookup; a vocabulary share, zeros outside "
               "it; rows scaled), or written to the rows they name (a scatter)"),
    "row_pick": "one element of each row picked by an integer index, then mapped: -log(probs[r, target[r]]) ...",
    "histogram": ("counts of integer values into bins, or of real values in equal bins of a range; weights summed "
                  "by bin"),
    "optimizer_step": "an optimizer's in-place update of every parameter: Adam / AdamW, SGD with momentum",
    "rope": ("rotary position embeddings: each row's pairs (interleaved or halves) rotated by its position's "
             "angle, from cos / sin tables or (cos, sin) pairs, rows [.., T, d] or [B, T, heads, d], in place or not"),
    "onehot_grad": ("cross-entropy's gradient through a softmax: (probs - onehot(target)) * the row's dloss (or a "
                    "scalar), added or written"),
    "elementwise": ("a map of every element, or a fused chain: act(x + bias) + residual, alpha * x + z, act(x) * z "
                    "(also on the two halves of each row: act_and_mul), act(a * x + b) with constants written in the "
                    "kernel, fitted (exp(x / 255)) ..."),
    "stencil2d": ("a K x K stencil or small convolution over a 2-D image (clamped or zero edges), a conv layer's "
                  "bias and activation after it"),
    "box_filter": "the mean or sum of the 2r+1 values around each pixel along a row or a column, r a parameter",
    "pool2d": ("max, mean or sum pooling of K x K windows with stride S and padding P over the planes of an image "
               "batch (a max pooling's indices too)"),
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


def _same(m: Match, other: Match, probe) -> bool:
    """Whether ``other`` (found on ``probe``, another case) is ``m``: the kind, every parameter that
    is not a fitted real number (the op, the norm, the function, the edge mode, a window's size, a
    stride ...), and each role bound to the same parameter, or to sizes of the same value on
    ``probe`` (``B*T*C`` and ``B*C`` where T is 1 there: that case cannot tell them apart, and the
    first one told)."""
    from kernel_forge.common import expressions
    from kernel_forge.common.errors import ExpressionError

    if m.kind != other.kind or set(m.binding) != set(other.binding):
        return False
    words = lambda p: {k: v for k, v in p.items() if isinstance(v, (str, bool, int))}  # noqa: E731
    if words(m.params) != words(other.params):
        return False
    for role, name in m.binding.items():
        them = other.binding[role]
        if name == them:
            continue
        if not (isinstance(name, str) and isinstance(them, str)):
            return False
        try:
            if expressions.evaluate(name, probe.scalars) != expressions.evaluate(them, probe.scalars):
                return False
        except (ExpressionError, TypeError, ValueError):     # a buffer's name, a name with no value
            return False
    return True


def _holds_on(task, m: Match, probe) -> bool:
    """Whether a finder of ``m``'s kind finds ``m`` again on ``probe`` (another case)."""
    for kinds, finder in FINDERS:
        if m.kind in kinds and any(_same(m, again, probe) for again in _tried(finder, probe)):
            return True
    return m.kind in STRIDED_KINDS and "ldx" in m.binding and _strided(task, probe) == m


class _Probes:
    """The probes of the cases identification may use (kinds.probe.pick_cases), each taken once, when
    first asked for: the first finds the kind, a second confirms it on other sizes."""

    def __init__(self, task, seed: int):
        from kernel_forge.kinds.probe import pick_cases

        self.task, self.seed, self.cases, self._got = task, seed, pick_cases(task), {}

    def get(self, i: int):
        from kernel_forge.common.errors import KForgeError
        from kernel_forge.kinds.probe import take

        if i >= len(self.cases):
            return None
        if i not in self._got:
            try:
                self._got[i] = take(self.task, self.seed, self.cases[i])
            except KForgeError:
                if i == 0:
                    raise           # the first case's reference failure is the task's error, as in validate
                self._got[i] = None
        return self._got[i]

    def other(self, primary: int):
        """The first later case's probe that could be taken (None: none).  Cases before ``primary``
        are not asked: no kind's hypothesis held on them."""
        for j in range(primary + 1, len(self.cases)):
            if (other := self.get(j)) is not None:
                return other
        return None


def _rebound(task, m: Match, other, primary) -> Match | None:
    """A match of ``m``'s kind found on ``other`` that binds and holds on ``primary`` as well: the
    binding both cases bear out (a size of 1 on the first case let a product leave that axis out)."""
    for kinds, finder in FINDERS:
        if m.kind not in kinds:
            continue
        for again in _tried(finder, other):
            if again.kind == m.kind and _binds(task, again) and _holds_on(task, again, primary):
                return again
    return None


def identify(task, seed: int = 1234) -> Identified:
    """The task's kind (see the module docstring).  Raises :class:`KindMismatch` when the manifest
    states a kind the reference does not bear out; a reference that fails raises as it does for
    ``validate`` (a ReferenceError_).

    A match found on the first case is confirmed on a second case of other sizes (two sizes that
    happen to be equal on one case hide which is which; a histogram's pitch equal to its width
    hides the pitch): one that does not hold there is passed over.  When the first case gives no
    match, the second is searched (a case too small for a kernel's window hides its edge mode)."""
    t0 = time.monotonic()
    want = stated(task)
    if getattr(task.reference, "kind", "python") != "python":
        return Identified(None, "the reference is a CUDA kernel, not a Python callable")
    if not _may_run_reference(task):
        return Identified(None, "the reference was written by a model and has not been accepted (kforge validate "
                                "--accept runs it first, in a sandbox); it is not run to read the kind")
    probes = _Probes(task, seed)
    probe = probes.get(0)
    if probe is None:
        return Identified(None, "no case is small enough to probe")
    if want is not None:
        return _stated(want, probe, t0)
    found = _search(task, probes, 0, t0)
    if found.match is None and (second := probes.get(1)) is not None:
        again = _search(task, probes, 1, t0)
        if again.match is not None:
            return again
        return Identified(None, f"no kind's hypothesis reproduces the reference's outputs on case "
                                f"{probe.inputs.case.name} or {second.inputs.case.name}", time.monotonic() - t0)
    return found


def _stated(want: dict, probe, t0: float) -> Identified:
    for kinds, finder in FINDERS:
        if want["name"] not in kinds:
            continue
        for m in _tried(finder, probe):
            if _agrees(m, want):
                m = Match(m.kind, m.binding, {**m.params, **want["params"]}, source="manifest")
                return Identified(m, f"case {probe.inputs.case.name}", time.monotonic() - t0)
    raise KindMismatch(f"the manifest states kind {want['name']}"
                       + (f" with binding {want['binding']}" if want["binding"] else "")
                       + (f" and params {want['params']}" if want["params"] else "")
                       + f", but the reference does not compute that on case {probe.inputs.case.name}")


def _search(task, probes: _Probes, primary: int, t0: float) -> Identified:
    """The first match on probe ``primary`` that binds and holds on another case; else the first that
    binds but did not hold (named so), else the first that leaves a size unbound."""
    probe = probes.get(primary)
    here = f"case {probe.inputs.case.name}"
    unbound = None              # the first match no pattern could be bound for: the answer if no later one binds
    unconfirmed = None          # the first that binds but does not hold on the other case

    def checked(m: Match, telling: bool = False) -> Identified | None:
        """``m`` if it holds on the other case (with its neutral scalars at the telling value where
        ``m`` was found so), or the binding both cases bear out; None (remembered) if neither."""
        nonlocal unconfirmed
        other = probes.other(primary)
        if other is None:
            return Identified(m, here, time.monotonic() - t0)
        if telling:
            other = _telling_probe(other, None) or other
        there = f"case {other.inputs.case.name}"
        if _holds_on(task, m, other):
            return Identified(m, f"{here}, confirmed on {there}", time.monotonic() - t0)
        again = _rebound(task, m, other, probe)
        if again is not None:
            return Identified(again, f"{there}, confirmed on {here}", time.monotonic() - t0)
        unconfirmed = unconfirmed or Identified(m, f"{here}; it does not hold on {there}", 0.0)
        return None

    for kinds, finder in FINDERS:
        for m in _tried(finder, probe):
            if _binds(task, m):
                telling = _telling_probe(probe, m)
                again = _first_binding(task, telling) if telling is not None else None
                if again is not None:            # a scalar the match leaves out matters: found there
                    m = again
                if (done := checked(m, telling=again is not None)) is not None:
                    return done
                continue
            unbound = unbound or m
    if unbound is None:
        strided = _strided(task, probe)
        if strided is not None and (done := checked(strided)) is not None:
            return done
        telling = _telling_probe(probe, None)
        found = _first_binding(task, telling) if telling is not None else None
        if found is not None:
            return Identified(found, f"{here}, its neutral scalars at {TELLING:.3f}", time.monotonic() - t0)
    if unconfirmed is not None:
        return Identified(unconfirmed.match, unconfirmed.why, time.monotonic() - t0)
    if unbound is not None:
        return Identified(unbound, here, time.monotonic() - t0)
    return Identified(None, f"no kind's hypothesis reproduces the reference's outputs on {here}", time.monotonic() - t0)
