"""Includes: an allow-list, not a deny-list.

A kernel may include the CUDA toolkit's and CCCL's headers (the include folders NVRTC is given)
and the headers the task's manifest names (handed to NVRTC in memory, by name).  Nothing else:
no file in the working folder (``.env``), none by absolute or parent-relative path, none through
a symlink.  Three checks, each on what the preprocessor sees rather than how a line is spelled:

* :func:`check_source`, before NVRTC: every include-like directive, after line splicing, with
  ``#`` or its digraph ``%:``, comments between the words, ``include_next``, ``__has_include``
  and a header name given by a macro (refused: a computed include could name any file).  A name
  is resolved the way NVRTC could resolve it (absolute, against each include folder, in the
  working folder) and every file it could open must be allowed, by real path.  A ``#define`` of
  a macro that a toolkit header uses to name an include is refused too.
* :func:`opened_files`, after a successful compile: the headers NVRTC itself reports it processed
  (its ``--fdevice-time-trace`` record) must all be allowed.
* :func:`log_files`, after a failed one: every file NVRTC's messages are located in.  NVRTC
  writes no trace for a failed compile, and text it folds into a macro argument is reported at
  the kernel's line, so for a failed compile the check before NVRTC is what stands.

:func:`cut_log` cuts NVRTC's log to the kernel's own lines: a message about a line outside the
kernel keeps its place (file and line) but not that line's text.  A refused file is named, its
contents never.
"""
from __future__ import annotations

import bisect
import functools
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

#: NVRTC's own header, compiled into the library (named in its trace)
BUILTIN = "__nv_nvrtc_builtin_header.h"
ALLOWED = ("a kernel may include only the CUDA toolkit's and CCCL's headers and the headers the task's "
           "manifest names in \"headers\"")

_GAP = r"(?:[ \t\f\v]|/\*.*?\*/)*"                    # blanks and block comments inside a directive
_DIRECTIVE = re.compile(r"(?:#|%:|\?\?=)" + _GAP + r"(include_next|include|import|embed)\b", re.S)
_HAS = re.compile(r"\b(__has_include_next|__has_include|__has_embed)\s*\(", re.S)
_NAME = re.compile(_GAP + r"(?:\"([^\"\n]*)\"|<([^>\n]*)>)", re.S)
_DEFINE = re.compile(r"(?:#|%:)" + _GAP + r"(?:define|undef)" + _GAP + r"([A-Za-z_]\w*)", re.S)
_COMPUTED = re.compile(rb"#[ \t]*include(?:_next)?[ \t]+([A-Za-z_]\w*)")   # in a comment too: more is safe
_WORD = re.compile(rb"[A-Za-z_]\w*")
_LOCATION = re.compile(r"^(?P<file>[^\n]*?)\((?P<line>\d+)\): (?P<sev>catastrophic error|error|warning|remark|note|info)"
                       r"\b(?P<rest>[^\n]*)$", re.M)


@dataclass(frozen=True)
class Refusal:
    """One include the allow-list refuses: the kernel ``line`` (0: unknown), the ``name`` as
    written (or the file NVRTC opened) and ``why``."""
    line: int
    name: str
    why: str

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        return f"{where}{self.why}"


@dataclass(frozen=True)
class Allowed:
    """What a compile may read: the include folders (real paths) and the in-memory header names."""
    roots: tuple[str, ...]
    headers: frozenset[str]

    @classmethod
    def of(cls, include_dirs: Iterable[str], headers: Iterable[str] = ()) -> "Allowed":
        return cls(tuple(os.path.realpath(d) for d in include_dirs), frozenset(headers))

    def path_ok(self, path: str) -> bool:
        real = _real(path)
        return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in self.roots)


def _real(path: str) -> str:
    """``os.path.realpath``, its folder's part remembered (a CUB kernel opens 600 headers in a few
    dozen folders); a file that is itself a link is followed each time."""
    head, tail = os.path.split(os.path.abspath(path))
    if not tail or os.path.islink(path):
        return os.path.realpath(path)
    return os.path.join(_real_dir(head), tail)


@functools.lru_cache(maxsize=4096)
def _real_dir(folder: str) -> str:
    return os.path.realpath(folder)


# ------------------------------------------------------------------------------- before NVRTC

