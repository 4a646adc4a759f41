"""The one validator: every entry point (the command line, a ``--config`` file, MCP, batch,
resume) makes its settings with :func:`build`, so the same bad value gets the same message body
everywhere.  Only the place differs, spelled as the entry point spells it (a :class:`Where`):

    --max-iterations -1: must be at least 1, got -1                   (OnCommandLine)
    opt.json: $.loop.max_iterations: must be at least 1, got -1        (InFile)
    max_iterations: must be at least 1, got -1                         (AsArguments: MCP)
"""
from __future__ import annotations

import dataclasses
import math
import re
import typing
from collections.abc import Mapping
from typing import Any

from kernel_forge.common.errors import InputError
from kernel_forge.common.json_path import json_path
from kernel_forge.common.setting import Spec, bound_words, fields_of, strip_optional


# ------------------------------------------------------------------------------ where

class Where:
    """How an entry point names a setting in a message."""

    def value(self, section: str, name: str, value: Any, index: int | None = None) -> str:
        """The place of ``value`` (item ``index`` of a list)."""
        raise NotImplementedError

    def place(self, section: str, name: str | None = None) -> str:
        """The place of a setting (or a section) without its value."""
        raise NotImplementedError


class OnCommandLine(Where):
    """``--max-iterations -1``: the option as typed, with its value."""

    def __init__(self, flags: Mapping[tuple[str, str], str]):
        self.flags = dict(flags)

    def place(self, section: str, name: str | None = None) -> str:
        return self.flags.get((section, name or ""), f"{section}.{name}" if name else section)

    def value(self, section: str, name: str, value: Any, index: int | None = None) -> str:
        return f"{self.place(section, name)} {value!r}"


class InFile(Where):
    """``FILE: $.loop.max_iterations``: the file (or what holds the values) and the JSON path."""

    def __init__(self, label: str):
        self.label = label

    def place(self, section: str, name: str | None = None) -> str:
        return f"{self.label}: {json_path(section, *([name] if name else []))}"

    def value(self, section: str, name: str, value: Any, index: int | None = None) -> str:
        return f"{self.label}: {json_path(section, name, *([index] if index is not None else []))}"


class AsArguments(Where):
    """``max_iterations``: a tool's argument name (MCP); settings without one as ``rest`` says."""

    def __init__(self, names: Mapping[tuple[str, str], str], rest: Where):
        self.names, self.rest = dict(names), rest

    def place(self, section: str, name: str | None = None) -> str:
        arg = self.names.get((section, name or ""))
        return arg if arg else self.rest.place(section, name)

    def value(self, section: str, name: str, value: Any, index: int | None = None) -> str:
        arg = self.names.get((section, name))
        if arg is None:
            return self.rest.value(section, name, value, index)
        return arg + (f"[{index}]" if index is not None else "")


# ------------------------------------------------------------------------------ one value

def _refuse(where: str, must: str, value: Any) -> InputError:
    return InputError(f"{where}: must be {must}, got {value!r}")


def check_value(value: Any, annotation: Any, spec: Spec, where: Where, section: str, name: str,
                index: int | None = None) -> Any:
    """``value`` as ``annotation`` and ``spec`` say (a tuple becomes a list, an int a float where
    a float is asked), or an :class:`InputError` naming its place."""
    here = where.value(section, name, value, index)
    inner, optional = strip_optional(annotation)
    if value is None:
        if optional or inner is Any:
            return None
        raise InputError(f"{here}: a value is required (null is not allowed here)")
    origin = typing.get_origin(inner)
    if inner is Any:
        return value
    if inner is bool:
        if not isinstance(value, bool):
            raise InputError(f"{here}: expected true or false, got {value!r}")
        return value
    if origin is typing.Literal:
        choices = typing.get_args(inner)
        if value not in choices:
            raise _refuse(here, "one of " + ", ".join(map(repr, choices)), value)
        return value
    if inner is int or inner is float:
        ok = isinstance(value, int) if inner is int else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok:
            raise InputError(f"{here}: expected {'an integer' if inner is int else 'a number'}, got {value!r}")
        if not math.isfinite(value):
            raise _refuse(here, "a finite number", value)
        value = float(value) if inner is float else value
        _check_number(value, spec, here)
        _check_valid(value, spec, here)
        return value
    if inner is str:
        if not isinstance(value, str):
            raise InputError(f"{here}: expected a string, got {value!r}")
        if spec.pattern and not re.search(spec.pattern, value):
            raise _refuse(here, spec.must or f"of the form {spec.pattern}", value)
        _check_valid(value, spec, here)
        return value
    if origin in (list, tuple):
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise InputError(f"{here}: expected a list, got {value!r}")
        sub = typing.get_args(inner)[0] if typing.get_args(inner) else Any
        return [check_value(v, sub, spec, where, section, name, i) for i, v in enumerate(value)]
    if origin is dict or inner is dict:
        if not isinstance(value, dict):
            raise InputError(f"{here}: expected an object, got {value!r}")
        return value
    return value


def _check_number(value: float, spec: Spec, here: str) -> None:
    """Within the declared bounds; the message names the bound that was crossed ("at least 1",
    "at most 1000000"), since every number has a ceiling and most ceilings only stop typos."""
    if (spec.min is not None and value < spec.min) or (spec.above is not None and value <= spec.above):
        raise _refuse(here, bound_words(Spec(min=spec.min, above=spec.above)), value)
    if (spec.max is not None and value > spec.max) or (spec.below is not None and value >= spec.below):
        raise _refuse(here, bound_words(Spec(max=spec.max, below=spec.below)), value)


def _check_valid(value: Any, spec: Spec, here: str) -> None:
    if spec.valid is not None and not spec.valid(value):
        raise _refuse(here, spec.must or "valid", value)


# ------------------------------------------------------------------------------ a section

def section_of(cls: type) -> str:
    """The section a settings dataclass fills (its ``SECTION``: "loop", "gate" ...)."""
    return getattr(cls, "SECTION", cls.__name__)


def check_values(cls: type, values: Mapping[str, Any], where: Where) -> dict[str, Any]:
    """``values`` (some fields of ``cls``) checked and converted; an unknown name is refused."""
    section = section_of(cls)
    known = {f.name: f for f in fields_of(cls)}
    out = {}
    for name, value in values.items():
        f = known.get(name)
        if f is None:
            raise InputError(f"{where.place(section, name)}: unknown setting", hint="known: " + ", ".join(sorted(known)))
        out[name] = check_value(value, f.annotation, f.spec, where, section, name)
    return out


def build(cls: type, values: Mapping[str, Any], where: Where, *, base: Any = None):
    """``base`` (default ``cls()``) with ``values`` laid over it, every value checked first: the
    way every entry point makes its settings."""
    checked = check_values(cls, values, where)
    return dataclasses.replace(base if base is not None else cls(), **checked)


def check_settings(obj: Any, where: Where) -> None:
    """Every field of a settings object made elsewhere (a library caller's ``GateOptions(...)``)."""
    check_values(type(obj), {f.name: getattr(obj, f.name) for f in fields_of(type(obj))}, where)
