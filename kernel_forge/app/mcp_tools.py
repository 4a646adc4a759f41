"""The MCP tools of ``kforge mcp``, generated: each tool is a row of :data:`TOOLS` (its name, what it
does, its own arguments, and the settings it takes as named arguments), and its signature, input
schema and per-argument descriptions are made from that row and from the settings' declaration
(:mod:`kernel_forge.config`, the provider options of :mod:`kernel_forge.proposers.options`): a
setting's type, help and bounds are written once, for the command line, the config file and the
tools alike.  Every tool's schema is strict: an argument it does not take is a tool error that
names the ones it does (:func:`strict_arguments`).  The ``mcp`` SDK is imported only here, by
:func:`make_tools`, through its public ``Tool.from_function``.
"""
from __future__ import annotations

import inspect
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Optional

from kernel_forge.common.errors import KForgeError
from kernel_forge.common.setting import bound_words, fields_of, strip_optional

#: the sections a tool's named settings come from
SECTIONS = ("loop", "gate", "proposer")


@dataclass(frozen=True)
class Arg:
    """One argument of a tool that is not a setting."""

    name: str
    annotation: Any
    default: Any = inspect.Parameter.empty
    help: str = ""


@dataclass(frozen=True)
class Named:
    """A setting a tool takes as a named argument (``section.field``, called ``name`` in the tool)."""

    section: str
    field: str
    name: str | None = None

    @property
    def argument(self) -> str:
        return self.name or self.field


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name (the :class:`~kernel_forge.app.mcp_server.Service` method it calls), what
    it does, its own arguments, the settings it takes by name, and the arguments after those."""

    name: str
    doc: str
    args: tuple[Arg, ...] = ()
    named: tuple[Named, ...] = ()
    rest: tuple[Arg, ...] = ()


MANIFEST = Arg("manifest", str, help="path of the task's manifest JSON")
QUICK = Arg("quick", bool, False, "one input draw, no repeat launch (the last timed launch is still checked)")


def _settings(sections: str) -> Arg:
    return Arg("settings", Optional[dict[str, Any]], None,
               f"any other setting, as in a kforge optimize --config file: {sections}")


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec("doctor", "What this machine has: GPU, driver, CUDA/NVRTC, bindings, CuPy, which LLM keys are set "
                       "(never values)."),
    ToolSpec("validate_manifest",
             "Check a task manifest without a GPU: schema, meaning, files (and where they resolve), case sizes, "
             "the initial kernel and templates (static rules, signature, NVRTC for arch), weak cases.",
             (MANIFEST, Arg("deep", bool, False, "run the reference on every case that fits this host, large ones too"),
              Arg("arch", str, "sm_90", "the architecture NVRTC compiles the kernels for, like sm_90"))),
    ToolSpec("eval_kernel",
             "Run one kernel (source text, or path of a .cu file) through the gate on every case of manifest: "
             "verdict and reason code, per-case median µs with its p20-p80 band, % of peak bandwidth/FLOP/s, the "
             "bound, speedups vs the initial kernel and vendor baselines, and the compiler's resources (registers, "
             "spills). Unset numbers take kforge's defaults; settings: {\"gate\": {...}} holds any other gate "
             "setting, as in a kforge optimize --config file.",
             (MANIFEST, Arg("source", Optional[str], None, "the kernel's .cu source text (or give path)"),
              Arg("path", Optional[str], None, "path of the kernel's .cu file (or give source)"), QUICK),
             (Named("gate", "reps"), Named("gate", "warmup"), Named("gate", "seed"),
              Named("gate", "launch_timeout_s", "timeout"), Named("gate", "arch")),
             (Arg("holdout", bool, True, "also run the holdout cases"),
              Arg("baselines", bool, True, "also time the vendor baselines"),
              Arg("initial", bool, True, "also time the task's initial kernel"), _settings('{"gate": {...}}'))),
    ToolSpec("optimize",
             "Start `kforge optimize` on manifest in the background (no models: the built-in tuner; models like "
             "\"anthropic:claude-sonnet-5-5\" use the keys in the server's environment). Returns the run folder at "
             "once; follow it with run_status. settings: {\"loop\": {...}, \"gate\": {...}, \"proposer\": {...}} "
             "holds any other setting, as in a kforge optimize --config file (the named arguments win over it).",
             (MANIFEST,),
             (Named("proposer", "models"), Named("proposer", "base_url"), Named("proposer", "replay"),
              Named("loop", "max_iterations"), Named("loop", "candidates"), Named("loop", "time_limit_s", "time_limit"),
              Named("loop", "tune_budget"), Named("loop", "budget_usd"), Named("loop", "patience"),
              Named("loop", "hints")),
             (QUICK, _settings('{"loop": {...}, "gate": {...}, "proposer": {...}}'))),
    ToolSpec("run_status",
             "Progress of a run folder (or a run name under the runs folder): attempts gated, best so far, and when "
             "finished the stop reason, speedups and holdout. wait_s waits up to that long for a run of this server.",
             (Arg("run", str, help="a run folder, or a run name like run-007 under the runs folder"),
              Arg("wait_s", float, 0.0, "seconds to wait for a run of this server to finish (at most 600)"))),
    ToolSpec("replay",
             "Re-run a recorded best-case-NAME.json (the best kernel on that case, same seeds) and say whether its "
             "recorded median holds within the measured noise band. settings: {\"gate\": {...}}, as in a config file.",
             (Arg("request", str, help="path of a best-case-NAME.json replay request"),),
             (Named("gate", "reps"), Named("gate", "warmup"), Named("gate", "launch_timeout_s", "timeout")),
             (QUICK, _settings('{"gate": {...}}'))),
)

BY_NAME = {t.name: t for t in TOOLS}


def named_arguments(tool: str) -> dict[tuple[str, str], str]:
    """``{(section, field): argument}`` of the settings ``tool`` takes by name."""
    return {(n.section, n.field): n.argument for n in BY_NAME[tool].named}


def _declared(n: Named):
    from kernel_forge.config.sections import RUN_SECTIONS

    return {f.name: f for f in fields_of(dict(RUN_SECTIONS)[n.section])}[n.field]


def setting_argument(n: Named) -> Arg:
    """The argument of a named setting: its declared type (unset: None, kforge's default), its help
    and bounds, its default and its config key."""
    f = _declared(n)
    inner, _ = strip_optional(f.annotation)
    bounds = bound_words(f.spec)
    shown = "" if f.default in (None, "", [], {}) else f"; default {f.default!r}"
    text = (f.spec.help or n.field.replace("_", " ")) + (f" ({bounds})" if bounds else "")
    return Arg(n.argument, Optional[inner], None, f"{text}{shown}; {n.section}.{n.field} in settings")


def arguments_of(spec: ToolSpec) -> list[Arg]:
    """Every argument of a tool, in order: its own, its named settings, the rest."""
    return [*spec.args, *(setting_argument(n) for n in spec.named), *spec.rest]


def signature(spec: ToolSpec) -> inspect.Signature:
    """The tool function's signature: each argument typed and described (pydantic ``Field``)."""
    from pydantic import Field

    params = [inspect.Parameter(a.name, inspect.Parameter.KEYWORD_ONLY, default=a.default,
                                annotation=Annotated[a.annotation, Field(description=a.help)] if a.help
                                else a.annotation) for a in arguments_of(spec)]
    return inspect.Signature(params, return_annotation=dict[str, Any])


def tool_function(spec: ToolSpec, method: Callable[..., dict]) -> Callable[..., dict]:
    """A function with ``spec``'s signature that calls ``method`` (a Service method) with the
    arguments by name; a :class:`KForgeError` becomes a tool error with the CLI's message."""
    from mcp.server.mcpserver.exceptions import ToolError

    def run(**kwargs) -> dict[str, Any]:
        try:
            return method(**kwargs)
        except KForgeError as exc:
            raise ToolError(f"{type(exc).__name__} (exit code {exc.exit_code} in the CLI): {exc}") from None
        except Exception as exc:  # noqa: BLE001 - the message reaches the agent, the traceback stderr
            traceback.print_exc(file=sys.stderr)
            raise ToolError(f"internal error: {type(exc).__name__}: {exc} (please report)") from None

    run.__name__ = run.__qualname__ = spec.name
    run.__doc__ = spec.doc
    run.__signature__ = signature(spec)          # type: ignore[attr-defined]
    return run


def unknown_arguments(tool: str, unknown: list[str], known: list[str]) -> str:
    """The message for arguments a tool does not take: each, with a close known name if there is one."""
    import difflib

    parts = []
    for k in unknown:
        close = difflib.get_close_matches(str(k), known, n=1, cutoff=0.6)
        parts.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return (f"{tool}: unknown argument{'s' if len(unknown) > 1 else ''} {', '.join(parts)}; nothing was done. "
            f"{tool} takes: {', '.join(known) or 'no arguments'}")


def strict_arguments(tool) -> None:
    """Make an MCP tool refuse arguments it does not take: its input schema says
    ``additionalProperties: false`` and a call with an unknown one is a tool error naming the
    known ones (the SDK would drop it silently: ``{"model": [...]}`` ran the tuner)."""
    from pydantic import ConfigDict, model_validator

    base = tool.fn_metadata.arg_model
    known = sorted(f.alias or name for name, f in base.model_fields.items())
    name = tool.name

    def _only_known(cls, data):
        if isinstance(data, dict):
            unknown = [k for k in data if k not in known]
            if unknown:
                raise ValueError(unknown_arguments(name, unknown, known))
        return data

    strict = type(f"{name} arguments", (base,), {
        "model_config": ConfigDict(arbitrary_types_allowed=True, extra="forbid"),
        "_only_known": model_validator(mode="before")(classmethod(_only_known))})
    tool.fn_metadata.arg_model = strict
    tool.parameters = {**tool.parameters, "additionalProperties": False}


def make_tools(service) -> list:
    """The MCP tools (the SDK's ``Tool``) of every row of :data:`TOOLS`, each calling the
    ``service`` method of its name, strict about its arguments."""
    from mcp.server.mcpserver.tools import Tool

    tools = []
    for spec in TOOLS:
        tool = Tool.from_function(tool_function(spec, getattr(service, spec.name)), name=spec.name,
                                  description=spec.doc, structured_output=True)
        strict_arguments(tool)
        tools.append(tool)
    return tools
