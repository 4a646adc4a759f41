"""Load and run Python reference and baseline callables.

Convention: a callable takes every kernel parameter as a keyword argument, named as in the
signature (a name that is a Python keyword, like ``in``, gets a trailing underscore: ``in_``).
Buffers are arrays (NumPy for references, CuPy for baselines; bf16 buffers are given to
references as float32 values), scalars are Python numbers.  The callable writes its results into
the output buffers in place, like the kernel does, and returns nothing.

A Python reference runs in a child process with a time limit
(:mod:`kernel_forge.model.reference_process`); its expected values must be finite unless the manifest
says ``"nonfinite_outputs": true``.
"""
from __future__ import annotations

import hashlib
import keyword
import sys
import traceback
import types
from pathlib import Path

import numpy as np

from kernel_forge.common.dtypes import from_float
from kernel_forge.common.errors import ReferenceError_
from kernel_forge.model.inputs import CaseInputs, host_values
from kernel_forge.model.task import CallableRef, Task

#: loaded callables by (file, function, content hash): an edited file is loaded again (a
#: long-lived process, like ``kforge mcp``, must not keep running the old reference)
_loaded: dict[tuple[Path, str, str], object] = {}


def guarded_call(what: str, fn, *args, **kwargs):
    """Call manifest-supplied code (a reference, a baseline, their module's import) so that
    anything it does to end itself becomes a :class:`ReferenceError_` naming ``what``: an
    exception, ``sys.exit()``/``exit()``/``quit()`` (SystemExit), a generator's exit.  Ctrl-C
    (KeyboardInterrupt) still stops kforge.  A process-ending ``os._exit`` cannot be caught in
    the same process; nothing else escapes."""
    try:
        return fn(*args, **kwargs)
    except KeyboardInterrupt:
        raise
    except ReferenceError_:
        raise
    except SystemExit as exc:
        raise ReferenceError_(f"{what} called sys.exit({exc.code!r}); a reference must return, "
                              "writing its outputs in place") from None
    except NotImplementedError as exc:
        raise ReferenceError_(f"{what} is not implemented yet: {exc}") from None
    except BaseException as exc:  # noqa: BLE001 - the code is the user's, its failure is data here
        raise ReferenceError_(f"{what} failed: {type(exc).__name__}: {exc}{_where(exc)}") from None


def _where(exc: BaseException) -> str:
    """Where in the user's code an exception was raised: the deepest frame outside kernel_forge
    (and outside NumPy), as `` (at FILE:LINE in FUNCTION: CODE)``."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" (at {exc.filename}:{exc.lineno})"
    here = str(Path(__file__).resolve().parent)
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith(here) and "importlib" not in f.filename]
    user = [f for f in frames if "site-packages" not in f.filename] or frames
    if not user:
        return ""
    f = user[-1]
    return f" (at {f.filename}:{f.lineno} in {f.name}: {(f.line or '').strip()})"


def load_callable(ref: CallableRef):
    """The callable ``ref`` names, its module run from the file's current text (compiled here,
    so no stale bytecode is used and nothing is written beside the user's file)."""
    try:
        source = Path(ref.path).read_bytes()
    except OSError as exc:
        raise ReferenceError_(f"{ref.path}: cannot read it: {exc.strerror}") from None
    digest = hashlib.sha256(source).hexdigest()
    key = (ref.path, ref.function, digest)
    if key in _loaded:
        return _loaded[key]
    mod_name = f"kforge_ref_{abs(hash(str(ref.path))):x}_{digest[:12]}"
    module = types.ModuleType(mod_name)
    module.__file__ = str(ref.path)
    sys.modules[mod_name] = module

    def run_module():
        exec(compile(source, str(ref.path), "exec"), module.__dict__)  # noqa: S102 - the user's reference, by design

    try:
        guarded_call(f"importing {ref.path}", run_module)
    except ReferenceError_:
        sys.modules.pop(mod_name, None)
        raise
    fn = getattr(module, ref.function, None)
    if not callable(fn):
        raise ReferenceError_(f"{ref.path}: has no function {ref.function!r}")
    _loaded[key] = fn
    return fn


def python_name(name: str) -> str:
    """The keyword a Python callable gets a kernel parameter under: its name, with ``_`` added to a
    Python keyword (``in`` -> ``in_``), so that ``def reference(in_, out, n)`` can be written."""
    return name + "_" if keyword.iskeyword(name) else name


def compute_reference(task: Task, inputs: CaseInputs) -> dict[str, np.ndarray]:
    """Run the task's Python reference here, on host copies of ``inputs``; return its outputs,
    checked to be finite (:func:`check_finite`).  Called in the reference process: use
    :func:`run_python_reference` or :func:`reference_outputs`, which bound it in time."""
    fn = load_callable(task.reference)
    kwargs: dict[str, object] = {python_name(k): v for k, v in inputs.scalars.items()}
    for arg in task.args:
        if not arg.is_buffer:
            continue
        array = host_values(arg, inputs.buffers[arg.name]).copy()
        if arg.output and arg.init is None:
            array[...] = 0
        kwargs[python_name(arg.name)] = array
    what = f"reference {task.reference.describe()} on case {inputs.case.name!r}"
    guarded_call(what, fn, **kwargs)
    out = {}
    for arg in task.outputs:
        values = kwargs[python_name(arg.name)]
        if arg.param.dtype.name == "bfloat16":
            # keep the reference's full precision: comparison happens in float64 values
            out[arg.name] = np.asarray(values, dtype=np.float32)
        elif arg.param.dtype.name == "bool":
            out[arg.name] = (np.asarray(values) != 0).astype(np.uint8)
        else:
            out[arg.name] = np.asarray(values)
        shape = tuple(task.shape(arg, inputs.case))
        if out[arg.name].size != int(np.prod(shape)):
            raise ReferenceError_(f"{what}: output {arg.name} holds {out[arg.name].size} values, its shape {list(shape)} "
                                  f"needs {int(np.prod(shape))}; write into the array in place (out[...] = ...)")
    check_finite(task, inputs.case.name, out)
    return out


def check_finite(task: Task, case_name: str, outputs: dict[str, np.ndarray]) -> None:
    """Refuse expected values that hold NaN or Inf, unless the manifest says
    ``"nonfinite_outputs": true`` (a kernel must then put the same NaN/Inf at the same places).
    Expected NaNs everywhere would let a kernel that writes only NaN pass."""
    if getattr(task, "nonfinite_outputs", False):
        return
    for name, values in outputs.items():
        values = np.asarray(values)
        if values.dtype.kind not in "fc":
            continue
        bad = ~np.isfinite(values)
        n = int(np.count_nonzero(bad))
        if n:
            first = int(np.flatnonzero(bad.reshape(-1))[0])
            index = tuple(int(i) for i in np.unravel_index(first, values.shape))
            raise ReferenceError_(
                f"reference {task.reference.describe()} on case {case_name!r}: output {name} holds {n} NaN/Inf "
                f"value(s) of {values.size} (first at {list(index)}: {float(values.reshape(-1)[first])}); expected values "
                "must be finite, or a kernel that writes NaN would pass",
                hint='if NaN or Inf is the right answer, add "nonfinite_outputs": true to the manifest (then a kernel '
                     "must give NaN/Inf at exactly the same places)")


def expected_values(task: Task, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Reference outputs as float64/int values for comparison."""
    return {k: np.asarray(v) for k, v in outputs.items()}


__all__ = ["guarded_call", "load_callable", "compute_reference",
           "check_finite", "python_name", "from_float"]