def splice(source: str) -> tuple[str, list[tuple[int, int]]]:
    """The source with its line continuations joined (a backslash, blanks, a newline: NVRTC takes
    only the first form, this takes both), and (offset in it, original line) where each original
    line starts."""
    out, marks, pos, line, length = [], [(0, 1)], 0, 1, 0
    for m in re.finditer(r"\\[ \t\f\v]*\r?\n|\n", source):
        chunk = source[pos:m.start()] + ("\n" if m.group(0) == "\n" else "")
        out.append(chunk)
        length += len(chunk)
        line += 1
        marks.append((length, line))
        pos = m.end()
    out.append(source[pos:])
    return "".join(out), marks


def _in_line_comment(before: str) -> bool:
    """Whether a directive preceded on its (spliced) line by ``before`` is a line comment's text: the
    line begins with ``//`` and no ``*/`` before it could end a block comment that makes the rest code."""
    return before.lstrip().startswith("//") and "*/" not in before


def _line_of(marks: list[tuple[int, int]], offset: int) -> int:
    """The original line of an offset in the spliced text."""
    k = bisect.bisect_right([p for p, _ in marks], offset)
    return marks[k - 1][1] if k else 1


def check_source(source: str, allowed: Allowed, *, cwd: str | None = None,
                 guarded: frozenset[str] | None = None, defines: Iterable[str] = ()) -> list[Refusal]:
    """Every include the kernel's text could make NVRTC open that the allow-list refuses."""
    text, marks = splice(source)
    cwd = cwd or os.getcwd()
    found: list[Refusal] = []
    names = [(m.end(), "#" + m.group(1)) for m in _DIRECTIVE.finditer(text)
             if not _in_line_comment(text[text.rfind("\n", 0, m.start()) + 1:m.start()])]
    names += [(m.end(), m.group(1)) for m in _HAS.finditer(text)]
    for end, word in sorted(names):
        line = _line_of(marks, end)
        m = _NAME.match(text, end)
        if m is None:
            found.append(Refusal(line, "", f"{word} names its file with a macro (a computed include); "
                                           f"name the header literally: {ALLOWED}"))
            continue
        name = m.group(1) if m.group(1) is not None else m.group(2)
        why = _refuse_name(name, allowed, cwd)
        if why:
            spelled = f'"{name}"' if m.group(1) is not None else f"<{name}>"
            found.append(Refusal(line, name, f"{word} {spelled} {why}; {ALLOWED}"))
    defined = [(m.group(1), m.start()) for m in _DEFINE.finditer(text)]
    defines = list(defines)
    if guarded is None and (defined or defines):     # read the toolkit's headers only when it matters
        guarded = computed_include_macros(allowed.roots)
    for name, start in defined:
        if name in guarded:
            found.append(Refusal(_line_of(marks, start), name,
                                 f"defines {name}, a macro a toolkit header uses to name a file it "
                                 "includes; leave it to the toolkit"))
    for d in defines:
        if d in guarded:
            found.append(Refusal(0, d, f"the setting defines {d}, a macro a toolkit header uses to name a "
                                       "file it includes"))
    return found


def _refuse_name(name: str, allowed: Allowed, cwd: str) -> str | None:
    """Why NVRTC could open a file outside the allow-list for this header name (None: it cannot)."""
    if not name:
        return None
    if name in allowed.headers:
        return None            # handed over in memory: NVRTC takes it before any folder
    if os.path.isabs(name) or re.match(r"^[A-Za-z]:[\\/]", name):
        candidates = [name]
    else:
        candidates = [os.path.join(r, name) for r in allowed.roots] + [os.path.join(cwd, name)]
    for c in candidates:
        if os.path.lexists(c) and not allowed.path_ok(c):
            real = os.path.realpath(c)
            via = f" (a link to {real})" if os.path.islink(c) or real != os.path.abspath(c) else ""
            return f"would open {os.path.abspath(c)}{via}, outside the allowed headers"
    return None


