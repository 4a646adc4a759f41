"""Two independent witnesses of a generated task must agree: the NumPy reference and a naive CUDA
kernel, written by separate model calls that never saw each other.

:func:`run_crosscheck` draws fresh random inputs (a seed chosen here, recorded) for every case of
the task and for a few extra random shapes (:func:`extra_cases`: all sizes 1, and odd primes up
to twice the largest non-performance size), runs both witnesses on them and compares the outputs
under the task's tolerance.  A :class:`WitnessRunner` runs the CUDA witness:

* :class:`GateWitness` -- the real harness (``kernel_forge.gate.gate``): the witness is a candidate
  against the reference, on a copy of the task whose every case is a correctness case, with the
  gate's poisoned outputs, unwritten-element check, second input draw and repeat launch.  It
  needs a GPU; without one the cross-check is ``pending``.
* :class:`OutputsWitness` -- any function that runs the kernel and returns its outputs; they are
  compared here by :func:`check_outputs` (a pure function, the same rule as the gate's:
  :func:`kernel_forge.model.tolerance.compare`).  The tests build the witness for the host with a C++
  compiler this way.

Every disagreement names the case, its sizes and seed, the output and the first elements that
differ, with both values: ``y[1036]: reference 0, CUDA witness 0.731``.
"""
from __future__ import annotations

import json
import math
import os
import random
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Protocol

import numpy as np

from kernel_forge.common import writes
from kernel_forge.model.candidate import Candidate, load_candidate
from kernel_forge.common.errors import EnvironmentProblem, KForgeError, ManifestError, ReferenceError_
from kernel_forge.model.task import Case, Task, _check_expressions

#: extra random shapes drawn beside the task's own cases
EXTRA_SHAPES = 4
#: most buffer elements (all buffers together) of an extra random shape
EXTRA_MAX_ELEMENTS = 1 << 22
#: elements that differ, shown per output
SHOWN = 4

AGREED, DISAGREED, FAILED, PENDING = "agreed", "disagreed", "failed", "pending"


@dataclass
class CaseCheck:
    """The two witnesses on one case (one input draw, or the gate's two)."""

    case: str
    vars: dict
    seeds: list[int]
    status: str                      #: agreed | disagreed | witness_failed | reference_failed | skipped
    detail: str = ""
    extra: bool = False              #: an extra random shape, not one of the task's cases
    outputs: list[dict] = field(default_factory=list)   #: per output: name, ok, total, mismatches, unwritten, max_abs, first

    def lines(self) -> list[str]:
        sizes = ", ".join(f"{k}={v}" for k, v in self.vars.items())
        head = (f"{'random shape' if self.extra else 'case'} {self.case} ({sizes}), "
                f"seed{'s' if len(self.seeds) > 1 else ''} {', '.join(map(str, self.seeds))}: ")
        if self.status == AGREED:
            return [head + "agree"]
        out = [head + ("the witnesses disagree" if self.status == DISAGREED else (self.detail or self.status))]
        for o in self.outputs:
            if o.get("ok", True):
                continue
            out.append(f"  {o['name']}: {o.get('mismatches', 0)} of {o.get('total', 0)} elements differ"
                       + (f" ({o['unwritten']} never written by the CUDA witness)" if o.get("unwritten") else "")
                       + (f", max abs difference {o['max_abs']:.4g}" if isinstance(o.get("max_abs"), (int, float)) else ""))
            for f in o.get("first", [])[:SHOWN]:
                idx = ", ".join(str(i) for i in f["index"])
                out.append(f"    {o['name']}[{idx}]: reference {f['reference']!r}, CUDA witness {f['witness']!r}")
        return out


