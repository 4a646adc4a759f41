"""A strict check of request bodies against the installed SDKs' own request types.

The ``anthropic`` and ``openai`` SDKs are generated from the providers' API specifications; their
request parameters are ``TypedDict`` classes (``anthropic.types.MessageCreateParams*``,
``openai.types.responses.ResponseCreateParams*``, ``openai.types.chat.CompletionCreateParams*``).
:func:`problems` walks a JSON body against one of them -- ``typing.get_type_hints(...,
include_extras=True)``, ``Required``/``NotRequired`` and ``total``, ``Literal``, ``Union``/``Optional``,
``Iterable``/``List``/``Sequence``, ``Dict``/``Mapping``, nested ``TypedDict``s -- and lists every
field the type does not define (unknown keys fail), every value outside a ``Literal``, every
required field missing, every wrong JSON type, each with its JSON path.

So a field or value kforge sends that the provider's API does not define fails the loopback
(tests/support/loopback.py calls :func:`check_request` on every request), whatever kernel_forge's own
capability table (``kernel_forge/data/models.json``) says.  The few fields kforge sends on purpose
although the installed SDK does not define them are listed in :data:`DELIBERATE_EXTRAS`, each with
its reason; nothing else passes.
"""
from __future__ import annotations

import collections.abc
import functools
import types
import typing

import typing_extensions

#: (route, top-level field) kforge sends although the SDK's request type has no such field, and why
DELIBERATE_EXTRAS: dict[tuple[str, str], str] = {
    ("anthropic", "temperature"): (
        "anthropic SDK 2.17 has no temperature argument (Claude Opus 4.7 and later reject it), but the Messages "
        "API still takes it on the older models the table marks temperature 'without_thinking' (Haiku 4.5, "
        "Opus 4.5/4.6, Sonnet 4.6, Opus 4.7, Haiku 5.5); kforge sends it through extra_body only when "
        "--temperature is given, thinking is off and the model's entry allows it"),
}

ROUTES = ("anthropic", "responses", "chat")


@functools.lru_cache(maxsize=None)
def request_type(route: str, streaming: bool):
    """The SDK's TypedDict for a request body on ``route`` (streamed or not)."""
    if route == "anthropic":
        from anthropic.types import message_create_params as m
        return m.MessageCreateParamsStreaming if streaming else m.MessageCreateParamsNonStreaming
    if route == "responses":
        from openai.types.responses import response_create_params as r
        return r.ResponseCreateParamsStreaming if streaming else r.ResponseCreateParamsNonStreaming
    if route == "chat":
        from openai.types.chat import completion_create_params as c
        return c.CompletionCreateParamsStreaming if streaming else c.CompletionCreateParamsNonStreaming
    raise ValueError(f"unknown route {route!r}: one of {', '.join(ROUTES)}")


def check_request(route: str, body) -> list[str]:
    """Every way ``body`` (a request as sent on ``route``) departs from the SDK's request type."""
    if not isinstance(body, dict):
        return [f"$: the request body is {type(body).__name__}, not a JSON object"]
    extras = {k for k in body if (route, k) in DELIBERATE_EXTRAS}
    checked = {k: v for k, v in body.items() if k not in extras}
    return problems(checked, request_type(route, bool(body.get("stream"))), "$")


@functools.lru_cache(maxsize=1)
def warm() -> int:
    """Resolve every type reachable from the request types once (the loopback calls this as it
    starts, so no request of a test with a short timeout waits for it).  Returns how many."""
    seen: set = set()

    def visit(tp) -> None:
        tp = _strip(tp)
        try:
            if tp in seen:
                return
            seen.add(tp)
        except TypeError:                   # an unhashable alias: walk it, do not remember it
            pass
        if _is_typeddict(tp):
            for sub in _fields(tp)[0].values():
                visit(sub)
            return
        for arg in typing_extensions.get_args(tp):
            if not isinstance(arg, (str, int, bool, type(Ellipsis))) and arg is not None:
                visit(arg)

    for route in ROUTES:
        for streaming in (False, True):
            visit(request_type(route, streaming))
    return len(seen)


