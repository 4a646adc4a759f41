"""``kforge mcp``: kernel_forge as an MCP server over stdio, for coding agents.

Tools (each returns a JSON object; a bad input is a tool error whose text is the same message
the CLI prints):

- ``doctor``: what this machine has (GPU, driver, NVRTC, packages, which LLM keys are set);
- ``validate_manifest``: schema, meaning, files, sizes, kernels, weak cases;
- ``eval_kernel``: a manifest and a kernel (source text or a path) through the gate: verdict,
  reason, per-case times with their p20-p80 band, % of peak, the bound, the compiler's resources;
- ``optimize``: starts a run in the background and returns its folder;
- ``run_status``: a run's progress (attempts gated, best so far, stop reason when finished);
- ``replay``: re-runs a ``best-case-NAME.json`` and says whether its recorded time holds.

Every path an agent gives (a manifest and the files it names, a kernel, a replay request and
the files it names, a run folder, ``settings`` such as ``{"loop": {"archive": PATH}}``) must
resolve, symlinks followed, inside the server's working folder, its ``--runs-dir``, or a folder
named with ``kforge mcp --allow DIR`` at start-up; a kernel ``path`` is read as ``source`` is,
at most :data:`MAX_SOURCE` bytes and only from a regular file.  A refusal is a tool error that
names the argument.

Resources: ``kforge://runs/{run}/summary`` (summary.json) and ``kforge://runs/{run}/report``
(report.md) for the runs under ``--runs-dir``.

The tools call the same library functions as the CLI (``validate_manifest``, ``run_eval``,
``start_run``, ``replay_check.replay``) with the same option checks and limits; this module
only translates arguments and results.  :class:`Service` holds the calls and knows nothing of
MCP; the tools are generated from their rows in :mod:`.mcp_tools` and the settings' declaration,
and :func:`build_server` serves them with the ``mcp`` SDK (imported only there and here, lazily).

Test hook: ``KFORGE_MCP_TEST_GATE`` makes the server answer from a gate that is not measured —
``recorded:RUN_DIR`` (the verdicts recorded in that run's history.json) or
``python:MODULE:CALLABLE`` (a callable taking the Task, e.g. the test suite's scripted gate).
It exists for the test suite only; every answer then carries ``"gate": "test: ..."`` and the
server says so on stderr.  Never set it where verdicts matter.
"""
from __future__ import annotations

import collections
import importlib
import math
import os
import re
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from kernel_forge.common.errors import InputError, KForgeError

TEST_GATE_ENV = "KFORGE_MCP_TEST_GATE"
#: the most source text eval_kernel accepts (a kernel is one file; this bounds a runaway agent)
MAX_SOURCE = 1 << 20
_RUN_NAME = re.compile(r"^run-\d{3,}$")


def gate_factory_from_spec(spec: str):
    """The gate factory of the test hook (see the module docstring)."""
    kind, _, rest = spec.partition(":")
    if kind == "recorded" and rest:
        from kernel_forge.gate.recorded import RecordedGate

        run = Path(rest)
        if not ((run / "history.json").is_file() or (run / "history.jsonl").is_file()):
            raise InputError(f"{TEST_GATE_ENV}={spec}: {run} has no history.json")
        return lambda task, options: RecordedGate.from_run(run)
    if kind == "python" and ":" in rest:
        module, _, attr = rest.rpartition(":")
        try:
            fn = getattr(importlib.import_module(module), attr)
        except ImportError as exc:
            raise InputError(f"{TEST_GATE_ENV}={spec}: cannot import {module!r} ({exc})") from None
        except AttributeError:
            raise InputError(f"{TEST_GATE_ENV}={spec}: module {module!r} has no {attr!r}") from None
        if not callable(fn):
            raise InputError(f"{TEST_GATE_ENV}={spec}: {module}.{attr} is not callable")
        return lambda task, options: fn(task)
    raise InputError(f"{TEST_GATE_ENV}={spec!r}: expected recorded:RUN_DIR or python:MODULE:CALLABLE")


