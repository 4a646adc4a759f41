"""The settings part of ``schemas/run.schema.json`` (``$.loop``, ``$.gate``, ``$.proposer``),
generated from the declaration; the declaration is the source, the schema file its copy.

    python -m kernel_forge.config.schema          # rewrite the file after a setting changed
    python -m kernel_forge.config.schema --check  # exit 1 if the file is not what the declaration says

(``tests/config/test_schema.py`` fails while the committed file differs.)"""
from __future__ import annotations

import json
import sys
import typing
from importlib import resources
from pathlib import Path
from typing import Any

from kernel_forge.common.writes import write_text
from kernel_forge.config.sections import RUN_SECTIONS
from kernel_forge.common.setting import Field, fields_of, strip_optional

#: the settings every run.json has held since runs were first recorded; a setting added since is
#: optional in the schema, so that the runs of earlier releases still read (and resume)
FIRST_RECORDED = {
    "loop": ("max_iterations", "candidates", "budget_usd", "max_tokens", "time_limit_s", "patience", "target_speedup",
             "tune_budget", "refine", "history_in_prompt", "failures_in_prompt", "crossover_every", "retime_rounds",
             "min_improvement", "hints", "seed", "fix_turns", "profile", "history_chars", "archive",
             "archive_examples", "archive_chars"),
    "gate": ("warmup", "reps", "flush_l2", "seed", "extra_draws", "repeat_check", "check_after_timing", "plausibility",
             "fail_fast", "launch_timeout_s", "timing_timeout_s", "arch", "device", "sanitize", "plausible_margin",
             "fresh_seeds", "timing_budget_s", "min_reps", "max_noise", "warmup_budget_s", "min_warmup", "compare",
             "sample_size", "resident_bytes", "compile_threads", "devices"),
    "proposer": ("models", "base_url", "ensemble", "replay", "prices", "max_tokens", "temperature", "max_tokens_cap",
                 "reasoning_effort", "thinking_budget", "thinking", "request_timeout_s", "timeout_retries",
                 "max_attempts", "stream", "max_tokens_field", "prompt_cache"),
}
ADDED = "Absent in runs of earlier releases."
_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean", dict: "object", list: "array"}


def _type(annotation: Any, spec) -> dict:
    inner, optional = strip_optional(annotation)
    origin = typing.get_origin(inner)
    if origin is typing.Literal:
        return {"enum": list(typing.get_args(inner)) + ([None] if optional else [])}
    out: dict[str, Any] = {}
    name = _TYPES.get(origin or inner, "string")
    out["type"] = [name, "null"] if optional else name
    if origin in (list, tuple):
        sub = typing.get_args(inner)[0] if typing.get_args(inner) else Any
        out["items"] = {**_type(sub, None), **(_bounds(spec) if spec is not None else {})}
    elif spec is not None:
        out.update(_bounds(spec))
    return out


def _bounds(spec) -> dict:
    out: dict[str, Any] = {}
    for key, value in (("minimum", spec.min), ("exclusiveMinimum", spec.above), ("maximum", spec.max),
                       ("exclusiveMaximum", spec.below), ("pattern", spec.pattern)):
        if value is not None:
            out[key] = value
    if spec.must and spec.pattern:
        out["x-must"] = spec.must
    return out


def _sentence(text: str) -> str:
    text = text.strip()
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text.endswith(".") else text + "."


def property_of(section: str, f: Field) -> dict:
    """One setting's JSON schema."""
    inner, _ = strip_optional(f.annotation)
    out = _type(f.annotation, None if typing.get_origin(inner) is typing.Literal else f.spec)
    out.update(f.spec.json_schema or {})
    out["default"] = f.default
    text = _sentence(f.spec.help or f.name.replace("_", " "))
    out["description"] = text if f.name in FIRST_RECORDED.get(section, ()) else f"{text} {ADDED}".strip()
    return out


def section_schema(section: str, cls: type) -> dict:
    """A section's schema: every field, the first-recorded ones required, nothing else allowed."""
    fields = fields_of(cls)
    first = FIRST_RECORDED.get(section, ())
    doc = (cls.__doc__ or "").strip().split("\n\n")[0].split(". ")[0].rstrip(".")
    return {"type": "object", "additionalProperties": False,
            "required": [f.name for f in fields if f.name in first],
            "properties": {f.name: property_of(section, f) for f in fields},
            "description": f"{cls.__name__}: {doc[:1].lower()}{' '.join(doc[1:].split())}."}


def run_schema(current: dict) -> dict:
    """``current`` (the run schema) with its settings sections as the declaration says."""
    out = dict(current)
    props = dict(out["properties"])
    for section, cls in RUN_SECTIONS:
        props[section] = section_schema(section, cls)
    out["properties"] = {k: props[k] for k in current["properties"]}
    return out


def render(schema: dict) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def schema_path() -> Path:
    return Path(str(resources.files("kernel_forge").joinpath("schemas/run.schema.json")))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = schema_path()
    text = path.read_text(encoding="utf-8")
    wanted = render(run_schema(json.loads(text)))
    if "--check" in argv:
        if text != wanted:
            print(f"{path} differs from the settings declared in kernel_forge/config; "
                  "run: python -m kernel_forge.config.schema", file=sys.stderr)
            return 1
        return 0
    if text != wanted:
        write_text(path, wanted, private=False)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
