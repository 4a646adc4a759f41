"""Which library kernels fit a task: the kind of operation it is, and the expert patterns of that kind.

The expert patterns are the library's kernels of role ``pattern`` (:mod:`kernel_forge.kernels.library`:
how an expert writes each kind of operation, each gated against the bundled task whose signature it
carries, holdout included: ``tests/kernels/test_patterns.py``).  :func:`classify` says which kind of
operation a task is -- the manifest's ``kind`` where it states one, else from its name,
description, signature, argument shapes and cost model -- so that

* retrieval (:mod:`kernel_forge.search.retrieval`) offers the pattern of the task's kind to a model
  when the archive holds no kernel of this task (:func:`for_task`), and
* the built-in tuner searches the pattern itself when its entry point has the task's exact
  signature and it declares tunables (:func:`tuner_templates`): the bundled manifests list
  theirs in ``templates``; a task that lists no templates gets them from here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kernel_forge.kernels.library import Kernel, patterns

#: the kinds of operation, with what they look like (the manifest's "kind" takes one of these)
KINDS = {
    "gemm": "a matrix product (C = A @ B and relatives): FLOPs grow with three sizes",
    "row_norm": "a per-row normalisation (layer norm, RMS norm): statistics of a row, then an elementwise map",
    "row_softmax": "a per-row softmax: a row maximum and sum of exponentials, then a scale",
    "transpose": "a permutation of a matrix's axes: a pure copy with a strided side",
    "histogram": "counts of values into bins (scattered integer atomics)",
    "elementwise": "the same independent map on every element (activation functions, axpy, adds)",
    "reduction": "many values into one (or a few): sums, norms, dot products",
    "row_reduction": "a sum / max / mean of each row",
    "column_reduction": "a sum / max / mean of each column (a bias gradient)",
    "scan": "a prefix sum (inclusive or exclusive)",
    "gather": "rows of a table picked by integer indices (an embedding lookup)",
    "row_pick": "one element of each row picked by an integer index, then mapped (cross-entropy's -log(probs[r, target[r]]))",
    "optimizer_step": "an optimizer's in-place update of every parameter (Adam / AdamW, SGD with momentum)",
    "stencil2d": "a K x K stencil or small convolution over a 2-D image",
    "box_filter": "the mean or sum of the 2r+1 values around each pixel along a row or a column",
    "pool2d": "max / mean / sum pooling of S x S windows with stride S",
    "resample": "nearest-neighbour upsampling by an integer factor (each value copied into an S x S block)",
    "stencil1d": "a 1-D convolution or stencil along a signal or each row (a mask of k taps)",
    "onehot_grad": "cross-entropy's gradient through a softmax: each row of probabilities less its target's one-hot, scaled",
    "rope": "rotary position embeddings: pairs of each row rotated by their position's angle (cos / sin tables)",
    "other": "none of the kinds above",
}

#: keywords that name a kind, checked in this order on the name and the description
_KEYWORDS = (
    ("gemm", r"\b(matmul|gemm|sgemm|dgemm|hgemm|mat_?mul|matrix[ -](product|multiplication|multiply))\b|\bA\s*@\s*B\b"),
    ("row_softmax", r"softmax"),
    ("row_norm", r"layer[ _-]?norm|rms[ _-]?norm|\bnormali[sz]ation\b"),
    ("transpose", r"transpos"),
    ("rope", r"\brope\b|rotary"),
    ("pool2d", r"(max|avg|average|mean)[ _-]?pool|\bpool(ing|2d)\b"),
    ("resample", r"upsampl|\bnearest\b|interpolat"),
    ("histogram", r"histogram|bincount|\bbins?\b"),
    ("reduction", r"\b(reduce|reduction|sum of|dot product|argmax|argmin)\b|^reduce_|_sum$"),
    ("elementwise", r"element[ -]?wise|\b(gelu|relu|silu|sigmoid|tanh|axpy|saxpy|daxpy|vector[ _]add|scale)\b"),
)


def of_kind(kind: str) -> list[Kernel]:
    """The expert patterns of ``kind``, in the library's order."""
    return [p for p in patterns() if p.kind == kind]


@dataclass(frozen=True)
class Kind:
    kind: str          #: one of KINDS
    source: str        #: "manifest" | "name" | "structure" | "none"
    why: str           #: one phrase


def _shape(arg) -> tuple:
    return tuple(str(s).replace(" ", "") for s in (arg.shape or ()))