def _plain(obj):
    """JSON-safe values: paths and dataclasses as text or dicts, non-finite floats as null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [_plain(v) for v in obj]
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if hasattr(obj, "to_json"):
        return _plain(obj.to_json())
    return str(obj)


#: how a value inside the ``settings`` argument is named: ``settings: $.gate.min_reps``
SETTINGS = "settings"
#: the settings that name a file or folder (checked like every path an agent gives), and the
#: words they take that are not paths
PATH_SETTINGS = {("loop", "archive"): {"off"}, ("proposer", "replay"): set()}


def allowed_roots(*folders: str | Path) -> tuple[Path, ...]:
    """The folders an agent's paths may resolve into, each resolved (symlinks followed) once."""
    return tuple(dict.fromkeys(Path(os.path.realpath(os.fspath(f))) for f in folders))


def inside(value: str | Path, roots: tuple[Path, ...], argument: str) -> Path:
    """``value`` resolved (relative to the working folder, every symlink followed, as the file
    would be opened); an :class:`InputError` naming ``argument`` when it is in none of ``roots``."""
    real = Path(os.path.realpath(os.fspath(value)))
    if any(real == r or r in real.parents for r in roots):
        return real
    raise InputError(f"{argument}: {value} resolves to {real}, outside the folders this server may use "
                     f"({', '.join(map(str, roots))}); nothing was done",
                     hint="start the server with kforge mcp --allow DIR to let agents use DIR")


def where_of(arguments):
    """Messages name a setting by its argument (``max_iterations``), else by its place in ``settings``."""
    from kernel_forge.config.build import AsArguments, InFile

    return AsArguments(arguments, InFile(SETTINGS))


