"""Static rules: source a candidate may not contain, found before anything is compiled.

A candidate must compute the task itself, in its one kernel, on the launch stream.  These
rules refuse the ways around that which a text scan can see: vendor-library headers and calls,
device-side launches and stream/memory API calls, reads of the clocks used for timing,
includes that reach outside the standard headers, and memory outside the module image (the
device heap, ``__managed__`` variables) that the gate could not reset between launches.  Comments and string literals are ignored;
each finding names the line.

The include rules (``include_path``, ``computed_include``) stay for their clear messages, but
what a kernel can read no longer rests on them: :mod:`kernel_forge.common.includes` allows only
the toolkit's and the task's own headers, checked on the spliced source and on what NVRTC opened.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

#: rules checked with string literals kept (inline assembly lives in strings)
IN_STRINGS = {"timer", "include_path"}

RULES: list[tuple[str, re.Pattern, str]] = [
    ("vendor_library", re.compile(r"#\s*include\s*[<\"](cublas|cublasLt|cudnn|cufft|curand_kernel_host|cusparse|cusolver|nccl|thrust/system/cuda/detail/.*cub)[^>\"]*[>\"]"),
     "includes a vendor library; the task must be computed by the kernel itself"),
    ("vendor_call", re.compile(r"\b(cublas|cudnn|cufft|cusparse|cusolver|nccl)[A-Z_]\w*\s*\("),
     "calls a vendor library"),
    ("device_launch", re.compile(r"<<<"), "launches kernels from the device (dynamic parallelism)"),
    ("runtime_api", re.compile(r"\bcuda(StreamCreate\w*|LaunchKernel\w*|Malloc\w*|Free\w*|Memcpy\w*|Memset\w*|"
                               r"DeviceSynchronize|GraphLaunch|StreamSynchronize|EventRecord)\s*\("),
     "calls the CUDA runtime from the kernel (streams, memory, launches)"),
    ("timer", re.compile(r"%(globaltimer\w*|clock64|clock\b)|\bglobaltimer\b"),
     "reads a GPU timer in inline assembly"),
    ("include_path", re.compile(r"#\s*include\s*[\"<]\s*(/|[A-Za-z]:\\|[^\">]*\.\.)"),
     "includes a file by absolute or parent-relative path"),
    ("computed_include", re.compile(r"#\s*include(?:_next)?\b\s*(?![\s<\"])\S"),
     "includes a file named by a macro (a computed #include); name headers literally"),
    ("host_code", re.compile(r"\b(fopen|system|popen|getenv|dlopen)\s*\("),
     "calls host or OS functions"),
    ("device_heap", re.compile(r"\b(malloc|free|realloc|calloc)\s*\(|\bnew\b|(?<!=)(?<!= )\bdelete\b"),
     "allocates on the device heap (malloc/free/new/delete): state outside the module image survives launches"),
    ("managed_memory", re.compile(r"\b__managed__\b"),
     "declares __managed__ memory: state outside the module image survives launches"),
]


@dataclass(frozen=True)
class Finding:
    rule: str
    line: int
    text: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message} ({self.rule}): {self.text.strip()}"


def strip_comments_and_strings(source: str, *, keep_strings: bool = False) -> str:
    """Blank out comments and (unless ``keep_strings``) string/char literals, keeping every
    newline and #include paths."""
    out = []
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if source.startswith("//", i):
            j = source.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif source.startswith("/*", i):
            j = source.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join("\n" if ch == "\n" else " " for ch in source[i:j]))
            i = j
        elif c == "'" and 0 < i < n - 1 and source[i - 1].isalnum() and source[i + 1].isalnum():
            out.append(c)          # a C++14 digit separator (1'000), not a character literal
            i += 1
        elif c in "\"'":
            # keep include paths intact: a string right after #include is a path, not data
            line_start = source.rfind("\n", 0, i) + 1
            is_include = re.match(r"\s*#\s*include\s*$", source[line_start:i]) is not None
            j = i + 1
            while j < n and source[j] != c and source[j] != "\n":
                j += 2 if source[j] == "\\" else 1
            if j < n and source[j] == c:
                j += 1             # the closing quote; an unterminated literal stops before its newline
            j = min(j, n)
            out.append(source[i:j] if (is_include or keep_strings) else c + " " * max(0, j - i - 2) + (c if j - i >= 2 else ""))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def check(source: str) -> list[Finding]:
    code = strip_comments_and_strings(source).splitlines()
    with_strings = strip_comments_and_strings(source, keep_strings=True).splitlines()
    original = source.splitlines()
    findings = []
    for lineno, (line, line_s) in enumerate(zip(code, with_strings), start=1):
        for rule, pattern, message in RULES:
            if pattern.search(line_s if rule in IN_STRINGS else line):
                findings.append(Finding(rule, lineno, original[lineno - 1] if lineno <= len(original) else line,
                                        message))
    return findings
