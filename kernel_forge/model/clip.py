"""Clip a kernel's source for a prompt without losing its hot loop.

A kernel that does not fit its share of the prompt keeps, in this order: its main loop nest
whole (the outermost loop holding the most work: FMAs and other arithmetic, barriers, shuffles,
atomics, shared-memory traffic), the entry point's signature, the ``// kforge:`` header, then
the lines nearest the loop on either side; the setup code that does not fit (includes, helper
functions, index math, the epilogue) is replaced by a marker saying how many lines were left out.
A main loop larger than the limit is kept from its hottest inner loop outwards.  Lines are never
cut.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from kernel_forge.common.static_rules import strip_comments_and_strings

_LOOP = re.compile(r"\b(for|while|do)\b")
_HEADER = re.compile(r"^\s*//\s*kforge:")
#: what counts as work inside a loop, and its weight
_WORK = [(re.compile(r"\b(?:fmaf?|__fmaf?_r[nzud]|__hfma2?|hfma2?|mma|wmma|__dp4a|__dp2a)\b|mma\.sync"), 4),
         (re.compile(r"__syncthreads|__syncwarp|bar\.sync|cp\.async|__pipeline"), 8),
         (re.compile(r"__shfl\w*|atomic\w+"), 3),
         (re.compile(r"(?<![+\-*/=<>!&|])[*/](?![*/=])|(?<![+])\+(?![+=])|(?<![-])-(?![-=>])|\+=|-=|\*="), 1)]


def mask(source: str) -> str:
    """``source`` with comments and string/char literal contents blanked, same length and line
    structure, so braces and keywords can be found by position."""
    return strip_comments_and_strings(source)


def _match(text: str, i: int, open_: str, close: str) -> int:
    """Index of the bracket closing the one at ``i`` (or len(text))."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_:
            depth += 1
        elif text[j] == close:
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


def _statement_end(text: str, i: int) -> int:
    """End index of the statement starting at or after ``i``: a braced block, a nested loop or
    ``if``, or up to the next ``;``."""
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text):
        return len(text) - 1
    if text[i] == "{":
        return _match(text, i, "{", "}")
    m = re.match(r"(for|while|if|switch)\b", text[i:])
    if m:
        p = text.find("(", i)
        if p < 0:
            return len(text) - 1
        end = _statement_end(text, _match(text, p, "(", ")") + 1)
        if m.group(1) == "if":
            rest = re.match(r"\s*else\b", text[end + 1:])
            if rest:
                end = _statement_end(text, end + 1 + rest.end())
        return end
    if re.match(r"do\b", text[i:]):
        end = _statement_end(text, i + 2)
        semi = text.find(";", end)
        return len(text) - 1 if semi < 0 else semi
    semi = text.find(";", i)
    return len(text) - 1 if semi < 0 else semi


@dataclass
class Loop:
    start: int          # character offsets in the source
    end: int
    first_line: int     # 0-based line numbers, inclusive
    last_line: int
    work: int = 0
    depth: int = 0      # loops it is nested in


def loops(source: str) -> list[Loop]:
    """Every ``for``/``while``/``do`` loop of ``source`` with its extent and work."""
    text = mask(source)
    line_of = _line_index(text)
    out: list[Loop] = []
    for m in _LOOP.finditer(text):
        kw = m.group(1)
        if kw == "while":
            before = text[:m.start()].rstrip()
            if before.endswith("}") and _is_do_tail(text, m.start()):
                continue                     # the tail of a do ... while
        if kw == "do":
            end = _statement_end(text, m.start())
        else:
            p = text.find("(", m.end())
            if p < 0 or text[m.end():p].strip():
                continue
            end = _statement_end(text, _match(text, p, "(", ")") + 1)
        body = text[m.start():end + 1]
        work = sum(w * len(rx.findall(body)) for rx, w in _WORK)
        out.append(Loop(m.start(), end, line_of(m.start()), line_of(end), work))
    for a in out:
        a.depth = sum(1 for b in out if b is not a and b.start < a.start and a.end <= b.end)
    return out


def _is_do_tail(text: str, at: int) -> bool:
    """Whether the ``while`` at ``at`` closes a ``do { ... }`` block."""
    close = len(text[:at].rstrip()) - 1
    depth = 0
    for j in range(close, -1, -1):
        if text[j] == "}":
            depth += 1
        elif text[j] == "{":
            depth -= 1
            if depth == 0:
                return text[:j].rstrip().endswith("do")
    return False


