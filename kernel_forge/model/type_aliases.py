"""The type names a kernel file gives its scalar types: ``typedef float floatX;``, ``using real = double;``,
``#define DATA_TYPE float``.

Projects name their element type once and write kernels over it (llm.c's ``floatX``, chosen by
``#if defined(ENABLE_BF16)`` ... ``#else typedef float floatX;``).  :func:`aliases` reads the
typedefs that hold in the text as the preprocessor would see it with no ``-D`` given: ``#if`` /
``#ifdef`` / ``#ifndef`` / ``#elif`` / ``#else`` are followed, an identifier no ``#define`` names
counts as 0 (C's rule), ``defined(X)`` as whether one does.  Each alias maps to a spelling that
:mod:`kernel_forge.model.signature` knows (a scalar or vector type, through other aliases too).
"""
from __future__ import annotations

import ast
import re

from kernel_forge.common.dtypes import C_TYPES, VECTOR_TYPES

_DIRECTIVE = re.compile(r"^\s*#\s*(\w+)\s*(.*)$")
_TYPEDEF = re.compile(r"\btypedef\s+([A-Za-z_][\w\s]*?)\s+([A-Za-z_]\w*)\s*;")
_USING = re.compile(r"\busing\s+([A-Za-z_]\w*)\s*=\s*([A-Za-z_][\w\s]*?)\s*;")
_DEFINE = re.compile(r"([A-Za-z_]\w*)(\([^)]*\))?\s*(.*)$")


def aliases(source: str, headers: dict[str, str] | None = None) -> dict[str, str]:
    """alias -> a known type spelling, from the typedefs and usings active in ``source`` read as one
    translation unit: each ``#include "NAME"`` of ``headers`` (name -> text) read where it stands, so
    a ``#define`` before it counts (llm.c's ``#define ENABLE_BF16`` then ``#include "common.h"``)."""
    from kernel_forge.common.static_rules import strip_comments_and_strings

    headers = headers or {}

    def expand(line: str) -> str:
        m = re.match(r'\s*#\s*include\s*"([^"]+)"', line)
        return strip_comments_and_strings(headers[m.group(1)], keep_strings=True) if m and m.group(1) in headers else line

    code = "\n".join(expand(line) for line in strip_comments_and_strings(source, keep_strings=True).split("\n"))
    found: dict[str, str] = {}
    macros: dict[str, str] = {}
    active = _active_text(code, macros)
    for name, value in macros.items():         # #define DATA_TYPE float (PolyBench's element type)
        if value and re.fullmatch(r"[A-Za-z_][\w\s]*", value):
            found[name] = " ".join(value.split())
    for m in _TYPEDEF.finditer(active):
        found[m.group(2)] = " ".join(m.group(1).split())
    for m in _USING.finditer(active):
        found[m.group(1)] = " ".join(m.group(2).split())
    known = {}
    for name in found:
        seen, spelled = {name}, found[name]
        while spelled in found and spelled not in seen:
            seen.add(spelled)
            spelled = found[spelled]
        if spelled in C_TYPES or spelled in VECTOR_TYPES:
            known[name] = spelled
    return known


def _active_text(code: str, macros: dict[str, str]) -> str:
    """The lines of ``code`` the preprocessor keeps, ``#define`` / ``#undef`` applied to ``macros``."""
    out, stack = [], []           # stack of (this branch taken, some branch taken, parent active)
    lines = code.replace("\\\n", " ").split("\n")
    for line in lines:
        on = all(s[0] for s in stack)
        m = _DIRECTIVE.match(line)
        if not m:
            if on:
                out.append(line)
            continue
        word, rest = m.group(1), m.group(2).strip()
        if word in ("if", "ifdef", "ifndef"):
            cond = (rest.split()[0] in macros if rest else False) if word == "ifdef" else \
                   (rest.split()[0] not in macros if rest else True) if word == "ifndef" else _truth(rest, macros)
            stack.append([on and cond, cond, on])
        elif word == "elif" and stack:
            taken = stack[-1][1]
            cond = not taken and _truth(rest, macros)
            stack[-1] = [stack[-1][2] and cond, taken or cond, stack[-1][2]]
        elif word == "else" and stack:
            stack[-1] = [stack[-1][2] and not stack[-1][1], True, stack[-1][2]]
        elif word == "endif" and stack:
            stack.pop()
        elif word == "define" and on:
            d = _DEFINE.match(rest)
            if d:
                macros[d.group(1)] = d.group(3).strip()
        elif word == "undef" and on and rest:
            macros.pop(rest.split()[0], None)
    return "\n".join(out)


def _truth(expr: str, macros: dict[str, str]) -> bool:
    """An ``#if`` condition: defined(X), integers, macros' integer values, ! && || == != < > <= >=,
    an unknown identifier 0; anything else (a function-like macro, a cast) counts as false."""
    expr = re.sub(r"\bdefined\s*\(\s*(\w+)\s*\)|\bdefined\s+(\w+)",
                  lambda m: "1" if (m.group(1) or m.group(2)) in macros else "0", expr)
    for _ in range(8):                         # object-like macros, a few levels deep
        new = re.sub(r"\b([A-Za-z_]\w*)\b", lambda m: macros.get(m.group(1), m.group(1)) or "1", expr)
        if new == expr:
            break
        expr = new
    expr = re.sub(r"\b[A-Za-z_]\w*\b", "0", expr)                       # C: an unknown identifier is 0
    expr = re.sub(r"(\d+)[uUlL]+\b", r"\1", expr)
    py = expr.replace("&&", " and ").replace("||", " or ")
    py = re.sub(r"!(?!=)", " not ", py)
    try:
        return bool(_eval(ast.parse(py, mode="eval").body))
    except (SyntaxError, ValueError, ZeroDivisionError, TypeError):
        return False


def _eval(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, bool)):
        return node.value
    if isinstance(node, ast.BoolOp):
        vals = [_eval(v) for v in node.values]
        return all(vals) if isinstance(node.op, ast.And) else any(vals)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
        v = _eval(node.operand)
        return (not v) if isinstance(node.op, ast.Not) else -v
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        a, b = _eval(node.left), _eval(node.comparators[0])
        ops = {ast.Eq: a == b, ast.NotEq: a != b, ast.Lt: a < b, ast.Gt: a > b, ast.LtE: a <= b, ast.GtE: a >= b}
        return ops[type(node.ops[0])]
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
        a, b = _eval(node.left), _eval(node.right)
        return a + b if isinstance(node.op, ast.Add) else a - b if isinstance(node.op, ast.Sub) else a * b
    raise ValueError("not a simple #if")