def sections_of(settings, allowed: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The ``settings`` argument (sections as in a config file), each value checked."""
    from kernel_forge.common.json_path import json_path
    from kernel_forge.config.build import InFile
    from kernel_forge.config.file import sections_from

    if settings is None:
        return {}
    if not isinstance(settings, dict):
        raise InputError(f"{SETTINGS}: expected an object like {{\"{allowed[0]}\": {{...}}}}, got {settings!r}")
    for key in settings:
        if key not in allowed:
            raise InputError(f"{SETTINGS}: {json_path(key)}: unknown section (this tool takes {', '.join(allowed)})")
    return sections_from(settings, InFile(SETTINGS))


def settings_object(cls, named: dict[str, Any], arguments, given: dict[str, dict[str, Any]], *, quick: bool = False):
    """``cls``'s defaults, then its section of ``given``, then ``--quick`` (the gate), then the named
    arguments that were given; every value through the one validator."""
    import dataclasses

    from kernel_forge.config.build import build, section_of
    from kernel_forge.config.gate_settings import QUICK

    section = section_of(cls)
    base = dataclasses.replace(cls(), **{**given.get(section, {}), **(QUICK if quick and section == "gate" else {})})
    values = {name: named[arg] for (s, name), arg in arguments.items()
              if s == section and named.get(arg) is not None}
    return build(cls, values, where_of(arguments), base=base)


class Service:
    """The tools' work, as plain methods returning dicts (raising KForgeError on bad input)."""

    def __init__(self, runs_dir: str | Path = "runs", *, gate_factory=None, gate_label: str = "gpu",
                 allow: tuple[str | Path, ...] = ()):
        from kernel_forge.ci.evaluate import default_gate

        self.runs_dir = Path(runs_dir)
        #: the folders an agent's paths may resolve into: the working folder at start-up, the runs
        #: folder, and each ``--allow DIR`` (symlinks resolved once, here)
        self.roots = allowed_roots(Path.cwd(), self.runs_dir, *allow)
        self.gate_factory = gate_factory or default_gate
        self.gate_label = gate_label
        self._lock = threading.Lock()
        self._runs: dict[str, dict] = {}     # run folder -> {"thread", "log", "error", "summary"}
        self.on_new_run = lambda path: None  #: called with a new run's folder (the server lists it)

    # -- helpers ----------------------------------------------------------------------------
    def _inside(self, value: str | Path, argument: str) -> Path:
        """``value`` (an agent's path), resolved; an :class:`InputError` naming ``argument`` when it
        leaves the allowed folders."""
        return inside(value, self.roots, argument)

    def _manifest(self, manifest: str, argument: str = "manifest"):
        """The task of an agent's manifest, after it and every file it names passed :meth:`_inside`."""
        from kernel_forge.authoring.validate import task_files
        from kernel_forge.model.task import load_task

        real = self._inside(manifest, argument)
        task = load_task(real)          # the path checked, not the one given: a link swapped since is not followed
        for what, _shown, path in task_files(task):
            self._inside(path, f"{argument} ({task.path}: its {what})")
        return task

    def _settings_paths(self, settings) -> None:
        """The paths inside ``settings`` (the archive, a replay source) through :meth:`_inside`."""
        if not isinstance(settings, dict):
            return
        for (section, key), words in PATH_SETTINGS.items():
            given = settings.get(section)
            value = given.get(key) if isinstance(given, dict) else None
            if isinstance(value, str) and value not in words:
                self._inside(value, f"{SETTINGS}: $.{section}.{key}")

    def _kernel_text(self, path: str, argument: str = "path") -> str:
        """The text of a kernel file an agent named: inside the allowed folders, a regular file of at
        most :data:`MAX_SOURCE` bytes, UTF-8."""
        from kernel_forge.common.reads import Unreadable, read_input_bytes

        real = self._inside(path, argument)
        try:
            data = read_input_bytes(real, "kernel file", limit=MAX_SOURCE)
        except Unreadable as exc:
            raise InputError(f"{argument}: {path}: {exc.reason}") from None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{argument}: {path}: the kernel file is not UTF-8 text (byte offset {exc.start})") from None

    def _options(self, tool: str, named: dict[str, Any], settings, *, quick: bool = False):
        """The GateOptions of eval_kernel and replay: the defaults, ``settings`` (its gate section),
        ``quick``, then the named arguments of ``tool``; every value through the one validator."""
        from kernel_forge.app import option_checks
        from kernel_forge.app.mcp_tools import named_arguments
        from kernel_forge.config.gate_settings import GateOptions

        arguments = named_arguments(tool)
        opts = settings_object(GateOptions, named, arguments, sections_of(settings, ("gate",)), quick=quick)
        option_checks.check_settings(opts, where_of(arguments))
        return opts

    def _busy(self) -> str | None:
        with self._lock:
            for path, r in self._runs.items():
                if r["thread"].is_alive():
                    return path
        return None

    def _refuse_while_running(self, what: str) -> None:
        busy = self._busy()
        if busy:
            raise InputError(f"{what} would share the GPU with the optimize run in {busy}: its times and the run's "
                             "would both be disturbed", hint="wait for it (run_status), then ask again")

    def _run_dir(self, run: str) -> Path:
        p = Path(run)
        if not p.is_dir() and _RUN_NAME.match(run):
            p = self.runs_dir / run
        self._inside(p, "run")
        if not (p / "run.json").is_file():
            raise InputError(f"{run}: not a kforge run folder (no run.json)", hint=f"runs are under {self.runs_dir}")
        return p

    # -- tools ------------------------------------------------------------------------------
    def doctor(self) -> dict:
        from kernel_forge.app.doctor import collect

        report = collect()
        report["gate"] = self.gate_label
        return report

    def validate_manifest(self, manifest: str, deep: bool = False, arch: str | None = "sm_90") -> dict:
        from kernel_forge.authoring.validate import validate_manifest

        self._manifest(manifest)
        r = validate_manifest(manifest, deep=deep, arch=arch, arch_where="arch")
        t = r.task
        return {"ok": True, "task": t.name, "manifest": str(t.path),
                "cases": [{"name": c.name, "role": c.role, "vars": c.vars} for c in t.cases],
                "files": [{"what": w, "path": p, "outside_manifest_folder": o} for w, p, o in r.resolved],
                "compiled": [{"kernel": k, "arch": r.arch, "resources": res} for k, res in r.compiled],
                "not_compiled": r.not_compiled or None,
                "reference_not_run": [{"case": c, "why": w} for c, w in r.skipped],
                "warnings": r.warnings}

    def eval_kernel(self, manifest: str, source: str | None = None, path: str | None = None, *,
                    quick: bool = False, warmup: int | None = None, reps: int | None = None, seed: int | None = None,
                    timeout: float | None = None, arch: str | None = None, holdout: bool = True,
                    baselines: bool = True, initial: bool = True, settings: dict | None = None) -> dict:
        from kernel_forge.gate import preflight
        from kernel_forge.model.candidate import parse_candidate
        from kernel_forge.analysis.diagnosis import diagnose
        from kernel_forge.ci.evaluate import run_eval
        from kernel_forge.model.task import load_task

        if (source is None) == (path is None):
            raise InputError("eval_kernel needs the kernel as source (text) or path (a .cu file), one of them")
        if source is not None and len(source) > MAX_SOURCE:
            raise InputError(f"source: {len(source)} characters, over the {MAX_SOURCE} a kernel file may have")
        self._manifest(manifest)
        if path is not None:
            source = self._kernel_text(path)
        self._refuse_while_running("eval_kernel")
        opts = self._options("eval_kernel", dict(warmup=warmup, reps=reps, seed=seed, timeout=timeout, arch=arch),
                             settings, quick=quick)
        cand = parse_candidate(source, name=path or "kernel.cu")
        try:
            result, _table = run_eval(manifest, None, opts, with_initial=initial, with_baselines=baselines,
                                      with_holdout=holdout, candidate=cand, gate_factory=self.gate_factory)
        except preflight.KernelRefused as exc:     # a kernel that cannot run is a verdict, not a fault
            return {"gate": self.gate_label, "passed": False, "verdict": "failed", "reason": exc.reason,
                    "message": exc.message, "cases": [], "score_us": None, "bound": None, "compile": None}
        task = load_task(manifest)
        diag = diagnose(task, result, initial=result.get("initial"), baselines=result.get("baselines"),
                        device=result.get("device"), calibration=result.get("calibration"))
        bounds = {c.name: c.bound for c in diag.cases}
        cases = []
        for c in result["cases"]:
            t = c.get("timing") or {}
            cases.append({"name": c["name"], "role": c["role"], "passed": c["passed"], "reason": c["reason"],
                          "message": c["message"], "median_us": t.get("median"), "p20_us": t.get("p20"),
                          "p80_us": t.get("p80"), "cv": t.get("cv"), "timing_method": t.get("method"),
                          "gbps": c.get("gbps"), "tflops": c.get("tflops"), "pct_peak_bw": c.get("pct_peak_bw"),
                          "pct_peak_flops": c.get("pct_peak_flops"), "speedup_vs_initial": c.get("speedup_vs_initial"),
                          "speedup_vs_baselines": c.get("speedup_vs_baselines"), "bound": bounds.get(c["name"]),
                          "resources": c.get("resources"), "variant": c.get("variant")})
        comp = result.get("compile") or {}
        score = result.get("score") or {}
        return _plain({"gate": self.gate_label, "task": result["task"], "kernel": path or "source",
                       "passed": result["passed"], "verdict": "passed" if result["passed"] else "failed",
                       "reason": result["reason"], "message": result["message"],
                       "score_us": score.get("candidate_us"), "initial_us": score.get("initial_us"),
                       "baselines_us": score.get("baselines_us"),
                       "speedup_vs_initial": (score["initial_us"] / score["candidate_us"]
                                              if score.get("initial_us") and score.get("candidate_us") else None),
                       "cases": cases, "dispatch": result.get("dispatch"), "bound": diag.to_json(), "diagnosis": diag.render(),
                       "compile": {"arch": comp.get("arch"), "resources": comp.get("resources"),
                                   "seconds": comp.get("seconds"), "log": (comp.get("log") or "")[-4000:]},
                       "device": (result.get("device") or {}).get("name"),
                       "wall_seconds": result.get("wall_seconds")})

    def optimize(self, manifest: str, *, models: list[str] | None = None, base_url: str | None = None,
                 replay: str | None = None, max_iterations: int | None = None, candidates: int | None = None,
                 time_limit: float | None = None, tune_budget: int | None = None, budget_usd: float | None = None,
                 patience: int | None = None, quick: bool = False, hints: str | None = None,
                 settings: dict | None = None) -> dict:
        from kernel_forge.app import option_checks
        from kernel_forge.app.mcp_tools import named_arguments
        from kernel_forge.app.run_setup import start_run
        from kernel_forge.config.gate_settings import GateOptions
        from kernel_forge.config.loop_settings import LoopConfig
        from kernel_forge.config.proposer import ProposerConfig

        named = dict(models=models, base_url=base_url, replay=replay, max_iterations=max_iterations,
                     candidates=candidates, time_limit=time_limit, tune_budget=tune_budget, budget_usd=budget_usd,
                     patience=patience, hints=hints)
        self._settings_paths(settings)
        if replay is not None:
            self._inside(replay, "replay")
        given = sections_of(settings, ("loop", "gate", "proposer"))
        arguments = named_arguments("optimize")
        loop, gate_opts, prop = (settings_object(cls, named, arguments, given, quick=quick)
                                 for cls in (LoopConfig, GateOptions, ProposerConfig))
        for obj in (loop, gate_opts, prop):
            option_checks.check_settings(obj, where_of(arguments))
        if prop.replay and prop.models:
            raise InputError("replay and models are exclusive: a run replays recorded proposals or asks models")
        busy = self._busy()
        if busy:
            raise InputError(f"an optimize run is already going in {busy}", hint="wait for it (run_status)")
        task = self._manifest(manifest)
        log: collections.deque = collections.deque(maxlen=200)
        gate = self.gate_factory(task, gate_opts)
        try:
            opt = start_run(manifest, loop, gate_opts, prop, runs_dir=self.runs_dir, progress=log.append, gate=gate)
        except BaseException:
            gate.close()
            raise
        path = str(opt.run_dir.path)
        record = {"log": log, "error": None, "summary": None, "started": time.time()}

        def work():
            try:
                record["summary"] = opt.run()
            except BaseException as exc:  # noqa: BLE001 - recorded for run_status; the evidence stays resumable
                record["error"] = f"{type(exc).__name__}: {exc}"
                log.append(traceback.format_exc(limit=-3))
            finally:
                gate.close()

        record["thread"] = threading.Thread(target=work, name=f"kforge-{opt.run_dir.path.name}", daemon=True)
        with self._lock:
            self._runs[path] = record
        record["thread"].start()
        self.on_new_run(opt.run_dir.path)
        return {"gate": self.gate_label, "run": path, "task": task.name, "proposer": prop.kind,
                "status": "started", "hint": "poll run_status with this run; its summary and report become "
                                             "resources when it finishes"}

    def run_status(self, run: str, wait_s: float = 0.0) -> dict:
        from kernel_forge.evidence.run_dir import RunDir

        p = self._run_dir(run)
        record = self._runs.get(str(p))
        if record is not None and wait_s > 0:
            record["thread"].join(timeout=min(float(wait_s), 600.0))
        rd = RunDir(p)
        meta = rd.read_json("run.json")
        summary = rd.read_json("summary.json")
        # the history grows with the run and is read on every poll: its schema check is left to
        # resume and report; here only the fields used are checked
        from kernel_forge.evidence.history_log import read_history

        hist = read_history(rd, {}, check=False) or {}
        try:
            attempts = list(hist.get("attempts", []))
            done = [a for a in attempts if a.get("status") != "pending"]
            best = next((a for a in reversed(attempts) if a.get("best")), None)
            iteration = (hist.get("state") or {}).get("iteration")
        except (AttributeError, TypeError) as exc:
            raise InputError(f"{p / 'history.json'}: not a kforge history ({exc})") from None
        running = record is not None and record["thread"].is_alive()
        state = "running" if running else ("finished" if summary else
                                           "stopped (resume it: kforge optimize --resume " + str(p) + ")")
        out = {"run": str(p), "task": meta.get("task"), "state": state, "iteration": iteration,
               "attempts": len(attempts), "gated": len(done), "passed": sum(a.get("status") == "passed" for a in done),
               "best_so_far": ({"id": best.get("id"), "score_us": best.get("score_us"), "label": best.get("label")}
                               if best else None)}
        if summary:
            b = summary.get("best") or {}
            out.update(stop_reason=summary.get("stop_reason"),
                       best={"id": b.get("id"), "score_us": b.get("score_us"),
                             "speedup_vs_initial": b.get("speedup_vs_initial"),
                             "speedup_vs_baselines": b.get("speedup_vs_baselines"), "holdout": b.get("holdout")},
                       cost_usd=summary.get("cost_usd"),
                       resources=[f"kforge://runs/{p.name}/summary", f"kforge://runs/{p.name}/report"])
        if record is not None:
            out["log"] = list(record["log"])[-20:]
            if record["error"]:
                out["error"] = record["error"]
        return _plain(out)

    def replay(self, request: str, *, warmup: int | None = None, reps: int | None = None,
               timeout: float | None = None, quick: bool = False, settings: dict | None = None) -> dict:
        from kernel_forge.ci.replay_check import replay

        from kernel_forge.ci.replay_check import load_request, request_files

        self._inside(request, "request")
        manifest, kernel = request_files(Path(request), load_request(request))
        self._manifest(str(manifest), f"request ({request}: $.manifest)")
        self._kernel_text(str(kernel), f"request ({request}: $.kernel)")
        self._refuse_while_running("replay")
        opts = self._options("replay", dict(warmup=warmup, reps=reps, timeout=timeout), settings, quick=quick)
        result, _table = replay(request, opts, gate_factory=self.gate_factory)
        result["gate"] = self.gate_label
        return _plain(result)

    # -- resources --------------------------------------------------------------------------
    def resource_text(self, run: str, name: str) -> str:
        if not _RUN_NAME.match(run):
            raise InputError(f"{run!r} is not a run name like run-007")
        p = self.runs_dir / run / name
        if not p.is_file():
            raise InputError(f"{p} does not exist (yet): the run has not finished")
        return p.read_text(encoding="utf-8")


def build_server(service: Service):
    """The MCP server (``mcp`` SDK) whose tools and resources call ``service``."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ResourceError
        from mcp.server.mcpserver.resources import FunctionResource
    except ImportError as exc:
        from kernel_forge.common.errors import EnvironmentProblem
        raise EnvironmentProblem(f"the MCP SDK is not installed ({exc})",
                                 hint='pip install "cuda-kernel-forge[mcp]" (the official mcp package, 2.x)') from None
    from kernel_forge import __version__
    from kernel_forge.app.mcp_tools import make_tools

    server = MCPServer("kforge", version=__version__, tools=make_tools(service), instructions=(
        "kernel_forge: an honest gate for one CUDA kernel. validate_manifest checks a task; eval_kernel runs a kernel "
        "through the anti-cheat gate (verdict, reason, per-case times, % of peak, bound, registers); optimize starts a "
        "run in the background; run_status follows it; replay re-checks a recorded time. Paths are relative to the "
        "server's working folder and must stay inside it (or a folder the user allowed with kforge mcp --allow). "
        "A manifest's reference is Python code that runs as the user."))

    def read(run: str, name: str) -> str:
        try:
            return service.resource_text(run, name)
        except KForgeError as exc:
            raise ResourceError(str(exc)) from None

    @server.resource("kforge://runs/{run}/summary", mime_type="application/json",
                     description="summary.json of a finished run: best kernel, speedups, holdout, stop reason, cost")
    def summary_resource(run: str) -> str:
        return read(run, "summary.json")

    @server.resource("kforge://runs/{run}/report", mime_type="text/markdown",
                     description="report.md of a finished run")
    def report_resource(run: str) -> str:
        return read(run, "report.md")

    listed: set[str] = set()

    def list_run(path: Path) -> None:
        name = Path(path).name
        if name in listed or not _RUN_NAME.match(name):
            return
        listed.add(name)
        for kind, fname, mime in (("summary", "summary.json", "application/json"),
                                  ("report", "report.md", "text/markdown")):
            def content(n: str = name, f: str = fname) -> str:
                return read(n, f)
            server.add_resource(FunctionResource.from_function(
                content, uri=f"kforge://runs/{name}/{kind}", name=f"{name} {kind}", mime_type=mime,
                description=f"{fname} of {name}"))

    if service.runs_dir.is_dir():
        for p in sorted(service.runs_dir.iterdir()):
            if (p / "run.json").is_file():
                list_run(p)
    service.on_new_run = list_run
    return server


def serve(runs_dir: str | Path = "runs", allow: tuple[str | Path, ...] = ()) -> None:
    """Run the server over stdio until the client closes it; agents' paths stay inside the working
    folder, ``runs_dir`` and the ``allow`` folders."""
    spec = os.environ.get(TEST_GATE_ENV)
    if spec:
        factory, label = gate_factory_from_spec(spec), f"test: {spec} (not measured)"
        print(f"[kforge mcp] {TEST_GATE_ENV} is set: verdicts come from {spec}, not from a GPU", file=sys.stderr)
    else:
        factory, label = None, "gpu"
    server = build_server(Service(runs_dir, gate_factory=factory, gate_label=label, allow=allow))
    server.run("stdio")


__all__ = ["Service", "build_server", "serve", "gate_factory_from_spec", "TEST_GATE_ENV"]