def _line_index(text: str):
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    import bisect

    return lambda pos: bisect.bisect_right(starts, pos) - 1


def hot_loop(source: str) -> Loop | None:
    """The outermost loop holding the most work (ties: the longer one)."""
    outer = [x for x in loops(source) if x.depth == 0 and x.work > 0]
    if not outer:
        return None
    return max(outer, key=lambda x: (x.work, x.end - x.start, -x.start))


def _signature_lines(lines: list[str], masked_lines: list[str]) -> list[int]:
    """The lines of each ``__global__`` entry point's declaration, up to its opening brace."""
    out = []
    for i, line in enumerate(masked_lines):
        if "__global__" in line:
            j = i
            while j < len(lines) and "{" not in masked_lines[j] and j - i < 8:
                out.append(j)
                j += 1
            if j < len(lines):
                out.append(j)
    return out


def clip_kernel(source: str, limit: int) -> str:
    """``source`` if it fits ``limit`` characters, else its hot loop whole with as much of the
    rest as fits (see the module docstring)."""
    if len(source) <= limit:
        return source
    lines = source.splitlines()
    masked = mask(source).splitlines()
    size = [len(l) + 1 for l in lines]
    loop = hot_loop(source)
    must: list[int] = []
    if loop is not None:
        span = list(range(loop.first_line, loop.last_line + 1))
        if sum(size[i] for i in span) > limit:                   # too large: its hottest inner loop
            inner = [x for x in loops(source) if loop.start < x.start and x.end <= loop.end and x.work > 0]
            while inner:
                cand = max(inner, key=lambda x: (x.work, x.end - x.start))
                span = list(range(cand.first_line, cand.last_line + 1))
                if sum(size[i] for i in span) <= limit:
                    break
                inner = [x for x in inner if cand.start < x.start and x.end <= cand.end]
            else:
                span = span[:1]
        must = span
    keep: set[int] = set()
    used = 0

    def take(i: int) -> bool:
        nonlocal used
        if i in keep or not 0 <= i < len(lines):
            return True
        if used + size[i] > limit - 120:      # room for the markers
            return False
        keep.add(i)
        used += size[i]
        return True

    for i in must:
        keep.add(i)
        used += size[i]
    for i in _signature_lines(lines, masked):
        take(i)
    for i, line in enumerate(lines):
        if _HEADER.match(line):
            take(i)
    if must:
        lo, hi = min(must) - 1, max(must) + 1
        grew = True
        while grew:
            grew = False
            for i in (lo, hi):
                if 0 <= i < len(lines) and i not in keep and take(i):
                    grew = True
            lo, hi = lo - 1, hi + 1
            if lo < 0 and hi >= len(lines):
                break
    else:
        i = 0
        while i < len(lines) and take(i):
            i += 1
        j = len(lines) - 1
        while j > i and take(j):
            j -= 1
    out: list[str] = []
    i = 0
    while i < len(lines):
        if i in keep:
            out.append(lines[i])
            i += 1
            continue
        j = i
        while j < len(lines) and j not in keep:
            j += 1
        chars = sum(size[k] for k in range(i, j))
        where = ("after the main loop" if must and i > max(must) else
                 "before the main loop" if must else "")
        indent = re.match(r"\s*", lines[j] if j < len(lines) else lines[i]).group(0)
        out.append(f"{indent}// ... " + (f"{where}: " if where else "")
                   + f"{j - i} line{'s' if j - i > 1 else ''} ({chars} characters) left out ...")
        i = j
    return "\n".join(out)


# -- text helpers -----------------------------------------------------------------------------
def clip_source(text: str, limit: int) -> str:
    """``text`` if it fits, else its first and last lines (about 2/3 and 1/3 of ``limit``) with
    a marker saying how many lines were left out; lines are never cut."""
    if len(text) <= limit:
        return text
    lines = text.splitlines()
    head, used = [], 0
    for line in lines:
        if used + len(line) + 1 > limit * 2 // 3:
            break
        head.append(line)
        used += len(line) + 1
    tail, used_t = [], 0
    for line in reversed(lines[len(head):]):
        if used_t + len(line) + 1 > limit - used - 80:
            break
        tail.insert(0, line)
        used_t += len(line) + 1
    left = len(lines) - len(head) - len(tail)
    chars = len(text) - used - used_t
    return "\n".join(head + [f"// ... {left} lines ({chars} characters) left out ..."] + tail)