# ------------------------------------------------------------------------------- the walk

_NONE = type(None)
_YES = {typing_extensions.Required, getattr(typing, "Required", None)} - {None}
_NO = {typing_extensions.NotRequired, getattr(typing, "NotRequired", None)} - {None}
_REQUIRED = _YES | _NO
_READONLY = {getattr(typing_extensions, "ReadOnly", None), getattr(typing, "ReadOnly", None)} - {None}
_LITERAL = {typing.Literal, typing_extensions.Literal}
_SEQUENCES = {list, tuple, collections.abc.Iterable, collections.abc.Sequence, collections.abc.Collection,
              collections.abc.MutableSequence}
_MAPPINGS = {dict, collections.abc.Mapping, collections.abc.MutableMapping}


def _is_typeddict(tp) -> bool:
    return typing_extensions.is_typeddict(tp)


@functools.lru_cache(maxsize=None)
def _fields(td) -> tuple[dict, frozenset]:
    """(field -> type, required fields) of a TypedDict.  Required-ness is read from the resolved
    hints, not ``__required_keys__``: the SDKs' modules use ``from __future__ import annotations``,
    and with string annotations ``Required[...]`` is invisible to that attribute (it is empty)."""
    hints = typing_extensions.get_type_hints(td, include_extras=True)
    total: dict[str, bool] = {}

    def declare(klass) -> None:                 # each field takes the totality of the class declaring it
        bases = [b for b in getattr(klass, "__orig_bases__", ()) if _is_typeddict(b)]
        for b in bases:
            declare(b)
        inherited = {k for b in bases for k in b.__annotations__}
        for k in klass.__annotations__:
            if k not in inherited:
                total[k] = getattr(klass, "__total__", True)

    declare(td)
    required = set()
    for k, hint in hints.items():
        marks = set()
        while typing_extensions.get_origin(hint) in _REQUIRED | _READONLY:
            marks.add(typing_extensions.get_origin(hint))
            hint = typing_extensions.get_args(hint)[0]
        if marks & _YES or (not marks & _NO and total.get(k, True)):
            required.add(k)
    return {k: _strip(v) for k, v in hints.items()}, frozenset(required)


def _strip(tp):
    """The type inside Required / NotRequired / ReadOnly / Annotated."""
    while True:
        origin = typing_extensions.get_origin(tp)
        if origin in _REQUIRED or origin in _READONLY:
            tp = typing_extensions.get_args(tp)[0]
        elif origin is typing_extensions.Annotated:
            tp = tp.__origin__
        else:
            return tp


def _kind(value) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number",
            _NONE: "null"}.get(type(value), type(value).__name__)