@dataclass
class CrossCheck:
    """The outcome over every case and extra shape."""

    status: str                      #: agreed | disagreed | failed | pending
    detail: str
    runner: str = ""
    seed: int | None = None
    cases: list[CaseCheck] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"cross-check ({self.runner or 'no runner'}): {self.status}: {self.detail}"]
        for c in self.cases:
            if c.status != AGREED:
                out += ["  " + line for line in c.lines()]
        return out

    def disagreements(self, limit: int = 3) -> list[dict]:
        """The first cases that did not agree, each with its first differing elements (for the
        manifest's ``generated`` block, so a refusal can show both values without a GPU)."""
        out = []
        for c in self.cases:
            if c.status in (AGREED, "skipped"):
                continue
            out.append({"case": c.case, "vars": c.vars, "seeds": c.seeds, "status": c.status, "detail": c.detail,
                        "outputs": [{**o, "first": o.get("first", [])[:SHOWN]} for o in c.outputs if not o.get("ok", True)]})
            if len(out) >= limit:
                break
        return out

    def block(self) -> dict:
        """What the manifest's ``generated.crosscheck`` records."""
        return {"status": self.status, "detail": self.detail, "cases": [c.case for c in self.cases],
                "seed": self.seed, "runner": self.runner, "disagreements": self.disagreements()}

    def to_json(self) -> dict:
        return {"status": self.status, "detail": self.detail, "runner": self.runner, "seed": self.seed,
                "cases": [asdict(c) for c in self.cases]}


def block_lines(block: dict) -> list[str]:
    """A recorded ``generated.crosscheck`` block as the lines :meth:`CrossCheck.lines` prints."""
    out = [f"cross-check ({block.get('runner') or 'no runner'}): {block.get('status')}: {block.get('detail', '')}"]
    for d in block.get("disagreements") or []:
        c = CaseCheck(case=d["case"], vars=d.get("vars", {}), seeds=d.get("seeds", []), status=d.get("status", ""),
                      detail=d.get("detail", ""), outputs=d.get("outputs", []), extra=d["case"].startswith("random-"))
        out += ["  " + line for line in c.lines()]
    return out


# ------------------------------------------------------------------------------ the comparison

def _entries(first: list[dict]) -> list[dict]:
    """verify's first mismatches ({index, actual, expected}) as {index, reference, witness}."""
    return [{"index": list(f["index"]), "reference": f["expected"], "witness": f["actual"]} for f in first]


def _output(check) -> dict:
    d = check.to_json()
    return {"name": d["name"], "ok": d["ok"], "total": d["total"], "mismatches": d["mismatches"],
            "unwritten": d["unwritten"], "max_abs": d["max_abs"], "first": _entries(d["first"]),
            "shape_error": d["shape_error"]}


def check_outputs(task: Task, case: Case, seeds: list[int], expected: dict[str, np.ndarray],
                  got: dict[str, np.ndarray], *, extra: bool = False) -> CaseCheck:
    """Compare the CUDA witness's outputs (``got``, storage values as the kernel wrote them, pure
    outputs poisoned before the launch) with the reference's (``expected``) under the task's
    tolerance: the rule the gate applies (:func:`kernel_forge.model.tolerance.compare`).  Pure."""
    from kernel_forge.model.tolerance import compare

    outputs = []
    for arg in task.outputs:
        if arg.name not in got:
            outputs.append({"name": arg.name, "ok": False, "total": 0, "mismatches": 0, "unwritten": 0,
                            "max_abs": None, "first": [], "shape_error": "the CUDA witness returned no such output"})
            continue
        with np.errstate(all="ignore"):
            check = compare(arg.name, got[arg.name], expected[arg.name], arg.param.dtype, task.tolerance_for(arg),
                            max_report=SHOWN)
        outputs.append(_output(check))
    bad = [o for o in outputs if not o["ok"]]
    if not bad:
        return CaseCheck(case.name, dict(case.vars), list(seeds), AGREED, extra=extra, outputs=outputs)
    detail = "; ".join(o["shape_error"] or f"{o['name']}: {o['mismatches']} of {o['total']} elements differ"
                       for o in bad)
    return CaseCheck(case.name, dict(case.vars), list(seeds), DISAGREED, detail=detail, extra=extra, outputs=outputs)


# ------------------------------------------------------------------------------ extra shapes

