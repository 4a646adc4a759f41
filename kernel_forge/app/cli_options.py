"""Command-line options generated from the settings declaration (:mod:`kernel_forge.config`).

Every field of a section's dataclass (``LoopConfig``, ``GateOptions``, ``ProposerConfig`` ...)
becomes a click option named as :func:`~kernel_forge.common.setting.option_names` says; its help
and default are the field's, its type comes from the annotation (``bool`` -> ``--x/--no-x``,
``int``, ``float``, ``str``, ``Literal[...]`` -> a choice, ``list[...]`` -> a repeatable option; a
``dict`` field is config-file only).  A field added to a section appears as an option without
touching this module or the command.

Values are layered: the dataclass defaults, then the config file section, then presets (such as
``--quick``), then what was typed on the command line -- told apart from click's defaults with
``ctx.get_parameter_source()``.  What was typed is checked by the one validator
(:func:`kernel_forge.config.build.check_value`) and named as typed (``--reps 0``), before
anything runs.
"""
from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import click

from kernel_forge.config.build import OnCommandLine, check_value
from kernel_forge.common.setting import Spec, fields_of, is_bool, is_mapping, option_names, strip_optional

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
    spec: Spec                    # its bounds and help, as declared
    help: str

    @property
    def flag(self) -> str:
        """The option as a user types it, for messages."""
        return self.decls[0].split("/")[0]


class _Choice(click.Choice):
    """A ``Literal`` field's choices, shown in the help; the value is checked by the one validator
    (so a bad one gets the words it gets in a config file)."""

    def convert(self, value, param, ctx):
        return value


def _click_type(annotation: Any):
    """(click type, multiple) for an annotation, or ``None`` if it cannot be typed on a command line."""
    inner, _ = strip_optional(annotation)
    origin = typing.get_origin(inner)
    if origin is typing.Literal:
        return _Choice([str(v) for v in typing.get_args(inner)]), False
    if origin in (list, tuple) and typing.get_args(inner):
        sub = _click_type(typing.get_args(inner)[0])
        return (sub[0], True) if sub is not None and not sub[1] else None
    return {int: (click.INT, False), float: (click.FLOAT, False), str: (click.STRING, False)}.get(inner)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value))
    return str(value)


def build_options(sections: Iterable[tuple[str, type]], *, reserved: Iterable[str] = frozenset(),
                  skip: Iterable[tuple[str, str]] = frozenset()) -> list[Opt]:
    """One :class:`Opt` per field of every ``(section, dataclass)`` that a command line can carry
    (``reserved``: names the command itself uses; ``skip``: fields it does not offer)."""
    sections = list(sections)
    names = option_names(sections, reserved=reserved, skip=skip)
    out: list[Opt] = []
    for section, cls in sections:
        for f in fields_of(cls):
            if (section, f.name) not in names or is_mapping(f.annotation):
                continue
            if not is_bool(f.annotation) and _click_type(f.annotation) is None:
                continue
            flag = names[(section, f.name)]
            decls = (f"{flag}/--no-{flag[2:]}",) if is_bool(f.annotation) else (flag,)
            doc = f.spec.help or f.name.replace("_", " ")
            shown = "" if f.default in (None, "", [], {}) else f" [default: {_show(f.default)}]"
            out.append(Opt(section=section, name=f.name, param=f"{section}__{f.name}", decls=decls,
                           annotation=f.annotation, spec=f.spec, help=f"{doc}{shown}"))
    return out


def apply_options(options: list[Opt]) -> Callable:
    """A decorator adding ``options`` to a click command (defaults ``None``: unset)."""
    def decorate(f):
        for o in reversed(options):
            if is_bool(o.annotation):
                f = click.option(*o.decls, o.param, default=None, help=o.help)(f)
            else:
                ctype, multiple = _click_type(o.annotation)
                f = click.option(*o.decls, o.param, type=ctype, multiple=multiple,
                                 default=None, help=o.help)(f)
        return f
    return decorate


def command_line(options: Iterable[Opt]) -> OnCommandLine:
    """How the command's messages name each setting: its option as typed."""
    return OnCommandLine({(o.section, o.name): o.flag for o in options})


def given(ctx: click.Context, options: list[Opt], params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per section, the values typed on the command line (not click's defaults), each checked by
    the one validator and named as typed (``--max-iterations -1``)."""
    where = command_line(options)
    out: dict[str, dict[str, Any]] = {}
    for o in options:
        if ctx.get_parameter_source(o.param) not in EXPLICIT:
            continue
        value = params[o.param]
        if isinstance(value, tuple):
            value = list(value)
        out.setdefault(o.section, {})[o.name] = check_value(value, o.annotation, o.spec, where, o.section, o.name)
    return out


def layered(cls: type, *layers: Mapping[str, Any]):
    """``cls()`` with each layer of (checked) values laid over the previous (the last wins)."""
    values: dict[str, Any] = {}
    for layer in layers:
        values.update(layer or {})
    return dataclasses.replace(cls(), **values)