def problems(value, tp, path: str) -> list[str]:
    """What in ``value`` (JSON) the type ``tp`` does not allow; [] when it is allowed."""
    tp = _strip(tp)
    if tp is typing.Any or tp is object:
        return []
    if tp is _NONE or tp is None:
        return [] if value is None else [f"{path}: {_kind(value)} where only null is allowed"]
    if _is_typeddict(tp):
        return _typeddict(value, tp, path)
    origin = typing_extensions.get_origin(tp)
    args = typing_extensions.get_args(tp)
    if origin in _LITERAL:
        return [] if any(value == a and type(value) is type(a) for a in args) else [
            f"{path}: {value!r} is not one of {', '.join(repr(a) for a in args)}"]
    if origin is typing.Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        return _union(value, args, path)
    if origin in _SEQUENCES or (origin is not None and getattr(origin, "__name__", "") == "SequenceNotStr"):
        if not isinstance(value, list):
            return [f"{path}: {_kind(value)} where an array is expected"]
        item = args[0] if args else typing.Any
        if origin is tuple and len(args) != 2 or (origin is tuple and args[1] is not Ellipsis):
            item = typing.Any
        return [p for i, v in enumerate(value) for p in problems(v, item, f"{path}[{i}]")]
    if origin in _MAPPINGS:
        if not isinstance(value, dict):
            return [f"{path}: {_kind(value)} where an object is expected"]
        vt = args[1] if len(args) == 2 else typing.Any
        return [p for k, v in value.items() for p in problems(v, vt, f"{path}.{k}")]
    if tp is str:
        return [] if isinstance(value, str) else [f"{path}: {_kind(value)} where a string is expected"]
    if tp is bool:
        return [] if isinstance(value, bool) else [f"{path}: {_kind(value)} where a boolean is expected"]
    if tp is int:
        return [] if isinstance(value, int) and not isinstance(value, bool) else [
            f"{path}: {_kind(value)} where an integer is expected"]
    if tp is float:
        return [] if isinstance(value, (int, float)) and not isinstance(value, bool) else [
            f"{path}: {_kind(value)} where a number is expected"]
    if tp in _MAPPINGS:
        return [] if isinstance(value, dict) else [f"{path}: {_kind(value)} where an object is expected"]
    if tp in (list, collections.abc.Iterable, collections.abc.Sequence):
        return [] if isinstance(value, list) else [f"{path}: {_kind(value)} where an array is expected"]
    if isinstance(tp, typing.TypeVar):
        return []
    if isinstance(tp, type) and any(c.__name__ == "BaseModel" for c in tp.__mro__):
        # a response model the SDK also takes as input (an answer sent back); its Param twin in the
        # same union is what a JSON body is checked against
        return [f"{path}: not checked against the response model {tp.__name__}"]
    raise TypeError(f"{path}: the checker does not know the type {tp!r} (teach tests/support/sdk_types.py)")


def _typeddict(value, td, path: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{path}: {_kind(value)} where an object ({td.__name__}) is expected"]
    fields, required = _fields(td)
    out = [f"{path}.{k}: {td.__name__} has no field {k!r}" for k in value if k not in fields]
    out += [f"{path}.{k}: required by {td.__name__}, missing" for k in sorted(required) if k not in value]
    for k, v in value.items():
        if k in fields:
            out += problems(v, fields[k], f"{path}.{k}")
    return out


def _discriminator(td) -> tuple | None:
    """The Literal values of a TypedDict's ``type`` field, if it has one."""
    fields, _ = _fields(td)
    t = fields.get("type")
    t = _strip(t) if t is not None else None
    if t is not None and typing_extensions.get_origin(t) is typing.Union:    # Optional[Literal[...]]
        t = next((a for a in typing_extensions.get_args(t) if a is not _NONE), None)
    if t is not None and typing_extensions.get_origin(t) in _LITERAL:
        return typing_extensions.get_args(t)
    return None


def _union(value, args, path: str) -> list[str]:
    if value is not None:
        args = tuple(a for a in args if a is not _NONE)
        if len(args) == 1:                 # Optional[X]: X's own problems
            return problems(value, args[0], path)
    results = []
    for a in args:
        found = problems(value, a, path)
        if not found:
            return []
        results.append((a, found))
    # the branch the value means to be (its "type" names it), else the one with the fewest problems
    if isinstance(value, dict) and "type" in value:
        named = [(a, f) for a, f in results if _is_typeddict(_strip(a)) and value["type"] in (_discriminator(_strip(a)) or ())]
        if named:
            return min(named, key=lambda r: len(r[1]))[1]
    # a form whose own shape fits (its problems lie deeper) is nearer than one that does not
    a, found = min(results, key=lambda r: (any(p.startswith(f"{path}: ") for p in r[1]), len(r[1])))
    if len(results) > 1 and not (isinstance(value, dict) and "type" in value):
        return [f"{path}: matches none of the {len(results)} allowed forms; the nearest: {found[0]}"] + found[1:]
    return found
