"""One setting: a dataclass field whose type (the annotation), default (the field's default) and
bounds, help and command-line name (the field's :class:`Spec`, from :func:`setting`) are declared
once.  The command-line options, the checks of every entry point and the settings part of
``run.schema.json`` are all made from it.

    max_iterations: int | None = setting(None, min=1, flag="--max-iterations", help="iterations ...")
"""
from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: ceilings every numeric setting declares (a value beyond its ``max`` is a typo or an attack, and
#: would reach SQLite, NumPy or a timer as an overflow): wall-clock times (seconds)
DAY_S = 86400.0
YEAR_S = 365 * DAY_S
#: launches per case; iterations, budgets and other counts; seeds; tokens per request
MAX_LAUNCHES = 10**6
MAX_COUNT = 10**6
MAX_SEED = 2**32 - 1
MAX_TOKENS = 10**7

#: the key of a field's metadata that holds its Spec
SPEC = "kforge.setting"
_NONE = type(None)


@dataclass(frozen=True)
class Spec:
    """What a setting may be, beyond its annotation, and how it is shown."""

    help: str = ""
    min: float | None = None              #: least value (inclusive)
    above: float | None = None            #: the value must be greater than this
    max: float | None = None              #: greatest value (inclusive)
    below: float | None = None            #: the value must be less than this
    pattern: str | None = None            #: a text (each text of a list) must match it (re.search; anchor it)
    valid: Callable[[Any], bool] | None = None   #: a further test of a value (each value of a list)
    must: str | None = None               #: what ``pattern``/``valid`` ask for, in words ("like sm_90")
    flag: str | None = None               #: the command-line name, where it is not --field-name
    json_schema: Mapping[str, Any] | None = None  #: more of the JSON schema than the annotation says (a mapping's shape)


def setting(default: Any = dataclasses.MISSING, *, help: str, factory: Callable[[], Any] | None = None,
            min: float | None = None, above: float | None = None, max: float | None = None,
            below: float | None = None, pattern: str | None = None, valid: Callable[[Any], bool] | None = None,
            must: str | None = None, flag: str | None = None, json_schema: Mapping[str, Any] | None = None,
            metadata: Mapping[str, Any] | None = None):
    """A dataclass field with its :class:`Spec` (``factory`` instead of ``default`` for a list or a dict);
    ``metadata``: more of the field's metadata, for a section's own keys (which provider takes it)."""
    spec = Spec(help=help, min=min, above=above, max=max, below=below, pattern=pattern, valid=valid, must=must,
                flag=flag, json_schema=json_schema)
    meta = {**(metadata or {}), SPEC: spec}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclass(frozen=True)
class Field:
    """One setting of a section, as every consumer reads it."""

    name: str
    annotation: Any
    spec: Spec
    default: Any


def fields_of(cls: type) -> list[Field]:
    """The settings of dataclass ``cls`` (its ``init`` fields, bases first), with their resolved types."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        out.append(Field(f.name, hints.get(f.name, Any), f.metadata.get(SPEC) or Spec(), default_of(f)))
    return out


def default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()                      # type: ignore[misc]
    return None


def strip_optional(annotation: Any) -> tuple[Any, bool]:
    """(the annotation without ``None``, whether ``None`` was allowed)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not _NONE]
        optional = len(args) < len(typing.get_args(annotation))
        return (args[0] if len(args) == 1 else typing.Union[tuple(args)]), optional
    return annotation, False


def is_mapping(annotation: Any) -> bool:
    inner, _ = strip_optional(annotation)
    return inner is dict or typing.get_origin(inner) in (dict, Mapping)


def is_bool(annotation: Any) -> bool:
    return strip_optional(annotation)[0] is bool


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def bound_words(spec: Spec) -> str | None:
    """A number's bounds in words ("at least 1", "> 0", "in [0, 1)"), or None without any."""
    low = f"[{_num(spec.min)}" if spec.min is not None else (f"({_num(spec.above)}" if spec.above is not None else None)
    high = f"{_num(spec.max)}]" if spec.max is not None else (f"{_num(spec.below)})" if spec.below is not None else None)
    if low and high:
        return f"in {low}, {high}"
    if spec.min is not None:
        return f"at least {_num(spec.min)}"
    if spec.above is not None:
        return f"> {_num(spec.above)}"
    if spec.max is not None:
        return f"at most {_num(spec.max)}"
    if spec.below is not None:
        return f"< {_num(spec.below)}"
    return None


def option_names(sections: Iterable[tuple[str, type]], *, reserved: Iterable[str] = (),
                 skip: Iterable[tuple[str, str]] = ()) -> dict[tuple[str, str], str]:
    """``{(section, field): "--name"}`` for every field a command line can carry (a mapping is
    config-file only): the declared ``flag``, else ``--field-name`` (a ``_s`` suffix, seconds,
    dropped), or ``--section-field-name`` where another section or the command (``reserved``)
    already took the plain name.  Declared flags are claimed first; a boolean takes ``--no-NAME`` too."""
    sections = list(sections)
    skip = set(skip)
    taken = set(reserved)
    rows = [(section, f) for section, cls in sections for f in fields_of(cls)
            if (section, f.name) not in skip and not is_mapping(f.annotation)]

    def claim(name: str, boolean: bool) -> None:
        taken.add(name)
        if boolean:
            taken.add("--no-" + name[2:])

    for _, f in rows:
        if f.spec.flag:
            claim(f.spec.flag, is_bool(f.annotation))
    out: dict[tuple[str, str], str] = {}
    for section, f in rows:
        if f.spec.flag:
            out[(section, f.name)] = f.spec.flag
            continue
        stem = (f.name[:-2] if f.name.endswith("_s") else f.name).replace("_", "-")
        name = f"--{stem}"
        if name in taken or (is_bool(f.annotation) and f"--no-{stem}" in taken):
            name = f"--{section}-{stem}"
        claim(name, is_bool(f.annotation))
        out[(section, f.name)] = name
    return out