def _primes_up_to(n: int) -> np.ndarray:
    sieve = np.ones(n + 1, dtype=bool)
    sieve[:2] = False
    for i in range(2, int(n ** 0.5) + 1):
        if sieve[i]:
            sieve[i * i::i] = False
    return np.flatnonzero(sieve)


def _size_vars(task: Task) -> dict[str, int]:
    """The integer case variables and the largest value each takes on a non-performance case
    (on any case where only performance cases set it)."""
    names = {k for c in task.cases for k, v in c.vars.items() if isinstance(v, int) and not isinstance(v, bool)}
    out = {}
    for k in sorted(names):
        vals = [c.vars[k] for c in task.cases if isinstance(c.vars.get(k), int) and c.role != "performance"]
        vals = vals or [c.vars[k] for c in task.cases if isinstance(c.vars.get(k), int)]
        if vals and all(v >= 1 for v in vals):
            out[k] = max(vals)
    return out


def _valid(task: Task, case: Case) -> bool:
    """Every expression of the task evaluates to a sensible value for ``case`` and it is small."""
    try:
        _check_expressions(replace(task, cases=(case,)), str(task.path))
        elements = sum(math.prod(task.shape(a, case)) for a in task.args if a.is_buffer)
    except (ManifestError, KForgeError, OverflowError, ValueError):
        return False
    return elements <= EXTRA_MAX_ELEMENTS


def extra_cases(task: Task, k: int = EXTRA_SHAPES, rng: random.Random | None = None) -> list[Case]:
    """Up to ``k`` random shapes beyond the task's cases, named ``random-1`` ...: the first sets
    every size variable to 1, the others draw odd primes up to twice each variable's largest
    non-performance value (halved until every shape, launch and size check of the task holds and
    the case has at most :data:`EXTRA_MAX_ELEMENTS` elements).  Other variables keep the first
    case's values.  A shape that never becomes valid is left out."""
    rng = rng or random.Random()
    sizes = _size_vars(task)
    if k <= 0 or not sizes or not task.cases:
        return []
    base = dict(task.cases[0].vars)
    out: list[Case] = []
    taken = {tuple(sorted(c.vars.items())) for c in task.cases}
    primes = {name: _primes_up_to(max(3, 2 * hi)) for name, hi in sizes.items()}
    for i in range(k + 2):              # the all-ones shape may already be a case: draw another instead
        if len(out) == k:
            break
        for attempt in range(12):
            v = dict(base)
            for name, hi in sizes.items():
                if i == 0:
                    v[name] = 1
                else:
                    cap = max(2, (2 * hi) >> attempt)
                    count = int(np.searchsorted(primes[name], cap, side="right"))
                    # log-uniform over the primes up to the cap: small and large sizes alike
                    v[name] = int(primes[name][min(count - 1, int(count ** rng.random()) - 1)]) if count else 1
            case = Case(f"random-{len(out) + 1}", "correctness", v, len(task.cases) + len(out))
            if tuple(sorted(v.items())) not in taken and _valid(task, case):
                taken.add(tuple(sorted(v.items())))
                out.append(case)
                break
            if i == 0:
                break           # all ones is one shape: no retry
    return out


# ------------------------------------------------------------------------------ runners

class WitnessRunner(Protocol):
    """Runs the CUDA witness on ``cases`` against the task's reference (one seed for all)."""

    name: str

    def check(self, task: Task, witness: Candidate, cases: list[Case], seed: int) -> list[CaseCheck]: ...


class WitnessPending(EnvironmentProblem):
    """The CUDA witness cannot run here (no GPU): the cross-check is pending."""


