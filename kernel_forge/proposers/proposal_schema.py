"""The shape of one candidate as a model submits it (the ``submit_kernel`` tool's arguments).

Model-backed proposers hand :func:`proposal_schema` to the provider as the tool's input schema,
check whatever comes back with :func:`check_proposal` (a readable message such as
``$.launch.grid: [] should be non-empty``, or ``None``) and turn valid arguments into a
:class:`~kernel_forge.proposers.base.Proposal` with :func:`to_proposal`.

The launch follows the manifest's launch object: ``grid`` and ``block`` are lists of one to three
items, each an integer or an expression over case variables and tunables (``"cdiv(n, BLOCK)"``);
``shared_mem`` is one such item.  ``tunables`` maps a macro name to the values a tuner may try.
"""
from __future__ import annotations

import copy
import re
from typing import Any

from kernel_forge.common.json_path import json_path
from kernel_forge.proposers.base import Proposal

TOOL_NAME = "submit_kernel"

TOOL_DESCRIPTION = (
    "Submit one complete candidate CUDA kernel. `source` is the whole .cu file (same entry point "
    "and signature as the current kernel); `rationale` says briefly why it should be faster. "
    "`launch` (optional) gives grid, block and dynamic shared memory as integers or expressions "
    "over the case variables and tunables; `tunables` (optional) maps a macro name, passed as "
    "-DNAME=VALUE, to the values worth trying; `direction`, `technique` and `predicted_speedup` "
    "(optional) say what the kernel tries and how much faster you expect it to be."
)

_EXPR: dict = {
    "anyOf": [
        {"type": "integer", "minimum": 0},
        {"type": "string", "minLength": 1},
    ],
    "description": "An integer or an expression over case variables and tunables, e.g. \"cdiv(n, BLOCK)\".",
}

_DIMS: dict = {"type": "array", "minItems": 1, "maxItems": 3, "items": _EXPR}

PROPOSAL_SCHEMA: dict = {
    "type": "object",
    "properties": {
        "source": {
            "type": "string",
            "minLength": 1,
            "description": "The complete CUDA .cu source of the candidate kernel.",
        },
        "rationale": {
            "type": "string",
            "description": "Why this version should be faster than the current best, in a few sentences.",
        },
        "launch": {
            "type": "object",
            "description": "Launch configuration; omit to keep the task's launch.",
            "properties": {
                "grid": {**_DIMS, "description": "Grid dimensions (1 to 3 items)."},
                "block": {**_DIMS, "description": "Block dimensions (1 to 3 items)."},
                "shared_mem": {**_EXPR, "description": "Dynamic shared memory in bytes (integer or expression)."},
                "cooperative": {"type": "boolean",
                                "description": "Launch with cuLaunchCooperativeKernel (grid-wide sync); the whole "
                                               "grid must fit on the GPU at once."},
            },
            "required": ["grid", "block"],
            "additionalProperties": False,
        },
        "tunables": {
            "type": "object",
            "description": "Compile-time macros to tune: NAME -> list of candidate values (first is the default).",
            "additionalProperties": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "number"},
            },
        },
        "direction": {"type": "string", "description": "The direction this kernel takes, in a few words."},
        "technique": {"type": "string", "description": "The main technique, e.g. 'vectorised float4 loads'."},
        "predicted_speedup": {
            "type": "number",
            "exclusiveMinimum": 0,
            "description": "The speedup over the kernel it builds on that you expect, e.g. 1.3.",
        },
    },
    "required": ["source", "rationale"],
}

_MACRO = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MAX_ERRORS = 5
_MAX_MESSAGE = 300


def proposal_schema() -> dict:
    """A fresh copy of the proposal JSON schema (callers may embed or mutate it)."""
    return copy.deepcopy(PROPOSAL_SCHEMA)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe_alternative(schema: dict) -> str:
    kind = schema.get("type")
    if kind == "integer":
        return "a non-negative integer" if schema.get("minimum") == 0 else "an integer"
    if kind == "string":
        return "a non-empty expression string" if schema.get("minLength") else "a string"
    return str(kind or "a value")


