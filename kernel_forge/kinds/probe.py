"""What the reference does on one small case: its inputs and outputs as float64 values.

:func:`take` draws the inputs of the task's smallest case (one where the integer scalars differ
from each other when there is one, so that rows and columns cannot be mistaken for each other),
runs the reference in the reference process (the user's code never runs in kforge's own process)
and keeps everything as flat float64 arrays.  :meth:`Probe.rerun` runs the reference again on
changed inputs (the row norms use it to read the epsilon on rows of tiny variance) or changed
scalars (the optimizer steps use it to tell which scalar is the learning rate, which beta1 ...).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kernel_forge.common.dtypes import from_float
from kernel_forge.model.inputs import CaseInputs, generate, host_values

#: a case with more buffer elements than this is not probed (identification stays fast)
MAX_ELEMENTS = 1 << 22


@dataclass
class Probe:
    task: object
    inputs: CaseInputs
    values: dict[str, np.ndarray]            #: every buffer's initial values, flat float64 (outputs: NaN)
    scalars: dict[str, float]                #: every scalar's value
    outputs: dict[str, np.ndarray]           #: the reference's outputs, flat float64
    sizes: dict[str, int] = field(default_factory=dict)

    def arg(self, name: str):
        return self.task.arg(name)

    # -- who is who --------------------------------------------------------------------------
    def buffers(self, *, output: bool | None = None, floating: bool | None = None) -> list[str]:
        out = []
        for a in self.task.args:
            if not a.is_buffer:
                continue
            if output is not None and bool(a.output) != output:
                continue
            if floating is not None and a.param.dtype.is_float != floating:
                continue
            out.append(a.name)
        return out

    def inputs_of(self, size: int | None = None, *, floating: bool | None = True) -> list[str]:
        """Buffers holding input values (pure inputs, and outputs that start from values)."""
        return [a.name for a in self.task.args if a.is_buffer and (not a.output or a.init is not None)
                and (size is None or self.sizes[a.name] == size)
                and (floating is None or a.param.dtype.is_float == floating)]

    def int_scalars(self) -> dict[str, int]:
        return {a.name: int(self.scalars[a.name]) for a in self.task.args
                if not a.is_buffer and a.param.dtype.kind in ("int", "uint")}

    def float_scalars(self) -> dict[str, float]:
        return {a.name: float(self.scalars[a.name]) for a in self.task.args
                if not a.is_buffer and a.param.dtype.is_float}

    def params_of(self, value: int) -> list[str]:
        """Integer scalars equal to ``value``, in signature order."""
        return [n for n, v in self.int_scalars().items() if v == value]

    def with_scalars(self, scalars: dict[str, float]) -> "Probe":
        """This probe with ``scalars`` in place of the case's, its outputs the reference's on them."""
        import dataclasses

        out = self.rerun({}, scalars=scalars)
        inputs = dataclasses.replace(self.inputs, scalars={**self.inputs.scalars, **scalars})
        return dataclasses.replace(self, inputs=inputs, scalars={**self.scalars, **scalars}, outputs=out)

    def stored(self, name: str, vals) -> np.ndarray:
        """``vals`` as buffer ``name`` stores them (rounded to its type: what a rerun's reference sees),
        flat float64."""
        from kernel_forge.common.dtypes import to_float

        dt = self.arg(name).param.dtype
        arr = np.asarray(vals, dtype=np.float64)
        if dt.name == "bfloat16":
            return np.asarray(to_float(from_float(arr.astype(np.float32), dt), dt), dtype=np.float64).reshape(-1)
        return arr.astype(dt.numpy).astype(np.float64).reshape(-1)

    def rerun(self, changes: dict[str, np.ndarray], scalars: dict[str, float] | None = None) -> dict[str, np.ndarray]:
        """The reference's outputs on these inputs with ``changes`` (name -> values) applied, and
        the scalars ``scalars`` (name -> value) in place of the case's (the optimizer steps tell
        their scalars' roles apart so)."""
        from kernel_forge.model.reference_process import run_reference

        bufs = dict(self.inputs.buffers)
        for name, vals in changes.items():
            dt = self.arg(name).param.dtype
            arr = np.asarray(vals, dtype=np.float64).reshape(bufs[name].shape)
            bufs[name] = from_float(arr.astype(np.float32), dt) if dt.name == "bfloat16" else arr.astype(dt.numpy)
        new = CaseInputs(case=self.inputs.case, seed=self.inputs.seed, buffers=bufs,
                         scalars={**self.inputs.scalars, **(scalars or {})})
        out = run_reference(self.task, new.case.name, new.seed, new)
        return {k: np.asarray(v, dtype=np.float64).reshape(-1) for k, v in out.items()}


@dataclass
class StridedProbe(Probe):
    """A probe that sees one input ``x`` as the first ``cols`` values of each of its rows of ``ld``
    (a BLAS ``ld``, a vocabulary padded to ``Vp``): its values and size are that view's, and a rerun
    writes changed values back into the whole buffer before the reference runs."""

    x: str = ""
    ld: int = 0
    cols: int = 0
    full: np.ndarray | None = None           #: x's values as the reference holds them (ld per row)

    def rerun(self, changes, scalars=None):
        if self.x in changes:
            whole = self.full.copy().reshape(-1, self.ld)
            whole[:, :self.cols] = np.asarray(changes[self.x], dtype=np.float64).reshape(-1, self.cols)
            changes = {**changes, self.x: whole.reshape(-1)}
        return super().rerun(changes, scalars)


def strided_views(probe: Probe):
    """(view, x, ld's parameter) for each floating-point input x declared ``[..., ld]`` whose last
    axis is a parameter's value with another integer parameter smaller than it (cols < ld): x read as
    its rows' first cols values.  The row kinds are tried on these views when nothing matched the
    task as it is."""
    ints = probe.int_scalars()
    for a in probe.task.args:
        if not a.is_buffer or a.output or len(a.shape) < 2 or not a.param.dtype.is_float:
            continue
        ld = int(probe.task.shape(a, probe.inputs.case)[-1])
        ld_names = [n for n, v in ints.items() if v == ld]
        if not ld_names:
            continue
        full = probe.values[a.name]
        for cols in sorted({v for v in ints.values() if 1 < v < ld}, reverse=True):
            view = full.reshape(-1, ld)[:, :cols].reshape(-1)
            yield StridedProbe(task=probe.task, inputs=probe.inputs, values={**probe.values, a.name: view},
                               scalars=probe.scalars, outputs=probe.outputs,
                               sizes={**probe.sizes, a.name: view.size},
                               x=a.name, ld=ld, cols=cols, full=full), a.name, ld_names[0]


def pick_case(task):
    """The case to probe: the smallest of those whose integer scalars repeat each other's values the
    least, then are 0 or 1 the least (a size of 1 hides which axis is which)."""
    cases = pick_cases(task)
    return cases[0] if cases else None


def pick_cases(task) -> list:
    """The cases identification may probe, the first :func:`pick_case`'s and then in the same order
    of preference: every case small enough whose variables differ from those of the cases before it
    variable (another case of the same sizes tells nothing new)."""
    def elements(case):
        try:
            return sum(int(np.prod(task.shape(a, case))) for a in task.args if a.is_buffer)
        except Exception:  # noqa: BLE001 - a case whose shapes do not evaluate is not probed
            return None

    def ints(case):
        vals = []
        for a in task.args:
            if not a.is_buffer and a.param.dtype.kind in ("int", "uint"):
                try:
                    vals.append(int(task.scalar(a, case)))
                except Exception:  # noqa: BLE001
                    pass
        return vals

    sized = [(c, elements(c)) for c in task.cases]
    sized = [(c, n) for c, n in sized if n is not None and n <= MAX_ELEMENTS]
    def ambiguity(case):        # how many integer scalars repeat another's value, how many are 0 or 1
        vals = ints(case)
        return len(vals) - len(set(vals)), sum(v <= 1 for v in vals)

    order = sorted(sized, key=lambda cn: (*ambiguity(cn[0]), cn[1]))
    out, seen = [], []
    for c, _ in order:
        shape = sorted(c.vars.items())
        if shape not in seen:
            out.append(c)
            seen.append(shape)
    return out


def take(task, seed: int = 1234, case=None) -> Probe | None:
    """The probe of ``task`` on ``case`` (default: :func:`pick_case`'s; None when no case is small enough)."""
    from kernel_forge.model.reference_process import run_reference

    case = case if case is not None else pick_case(task)
    if case is None:
        return None
    inputs = generate(task, case, seed)
    out = run_reference(task, case.name, seed, inputs)
    values, sizes = {}, {}
    for a in task.args:
        if a.is_buffer:
            arr = inputs.buffers[a.name]
            sizes[a.name] = int(arr.size)
            if a.output and a.init is None:
                values[a.name] = np.full(arr.size, np.nan)
            else:
                values[a.name] = np.asarray(host_values(a, arr), dtype=np.float64).reshape(-1)
    outputs = {k: _as_stored(task, k, v) for k, v in out.items()}
    return Probe(task=task, inputs=inputs, values=values, scalars=dict(inputs.scalars), outputs=outputs, sizes=sizes)


def _as_stored(task, name: str, values) -> np.ndarray:
    """An output as the kernel stores it, flat float64: a bfloat16 output rounded to bf16, as the kernel's
    store rounds it (a reference that computes in float then differs from the stored value by one rounding,
    and one that also rounds a value inside, as the kernel does, by two: kinds.match.close allows both)."""
    from kernel_forge.common.dtypes import to_float

    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    dtype = task.arg(name).param.dtype
    if dtype.name != "bfloat16" or not np.all(np.isfinite(flat)):
        return flat
    return to_float(from_float(flat, dtype), dtype).astype(np.float64)