class OutputsWitness:
    """A runner from a function ``run_kernel(task, witness, case, inputs) -> {output: storage array}``
    that runs the CUDA witness somewhere (the tests: built for the host); outputs are compared
    here with :func:`check_outputs`."""

    def __init__(self, run_kernel: Callable, name: str = "outputs"):
        self.run_kernel = run_kernel
        self.name = name

    def check(self, task: Task, witness: Candidate, cases: list[Case], seed: int) -> list[CaseCheck]:
        from kernel_forge.model.inputs import generate
        from kernel_forge.model.reference_process import run_python_reference

        out: list[CaseCheck] = []
        broken: CaseCheck | None = None          # the witness could not run at all: say it once
        for case in cases:
            extra = case.name.startswith("random-")
            if broken is not None:
                out.append(CaseCheck(case.name, dict(case.vars), [seed], "witness_failed",
                                     detail=f"not run: the CUDA witness could not run on {broken.case}", extra=extra))
                continue
            inputs = generate(task, case, seed)
            try:
                expected = run_python_reference(task, inputs)
            except ReferenceError_ as exc:
                status = "skipped" if extra else "reference_failed"
                out.append(CaseCheck(case.name, dict(case.vars), [seed], status, detail=exc.message, extra=extra))
                continue
            try:
                got = self.run_kernel(task, witness, case, inputs)
            except KForgeError as exc:
                broken = CaseCheck(case.name, dict(case.vars), [seed], "witness_failed",
                                   detail=f"the CUDA witness could not run: {exc.message}", extra=extra)
                out.append(broken)
                continue
            out.append(check_outputs(task, case, [seed], expected, got, extra=extra))
        return out


def derived_manifest(task: Task, cases: list[Case], folder: Path) -> Path:
    """A copy of ``task``'s manifest in ``folder`` whose cases are ``cases``, every one a correctness
    case (plus one performance case that the cross-check never runs, as a manifest needs one);
    paths point back at the task's files; the ``generated`` block is kept, so that the reference
    runs sandboxed as the task's does."""
    data = json.loads(json.dumps(task.raw))
    base = task.path.parent

    def rel(p: str) -> str:
        target = (base / p).resolve()
        try:
            return os.path.relpath(target, folder)
        except ValueError:          # another drive (Windows)
            return str(target)

    ref = data["reference"]
    if "python" in ref:
        file, _, fn = ref["python"].rpartition(":")
        data["reference"] = {"python": f"{rel(file)}:{fn}"}
    else:
        data["reference"] = {"cuda": rel(ref["cuda"])}
    for k in ("baselines", "initial", "templates", "$schema"):
        data.pop(k, None)           # "generated" stays: a model-written reference runs in the sandbox there too
    for spec in data["args"].values():
        if isinstance(spec, dict) and isinstance(spec.get("init"), dict) and "path" in spec["init"]:
            spec["init"]["path"] = rel(spec["init"]["path"])
    data.pop("defaults", None)
    data["cases"] = [{"name": c.name, "role": "correctness", "vars": c.vars} for c in cases]
    data["cases"].append({"name": "not-run", "role": "performance", "vars": cases[0].vars})
    path = folder / f"{task.name}.json"
    writes.write_text(path, json.dumps(data, indent=2))
    return path