def _structure(task) -> Kind | None:
    bufs = [a for a in task.args if a.is_buffer]
    outs = [a for a in bufs if a.output]
    ins = [a for a in bufs if not a.output]
    if not outs:
        return None
    flops = str(task.flops or "").replace(" ", "")
    size_vars = {str(a.value) for a in task.args if not a.is_buffer and isinstance(a.value, str)}
    # a product of three size variables in the FLOPs, 2-D operands sharing one of them: a matrix product
    prod = re.findall(r"[A-Za-z_]\w*", flops)
    mult = [v for v in dict.fromkeys(prod) if v in size_vars]
    if len(mult) >= 3 and len(outs) == 1 and len(_shape(outs[0])) == 2 and sum(len(_shape(a)) == 2 for a in ins) >= 2:
        return Kind("gemm", "structure", f"FLOPs {task.flops} grow with three sizes over 2-D operands")
    o = outs[0]
    if len(outs) == 1 and all(len(_shape(a)) <= 1 for a in outs) and _shape(o) in (("1",), ()):
        return Kind("reduction", "structure", f"a single output element ({o.name})")
    if len(outs) == 1 and ins and len(_shape(o)) == 2 and any(_shape(a) == _shape(o)[::-1] != _shape(o) for a in ins):
        return Kind("transpose", "structure", f"{o.name} has the shape of an input with its axes swapped")
    if (len(outs) == 1 and ins and o.param.dtype.name.startswith(("uint", "int")) and len(_shape(o)) == 1
            and all(not a.param.dtype.is_float for a in ins) and all(_shape(a) != _shape(o) for a in ins)):
        return Kind("histogram", "structure", f"integer counts ({o.name}) of a differently sized integer input")
    if ins and all(_shape(a) == _shape(o) for a in outs) and any(_shape(a) == _shape(o) for a in ins):
        if len(_shape(o)) == 1:
            return Kind("elementwise", "structure", "outputs shaped like the inputs, one axis")
    return None


def classify(task) -> Kind:
    """The kind of operation ``task`` is (see the module docstring)."""
    stated = (getattr(task, "raw", None) or {}).get("kind")
    if isinstance(stated, dict):
        stated = stated.get("name")
    if stated:
        return Kind(stated, "manifest", f'the manifest says "kind": "{stated}"')
    name = (task.name or "").replace("_", " ") + " " + (task.name or "")
    for kind, rx in _KEYWORDS:
        if re.search(rx, name, re.I):
            return Kind(kind, "name", f"its name ({task.name})")
    desc = task.description or ""
    for kind, rx in _KEYWORDS:
        if re.search(rx, desc, re.I):
            m = re.search(rx, desc, re.I)
            return Kind(kind, "name", f"its description ({m.group(0).strip()!r})")
    found = _structure(task)
    return found if found is not None else Kind("other", "none", "nothing in the manifest names a kind")


def signature_matches(pattern: Kernel, task) -> bool:
    """Whether the pattern defines the task's entry point with exactly the task's parameters."""
    from kernel_forge.common.errors import KForgeError
    from kernel_forge.model.signature import check_matches, find_entry

    try:
        found = find_entry(pattern.source(), task.signature.name)
        if found is None:
            return False
        sig, _ = found
        check_matches(task.signature, sig)
    except (KForgeError, OSError, ValueError):
        return False
    return all((w.name, w.dtype, w.pointer, w.const) == (g.name, g.dtype, g.pointer, g.const)
               for w, g in zip(task.signature.params, sig.params)) and len(task.signature.params) == len(sig.params)


def for_task(task) -> list[Kernel]:
    """The patterns of the task's kind, those that carry its exact signature first."""
    kind = classify(task).kind
    found = of_kind(kind)
    return sorted(found, key=lambda p: (not signature_matches(p, task), patterns().index(p)))


def tuner_templates(task) -> list[Path]:
    """Patterns of the task's kind that the tuner can search as they are: the task's exact
    signature and at least one ``// kforge: tune`` line."""
    from kernel_forge.model.candidate import parse_candidate
    from kernel_forge.common.errors import KForgeError

    out = []
    for p in for_task(task):
        if not signature_matches(p, task):
            continue
        try:
            if parse_candidate(p.source(), name=p.file).tunables:
                out.append(p.path)
        except KForgeError:
            continue
    return out
