"""Command-line options generated from configuration dataclasses (the "Options" seam).

Every field of a section's dataclass (``LoopConfig``, ``GateOptions``, ``ProposerConfig`` ...)
becomes a click option: ``--field-name`` (a ``_s`` suffix, seconds, dropped: ``timing_timeout_s`` is
``--timing-timeout``) unless a pinned name is given (kept for compatibility, e.g. ``--timeout`` for
``launch_timeout_s``), or ``--section-field-name`` when another section already took the plain name.  Its help is the field's ``#:`` comment; its type comes from the
annotation (``bool`` -> ``--x/--no-x``, ``int``, ``float``, ``str``, ``Literal[...]`` -> a choice,
``list[...]`` -> a repeatable option; a ``dict`` field is config-file only).  A field added to a
dataclass appears as an option without touching this module or the command.

Values are layered: the dataclass defaults, then the config file section, then presets (such as
``--quick``), then what was typed on the command line -- told apart from click's defaults with
``ctx.get_parameter_source()`` -- and the result is ``dataclasses.replace(cls(), **values)``.
Every value is checked against its annotation and against the bounds of the run schema
(``schemas/run.schema.json``) before anything runs; a bad one is an :class:`InputError` naming the
option or the config file's JSON path.
"""
from __future__ import annotations

import dataclasses
import inspect
import math
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import click

from kernel_forge.common.errors import InputError
from kernel_forge.common.json_path import json_path

_NONE = type(None)
EXPLICIT = frozenset({click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT,
                      click.core.ParameterSource.PROMPT})


@dataclass(frozen=True)
class Opt:
    """One generated option: a field of a section's dataclass."""

    section: str                  # the config file section ("loop", "gate", "proposer")
    name: str                     # the dataclass field
    param: str                    # the click parameter name ("loop__max_iterations")
    decls: tuple[str, ...]        # click declarations, e.g. ("--max-iterations",), ("--flush/--no-flush",)
    annotation: Any               # the field's resolved type
    help: str

    @property
    def flag(self) -> str:
        """The option as a user types it, for messages."""
        return self.decls[0].split("/")[0]

    @property
    def where(self) -> str:
        return f"{self.flag} ({self.section}.{self.name})"


# ------------------------------------------------------------------------------ field docs

_FIELD_LINE = re.compile(r"^\s*([A-Za-z_]\w*)\s*:(?!=)(.*)$")


def field_docs(cls: type) -> dict[str, str]:
    """The ``#:`` comment of every field of dataclass ``cls`` (and its dataclass bases): the
    trailing comment on the field's line, after any ``#:`` lines just above it."""
    names = {f.name for f in dataclasses.fields(cls)}
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass) or klass is object:
            continue
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        pending: list[str] = []
        for line in source.splitlines():
            stripped = line.strip()
            if stripped.startswith("#:"):
                pending.append(stripped[2:].strip())
                continue
            m = _FIELD_LINE.match(line)
            if m and m.group(1) in names and not stripped.startswith(("def ", "class ", "return ")):
                rest = m.group(2)
                trailing = rest.split("#:", 1)[1].strip() if "#:" in rest else ""
                doc = " ".join(pending + ([trailing] if trailing else [])).strip()
                if doc:
                    docs[m.group(1)] = doc
            if stripped and not stripped.startswith("#"):
                pending = []
    return docs


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()                      # type: ignore[misc]
    return None


def _strip_optional(annotation: Any) -> tuple[Any, bool]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not _NONE]
        optional = len(args) < len(typing.get_args(annotation))
        return (args[0] if len(args) == 1 else typing.Union[tuple(args)]), optional
    return annotation, False


def _click_type(annotation: Any):
    """(click type, multiple) for an annotation, or ``None`` if it cannot be typed on a command line."""
    inner, _ = _strip_optional(annotation)
    origin = typing.get_origin(inner)
    if origin is typing.Literal:
        return click.Choice([str(v) for v in typing.get_args(inner)]), False
    if origin in (list, tuple) and typing.get_args(inner):
        sub = _click_type(typing.get_args(inner)[0])
        return (sub[0], True) if sub is not None and not sub[1] else None
    return {int: (click.INT, False), float: (click.FLOAT, False), str: (click.STRING, False)}.get(inner)