class GateWitness:
    """The real harness: the witness is gated as a candidate against the reference (every case a
    correctness case; outputs poisoned; a second draw with a fresh seed; a repeat launch)."""

    name = "gate"

    def __init__(self, options=None, *, gate_factory: Callable | None = None, probe: Callable | None = None):
        self.options = options
        self.gate_factory = gate_factory      #: (task, GateOptions) -> a started gate (tests: a scripted one)
        self.probe = probe                    #: raises EnvironmentProblem without a GPU (default: the driver's probe)

    @staticmethod
    def _real_gate(task: Task, options):
        from kernel_forge.gate.gate import open_gate

        return open_gate(task, options)

    def check(self, task: Task, witness: Candidate, cases: list[Case], seed: int) -> list[CaseCheck]:
        from kernel_forge.config.gate_settings import GateOptions
        from kernel_forge.gate.gate import probe_gpu
        from kernel_forge.model.task import load_task

        try:
            (self.probe or probe_gpu)()
        except EnvironmentProblem as exc:
            raise WitnessPending(f"the CUDA witness runs on a GPU and there is none here ({exc.message.splitlines()[0]})",
                                 hint="run kforge validate --accept MANIFEST on a machine with an NVIDIA GPU") from None
        opts = self.options or GateOptions(seed=seed, check_after_timing=False, plausibility=False)
        with tempfile.TemporaryDirectory(prefix="kforge-crosscheck-") as tmp:
            derived = load_task(derived_manifest(task, cases, Path(tmp)))
            gate = (self.gate_factory or self._real_gate)(derived, opts)
            try:
                ev = gate.evaluate(witness, roles=("correctness",))
            finally:
                gate.close()
        extra = {c.name for c in cases if c.name.startswith("random-")}
        if not ev.cases:
            detail = f"the CUDA witness fails before any case runs: {ev.reason}: {ev.message}"
            return [CaseCheck(c.name, dict(c.vars), [seed], "witness_failed", detail=detail, extra=c.name in extra)
                    for c in cases]
        out = []
        for c in ev.cases:
            vars_ = dict(derived.case(c.name).vars)
            outputs = [{"name": o["name"], "ok": o.get("ok", True), "total": o.get("total", 0),
                        "mismatches": o.get("mismatches", 0), "unwritten": o.get("unwritten", 0),
                        "max_abs": o.get("max_abs"), "first": _entries(o.get("first") or []),
                        "shape_error": o.get("shape_error")} for o in c.outputs]
            if c.passed:
                status = AGREED
            elif c.reason in ("mismatch", "unwritten"):
                status = DISAGREED
            elif c.reason == "reference_error":
                status = "skipped" if c.name in extra else "reference_failed"
            else:
                status = "witness_failed"
            out.append(CaseCheck(c.name, vars_, list(c.seeds) or [seed], status,
                                 detail="" if c.passed else f"{c.reason}: {c.message}", extra=c.name in extra,
                                 outputs=outputs))
        return out


# ------------------------------------------------------------------------------ the check

def run_crosscheck(task: Task, witness: Path | Candidate, runner: WitnessRunner, *, extra: int = EXTRA_SHAPES,
                   seed: int | None = None, progress=lambda msg: None) -> CrossCheck:
    """Both witnesses on every case of ``task`` and ``extra`` random shapes, with fresh inputs
    (``seed``: chosen here unless given).  ``pending`` when the runner cannot run here."""
    rng = random.SystemRandom()
    seed = rng.randrange(1, 2**31) if seed is None else seed
    cases = list(task.cases) + extra_cases(task, extra, random.Random(seed))
    cand = witness if isinstance(witness, Candidate) else load_candidate(witness)
    progress(f"[kforge] cross-check: the reference and the CUDA witness {Path(cand.name).name} on {len(task.cases)} case(s) "
             f"and {len(cases) - len(task.cases)} random shape(s), seed {seed} ({runner.name})")
    try:
        checks = runner.check(task, cand, cases, seed)
    except WitnessPending as exc:
        return CrossCheck(PENDING, exc.message, runner=runner.name, seed=seed)
    bad = [c for c in checks if c.status not in (AGREED, "skipped")]
    agreed = sum(c.status == AGREED for c in checks)
    skipped = [c.case for c in checks if c.status == "skipped"]
    note = f"; the reference refused {', '.join(skipped)}" if skipped else ""
    if not bad:
        return CrossCheck(AGREED, f"the reference and the CUDA witness agree on all {agreed} shapes "
                          f"({len(task.cases)} cases, {agreed - len(task.cases)} random){note}",
                          runner=runner.name, seed=seed, cases=checks)
    failed = [c for c in bad if c.status in ("witness_failed", "reference_failed")]
    status = FAILED if failed and len(failed) == len(bad) else DISAGREED
    names = ", ".join(c.case for c in bad)
    what = ("one witness could not produce outputs on" if status == FAILED else "the reference and the CUDA "
            "witness disagree on")
    return CrossCheck(status, f"{what} {len(bad)} of {len(checks)} shapes ({names}){note}", runner=runner.name,
                      seed=seed, cases=checks)
