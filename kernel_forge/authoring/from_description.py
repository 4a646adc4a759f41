"""``kforge init NAME --describe "..."``: a new task written by a model, none of it trusted until checked.

Three separate conversations, each seeing only what it needs:

1. **spec** -- from the description: the signature, the arguments (shapes, input distributions),
   the default launch, the tolerance, the cost and the cases (correctness, performance, holdout;
   sizes of 1, odd primes, large), as a manifest;
2. **reference** -- from the description and the spec: the NumPy reference;
3. **witness** -- from the description and the spec: a naive CUDA kernel.  It never sees the
   reference, nor the reference the witness.

Every answer is checked here without running anything the model wrote -- the spec against the
manifest's schema and meaning (and the sizes against memory); the reference by a screen of what
it imports and calls (:func:`screen_reference`; a screen, not a sandbox); the witness by the static
rules, its entry point and signature, and NVRTC where available -- and an answer that cannot be
used goes back once with the reason (``repairs``).  The weak-case lint looks at the inputs only
(the outputs' lint needs the reference to run).

Written as ordinary files a user reads and edits: ``NAME.json`` (its ``generated`` block says
what was generated and checked, the cross-check ``pending``, ``accepted: false``),
``NAME_reference.py``, ``NAME_witness.cu`` (also ``NAME.cu`` as the initial kernel with
``initial``) and ``NAME_describe/`` (every model call as ``model-NNN.json``; ``--replay`` reads
this folder back).  Then the user reviews them: the reference is model-written Python and runs
only under ``kforge validate --accept`` (:mod:`kernel_forge.authoring.acceptance`), in the sandbox
(:mod:`kernel_forge.model.reference_sandbox`), where the weak-case lint and the cross-check of the
two witnesses (:mod:`kernel_forge.authoring.crosscheck`) run.  ``kforge optimize`` refuses the task
until then.
"""
from __future__ import annotations

import ast
import hashlib
import json
import re
import shutil
import string
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from kernel_forge import __version__
from kernel_forge.common import writes
from kernel_forge.common.errors import InputError, KForgeError, ManifestError
from kernel_forge.common.reads import nesting_problem
from kernel_forge.config.describe import DescribeConfig
from kernel_forge.config.sections import check_settings
from kernel_forge.evidence.run_dir import atomic_write
from kernel_forge.proposers.text import ProviderText, ReplayText, TextModel, record
from kernel_forge.proposers.answer import fences

#: the longest description taken (a paragraph or two; details go in the files it writes)
MAX_DESCRIPTION = 4000
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: spec keys the model writes; the others of a manifest are kforge's
SPEC_KEYS = ("description", "signature", "args", "launch", "tolerance", "cost", "cases", "defaults",
             "nondeterministic", "hints")
OURS = ("name", "reference", "initial", "baselines", "templates", "generated", "$schema")
#: the cross-check's detail until ``kforge validate --accept`` runs it
NOT_RUN = ("not run: the reference is model-written Python, run only by kforge validate --accept (in a sandbox), "
           "after your review; the CUDA witness needs a GPU")


@dataclass
class DescribeResult:
    manifest: Path
    written: list[Path] = field(default_factory=list)
    lint: list[str] = field(default_factory=list)      #: weak-case warnings on the inputs
    lines: list[str] = field(default_factory=list)     #: what happened, in words
    next_steps: list[str] = field(default_factory=list)


def _prompt(name: str) -> string.Template:
    return string.Template(resources.files("kernel_forge").joinpath(f"prompts/{name}.md").read_text())


# ------------------------------------------------------------------------------ answers

def fenced(text: str, langs: tuple[str, ...]) -> str | None:
    """The first fenced block of ``text`` in one of ``langs`` (an untagged block if there is no
    tagged one); blocks as the proposal answers' (:func:`~.proposers.answer.fences`)."""
    blocks = [(lang, body) for lang, body, _, _ in fences(text)]
    for lang, body in blocks:
        if lang in langs:
            return body
    for lang, body in blocks:
        if not lang:
            return body
    return None


_ALLOWED_IMPORTS = {"numpy", "math", "numpy.linalg", "numpy.fft"}
_FORBIDDEN_CALLS = {"open", "exec", "eval", "compile", "__import__", "input", "breakpoint", "globals", "locals",
                    "vars", "getattr", "setattr", "delattr", "memoryview", "exit", "quit", "help"}
_FORBIDDEN_ATTRS = {"load", "save", "savez", "savez_compressed", "savetxt", "loadtxt", "genfromtxt", "fromfile",
                    "fromregex", "tofile", "dump", "dumps", "memmap", "DataSource", "ctypeslib", "ctypes", "lib",
                    "testing", "distutils", "f2py", "system", "popen", "os", "sys", "builtins"}


