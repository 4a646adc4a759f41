"""Kernel heads in CUDA source: where each ``__global__ void NAME(`` stands, its attributes, and
whether a ``template <...>`` comes before it.  Shared by the signature parser
(:mod:`kernel_forge.model.signature`) and the template instances
(:mod:`kernel_forge.model.template_instance`)."""
from __future__ import annotations

import re
from dataclasses import dataclass

#: an attribute's arguments: parentheses nested up to three deep (``__launch_bounds__((BX * BY), MINB)``)
_ARGS = r'\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)'
#: attributes a kernel declaration may carry around ``void``
_ATTR = (r'(?:(?:__launch_bounds__|__maxnreg__|__cluster_dims__|[A-Z][A-Z0-9]*_LAUNCH_BOUNDS_\d)\s*' + _ARGS
         + r'\s*|[A-Z][A-Z0-9]*_LAUNCH_BOUNDS_0\s+|__noinline__\s+|__forceinline__\s+)*')
_ENTRY = re.compile(r'(extern\s+"C"\s+)?' + _ATTR + r'__global__\s+' + _ATTR + r'void\s+' + _ATTR
                    + r'([A-Za-z_]\w*)\s*\(')
#: what stands before a templated kernel's head: ``template <...>``
_TEMPLATE_BEFORE = re.compile(r'template\s*<[^;{}]*>\s*$')


def _entries(code: str):
    """Each kernel head in comment-free ``code``: (match, name, templated)."""
    for m in _ENTRY.finditer(code):
        yield m, m.group(2), bool(_TEMPLATE_BEFORE.search(code, max(0, m.start() - 400), m.start()))


def kernel_name(text: str) -> str | None:
    """The name of the first kernel head in ``text`` (``__global__ void __launch_bounds__(256) k(``: k)."""
    m = _ENTRY.search(" ".join(text.split()))
    return m.group(2) if m else None


@dataclass(frozen=True)
class TemplatedHead:
    """A template kernel's head in comment-free code: its name, where its head starts (its
    attributes and ``__global__``), the ``(`` that opens its parameters, and its ``template <...>``."""
    name: str
    start: int
    open_paren: int
    template: str


def templated_heads(code: str) -> list[TemplatedHead]:
    """Each kernel head with a ``template <...>`` before it (explicit specializations included)."""
    out = []
    for m in _ENTRY.finditer(code):
        t = _TEMPLATE_BEFORE.search(code, max(0, m.start() - 400), m.start())
        if t:
            out.append(TemplatedHead(m.group(2), m.start(), m.end() - 1, t.group(0).strip()))
    return out


def matching(code: str, open_at: int, pair: str = "()") -> int | None:
    """The index of the bracket that closes the one at ``open_at`` (``pair``: "()", "{}" or "[]",
    nested), or None when the text ends first."""
    depth = 0
    for i in range(open_at, len(code)):
        if code[i] == pair[0]:
            depth += 1
        elif code[i] == pair[1]:
            depth -= 1
            if depth == 0:
                return i
    return None


def closing_paren(code: str, open_at: int) -> int:
    """The index of the ``)`` that closes the ``(`` at ``open_at``."""
    from kernel_forge.common.errors import SignatureError

    at = matching(code, open_at)
    if at is None:
        raise SignatureError("unclosed parameter list")
    return at


def in_directive(code: str, pos: int) -> bool:
    """Whether ``pos`` lies in a preprocessor directive (a ``#define``'s body over continued lines too)."""
    start = code.rfind("\n", 0, pos) + 1
    while start > 1 and code[:start - 1].rstrip(" \t").endswith("\\"):
        start = code.rfind("\n", 0, start - 1) + 1
    return code[start:pos].lstrip().startswith("#")


def body_span(code: str, head_line: int) -> tuple[int, int]:
    """(start, end) offsets of the body (``{`` to its ``}``) of the kernel whose head begins on the
    1-based ``head_line`` of comment-free ``code``; (len, len) when none follows."""
    at = 0
    for _ in range(head_line - 1):
        at = code.index("\n", at) + 1
    brace = code.find("{", at)
    if brace < 0:
        return len(code), len(code)
    end = matching(code, brace, "{}")
    return brace, len(code) if end is None else end
