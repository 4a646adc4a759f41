"""The answer format: the kernel as a fenced code block, the rest as a small JSON part.

A model answers in plain text (no tool call, so no JSON-escaped kernel):

* a few sentences of rationale;
* the complete ``.cu`` file in one fenced block (```` ```cuda ````, also ``cu``/``cpp``/``c++``),
  **or** the edits to the kernel the proposal builds on (its parent) in one ```` ```diff ```` block
  of search/replace edits::

      <<<<<<< SEARCH
      exact lines of the parent
      =======
      what replaces them
      >>>>>>> REPLACE

* one ```` ```json ```` block with the structured part, every key optional: ``launch``
  (``grid``, ``block``, ``shared_mem``), ``tunables``, ``direction``, ``technique`` and
  ``predicted_speedup`` (the speedup over the parent the model expects).

:func:`read_answer` turns such a text into the arguments :func:`~.schema.to_proposal` takes, or
a problem to quote in the repair turn (which SEARCH text was not found, which JSON key is wrong).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from kernel_forge.common.json_path import json_path
from kernel_forge.common.reads import nesting_problem

_FENCE = re.compile(r"^```[ \t]*([A-Za-z0-9_+\-]*)[^\n]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
CODE_LANGS = {"cuda", "cu", "cpp", "c++", "cxx", "c", ""}
_EDIT = re.compile(r"^<{5,}[ \t]*SEARCH[ \t]*\n(.*?)^={5,}[ \t]*\n(.*?)^>{5,}[ \t]*REPLACE[ \t]*$",
                   re.DOTALL | re.MULTILINE)
#: keys of the structured part, and what each must be
EXTRA_KEYS = ("launch", "tunables", "direction", "technique", "predicted_speedup", "rationale")


@dataclass
class Answer:
    args: dict | None = None       # source, rationale, launch, tunables, direction, technique, predicted_speedup
    problem: str | None = None     # why the answer is unusable
    form: str = ""                 # "file" | "diff"


def fences(text: str) -> list[tuple[str, str, int, int]]:
    """(language, body, start, end) of every fenced block of ``text``, in order."""
    return [(m.group(1).lower(), m.group(2), m.start(), m.end()) for m in _FENCE.finditer(text or "")]


def apply_edits(parent: str, diff: str) -> tuple[str | None, str | None]:
    """``parent`` with the SEARCH/REPLACE edits of ``diff`` applied in order -> (source, problem).
    Each SEARCH text must occur in the (partly edited) source exactly once; a SEARCH that is only
    off by trailing spaces still matches."""
    edits = list(_EDIT.finditer(diff))
    if not edits:
        return None, ("the ```diff block holds no SEARCH/REPLACE edit (<<<<<<< SEARCH ... ======= ... "
                      ">>>>>>> REPLACE)")
    source = parent
    for n, m in enumerate(edits, 1):
        search, replace = m.group(1), m.group(2)
        count = source.count(search)
        if count == 0:
            loose = _loose_find(source, search)
            if loose is None:
                first = next((l for l in search.splitlines() if l.strip()), "")
                return None, (f"edit {n} of {len(edits)}: its SEARCH text is not in the parent kernel "
                              f"(first line: {first.strip()[:80]!r}); SEARCH must copy the parent's lines exactly")
            start, end = loose
            source = source[:start] + replace + source[end:]
            continue
        if count > 1:
            return None, (f"edit {n} of {len(edits)}: its SEARCH text occurs {count} times in the parent kernel; "
                          "give enough lines to make it unique")
        source = source.replace(search, replace, 1)
    return source, None


def _loose_find(source: str, search: str) -> tuple[int, int] | None:
    """Where ``search`` occurs in ``source`` when trailing whitespace is ignored (once only)."""
    want = [l.rstrip() for l in search.rstrip("\n").splitlines()]
    if not want:
        return None
    lines = source.splitlines(keepends=True)
    stripped = [l.rstrip() for l in lines]
    hits = [i for i in range(len(lines) - len(want) + 1) if stripped[i:i + len(want)] == want]
    if len(hits) != 1:
        return None
    start = sum(len(l) for l in lines[:hits[0]])
    end = start + sum(len(l) for l in lines[hits[0]:hits[0] + len(want)])
    return start, end


def _check_extra(obj: object) -> str | None:
    if not isinstance(obj, dict):
        return f"the ```json block must hold an object, got {type(obj).__name__}"
    unknown = sorted(set(obj) - set(EXTRA_KEYS))
    if unknown:
        return f"the ```json block has unknown key(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(EXTRA_KEYS)}"
    sp = obj.get("predicted_speedup")
    if sp is not None and (isinstance(sp, bool) or not isinstance(sp, (int, float)) or not sp > 0 or sp != sp):
        return f"$.predicted_speedup must be a positive number (e.g. 1.3), got {sp!r}"
    for k in ("direction", "technique", "rationale"):
        if obj.get(k) is not None and not isinstance(obj[k], str):
            return f"{json_path(k)} must be a string, got {type(obj[k]).__name__}"
    return None


def read_answer(text: str, parent: str | None = None) -> Answer:
    """The proposal in ``text`` (see the module doc), or the problem with it."""
    blocks = fences(text)
    code = [b for b in blocks if b[0] in CODE_LANGS and "__global__" in b[1]]
    diffs = [b for b in blocks if b[0] in ("diff", "patch") or (b[0] == "" and "<<<<<<< SEARCH" in b[1])]
    jsons = [b for b in blocks if b[0] == "json"]
    form = ""
    if code:
        source, form = code[0][1].rstrip() + "\n", "file"
        used = [code[0]]
    elif diffs:
        if parent is None:
            return Answer(problem="the answer gives a ```diff block but this proposal has no parent kernel to apply "
                                  "it to; give the complete file in a ```cuda block")
        source, problem = apply_edits(parent, diffs[0][1])
        if problem:
            return Answer(problem=problem, form="diff")
        form = "diff"
        used = [diffs[0]]
    else:
        return Answer(problem="the answer holds no ```cuda block with a __global__ function and no ```diff block "
                              "of SEARCH/REPLACE edits")
    extra: dict = {}
    if jsons:
        deep = nesting_problem(jsons[-1][1])
        if deep:
            return Answer(problem=f"the ```json block is {deep.replace('JSON ', '', 1)}", form=form)
        try:
            extra = json.loads(jsons[-1][1])
        except ValueError as exc:
            return Answer(problem=f"the ```json block is not valid JSON ({exc})", form=form)
        problem = _check_extra(extra)
        if problem:
            return Answer(problem=problem, form=form)
        used.append(jsons[-1])
    rest = text
    for _, _, start, end in sorted(used, key=lambda b: -b[2]):
        rest = rest[:start] + rest[end:]
    rest = re.sub(r"\n{3,}", "\n\n", rest).strip()
    args = {"source": source, "rationale": extra.pop("rationale", None) or rest}
    for k in ("launch", "tunables"):
        if extra.get(k) is not None:
            args[k] = extra[k]
    for k in ("direction", "technique", "predicted_speedup"):
        if extra.get(k) is not None:
            args[k] = extra[k]
    return Answer(args=args, form=form)