def _is_bool(annotation: Any) -> bool:
    return _strip_optional(annotation)[0] is bool


def build_options(sections: list[tuple[str, type]], *, pinned: Mapping[tuple[str, str], tuple[str, ...]] = {},
                  reserved: set[str] = frozenset(), skip: set[tuple[str, str]] = frozenset()) -> list[Opt]:
    """One :class:`Opt` per field of every ``(section, dataclass)`` that a command line can carry.

    ``pinned`` fixes the declarations of some fields (their names claimed first); ``reserved``
    are names the command itself uses; a field whose plain name is taken gets
    ``--section-name``."""
    taken = set(reserved)
    for decls in pinned.values():
        for d in decls:
            taken.update(d.split("/"))
    out: list[Opt] = []
    for section, cls in sections:
        hints = typing.get_type_hints(cls)
        docs = field_docs(cls)
        for f in dataclasses.fields(cls):
            if not f.init or (section, f.name) in skip:
                continue
            annotation = hints.get(f.name, Any)
            if not _is_bool(annotation) and _click_type(annotation) is None:
                continue                                 # a mapping or the like: config file only
            decls = pinned.get((section, f.name))
            if decls is None:
                stem = (f.name[:-2] if f.name.endswith("_s") else f.name).replace("_", "-")   # seconds: no unit
                plain = f"--{stem}"
                if plain in taken:
                    plain = f"--{section}-{stem}"
                decls = (f"{plain}/--no-{plain[2:]}",) if _is_bool(annotation) else (plain,)
                taken.update(decls[0].split("/"))
            default = _default(f)
            doc = docs.get(f.name, "") or f.name.replace("_", " ")
            shown = "" if default in (None, "", [], {}) else f" [default: {_show(default)}]"
            out.append(Opt(section=section, name=f.name, param=f"{section}__{f.name}", decls=tuple(decls),
                           annotation=annotation, help=f"{doc}{shown}"))
    return out


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value))
    return str(value)


def apply_options(options: list[Opt]) -> Callable:
    """A decorator adding ``options`` to a click command (defaults ``None``: unset)."""
    def decorate(f):
        for o in reversed(options):
            if _is_bool(o.annotation):
                f = click.option(*o.decls, o.param, default=None, help=o.help)(f)
            else:
                ctype, multiple = _click_type(o.annotation)
                f = click.option(*o.decls, o.param, type=ctype, multiple=multiple,
                                 default=None, help=o.help)(f)
        return f
    return decorate


# ------------------------------------------------------------------------------ checking values

def _schema_bounds(section: str) -> dict[str, dict]:
    try:
        from kernel_forge.evidence.run_dir import schema
        props = schema("run.schema.json")["properties"][section]["properties"]
    except (KeyError, OSError, ValueError):
        return {}
    return props if isinstance(props, dict) else {}