@functools.cache
def computed_include_macros(roots: tuple[str, ...]) -> frozenset[str]:
    """Macros the headers under ``roots`` use to name an include (``#include SOME_MACRO``), with
    the macros their definitions use in turn: a kernel that defined one could make a toolkit
    header open any file.  Read once per process (about 0.5 s for CUDA 13's headers)."""
    texts, frontier = [], set()
    for root in roots:
        if any(r != root and root.startswith(r.rstrip(os.sep) + os.sep) for r in roots):
            continue                     # inside another root (CCCL's folder in the toolkit's): read once
        for dirpath, _dirs, files in os.walk(root):
            for f in files:
                try:
                    data = Path(dirpath, f).read_bytes()
                except OSError:
                    continue
                if b"define" in data:
                    texts.append(data)
                if b"include" in data:
                    frontier.update(m.group(1) for m in _COMPUTED.finditer(data) if _macro_like(m.group(1)))
    seen: set[bytes] = set()
    while frontier:                      # the macros those names are defined with, and theirs
        seen |= frontier
        names = sorted(frontier)
        defs = re.compile(rb"#[ \t]*define[ \t]+(" + b"|".join(map(re.escape, names))
                          + rb")\b(?:\([^)]*\))?([^\n]*)")
        found: set[bytes] = set()
        for data in texts:
            for m in defs.finditer(data):
                found.update(_WORD.findall(m.group(2)))
        frontier = {w for w in found if w not in seen and _macro_like(w)}
    return frozenset(n.decode() for n in seen)


def _macro_like(word: bytes) -> bool:
    return word.isupper() or word.startswith(b"_")


# ------------------------------------------------------------------------------- after NVRTC

def opened_files(trace_dir: str) -> list[str] | None:
    """The headers NVRTC's time trace (``--fdevice-time-trace``) says it processed, or None when
    it wrote none (a failed compile writes none)."""
    files = []
    try:
        entries = sorted(e for e in os.listdir(trace_dir) if e.endswith(".json"))
    except OSError:
        return None
    if not entries:
        return None
    for entry in entries:
        try:
            with open(os.path.join(trace_dir, entry), encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return None
        for ev in data.get("traceEvents", []) if isinstance(data, dict) else []:
            if isinstance(ev, dict) and ev.get("name") == "Processing Header File":
                detail = (ev.get("args") or {}).get("detail")
                if isinstance(detail, str):
                    files.append(detail)
    return files


def refused_opened(files: Iterable[str], allowed: Allowed, kernel: str) -> list[str]:
    """The files among those NVRTC opened that the allow-list refuses (in order, once each)."""
    out: list[str] = []
    for f in dict.fromkeys(files):       # once each (prologue.h is opened hundreds of times)
        if f in (kernel, BUILTIN) or f in allowed.headers:
            continue
        if os.path.isabs(f) and allowed.path_ok(f):
            continue
        out.append(f)
    return out


def log_files(log: str) -> list[str]:
    """Every file a message in NVRTC's log is located in, in order, once each."""
    out: list[str] = []
    for m in _LOCATION.finditer(log):
        if m.group("file") not in out:
            out.append(m.group("file"))
    return out


def cut_log(log: str, kernel: str, allowed: Allowed) -> str:
    """NVRTC's log cut to the kernel's own lines.  A message located in the kernel is kept whole.
    One located elsewhere keeps its file, line and (for an allowed header) its message, never
    the text of that line; one located in a file outside the allow-list keeps its place only."""
    out: list[str] = []
    keep = True
    for raw in log.splitlines():
        m = _LOCATION.match(raw)
        if m:
            f = m.group("file")
            keep = f == kernel
            if keep or f in allowed.headers or f == BUILTIN or (os.path.isabs(f) and allowed.path_ok(f)):
                out.append(raw)          # the kernel's own, or a toolkit or task header's message
            else:
                out.append(f"{f}({m.group('line')}): {m.group('sev')}: (message withheld: the line is "
                           "not in the kernel)")
        elif not raw.strip() or not raw[0].isspace():
            out.append(raw)              # a blank line, a summary, ptxas's report: never quoted text
        elif keep or _kernel_ref(raw, kernel):
            out.append(raw)              # the kernel's quoted line, or "... at line N of kernel.cu"
    return "\n".join(out) + ("\n" if log.endswith("\n") else "")


def _kernel_ref(line: str, kernel: str) -> bool:
    return f"of {kernel}" in line or f'of "{kernel}"' in line
