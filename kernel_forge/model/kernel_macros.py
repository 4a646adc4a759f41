"""Kernels a function-like macro writes, as some projects generate a kernel per type (candle's
``UNARY_OP(float, ugelu_f32, gelu(x))``): the macro's invocations expanded, so a kernel's head is
found by the name it gets.  Only macros that write a kernel's head are expanded (one that calls such a
macro, too); what a body calls otherwise stays as written: the head is what is read.  NVRTC compiles
the file as it is.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from kernel_forge.model.kernel_heads import _ENTRY
from kernel_forge.model.template_instance import split_top

_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)\(([^)]*)\)[ \t]*(.*)$", re.M)


@dataclass(frozen=True)
class Expansion:
    """A macro's invocation written out: where it stands in the expanded text and its 1-based line."""
    start: int
    end: int
    line: int


def _spliced(code: str) -> str:
    """``code`` with its line continuations joined (a macro's body on one line, as it is read)."""
    return re.sub(r"\\[ \t]*\n", " ", code)


def _function_macros(code: str) -> dict[str, tuple[list[str], str]]:
    return {m.group(1): ([p.strip() for p in m.group(2).split(",")], m.group(3).strip())
            for m in _DEFINE.finditer(_spliced(code))}


def kernel_macros(code: str, *headers: str) -> dict[str, tuple[list[str], str]]:
    """name -> (parameters, body) of each function-like macro in comment-free ``code`` (or in the
    ``headers``' comment-free texts) that writes a kernel, itself or through another one
    (``BINARY_OP(T, NAME, F)`` -> ``BINARY_OP_OUT(T, T, NAME, F)``: its body written out)."""
    every = {}
    for text in (*headers, code):
        every.update(_function_macros(text))
    writers = {n: pb for n, pb in every.items() if _ENTRY.search(pb[1].replace("##", ""))}
    for _ in range(4):                                     # a macro that calls a writer writes one too
        more = {n: (params, _calls(body, writers)[0]) for n, (params, body) in every.items()
                if n not in writers and _calls(body, writers)[1]}
        if not more:
            break
        writers.update(more)
    return writers


def _substitute(body: str, params: list[str], args: list[str]) -> str:
    value = dict(zip(params, args))
    body = re.sub(r"#\s*([A-Za-z_]\w*)", lambda m: f'"{value[m.group(1)]}"' if m.group(1) in value and
                  not body[max(0, m.start() - 1):m.start()] == "#" else m.group(0), body)
    body = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: value.get(m.group(0), m.group(0)), body)
    return re.sub(r"\s*##\s*", "", body)                           # a ## b: one token


def _calls(code: str, macros: dict) -> tuple[str, list[Expansion]]:
    """``code`` with each invocation of one of ``macros`` (outside ``#`` lines) written out, and where."""
    if not macros:
        return code, []
    call = re.compile(r"(?<![\w#])(" + "|".join(map(re.escape, macros)) + r")\s*\(")
    out, spans, pos = [], [], 0
    for m in call.finditer(code):
        if m.start() < pos:
            continue
        line_start = code.rfind("\n", 0, m.start()) + 1
        if code[line_start:m.start()].lstrip().startswith("#"):
            continue                                                # the #define itself, or another directive
        depth, i = 0, m.end() - 1
        while i < len(code):
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            if depth == 0:
                break
            i += 1
        if i >= len(code):
            break
        params, body = macros[m.group(1)]
        text = _substitute(body, params, split_top(code[m.end():i]))
        out.append(code[pos:m.start()])
        start = sum(len(p) for p in out)
        out.append(text)
        spans.append(Expansion(start, start + len(text), code.count("\n", 0, m.start()) + 1))
        pos = i + 1
    out.append(code[pos:])
    return "".join(out), spans


def expanded(code: str, headers: tuple[str, ...] = ()) -> tuple[str, list[Expansion]]:
    """Comment-free ``code`` with each invocation of a kernel-writing macro (outside ``#`` lines; defined
    there or in one of the ``headers``' texts) replaced by the macro's body, its arguments in place; and
    where each expansion stands."""
    from kernel_forge.common.static_rules import strip_comments_and_strings

    return _calls(code, kernel_macros(code, *(strip_comments_and_strings(t, keep_strings=True) for t in headers)))


def line_in(spans: list[Expansion], offset: int, expanded_code: str) -> int:
    """The original line of an offset in the expanded text inside an expansion: its invocation's line
    (a head found only through a macro is inside one; elsewhere the lines are counted as they stand)."""
    for s in spans:
        if s.start <= offset < s.end:
            return s.line
    return expanded_code.count("\n", 0, offset) + 1
