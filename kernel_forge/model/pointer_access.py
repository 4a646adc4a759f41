"""Whether a kernel reads, writes or does both through each non-``const`` pointer, read from its body.

``kforge init`` uses it for its guess of each buffer's part: projects often leave ``const`` off a
pointer the kernel only reads (cuda-samples' histogram ``uint* d_Data``, reduce6's ``g_idata``), and
a buffer both read and written is an in/out one (shfl_scan's ``data``).  The reading is textual and
errs on the side of "written": a pointer passed to another function, kept in a local pointer or
cast is taken as possibly written (``unknown``), so only a pointer used solely as ``p[i]`` or
``*(p + i)`` in expressions that do not assign to it counts as read-only.
"""
from __future__ import annotations

import re

from kernel_forge.model.kernel_heads import body_span, matching

#: an assignment after an element (``p[i] = ``, ``p[i] += ``, ``p[i]++``), not a comparison
_ASSIGN = re.compile(r"\s*(?:(?:[-+*/%&|^]|<<|>>)?=(?!=)|\+\+|--)")
_ATOMIC = re.compile(r"\batomic\w*\s*\(\s*&?\s*\(?\s*$")


def _element_end(body: str, at: int) -> int:
    """The offset past ``[...]`` (brackets nested) starting at ``at``; ``at`` when no ``[`` is there."""
    i = at
    while i < len(body) and body[i] in " \t\n":
        i += 1
    if i >= len(body) or body[i] != "[":
        return at
    end = matching(body, i, "[]")
    return len(body) if end is None else end + 1


def access(code: str, head_line: int, names: list[str]) -> dict[str, str]:
    """For each pointer in ``names``: ``"read"``, ``"write"``, ``"both"`` or ``"unknown"``, from the body
    of the kernel whose head starts on ``head_line`` of comment-free ``code``."""
    start, end = body_span(code, head_line)
    body = code[start:end]
    found = {}
    for name in names:
        reads = writes = False
        unknown = False
        for m in re.finditer(r"(?<![\w.>])" + re.escape(name) + r"\b", body):
            before = body[max(0, m.start() - 40):m.start()]
            after = _element_end(body, m.end())
            if after > m.end():                                 # p[...]
                if _ATOMIC.search(before):                      # atomicAdd(&p[i], v): read and written
                    reads = writes = True
                elif _ASSIGN.match(body, after):
                    writes = True
                    op = _ASSIGN.match(body, after).group(0).strip()
                    reads = reads or op not in ("=",)
                else:
                    reads = True
            elif re.search(r"\*\s*\(?\s*$", before) and not re.search(r"\w\s*\*\s*\(?\s*$", before):
                rest = body[m.end():m.end() + 40]       # *p or *(p + i)
                close = rest.find(")") + 1 if before.rstrip().endswith("(") else 0
                if _ASSIGN.match(rest, close):
                    writes = True
                else:
                    reads = True
            elif _ATOMIC.search(before):
                reads = writes = True
            else:
                unknown = True                          # passed on, kept, cast or compared: it may be written
        if unknown:
            found[name] = "unknown"
        elif reads and writes:
            found[name] = "both"
        elif writes:
            found[name] = "write"
        elif reads:
            found[name] = "read"
        else:
            found[name] = "unknown"
    return found
