"""A task manifest → frozen :class:`Task` / :class:`Case` dataclasses.

Loading checks the JSON Schema (``schemas/manifest.schema.json``) and then the meaning: the
signature parses, every parameter has an argument, every expression evaluates for every case,
files exist, at least one performance case exists, tolerances make sense.  Every error names
the file and the JSON path.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

from kernel_forge.common import expressions, finite, reads
from kernel_forge.model.candidate import Launch
from kernel_forge.common.errors import ExpressionError, ManifestError, SignatureError
from kernel_forge.common.json_path import json_path
from kernel_forge.common.reads import Unreadable, open_input, read_input_bytes
from kernel_forge.model.limits import launch_limits, launch_problem
from kernel_forge.model.signature import Param, Signature, parse_signature

ROLES = ("correctness", "performance", "holdout")
INIT_KINDS = ("normal", "uniform", "randint", "constant", "zeros", "ones", "arange", "npy")


@dataclass(frozen=True)
class Tolerance:
    atol: float = 1e-5
    rtol: float = 1e-5

    def to_json(self) -> dict:
        return {"atol": self.atol, "rtol": self.rtol}


@dataclass(frozen=True)
class Init:
    kind: str
    params: tuple[tuple[str, float | str], ...] = ()

    def get(self, key: str, default=None):
        return dict(self.params).get(key, default)

    def numbers(self, variables: dict) -> dict:
        """The parameters with each expression (``"high": "V"``: token ids below a case's vocabulary)
        evaluated over a case's variables; ``path`` as it is."""
        return {k: (expressions.evaluate_number(v, variables, what=f"init {k}") if isinstance(v, str) and k != "path"
                    else v) for k, v in self.params}


@dataclass(frozen=True)
class Arg:
    """One kernel parameter: a buffer (pointer) or a scalar."""

    param: Param
    shape: tuple[str | int, ...] = ()       # buffers
    init: Init | None = None                # buffers: None for a pure (poisoned) output
    output: bool = False
    tolerance: Tolerance | None = None      # per-output override
    value: str | int | float | None = None  # scalars

    @property
    def name(self) -> str:
        return self.param.name

    @property
    def is_buffer(self) -> bool:
        return self.param.pointer

    @property
    def in_out(self) -> bool:
        return self.output and self.init is not None

    def shape_text(self) -> str:
        """The buffer's shape as the manifest gives it, for a prompt (a vector type's lanes said)."""
        text = f"shape [{', '.join(map(str, self.shape))}]"
        if self.param.lanes > 1:
            text += (f" of {self.param.vector} (the reference's array: {self.param.dtype.name}, a last axis of "
                     f"{self.param.lanes})")
        return text


@dataclass(frozen=True)
class CallableRef:
    kind: str          # "python" or "cuda"
    path: Path         # resolved file
    function: str = "" # python only
    spec: str = ""     # as written in the manifest

    def describe(self) -> str:
        return self.spec


@dataclass(frozen=True)
class Case:
    name: str
    role: str
    vars: dict[str, int | float]
    index: int


@dataclass(frozen=True)
class Task:
    name: str
    description: str
    signature: Signature
    reference: CallableRef
    baselines: dict[str, CallableRef]
    initial: Path | None             # None: the first passing translation becomes the baseline
    args: tuple[Arg, ...]            # in signature order
    launch: Launch | None
    tolerance: Tolerance
    nondeterministic: bool
    flops: str | int | float | None
    bytes: str | int | float | None
    cases: tuple[Case, ...]
    hints: str
    path: Path                       # the manifest file
    raw: dict = field(repr=False, compare=False, default_factory=dict)
    templates: tuple[Path, ...] = () # kernels with tunables for the built-in tuner
    reference_time_limit_s: float | None = None  # seconds the Python reference may take per case (None: the default)
    nonfinite_outputs: bool = False  # expected values may hold NaN/Inf (a kernel must match them in place)
    headers: tuple[str, ...] = ()    # the task's own headers a kernel may include by name (model/headers.py)

    # -- queries -------------------------------------------------------------------------
    def header_sources(self) -> dict[str, str]:
        """name → text of the task's own headers, for NVRTC (checked again as they are read)."""
        from kernel_forge.model import headers

        return headers.read(self.path.parent, self.headers) if self.headers else {}

    def arg(self, name: str) -> Arg:
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError(name)

    @property
    def outputs(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.output)

    @property
    def generated(self) -> dict | None:
        """The manifest's ``generated`` block (a task ``kforge init --describe`` wrote), or None."""
        block = self.raw.get("generated")
        return block if isinstance(block, dict) else None

    def cases_with(self, *roles: str) -> tuple[Case, ...]:
        return tuple(c for c in self.cases if c.role in roles)

    def case(self, name: str) -> Case:
        for c in self.cases:
            if c.name == name:
                return c
        raise KeyError(name)

    def shape(self, arg: Arg, case: Case) -> tuple[int, ...]:
        """A buffer's shape in ``case``: the manifest's expressions, and a pointer to a vector type
        (``float4*``) its lanes as a last axis (the manifest counts vectors; the host holds values)."""
        shape = tuple(expressions.evaluate_int(e, case.vars, what=f"shape of {arg.name}") for e in arg.shape)
        return shape + (arg.param.lanes,) if arg.param.lanes > 1 else shape

    def scalar(self, arg: Arg, case: Case) -> int | float:
        if arg.param.dtype.is_float:
            return float(expressions.evaluate_number(arg.value, case.vars, what=f"argument {arg.name}"))
        return expressions.evaluate_int(arg.value, case.vars, what=f"integer argument {arg.name}")

    def buffer_bytes(self, case: Case) -> dict[str, int]:
        """Bytes of every buffer of ``case``, from the shape expressions (nothing is allocated)."""
        return {a.name: math.prod(self.shape(a, case)) * a.param.dtype.itemsize for a in self.args if a.is_buffer}

    def case_bytes(self, case: Case) -> int:
        """Bytes of all of ``case``'s buffers together."""
        return sum(self.buffer_bytes(case).values())

    def footprint_bytes(self, case: Case) -> int:
        """Bytes of every buffer moved once: each read or written once, an in/out buffer both.  The
        least DRAM traffic an honest launch can get away with is at most this (what it reads again
        may come from cache; a gather may touch less of a table)."""
        sizes = self.buffer_bytes(case)
        return sum(sizes.values()) + sum(sizes[a.name] for a in self.args if a.is_buffer and a.in_out)

    def tolerance_for(self, arg: Arg) -> Tolerance:
        return arg.tolerance or self.tolerance

    def cost(self, case: Case) -> tuple[float | None, float | None]:
        """(flops, bytes) of one launch on ``case``, or None where the manifest has none.  Bytes are
        the DRAM traffic a launch cannot avoid, so the manifest's count is capped at
        :meth:`footprint_bytes`: a formula that counts every access (``B*T*C`` reads of a table of
        50 rows) would make the plausibility check refuse an honest kernel whose re-reads the cache
        serves, and overstate its bandwidth."""
        f = float(expressions.evaluate_number(self.flops, case.vars, what="flops")) if self.flops is not None else None
        b = float(expressions.evaluate_number(self.bytes, case.vars, what="bytes")) if self.bytes is not None else None
        if b is not None:
            b = min(b, float(self.footprint_bytes(case)))
        return f, b

    def hash(self) -> str:
        """Hash of everything a proposer may not change: manifest, reference, baselines, the task's
        own headers (a task without headers hashes as before)."""
        h = hashlib.sha256()
        h.update(json.dumps(self.raw, sort_keys=True).encode())
        for ref in (self.reference, *self.baselines.values()):
            h.update(ref.path.read_bytes())
        for name, text in sorted(self.header_sources().items()):
            h.update(json.dumps([name, text]).encode())
        return h.hexdigest()


# -- loading ---------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def manifest_schema() -> dict:
    text = resources.files("kernel_forge").joinpath("schemas/manifest.schema.json").read_text()
    return json.loads(text)


def check_schema(data: object, *, file: str) -> None:
    import jsonschema

    validator = jsonschema.Draft202012Validator(manifest_schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if not errors:
        return
    err = errors[0]
    # oneOf failures are unhelpful at the top; prefer the deepest specific cause
    best = jsonschema.exceptions.best_match(errors)
    err = best or err
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    raise ManifestError(f"{err.message}{more}", file=file, json_path=json_path(*err.absolute_path))


def load_task(path: str | Path) -> Task:
    """Load, schema-check and meaning-check a manifest."""
    p = Path(path)
    file = str(p)
    try:
        data = read_input_bytes(p, "manifest")
    except Unreadable as exc:
        raise ManifestError(exc.reason, file=file) from None
    try:
        text = data.decode("utf-8-sig")   # a byte-order mark (some Windows editors) is fine
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ManifestError(f"not UTF-8 text: byte 0x{exc.object[exc.start]:02x} at line {line} "
                            f"(offset {exc.start})", file=file,
                            hint="save the manifest as UTF-8 (JSON files must be UTF-8)") from None
    problem = reads.nesting_problem(text)
    if problem:
        raise ManifestError(problem, file=file)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ManifestError(f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
                            file=file) from None
    found = finite.find(data, text)
    if found is not None:
        raise ManifestError(f"{finite.describe(found[1])} {finite.WHY}", file=file, json_path=found[0])
    check_schema(data, file=file)
    return _build(data, p)


#: how every .npy file starts (numpy.lib.format); the most bytes of an .npy input kforge reads
NPY_MAGIC = b"\x93NUMPY"
MAX_NPY = 1 << 40


def npy_header(path: Path, file: str, jp: str) -> tuple[tuple[int, ...], "object"]:
    """(shape, dtype) of an .npy file, read from its header only (the data is not loaded)."""
    import numpy as np

    # numpy's own messages quote the bytes it read: they are never shown (the path may name any file)
    try:
        with open_input(path, ".npy file", limit=MAX_NPY) as f:
            if f.read(len(NPY_MAGIC)) != NPY_MAGIC:
                raise _err(f"{path} is not an .npy file (it does not start with NumPy's magic string)", file, jp,
                           hint="write it with numpy.save(path, array)")
            f.seek(0)
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, _fortran, dtype = np.lib.format.read_array_header_1_0(f)
            else:
                shape, _fortran, dtype = np.lib.format.read_array_header_2_0(f)
    except Unreadable as exc:
        raise _err(exc.message, file, jp) from None
    except (ValueError, EOFError, SyntaxError, TypeError):
        raise _err(f"{path} is not an .npy file (its header cannot be read as one)", file, jp,
                   hint="write it with numpy.save(path, array)") from None
    if dtype.hasobject:
        raise _err(f"{path} holds Python objects ({dtype}); only numeric arrays can be loaded", file, jp)
    if dtype.kind not in "biuf":
        raise _err(f"{path} holds {dtype} values, not numbers", file, jp)
    return tuple(int(d) for d in shape), dtype


def _err(msg: str, file: str, jp: str, hint: str | None = None) -> ManifestError:
    return ManifestError(msg, file=file, json_path=jp, hint=hint)


def _resolve(base: Path, rel: str, file: str, jp: str) -> Path:
    q = (base / rel).resolve()
    if not q.is_file():
        raise _err(f"file not found: {rel} (looked in {q})", file, jp)
    return q


def _template(base: Path, entry: str, file: str, jp: str) -> Path:
    """A ``templates`` entry: a kernel of the library by its name (``"gemm/matmul_f32_tiled"``:
    :mod:`kernel_forge.kernels.library`), else a file by its path relative to the manifest."""
    from kernel_forge.kernels import library

    if library.NAME.fullmatch(entry) and not (base / entry).is_file():
        found = library.by_name(entry)
        if found is None:
            raise _err(f"no kernel named {entry} in kforge's library, and no file {entry} beside the manifest",
                       file, jp, hint="name a library kernel as KIND/NAME (kforge's kernels: "
                       + ", ".join(library.names("pattern") + library.names("variant"))
                       + "), or your own file by its path with its extension (templates/mine.cu)")
        if found.role == "bound":
            raise _err(f"{entry} is a bound template: kforge writes it for a task's own signature itself "
                       "(the tuner's bound patterns); it cannot be listed as it is", file, jp)
        return found.path
    former = _former_location(entry)
    if former is not None and not (base / entry).is_file():
        return former
    return _resolve(base, entry, file, jp)


def _former_location(entry: str) -> Path | None:
    """Where a bundled manifest of an earlier release had its templates, spelled as it spelled
    them (``templates/NAME.cu`` beside it, ``../kernel_forge/patterns/NAME.cu``): those files are
    the library's now, and recorded runs keep those manifests.  The library kernel's file, or None."""
    from kernel_forge.kernels import library

    parts = Path(entry).parts
    if not ((len(parts) == 2 and parts[0] == "templates") or parts[-3:-1] == ("kernel_forge", "patterns")):
        return None
    found = library.by_name(Path(entry).stem)
    return found.path if found is not None and found.role != "bound" and found.file == parts[-1] else None


def _callable(spec: dict, base: Path, file: str, jp: str) -> CallableRef:
    if "python" in spec:
        rel, _, func = spec["python"].rpartition(":")
        return CallableRef("python", _resolve(base, rel, file, jp + ".python"), func, spec["python"])
    return CallableRef("cuda", _resolve(base, spec["cuda"], file, jp + ".cuda"), "", spec["cuda"])


def _init(spec, file: str, jp: str) -> Init:
    if isinstance(spec, str):
        return Init(spec)
    kind = spec["kind"]
    params = tuple(sorted((k, v) for k, v in spec.items() if k != "kind"))
    need = {"constant": ("value",), "npy": ("path",)}.get(kind, ())
    for k in need:
        if k not in spec:
            raise _err(f"init kind {kind!r} needs {k!r}", file, jp)
    if kind in ("uniform", "randint"):
        lo, hi = spec.get("low", 0 if kind == "randint" else -1.0), spec.get("high", 100 if kind == "randint" else 1.0)
        if not isinstance(lo, str) and not isinstance(hi, str) and not lo < hi:   # expressions: checked per case
            raise _err(f"init {kind}: low ({lo}) must be below high ({hi})", file, jp)
    return Init(kind, params)


def _build(data: dict, path: Path) -> Task:
    file = str(path)
    base = path.parent
    try:
        sig = parse_signature(data["signature"])
    except SignatureError as exc:
        raise _err(f"signature does not parse: {exc}", file, "$.signature") from None
    untyped = [p for p in sig.params if p.untyped]
    if untyped:
        raise _err(f"parameter {untyped[0].name} is `{untyped[0].describe()}`: the task's signature names the type its "
                   "buffer holds", file, "$.signature",
                   hint=f"write the type the kernel reads through it (e.g. `const __half* {untyped[0].name}`); the kernel "
                        "itself may keep void*")
    if sig.name != data["name"]:
        raise _err(f"name {data['name']!r} differs from the kernel name {sig.name!r} in the signature",
                   file, "$.name")

    reference = _callable(data["reference"], base, file, "$.reference")
    baselines = {k: _callable(v, base, file, json_path("baselines", k))
                 for k, v in data.get("baselines", {}).items()}
    for k, b in baselines.items():
        if b.kind != "python":
            raise _err("baselines must be Python callables (they run on CuPy arrays)", file,
                       json_path("baselines", k))
    initial = _resolve(base, data["initial"], file, "$.initial") if "initial" in data else None
    templates = tuple(_template(base, entry, file, json_path("templates", i))
                      for i, entry in enumerate(data.get("templates", [])))
    from kernel_forge.model import headers as task_headers
    header_names = task_headers.resolve(base, list(data.get("headers", [])), file)

    tol_raw = data.get("tolerance", {})
    tolerance = Tolerance(tol_raw.get("atol", 1e-5), tol_raw.get("rtol", 1e-5))

    raw_args = data["args"]
    extra = set(raw_args) - set(sig.names)
    if extra:
        name = sorted(extra)[0]
        raise _err(f"argument {name!r} is not a parameter of {sig.name}({', '.join(sig.names)})",
                   file, json_path("args", name))
    args = []
    for param in sig.params:
        jp = json_path("args", param.name)
        if param.name not in raw_args:
            raise _err(f"parameter {param.describe()!r} has no argument", file, "$.args",
                       hint=f'add "{param.name}": ' + ('{"shape": [...], "init": "normal"}'
                                                        if param.pointer else '"<expression>"'))
        spec = raw_args[param.name]
        if param.pointer:
            if not isinstance(spec, dict):
                raise _err(f"{param.describe()} is a pointer: give a buffer object with a shape",
                           file, jp)
            init = _init(spec["init"], file, jp + ".init") if "init" in spec else None
            output = bool(spec.get("output", False))
            if param.const and output:
                raise _err(f"{param.describe()} is const and cannot be an output", file, jp + ".output")
            if not output and init is None:
                raise _err(f"input buffer {param.name} needs an init", file, jp,
                           hint='e.g. "init": "normal" or {"kind": "uniform", "low": -1, "high": 1}')
            tol = spec.get("tolerance")
            args.append(Arg(param, shape=tuple(spec["shape"]), init=init, output=output,
                            tolerance=Tolerance(tol.get("atol", tolerance.atol), tol.get("rtol", tolerance.rtol)) if tol else None))
        else:
            if isinstance(spec, dict):
                raise _err(f"{param.describe()} is a scalar: give an expression or a number", file, jp)
            args.append(Arg(param, value=spec))
    if not any(a.output for a in args):
        raise _err("no buffer is marked \"output\": true, so nothing would be checked", file, "$.args")

    launch = None
    if "launch" in data:
        L = data["launch"]
        launch = Launch(tuple(L["grid"]), tuple(L["block"]), L.get("shared_mem", 0))
    cost = data.get("cost", {})

    defaults = data.get("defaults", {})
    cases, names = [], set()
    for i, c in enumerate(data["cases"]):
        if c["name"] in names:
            raise _err(f"case name {c['name']!r} is used twice", file, json_path("cases", i, "name"))
        names.add(c["name"])
        v = dict(defaults)
        v.update(c.get("vars", {}))
        for k in v:
            problem = expressions.variable_problem(k)
            if problem:
                raise _err(f"case variable {k!r} {problem}; rename it (and the argument that names it)", file,
                           json_path("cases", i, "vars", k) if k in c.get("vars", {}) else json_path("defaults", k))
        v = {k: (int(x) if isinstance(x, float) and x.is_integer() and not isinstance(x, bool) else x)
             for k, x in v.items()}
        cases.append(Case(c["name"], c["role"], v, i))
    if not any(c.role == "performance" for c in cases):
        raise _err("at least one case needs role \"performance\" (it is what gets scored)", file, "$.cases")

    task = Task(name=data["name"], description=data.get("description", ""), signature=sig,
                reference=reference, baselines=baselines, initial=initial, args=tuple(args),
                launch=launch, tolerance=tolerance, nondeterministic=bool(data.get("nondeterministic", False)),
                flops=cost.get("flops"), bytes=cost.get("bytes"), cases=tuple(cases),
                hints=data.get("hints", ""), path=path, raw=data, templates=templates,
                reference_time_limit_s=data["reference"].get("time_limit_s"),
                nonfinite_outputs=bool(data.get("nonfinite_outputs", False)), headers=header_names)
    _check_expressions(task, file)
    return task


def _check_init(a: Arg, case: Case, file: str, jp: str) -> None:
    """An init whose parameters are expressions: each evaluates for ``case``, and a range is not empty."""
    try:
        got = a.init.numbers(case.vars)
    except ExpressionError as exc:
        raise _err(f"{exc} (case {case.name!r})", file, jp) from None
    if a.init.kind in ("uniform", "randint"):
        lo, hi = got.get("low", 0 if a.init.kind == "randint" else -1.0), got.get("high", 100 if a.init.kind == "randint" else 1.0)
        if not lo < hi:
            raise _err(f"init {a.init.kind}: low ({lo}) must be below high ({hi}) in case {case.name!r}", file, jp)


def _check_expressions(task: Task, file: str) -> None:
    """Every shape, scalar, launch and cost expression evaluates for every case."""
    for case in task.cases:
        cjp = json_path("cases", case.index)
        for a in task.args:
            jp = json_path("args", a.name)
            try:
                if a.is_buffer:
                    shape = task.shape(a, case)
                    if any(d <= 0 for d in shape):
                        raise _err(f"shape {shape} of {a.name} has a non-positive dimension in case "
                                   f"{case.name!r}", file, jp + ".shape")
                    if a.init and any(isinstance(v, str) for k, v in a.init.params if k != "path"):
                        _check_init(a, case, file, jp + ".init")
                    if a.init and a.init.kind == "npy":
                        npy = _resolve(task.path.parent, a.init.get("path"), file, jp + ".init.path")
                        npy_shape, _ = npy_header(npy, file, jp + ".init.path")
                        if math.prod(npy_shape) != math.prod(shape):
                            raise _err(f"{npy} holds {math.prod(npy_shape)} elements (shape {list(npy_shape)}), "
                                       f"case {case.name!r} needs {math.prod(shape)} (shape {list(shape)})",
                                       file, jp + ".init.path")
                else:
                    value = task.scalar(a, case)
                    if a.param.dtype.kind in ("int", "uint"):
                        bits = a.param.dtype.bits
                        lo = 0 if a.param.dtype.kind == "uint" else -(2 ** (bits - 1))
                        hi = (2 ** bits - 1) if a.param.dtype.kind == "uint" else 2 ** (bits - 1) - 1
                        if not lo <= value <= hi:
                            raise _err(f"{a.name} = {value} does not fit {a.param.dtype.name} in case "
                                       f"{case.name!r}", file, jp)
            except ExpressionError as exc:
                raise _err(f"{exc} (case {case.name!r}, see {cjp}.vars)", file,
                           jp + (".shape" if a.is_buffer else "")) from None
        if task.launch is not None:
            try:
                grid, block, smem = task.launch.resolve(case.vars)
            except ExpressionError as exc:
                raise _err(f"{exc} (case {case.name!r})", file, "$.launch") from None
            for key, dims in (("grid", grid), ("block", block)):
                if any(d <= 0 for d in dims):
                    raise _err(f"{key} {list(dims)} has a dimension below 1 in case {case.name!r}", file,
                               json_path("launch", key))
            if smem < 0:
                raise _err(f"shared_mem = {smem} is negative in case {case.name!r}", file, "$.launch.shared_mem")
            problem = launch_problem(grid, block, smem, launch_limits())   # what no supported GPU can run
            if problem:
                key = "block" if "block" in problem else "grid" if "grid" in problem else "shared_mem"
                raise _err(f"{problem} in case {case.name!r}", file, json_path("launch", key))
        for key, expr in (("flops", task.flops), ("bytes", task.bytes)):
            if expr is None:
                continue
            try:
                value = float(expressions.evaluate_number(expr, case.vars, what=f"cost {key}"))
            except ExpressionError as exc:
                raise _err(f"{exc} (case {case.name!r})", file, json_path("cost", key)) from None
            if not math.isfinite(value) or value < 0:
                raise _err(f"{key} = {value} for case {case.name!r} must be a finite non-negative number",
                           file, json_path("cost", key))
    for a in task.outputs:
        tol = task.tolerance_for(a)
        if tol.rtol >= 1 or tol.atol >= 1e3:
            raise _err(f"tolerance for {a.name} (atol={tol.atol}, rtol={tol.rtol}) would accept almost "
                       "anything", file, json_path("args", a.name, "tolerance") if a.tolerance else "$.tolerance")
