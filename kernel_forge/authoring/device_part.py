"""The device part of a CUDA file as projects ship it: a kernel beside its host code.

A kernel brought by ``kforge init NAME --from FILE`` often sits in a program: ``main``, the
launcher that calls ``NAME<<<grid, block>>>``, ``cudaMalloc`` and ``printf``, includes of host
headers.  NVRTC compiles device code only, and the gate refuses a kernel file that launches
kernels.  :func:`device_part` keeps what the kernel needs and blanks the rest, line for line, so
that every line the kernel's compile errors name is still the line of the user's file:

- the entry kernel, every ``__device__`` function (templates too), ``__constant__`` /
  ``__device__`` variables, types (``struct``, ``typedef``, ``using``, ``enum``), namespaces and
  ``extern "C"`` blocks whole, and every preprocessor line but the includes left out;
- left out: host functions (``main``, launchers: no ``__device__`` or ``__global__`` in the head),
  the other kernels, host globals and prototypes, and includes of host or project headers
  (``<stdio.h>``, ``<cuda_runtime.h>``, ``"common.h"``: NVRTC has none of them).

Nothing here compiles or runs anything: it reads the text (comments and strings blanked first).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from kernel_forge.common.static_rules import strip_comments_and_strings
from kernel_forge.model.kernel_heads import kernel_name

#: headers device code includes, kept: CUDA's device headers, CCCL (cub, libcu++, thrust's device parts)
DEVICE_HEADERS = re.compile(r"^(cuda_(fp16|bf16|fp8|fp4|fp6|pipeline\w*|awbarrier\w*)\.h|cooperative_groups(/.*|\.h)?|"
                            r"cub/.*|cuda/.*|thrust/.*|mma\.h|math_constants\.h|sm_\d+_intrinsics\.h|"
                            r"curand_kernel\.h|vector_types\.h|vector_functions\.h|crt/.*)$")
#: device headers nvcc's host includes bring in, and what in the code needs each
_TYPE_HEADERS = (("cuda_fp16.h", r"\b(__half2?|half2?)\b"), ("cuda_bf16.h", r"\b__nv_bfloat162?\b"))
_INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
_TYPE = re.compile(r"\s*(template\s*<[^;{]*>\s*)?((?:__align__|alignas)\s*\([^()]*\)\s*)?(typedef\s+)?"
                   r"(struct|class|union|enum)\b|\s*(typedef|using)\b")
_NAME_BEFORE_PAREN = re.compile(r"([A-Za-z_~][\w:~]*)\s*(?:<[^<>]*>)?\s*$")


@dataclass
class DevicePart:
    """The kept text (the file's line count, dropped parts blank) and what was left out."""

    source: str
    dropped: list[str] = field(default_factory=list)      #: host functions and other kernels, by name
    includes: list[str] = field(default_factory=list)     #: the includes left out, as written
    blanked: int = 0                                      #: items left out (globals and prototypes too)
    local: dict[int, str] = field(default_factory=dict)   #: 1-based line -> a project header left out ("common.h")
    source_before: str = ""                               #: the file as it was
    rewritten: list[str] = field(default_factory=list)   #: includes written otherwise, in words

    @property
    def changed(self) -> bool:
        return self.blanked > 0

    def note(self) -> str:
        parts = []
        if self.dropped:
            parts.append("left out " + ", ".join(self.dropped))
        if self.includes:
            parts.append("and the includes " + ", ".join(self.includes))
        parts += [f"included {r}" for r in self.rewritten]
        return "; ".join(parts)


def device_part(source: str, entry: str | None, *, beside: set[str] = frozenset(),
                macros: set[str] = frozenset(), writers: set[str] = frozenset()) -> DevicePart:
    """``source`` with everything but ``entry``'s device part blanked (see the module docstring);
    ``entry`` None keeps every kernel.  ``beside``: the includes found as project files (``<ops.cuh>``
    as well as ``"common.h"``): their lines are recorded in ``local``, not given to other headers.
    ``macros``: names the project's other files define as ``__device__`` (DeepSpeed's ``DS_D_INLINE``);
    ``writers``: macros they define that write kernels (candle's ``BINARY_OP``)."""
    code = strip_comments_and_strings(source, keep_strings=True)
    keep = [True] * len(source)
    part = DevicePart(source="", source_before=source)
    freed: list[int] = []                      # lines of the system includes left out
    torch_lines: list[tuple[int, str]] = []    # those of PyTorch's headers (ATen, c10, torch)
    device_words = device_macros(code) | set(macros)
    from kernel_forge.model.kernel_macros import kernel_macros

    writers = set(kernel_macros(code)) | set(writers)    # macros that write kernels: their invocations are device code
    for start, end, kind in _items_within_namespaces(code):
        text = code[start:end]
        drop, what = _dropped(text, kind, entry, device_words, beside)
        if drop and kind in ("decl", "block") and writers and re.search(
                r"(?<![\w#])(" + "|".join(map(re.escape, writers)) + r")\s*\(", text):
            drop = False                      # UNARY_OP(float, ugelu_f32, ...): the kernels a macro writes
        if drop:
            keep[start:end] = [False] * (end - start)
            part.blanked += 1
            if what and what not in part.dropped and kind != "include":
                part.dropped.append(what)
            if kind == "include":
                part.includes.append(what)
                m = _INCLUDE.match(text)
                line = code.count("\n", 0, start) + 1
                if re.match(r"(ATen|c10|torch)/", m.group(2).strip()):
                    torch_lines.append((line, f"<{m.group(2).strip()}>"))
                if (m.group(1) == '"' or m.group(2).strip() in beside) and not re.match(r"(ATen|c10|torch)/", m.group(2).strip()):
                    part.local[line] = m.group(2).strip()
                else:
                    freed.append(line)
    for m in re.finditer(r"^[ \t]*//[ \t]*kforge:.*$", source, re.M):   # the file's own kforge lines stay, wherever
        keep[m.start():m.end()] = [True] * (m.end() - m.start())
    lines = [line.rstrip() for line in
             "".join(c if k or c == "\n" else (" " if c != "\t" else c) for c, k in zip(source, keep)).split("\n")]
    # what the host headers brought in (cuda_runtime.h includes the fp16 and bf16 types under nvcc),
    # each on a line a host include left free, so that the lines below keep their numbers
    wanted = [h for h, pattern in _TYPE_HEADERS if re.search(pattern, code)
              and not re.search(r"#\s*include\s*<" + re.escape(h), code)]
    umbrella = re.search(r"^[ \t]*#[ \t]*include[ \t]*<cub/cub\.cuh>", "\n".join(lines), re.M)
    if umbrella:               # NVRTC refuses CUB's umbrella header: the device headers of what the file uses
        at = "\n".join(lines)[:umbrella.start()].count("\n")
        used = cub_headers(code)
        lines[at] = lines[at].replace("cub/cub.cuh", used[0])
        wanted += used[1:]
        part.rewritten.append(f"<cub/cub.cuh> as <{'>, <'.join(used)}>")
    torch = [line for line, inc in torch_lines if line in freed]
    if torch and re.search(r"\b(at|c10)::|\bC10_\w+|\bWARP_(SHFL|BALLOT)", code):
        lines[torch[0] - 1] = '#include "kforge/torch_compat.cuh"'     # ATen's device names, as CUDA's own
        freed.remove(torch[0])
        part.rewritten.append(f"{torch_lines[0][1]} as \"kforge/torch_compat.cuh\" (c10::Half, C10_WARP_SIZE, WARP_SHFL ...)")
    for line, header in zip(freed, wanted):
        lines[line - 1] = f"#include <{header}>"
    if len(wanted) > len(freed) and not part.local:       # (a project header may well include it)
        part.rewritten.append("no free line for <" + ">, <".join(wanted[len(freed):]) + ">: include it yourself")
    part.source = "\n".join(lines)
    return part


#: CUB's device-side names and the header of each (NVRTC compiles these, not <cub/cub.cuh>)
_CUB_HEADERS = (
    ("BlockReduce", "block/block_reduce.cuh"), ("BlockScan", "block/block_scan.cuh"),
    ("BlockLoad", "block/block_load.cuh"), ("BlockStore", "block/block_store.cuh"),
    ("BlockRadixSort", "block/block_radix_sort.cuh"), ("BlockExchange", "block/block_exchange.cuh"),
    ("BlockHistogram", "block/block_histogram.cuh"), ("BlockDiscontinuity", "block/block_discontinuity.cuh"),
    ("BlockAdjacentDifference", "block/block_adjacent_difference.cuh"), ("BlockShuffle", "block/block_shuffle.cuh"),
    ("WarpReduce", "warp/warp_reduce.cuh"), ("WarpScan", "warp/warp_scan.cuh"), ("WarpLoad", "warp/warp_load.cuh"),
    ("WarpStore", "warp/warp_store.cuh"), ("WarpExchange", "warp/warp_exchange.cuh"),
    ("ThreadLoad", "thread/thread_load.cuh"), ("ThreadStore", "thread/thread_store.cuh"),
    ("(?:Sum|Max|Min|ArgMax|ArgMin)", "thread/thread_operators.cuh"))


def _before_last_parens(head: str) -> str:
    """The name before the parameter list that ends ``head`` (``... enable_if_t<(w > 0)> k(int n)``: k)."""
    end = head.rstrip().rstrip(";").rstrip()
    if not end.endswith(")"):
        return ""
    depth = 0
    for i in range(len(end) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(end[i], 0)
        if depth == 0:
            m = re.search(r"([A-Za-z_]\w*)\s*$", end[:i])
            return m.group(1) if m else ""
    return ""


def cub_headers(code: str) -> list[str]:
    """The CUB device headers for the ``cub::`` names ``code`` uses (block_reduce when it names none)."""
    used = [f"cub/{h}" for name, h in _CUB_HEADERS if re.search(rf"\bcub::{name}\b", code)]
    return list(dict.fromkeys(used)) or ["cub/block/block_reduce.cuh"]


def _items_within_namespaces(code: str, offset: int = 0):
    """:func:`_items`, a ``namespace NAME { ... }`` block's items each on its own (vLLM's kernels and
    launchers share ``namespace vllm``), its braces kept."""
    for start, end, kind in _items(code):
        text = code[start:end]
        ns = re.match(r"\s*namespace\b[^{;]*\{", text) if kind == "block" else None
        close = text.rfind("}")
        if ns and close > ns.end():
            yield from _items_within_namespaces(code[start + ns.end():start + close], offset + start + ns.end())
        else:
            yield offset + start, offset + end, kind


def _items(code: str):
    """(start, end, kind) of each top-level item: a preprocessor line ("pp", "include"), a braced
    definition ("block": a function, struct, namespace ...) or a declaration ending in ``;`` ("decl")."""
    i, n = 0, len(code)
    while i < n:
        while i < n and code[i] in " \t\r\n":
            i += 1
        if i >= n:
            return
        if code[i] == "#":                                    # a preprocessor line, with its continuations
            j = i
            while True:
                e = code.find("\n", j)
                e = n if e < 0 else e
                if e > 0 and code[e - 1] == "\\" and e < n:
                    j = e + 1
                    continue
                break
            yield i, e, "include" if _INCLUDE.match(code[i:e]) else "pp"
            i = e
            continue
        j, depth, paren = i, 0, 0
        while j < n:
            c = code[j]
            if c == "#" and depth == 0 and paren == 0 and (j == 0 or code[j - 1] == "\n"):
                if code[i:j].strip():                          # a declaration cut by a preprocessor line
                    yield i, j, "decl"
                break
            if c == "#" and (j == 0 or code[j - 1] == "\n" or not code[code.rfind("\n", 0, j) + 1:j].strip()):
                j = _past_directive(code, j)       # inside a definition: its braces and parens are the first branch's
                continue
            if c == "(":
                paren += 1
            elif c == ")":
                paren -= 1
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0 and paren == 0:
                    k = j + 1
                    while k < n and code[k] in " \t":
                        k += 1
                    if k < n and code[k] == ";":               # struct S { ... };
                        j = k
                    elif _TYPE.match(code[i:j]):               # typedef enum E { ... } E;  struct S { ... } a, *b;
                        tail = re.match(r"[\s\w,*&\[\]]*;", code[j + 1:])
                        if tail and re.search(r"\w", tail.group(0)):
                            j = j + tail.end()
                    yield i, j + 1, "block"
                    break
            elif c == ";" and depth == 0 and paren == 0:
                yield i, j + 1, "decl"
                break
            j += 1
        else:
            yield i, n, "decl"
        if j < n and code[j] == "#" and (j == 0 or code[j - 1] == "\n"):
            i = j if j > i else j + 1
            continue
        i = j + 1


def device_macros(code: str) -> set[str]:
    """Macros that stand for ``__device__`` and the like (DeepSpeed's ``DS_D_INLINE``, ``HOST_DEVICE``)."""
    return {m.group(1) for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+([^\n]*)$", code, re.M)
            if re.search(r"\b__(device|global|constant|managed|shared)__\b", m.group(2)) and "(" not in m.group(1)}


def _host_class(text: str, device_words: set[str]) -> str | None:
    """The name of a class whose members include a function with no ``__device__`` (or a macro for it):
    host code NVRTC refuses (a timer, an image loader, an NVTX range), left out whole; None for a
    class device code can use (data members, ``__device__`` or ``__host__ __device__`` functions)."""
    open_at, close = text.find("{"), text.rfind("}")
    name = re.search(r"\b(?:struct|class|union)\s+(?:__align__\s*\([^)]*\)\s*)?([A-Za-z_]\w*)", text[:max(open_at, 0)])
    if open_at < 0 or close < open_at or name is None:
        return None
    body = text[open_at + 1:close]
    while True:                               # member function bodies out: the members' heads alone remain
        flat = re.sub(r"\{[^{}]*\}", ";", body)
        if flat == body:
            break
        body = flat
    marks = {"__device__", "__global__", *device_words}
    # each member declaration: the text since the last ; { } or access label before a parameter list
    for m in re.finditer(r"([^;{}]*?)\b(~?[A-Za-z_]\w*)\s*\([^;{}]*\)\s*(?:const\s*)?(?:noexcept\s*)?(;|\{|:|=\s*\w*)", body):
        if m.group(3).startswith("=") and m.group(3)[1:].strip() in ("default", "delete"):
            continue                          # Packed128() = default: what the compiler writes, on either side
        decl = re.sub(r"^.*\b(public|private|protected)\s*:", "", m.group(1), flags=re.S)
        words = set(re.findall(r"[A-Za-z_]\w*", decl))
        if m.group(2) in ("if", "for", "while", "switch", "return", "sizeof", "__launch_bounds__", "alignas"):
            continue
        if "=" in decl or "(" in decl:        # an initialiser or a call, not a member function's head
            continue
        if not words & marks and "constexpr" not in words and "static_assert" not in words:
            return name.group(1)
    return None


def _past_directive(code: str, at: int) -> int:
    """Where scanning goes on after the preprocessor line at ``at`` inside a definition: past the line,
    or, for ``#else``/``#elif``, past the ``#endif`` that closes it (the first branch alone is counted,
    so branches that each open a parenthesis do not unbalance it)."""
    def line_end(k: int) -> int:
        while True:
            e = code.find("\n", k)
            if e < 0:
                return len(code)
            if e > 0 and code[e - 1] == "\\":
                k = e + 1
                continue
            return e
    end = line_end(at)
    if not re.match(r"#\s*(else|elif)\b", code[at:end]):
        return end
    nest = 0
    for m in re.finditer(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|endif)\b", code[end:], re.M):
        if m.group(1) == "endif":
            if nest == 0:
                return end + m.start()            # the #endif line itself is read next (and skipped as a line)
            nest -= 1
        else:
            nest += 1
    return len(code)


def _dropped(text: str, kind: str, entry: str | None, device_words: set[str] = frozenset(),
             beside: set[str] = frozenset()) -> tuple[bool, str]:
    """Whether an item is left out, and what to call it (``device_words``: macros standing for
    ``__device__``)."""
    if kind == "include":                 # a toolkit header written with quotes ("cuda_fp16.h") is one too
        m = _INCLUDE.match(text)
        name = m.group(2).strip()
        return (not DEVICE_HEADERS.match(name) or name in beside), text.strip()
    if kind == "pp":                      # a macro that launches kernels is a host launcher (vLLM's LAUNCH_...)
        launcher = re.match(r"\s*#\s*define\s+([A-Za-z_]\w*)", text)
        return (True, f"macro {launcher.group(1)}") if launcher and "<<<" in text else (False, "")
    head = text.split("{", 1)[0] if kind == "block" else text
    words = set(re.findall(r"[A-Za-z_]\w*", head))
    if kind == "block" and re.match(r"\s*(namespace\b|extern\s+\"C\"\s*\{)", text):
        return False, ""
    if kind == "decl" and re.match(r"\s*namespace\s+[A-Za-z_]\w*\s*=", text):     # namespace cg = cooperative_groups;
        return False, ""
    if _TYPE.match(head):                 # struct __align__(8) S { ... };  template <class T> struct P { ... };
        host = _host_class(text, device_words) if kind == "block" else None
        return (True, f"host class {host}") if host else (False, "")
    paren = head.find("(")
    name = ""
    if paren > 0:
        m = _NAME_BEFORE_PAREN.search(head[:paren])
        name = m.group(1) if m else ""
    if "__global__" in words:
        name = kernel_name(head) or _before_last_parens(head) or name   # past __launch_bounds__(...), enable_if_t<(...)>
        return entry is not None and name != entry, f"kernel {name}" if name else "a kernel"
    if words & ({"__device__", "__constant__", "__managed__", "__shared__"} | set(device_words)):
        return False, ""
    if kind == "decl" and (re.search(r'(?<![\w:])std::', text) or re.search(r'"', text)):
        return True, ""                   # a host library's constant (std::bool_constant), a string (a sample's name)
    if kind == "decl" and words & {"typedef", "using", "static_assert", "template", "const", "constexpr"} and paren < 0:
        return False, ""                  # a type, or a constant device code may read (const int N = 1024;)
    return True, (name if kind == "block" and name else "")