def check_value(value: Any, annotation: Any, where: str, bounds: Mapping[str, Any] | None = None) -> Any:
    """``value`` as ``annotation`` says (a tuple from a repeated option becomes a list), or an
    :class:`InputError` naming ``where``.  Numbers must be finite and >= 0, and within the
    schema ``bounds`` (minimum, exclusiveMinimum, maximum, enum, pattern) when given."""
    inner, optional = _strip_optional(annotation)
    if value is None:
        if optional or inner is Any:
            return None
        raise InputError(f"{where}: a value is required (null is not allowed here)")
    origin = typing.get_origin(inner)
    if inner is Any:
        return value
    if inner is bool:
        if not isinstance(value, bool):
            raise InputError(f"{where}: expected true or false, got {value!r}")
        return value
    if origin is typing.Literal:
        choices = typing.get_args(inner)
        if value not in choices:
            raise InputError(f"{where}: must be one of {', '.join(map(repr, choices))}, got {value!r}")
        return value
    if inner is int or inner is float:
        ok = isinstance(value, int) if inner is int else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok:
            kind = "an integer" if inner is int else "a number"
            raise InputError(f"{where}: expected {kind}, got {value!r}")
        if not math.isfinite(value):
            raise InputError(f"{where}: must be a finite number, got {value!r}")
        value = float(value) if inner is float else value
        _check_number(value, where, bounds or {})
        return value
    if inner is str:
        if not isinstance(value, str):
            raise InputError(f"{where}: expected a string, got {value!r}")
        pattern = (bounds or {}).get("pattern")
        if pattern and not re.search(pattern, value):
            must = (bounds or {}).get("x-must")      # the words RULES use for the same bound
            raise InputError(f"{where}: must be {must}, got {value!r}" if must
                             else f"{where}: {value!r} does not have the expected form ({pattern})")
        if "enum" in (bounds or {}) and value not in bounds["enum"]:
            choices = ", ".join(repr(c) for c in bounds["enum"] if c is not None)
            raise InputError(f"{where}: must be one of {choices}, got {value!r}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise InputError(f"{where}: expected a list, got {value!r}")
        sub = typing.get_args(inner)[0] if typing.get_args(inner) else Any
        items = (bounds or {}).get("items", {})
        return [check_value(v, sub, f"{where}[{i}]", items if isinstance(items, dict) else {})
                for i, v in enumerate(value)]
    if origin is dict or inner is dict:
        if not isinstance(value, dict):
            raise InputError(f"{where}: expected an object, got {value!r}")
        return value
    return value


def _check_number(value: float, where: str, bounds: Mapping[str, Any]) -> None:
    low, strict = bounds.get("minimum"), False
    if "exclusiveMinimum" in bounds:
        low, strict = bounds["exclusiveMinimum"], True
    if low is None:                          # no bound in the schema: counts, sizes and seeds are >= 0
        low = 0
    if (value <= low) if strict else (value < low):
        raise InputError(f"{where}: must be {'>' if strict else '>='} {low}, got {value}")
    high = bounds.get("maximum")
    if high is not None and value > high:
        raise InputError(f"{where}: must be <= {high}, got {value}")
    if "exclusiveMaximum" in bounds and value >= bounds["exclusiveMaximum"]:
        raise InputError(f"{where}: must be < {bounds['exclusiveMaximum']}, got {value}")
    if "enum" in bounds and value not in bounds["enum"]:
        raise InputError(f"{where}: must be one of {bounds['enum']}, got {value}")


def given(ctx: click.Context, options: list[Opt], params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per section, the values typed on the command line (not click's defaults), checked."""
    out: dict[str, dict[str, Any]] = {}
    for o in options:
        if ctx.get_parameter_source(o.param) not in EXPLICIT:
            continue
        value = params[o.param]
        if isinstance(value, tuple):
            value = list(value)
        bounds = _schema_bounds(o.section).get(o.name, {})
        out.setdefault(o.section, {})[o.name] = check_value(value, o.annotation, o.where, bounds)
    return out


def from_file(section: str, cls: type, values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A config file section checked against ``cls``'s fields; ``where`` is the file name."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    bounds = _schema_bounds(section)
    out = {}
    for k, v in values.items():
        if k not in names:
            raise InputError(f"{where}: {json_path(section, k)}: unknown setting",
                             hint="known: " + ", ".join(sorted(names)))
        out[k] = check_value(v, hints.get(k, Any), f"{where}: $.{section}.{k}", bounds.get(k, {}))
    return out


def layered(cls: type, *layers: Mapping[str, Any]):
    """``cls()`` with each layer of values laid over the previous (the last wins)."""
    values: dict[str, Any] = {}
    for layer in layers:
        values.update(layer or {})
    return dataclasses.replace(cls(), **values)
