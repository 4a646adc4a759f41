"""Rules on the compiled code: what a kernel's PTX actually calls and reads, however the source spelled it.

The text rules (:mod:`.static_rules`) read the spelling and name the line; a macro that pastes
``mal`` and ``loc`` together, a function pointer to ``malloc`` or a user declaration of it passes
them.  NVRTC's PTX for the same compile shows the program as it is: every function it calls that
is not in the module is declared ``.extern .func NAME`` (NVRTC lowers ``malloc``/``new`` to
``malloc``, ``free``/``delete`` to ``free``, ``__nv_aligned_device_malloc`` to
``__cuda_syscall_aligned_malloc``, ``printf`` to ``vprintf``, a device-side launch to
``cudaGetParameterBuffer*`` and ``cudaLaunchDevice*``), and every timer read is a special register
(``%clock``, ``%clock_hi``, ``%clock64``, ``%globaltimer``, ``%globaltimer_lo``/``_hi``), whether from inline
assembly or ``clock64()``; a ``__managed__`` variable is ``.global .attribute(.managed)``.  ``-lineinfo`` (always on, :func:`kernel_forge.gpu.nvrtc.build_options`)
gives ``.loc`` lines, so a finding names the kernel line where the PTX says which.

Honest kernels declare no external function but ``__assertfail`` (``assert``); CUB, cooperative
groups (grid sync too), templates and inline PTX compile to none (tests/common/test_compiled_rules.py
compiles every kernel of tests/honest/ through these rules).  Pure text in, findings out: no GPU.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath

#: external functions an honest kernel may call (``assert`` lowers to ``__assertfail``)
ALLOWED = frozenset({"__assertfail"})

#: (rule, name pattern, message) for external functions, the first that matches is the finding's
CALLS: list[tuple[str, re.Pattern, str]] = [
    ("device_heap", re.compile(r"^(malloc|free|realloc|calloc|__cuda_syscall_\w*malloc\w*|__cuda_syscall_\w*free\w*|"
                               r"_Zn[wa]\w*|_Zd[la]\w*)$"),
     "allocates on the device heap ({name} in the compiled code): state outside the module image survives launches"),
    ("device_launch", re.compile(r"^(cudaLaunchDevice\w*|cudaGetParameterBuffer\w*|cudaCDP\w*|__cudaCDP\w*)$"),
     "launches kernels from the device ({name} in the compiled code)"),
    ("runtime_api", re.compile(r"^cuda\w+$"),
     "calls the CUDA runtime from the kernel ({name} in the compiled code)"),
    ("device_printf", re.compile(r"^vprintf$"),
     "prints from the kernel ({name} in the compiled code): its output buffer lies outside the module image and "
     "its cost outside the kernel's work; remove printf from a timed kernel"),
]
#: a function outside the module that no rule above names
OTHER_CALL = ("external_call", "calls {name}, a function outside the module (the compiled code declares it .extern)")

#: a ``__managed__`` variable: memory outside the module image that the gate does not restore
_MANAGED = re.compile(r"^\s*\.global\s+\.attribute\s*\(\s*\.managed\s*\)[^;]*?([A-Za-z_$][\w$]*)\s*(?:\[[^\]]*\])*\s*(?:=[^;]*)?;", re.M)
MANAGED_MESSAGE = ("declares managed memory ({name} is __managed__ in the compiled code): state outside the module "
                   "image survives launches")

#: special registers that read a clock (the gate's own timers)
TIMER = re.compile(r"%(clock64|clock_hi|clock|globaltimer_lo|globaltimer_hi|globaltimer)\b")
TIMER_MESSAGE = "reads a GPU timer ({name} in the compiled code)"

_EXTERN = re.compile(r"^\s*\.extern\s+\.func\s*(?:\([^)]*\)\s*)?([A-Za-z_$][\w$]*)", re.M)
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', re.M)
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+\d+(?:.*?inlined_at\s+(\d+)\s+(\d+)\s+\d+)?")


@dataclass(frozen=True)
class Finding:
    rule: str
    line: int | None                   #: the kernel line (None where the PTX names no line of the program)
    name: str                          #: the function or register the compiled code uses
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        return f"{where}{self.message} ({self.rule})"


def externals(ptx: str) -> list[str]:
    """Every function the PTX declares ``.extern .func`` (called or taken the address of), in order."""
    seen: list[str] = []
    for name in _EXTERN.findall(ptx):
        if name not in seen:
            seen.append(name)
    return seen


def _program_files(ptx: str, file_label: str) -> set[str]:
    """The ``.file`` numbers that are the program itself (NVRTC writes its name, maybe made absolute)."""
    base = PurePath(file_label).name
    return {num for num, path in _FILE.findall(ptx) if PurePath(path.replace("\\", "/")).name == base}


def _first_use_lines(ptx: str, names: set[str], file_label: str) -> dict[str, int | None]:
    """The program line of the first instruction that uses each of ``names`` (a function's name as
    an operand, a timer register), from the ``.loc`` before it; None when there is none."""
    program = _program_files(ptx, file_label)
    found: dict[str, int | None] = {}
    line: int | None = None
    patterns = {n: re.compile(rf"(?<![\w$%]){re.escape(n)}(?![\w$])") for n in names}
    for text in ptx.splitlines():
        stripped = text.strip()
        if stripped.startswith(".loc"):
            m = _LOC.match(stripped)
            if m:
                if m.group(1) in program:
                    line = int(m.group(2))
                elif m.group(3) in program:
                    line = int(m.group(4))
            continue
        if not stripped or stripped.startswith((".extern", "//", ".file", ".global")):
            continue
        for n, pat in patterns.items():
            if n not in found and pat.search(stripped):
                found[n] = line
        if len(found) == len(names):
            break
    return {n: found.get(n) for n in names}


def check(ptx: str, *, file_label: str = "kernel.cu") -> list[Finding]:
    """The findings of the compiled-code rules on ``ptx`` (NVRTC's, compiled with ``-lineinfo`` from a
    program named ``file_label``): external calls other than :data:`ALLOWED`, managed variables and
    timer reads."""
    calls = [n for n in externals(ptx) if n not in ALLOWED]
    timers = sorted({f"%{m}" for m in TIMER.findall(ptx)})
    managed = list(dict.fromkeys(_MANAGED.findall(ptx)))
    names = set(calls) | set(timers) | set(managed)
    lines = _first_use_lines(ptx, names, file_label) if names else {}
    findings = [Finding("managed_memory", lines.get(name), name, MANAGED_MESSAGE.format(name=name)) for name in managed]
    for name in calls:
        rule, message = next(((r, msg) for r, pat, msg in CALLS if pat.match(name)), OTHER_CALL)
        findings.append(Finding(rule, lines.get(name), name, message.format(name=name)))
    for reg in timers:
        findings.append(Finding("timer", lines.get(reg), reg, TIMER_MESSAGE.format(name=reg)))
    return sorted(findings, key=lambda f: (f.line is None, f.line or 0))