def screen_reference(source: str, params: list[str]) -> list[str]:
    """Problems of a generated reference, found without running it: it must parse, define
    ``reference(<params>)`` with the kernel's parameter names, import only numpy (its linalg
    and fft) and math, and not reach files, the system or Python's internals.  A screen for a
    model's answer, not a sandbox: the user reviews the file, and it runs only under ``kforge
    validate --accept``, in the sandbox."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return [f"it does not parse: {exc.msg} (line {exc.lineno})"]
    problems = []
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "reference"), None)
    if fn is None:
        problems.append("it defines no top-level function `reference`")
    else:
        names = [a.arg for a in fn.args.args]
        if names != params:
            problems.append(f"reference() takes ({', '.join(names)}); it must take the kernel's parameters "
                            f"({', '.join(params)}) in that order")
    for node in ast.walk(tree):
        where = f"line {getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            bad = [a.name for a in node.names if a.name not in _ALLOWED_IMPORTS]
            if bad:
                problems.append(f"{where}: imports {', '.join(bad)} (only numpy, numpy.linalg, numpy.fft and math)")
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "") not in _ALLOWED_IMPORTS or node.level:
                problems.append(f"{where}: imports from {node.module or '.'} (only numpy, numpy.linalg, numpy.fft "
                                "and math)")
            bad = [a.name for a in node.names if a.name in _FORBIDDEN_ATTRS or a.name.startswith("_")]
            if bad:
                problems.append(f"{where}: imports {', '.join(bad)} from {node.module}")
        elif isinstance(node, ast.Name) and node.id in _FORBIDDEN_CALLS:
            problems.append(f"{where}: uses {node.id}()")
        elif isinstance(node, ast.Attribute) and (node.attr.startswith("__") or node.attr in _FORBIDDEN_ATTRS):
            problems.append(f"{where}: uses .{node.attr}")
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            problems.append(f"{where}: keeps global state")
    return problems


def _task_brief(task) -> str:
    """What the reference and witness calls are told of the task (the spec, never the other answer)."""
    lines = [f"Task `{task.name}`: {task.description}", "", "Entry point:", "```cuda", task.signature.text.rstrip(" {;"),
             "```", "", "Arguments:"]
    for a in task.args:
        if a.is_buffer:
            kind = ("in/out (its initial values are inputs)" if a.in_out else "output") if a.output else "input"
            lines.append(f"- `{a.param.text}`: {a.shape_text()}, {kind}")
        else:
            lines.append(f"- `{a.param.text}` = {a.value}")
    t = task.tolerance
    lines.append(f"\nTolerance: |out - ref| <= {t.atol} + {t.rtol} * |ref| elementwise")
    lines.append("Cases (every one is checked): " + "; ".join(
        f"{c.name} ({', '.join(f'{k}={v}' for k, v in c.vars.items())})" for c in task.cases))
    if task.hints:
        lines.append(f"Hints: {task.hints}")
    return "\n".join(lines)


def _launch_line(task) -> str:
    if task.launch is None:
        return "Give the launch in the file: `// kforge: grid = [...]` and `// kforge: block = [...]` lines."
    dims = lambda t: "[" + ", ".join(str(x) for x in t) + "]"  # noqa: E731
    return (f"It is launched with grid {dims(task.launch.grid)} and block {dims(task.launch.block)} (expressions "
            "over the case variables); if it needs another launch, give it as `// kforge: grid = [...]` and "
            "`// kforge: block = [...]` lines.")


# ------------------------------------------------------------------------------ the session

class Session:
    """One describe session: its model, the staging folder and the exchange records."""

    def __init__(self, name: str, description: str, model: TextModel, cfg: DescribeConfig, stage: Path,
                 exchange: Path, progress):
        self.name, self.description, self.model, self.cfg = name, description, model, cfg
        self.stage, self.exchange, self.progress = stage, exchange, progress
        self.index = 0
        self.prompts = hashlib.sha256()
        self.system = _prompt("describe_system").template
        self.replayed_from: str | None = None
        self.model_name = model.name

    # -- asking ---------------------------------------------------------------------------
    def _ask(self, role: str, messages: list[dict], turn: int) -> str:
        self.prompts.update(self.system.encode())
        for m in messages:
            if m["role"] == "user":
                self.prompts.update(m["content"].encode())
        self.progress(f"[kforge] describe: asking {self.model.name} for the {role}"
                      + (f" (repair {turn})" if turn else ""))
        answer = self.model.ask(role, self.system, messages)
        for call in answer.calls:
            self.index += 1
            if call.provider and call.model:
                self.model_name = f"{call.provider}:{call.model}"
            extra = {"index": self.index, "role": role, "turn": turn, "description": self.description,
                     "replayed_from": answer.replayed_from}
            atomic_write(self.exchange / f"model-{self.index:03d}.json",
                         (json.dumps(record(call, **extra), indent=2, default=str) + "\n").encode(), private=False)
        if answer.replayed_from:
            self.replayed_from = str(Path(answer.replayed_from).parent)
        return answer.text

    def converse(self, role: str, prompt: str, check):
        """Ask, check the answer, and send it back with the problem up to ``repairs`` times."""
        messages = [{"role": "user", "content": prompt}]
        problem = ""
        for turn in range(1 + max(0, self.cfg.repairs)):
            text = self._ask(role, messages, turn)
            value, problem = check(text)
            if problem is None:
                return value
            self.progress(f"[kforge] describe: the {role} answer cannot be used: {problem.splitlines()[0]}")
            messages = messages + [{"role": "assistant", "content": text or "(empty answer)"},
                                   {"role": "user", "content": f"That answer cannot be used: {problem}\n"
                                                               "Answer again with the complete corrected block."}]
        raise InputError(f"the model's {role} answer cannot be used: {problem}",
                         hint=f"its answers are in {self.exchange}; describe the task more precisely, try another "
                              "model, or write the file yourself (kforge init NAME --signature ...)")

    # -- 1. the spec ----------------------------------------------------------------------
    def spec_prompt(self) -> str:
        return _prompt("describe_spec").safe_substitute(name=self.name, description=self.description)

    def check_spec(self, text: str):
        from kernel_forge.gate.preflight import check_sizes
        from kernel_forge.model.task import check_schema, load_task

        block = fenced(text, ("json",))
        if block is None and (text or "").strip().startswith("{"):
            block = text
        if block is None:
            return None, "it holds no ```json block"
        deep = nesting_problem(block)
        if deep:
            return None, f"the {deep}"
        try:
            spec = json.loads(block)
        except json.JSONDecodeError as exc:
            return None, f"the JSON does not parse: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        if not isinstance(spec, dict):
            return None, "the JSON is not an object"
        unknown = [k for k in spec if k not in SPEC_KEYS and k not in OURS]
        if unknown:
            return None, f"unknown key(s) {', '.join(unknown)}; the keys are {', '.join(SPEC_KEYS)}"
        manifest = {"name": self.name, "description": spec.get("description") or self.description,
                    "signature": spec.get("signature"), "reference": {"python": f"{self.name}_reference.py:reference"}}
        manifest.update({k: spec[k] for k in SPEC_KEYS[2:] if k in spec})
        manifest = {k: v for k, v in manifest.items() if v is not None}
        try:
            check_schema(manifest, file="the spec")
        except ManifestError as exc:
            return None, exc.message
        roles = {c.get("role") for c in manifest["cases"]}
        missing = [r for r in ("correctness", "performance", "holdout") if r not in roles]
        if missing:
            return None, f"$.cases: no {' and no '.join(missing)} case; give at least one of each role"
        path = self.stage / f"{self.name}.json"
        writes.write_text(path, json.dumps(manifest, indent=2))
        writes.write_text(self.stage / f"{self.name}_reference.py", "def reference(**kw):\n    raise NotImplementedError\n")
        try:
            task = load_task(path)
            check_sizes(task)
        except KForgeError as exc:
            return None, exc.message.replace(f"{path}: ", "")
        return manifest, None

    # -- 2. the reference -----------------------------------------------------------------
    def reference_prompt(self, task) -> str:
        params = ", ".join(task.signature.names)
        outs = ", ".join(a.name for a in task.outputs)
        return _prompt("describe_reference").safe_substitute(task=_task_brief(task), params=params, outputs=outs)

    def check_reference(self, task, text: str):
        """The screen only: nothing the model wrote runs here (it runs, sandboxed, under
        ``kforge validate --accept``)."""
        source = fenced(text, ("python", "py", "python3"))
        if source is None:
            return None, "it holds no ```python block"
        problems = screen_reference(source, list(task.signature.names))
        if problems:
            return None, "; ".join(problems)
        return source, None

    # -- 3. the witness -------------------------------------------------------------------
    def witness_prompt(self, task) -> str:
        return _prompt("describe_witness").safe_substitute(task=_task_brief(task), name=self.name,
                                                           launch=_launch_line(task))

    def check_witness(self, task, text: str):
        from kernel_forge.gate import preflight
        from kernel_forge.model.candidate import parse_candidate
        from kernel_forge.common.errors import CandidateError, CompileError, EnvironmentProblem

        source = fenced(text, ("cuda", "cu", "c++", "cpp", "cxx", "c"))
        if source is None or "__global__" not in source:
            return None, "it holds no ```cuda block with the __global__ kernel"
        label = f"{self.name}_witness.cu"
        try:
            cand = parse_candidate(source, name=label)
            preflight.check_kernel(task, cand, file=label)
        except CandidateError as exc:
            return None, exc.message
        if preflight.nvrtc_available() is None:
            try:
                preflight.compile_kernel(cand, preflight.DEFAULT_ARCH, file=label)
            except CompileError as exc:
                return None, f"NVRTC does not compile it: {exc.message}"
            except EnvironmentProblem:
                pass
        return source, None


def check_description(text: str | None) -> str:
    """The description, stripped; an :class:`InputError` when it is empty or too long."""
    d = (text or "").strip()
    if not d:
        raise InputError("--describe: the description is empty: say what the kernel computes",
                         hint='e.g. --describe "y = max(x, 0) + 0.1 * min(x, 0) over n floats (leaky ReLU)"')
    if len(d) > MAX_DESCRIPTION:
        raise InputError(f"--describe: the description is {len(d)} characters long; at most {MAX_DESCRIPTION} are "
                         "taken", hint="say what the kernel computes in a paragraph; the details go into the "
                                       "files it writes, which you review and edit")
    return d


def make_model(cfg: DescribeConfig, description: str) -> TextModel:
    """The model a describe session asks: recorded answers (``replay``) or a provider."""
    from kernel_forge.config.environment import check_base_url

    if cfg.replay and cfg.model:
        raise InputError("--replay and --model are exclusive: recorded answers are replayed, or a model is asked")
    if cfg.base_url is not None:
        check_base_url(cfg.base_url)
        if not cfg.model:
            raise InputError("--base-url needs --model: the model the endpoint serves")
    if cfg.replay:
        return ReplayText(cfg.replay, description)
    if not cfg.model:
        raise InputError("--describe needs a model to write the task: --model anthropic:MODEL or openai:MODEL "
                         "(or --replay FOLDER of recorded answers)",
                         hint="e.g. --model anthropic:claude-sonnet-5-5 (ANTHROPIC_API_KEY)")
    budget = None
    if cfg.budget_usd is not None:
        from kernel_forge.proposers.budget import Budget
        budget = Budget(cfg.budget_usd)
    opts = dict(max_tokens=cfg.max_tokens, request_timeout_s=cfg.request_timeout_s, temperature=cfg.temperature,
                reasoning_effort=cfg.reasoning_effort, budget=budget)
    model = ProviderText(cfg.model, base_url=cfg.base_url, **opts)
    if budget is not None and not model.proposer.priced:
        raise InputError(f"--budget-usd {cfg.budget_usd:g}: no price is known for {cfg.model}, so its cost cannot "
                         "be counted and the budget could never stop a call",
                         hint="drop --budget-usd, or use a model listed in kernel_forge/data/models.json")
    return model


def _targets(name: str, folder: Path, cfg: DescribeConfig) -> dict[str, Path]:
    t = {"manifest": folder / f"{name}.json", "reference": folder / f"{name}_reference.py",
         "witness": folder / f"{name}_witness.cu", "exchange": folder / f"{name}_describe"}
    if cfg.initial:
        t["initial"] = folder / f"{name}.cu"
    return t


def describe_task(name: str, description: str, folder: str | Path = ".", cfg: DescribeConfig | None = None, *,
                  force: bool = False, model: TextModel | None = None,
                  progress=lambda msg: None) -> DescribeResult:
    """Write a task from ``description`` (see the module docstring).  Every input is checked before
    the first model call; the model's calls are recorded as they happen; the task's files are
    written only once every answer is usable; nothing the model wrote is run.  ``model``
    replaces the configured model (tests)."""
    cfg = cfg or DescribeConfig()
    if not NAME.match(name or ""):
        raise InputError(f"{name!r} is not a task name: a C identifier (letters, digits, _), the kernel's name")
    description = check_description(description)
    out = Path(folder)
    if out.exists() and not out.is_dir():
        raise InputError(f"--dir {out}: is a file, not a folder")
    targets = _targets(name, out, cfg)
    writes.check_within(out, targets.values())
    existing = [p for p in targets.values() if p.exists() or p.is_symlink()]
    if existing and not force:
        raise InputError(f"{', '.join(map(str, existing))} already exist{'s' if len(existing) == 1 else ''}; "
                         "nothing was written", hint="pass --force to overwrite, or --dir for another folder")
    check_settings(cfg)           # every value within its declared bounds, named by its option
    model = model or make_model(cfg, description)
    exchange = targets["exchange"]
    if (exchange.exists() or exchange.is_symlink()) and force:      # a link (inside out) goes, never what it names
        shutil.rmtree(exchange) if exchange.is_dir() and not exchange.is_symlink() else exchange.unlink()
    made_out = not out.exists()
    if exchange.exists():
        raise InputError(f"{exchange}: already exists", hint="pass --force to replace it")
    writes.make_dirs(exchange)
    try:
        return _describe(name, description, out, cfg, targets, model, progress)
    except BaseException:
        if exchange.is_dir() and not any(exchange.iterdir()):
            exchange.rmdir()            # nothing was asked: nothing is left behind
            if made_out and not any(out.iterdir()):
                out.rmdir()
        raise


def _describe(name: str, description: str, out: Path, cfg: DescribeConfig, targets: dict[str, Path],
              model: TextModel, progress) -> DescribeResult:
    from kernel_forge.model.task import load_task
    from kernel_forge.authoring.validate import validate_manifest

    exchange = targets["exchange"]
    with tempfile.TemporaryDirectory(prefix="kforge-describe-") as tmp:
        s = Session(name, description, model, cfg, Path(tmp), exchange, progress)
        manifest = s.converse("spec", s.spec_prompt(), s.check_spec)
        task = load_task(Path(tmp) / f"{name}.json")
        reference = s.converse("reference", s.reference_prompt(task), lambda t: s.check_reference(task, t))
        writes.write_text(Path(tmp) / targets["reference"].name, reference)
        witness = s.converse("witness", s.witness_prompt(task), lambda t: s.check_witness(task, t))
        writes.write_text(Path(tmp) / f"{name}_witness.cu", witness)
        files = {targets["reference"].name: reference, targets["witness"].name: witness}
        if cfg.initial:
            manifest = {**manifest, "initial": targets["initial"].name}
            files[targets["initial"].name] = witness
            writes.write_text(Path(tmp) / targets["initial"].name, witness)
        block = {"tool": f"kforge init --describe ({__version__})", "model": s.model_name,
                 "replayed_from": s.replayed_from, "description": description, "prompt_sha256": s.prompts.hexdigest(),
                 "created": _now(), "exchange": exchange.name, "files": {}, "witness": targets["witness"].name,
                 "crosscheck": {"status": "pending", "detail": NOT_RUN, "extra_shapes": cfg.extra_shapes},
                 "lint": [], "accepted": False, "accepted_by": None, "accepted_at": None}
        stage_manifest = Path(tmp) / f"{name}.json"
        writes.write_text(stage_manifest, json.dumps({**manifest, "generated": block}, indent=2))
        report = validate_manifest(stage_manifest, reference=False)     # the witness compiled; the reference not run
        block["lint"] = list(report.warnings)
    # every answer is usable: write the task's files, then its manifest with the hashes of what was written
    from kernel_forge.model.generated import file_hashes
    result = DescribeResult(targets["manifest"], lint=list(block["lint"]))
    for fname, text in files.items():
        atomic_write(out / fname, text.encode(), private=False)
        result.written.append(out / fname)
    data = {**manifest, "generated": block}
    block["files"] = file_hashes(targets["manifest"], data, list(files))
    atomic_write(targets["manifest"], (json.dumps(data, indent=2) + "\n").encode(), private=False)
    result.written.insert(0, targets["manifest"])
    result.written.append(exchange)
    _explain(result, name, block)
    return result


def _now() -> str:
    from kernel_forge.model.generated import now
    return now()


def _explain(result: DescribeResult, name: str, block: dict) -> None:
    m = result.manifest
    result.lines = [f"written by {block['model']}" + (f" (replayed from {block['replayed_from']})"
                                                      if block.get("replayed_from") else ""),
                    "nothing the model wrote has run: its reference runs only when you accept the task, in a sandbox"]
    result.lines += [f"weak case: {w}" for w in result.lint]
    result.next_steps = [f"review {m.name}, {name}_reference.py (model-written Python) and {name}_witness.cu",
                         f"on a machine with a GPU: kforge validate --accept {m}  (runs the reference in a sandbox, "
                         "the weak-case lint and the cross-check of the reference against the CUDA witness, then "
                         "records that you accepted the task)"]
    if result.lint:
        result.next_steps.insert(1, "make the weak cases stronger (a task is accepted only without weak-case warnings)")
    result.next_steps.append(f"then: kforge optimize {m} --model ...  (refused until the task is accepted)")