def _message(err) -> str:
    if err.validator in ("anyOf", "oneOf"):
        alternatives = " or ".join(_describe_alternative(s) for s in err.validator_value)
        text = f"expected {alternatives}, got {_short(err.instance)}"
    elif err.validator == "type":
        text = f"expected {err.validator_value}, got {type(err.instance).__name__} {_short(err.instance)}"
    elif err.validator == "required":
        missing = [k for k in err.validator_value if isinstance(err.instance, dict) and k not in err.instance]
        text = f"missing required field {missing[0]!r}" if missing else err.message
    elif err.validator == "additionalProperties":
        extra = sorted(set(err.instance) - set(err.schema.get("properties", {}))) if isinstance(err.instance, dict) else []
        text = f"unexpected field(s) {', '.join(map(repr, extra))}" if extra else err.message
    elif err.validator == "minItems":
        text = f"needs at least {err.validator_value} item(s), got {len(err.instance)}"
    elif err.validator == "maxItems":
        text = f"allows at most {err.validator_value} item(s), got {len(err.instance)}"
    elif err.validator == "minLength":
        text = "must not be empty"
    elif err.validator == "minimum":
        text = f"must be >= {err.validator_value}, got {_short(err.instance)}"
    else:
        text = err.message
    if len(text) > _MAX_MESSAGE:
        text = text[: _MAX_MESSAGE - 3] + "..."
    return f"{json_path(*err.absolute_path)}: {text}"


def check_proposal(args: object) -> str | None:
    """``None`` when ``args`` is a valid proposal, else a readable message naming the JSON path
    of each problem (at most five, then a count), e.g. ``$.launch.grid: needs at least 1 item(s), got 0``."""
    import jsonschema

    if not isinstance(args, dict):
        return f"$: expected an object with 'source' and 'rationale', got {type(args).__name__} {_short(args)}"
    validator = jsonschema.Draft202012Validator(PROPOSAL_SCHEMA)
    errors = sorted(validator.iter_errors(args),
                    key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    messages = [_message(e) for e in errors]
    tunables = args.get("tunables")
    if isinstance(tunables, dict):
        for name in tunables:
            if not _MACRO.match(str(name)):
                messages.append(f"{json_path('tunables', name)}: not a valid macro name (letters, digits, underscore; "
                                f"not starting with a digit)")
    if isinstance(args.get("source"), str) and args["source"].strip() == "" and args["source"] != "":
        messages.append("$.source: must not be blank")
    if not messages:
        return None
    shown = messages[:_MAX_ERRORS]
    more = len(messages) - len(shown)
    text = "; ".join(shown)
    if more:
        text += f" (and {more} more problem(s))"
    return text


class ProposalSchemaError(ValueError):
    """Arguments that do not match :data:`PROPOSAL_SCHEMA`; ``str()`` is the readable message."""


def validate_proposal(args: object) -> dict:
    """Return ``args`` unchanged if valid, else raise :class:`ProposalSchemaError`."""
    problem = check_proposal(args)
    if problem is not None:
        raise ProposalSchemaError(problem)
    return args  # type: ignore[return-value]


def to_proposal(args: dict, *, proposer: str = "", parent: str | None = None, label: str = "",
                rationale_prefix: str = "") -> Proposal:
    """Turn validated arguments into a :class:`Proposal` (raises :class:`ProposalSchemaError` if
    they are not valid).  ``launch`` gets ``shared_mem`` 0 when the model left it out."""
    validate_proposal(args)
    launch = None
    if args.get("launch") is not None:
        raw = args["launch"]
        launch = {"grid": list(raw["grid"]), "block": list(raw["block"]),
                  "shared_mem": raw.get("shared_mem", 0)}
        if raw.get("cooperative"):
            launch["cooperative"] = True
    tunables = None
    if args.get("tunables"):
        tunables = {str(k): list(v) for k, v in args["tunables"].items()}
    rationale = str(args.get("rationale", "")).strip()
    if rationale_prefix:
        rationale = f"{rationale_prefix} {rationale}".strip()
    technique = str(args.get("technique") or "").strip()
    speedup = args.get("predicted_speedup")
    speedup = float(speedup) if isinstance(speedup, (int, float)) and not isinstance(speedup, bool) else None
    return Proposal(source=args["source"], rationale=rationale, launch=launch, tunables=tunables,
                    proposer=proposer, parent=parent, label=label, technique=technique,
                    predicted_speedup=speedup, model_direction=str(args.get("direction") or "").strip())
