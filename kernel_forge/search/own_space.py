"""A search space for the user's own kernel, derived by rewriting its source.

When no template or pattern fits a task and its initial kernel declares no ``// kforge: tune``
lines, the tuner still searches something: :func:`derive` rewrites the kernel so that what an
engineer would tune by hand becomes tunables, each reaching the compiler as ``-DNAME=VALUE``:

* **the block shape** (``KF_BX``, ``KF_BY``, ``KF_BZ``), on an axis where it is safe to change:
  the block size there is a literal, the kernel reads ``blockDim.<axis>``, the literal appears
  nowhere else in its code (a ``__shared__ float s[256]`` sized for the block rules the axis
  out), and the grid follows the block (the literal appears in that axis's grid expression and
  is replaced by the tunable: ``cdiv(n, 256)`` becomes ``cdiv(n, KF_BX)``) or does not need to
  (the kernel strides by ``gridDim``/``blockDim`` along that axis);
* **the factor of every ``#pragma unroll`` loop** (``KF_U0``, ``KF_U1``, ...: as written, 1, 2,
  4, 8; 0 stands for a plain ``#pragma unroll``), the pragma line replaced by a macro line;
* **``__launch_bounds__``**: a literal maximum equal to the block size follows the tuned
  block; a kernel without one gets ``__launch_bounds__(threads, KF_MINB)`` with ``KF_MINB`` in
  1, 2, 4 (minimum resident blocks per SM: fewer registers per thread, more in flight).

The rewrite keeps every line of the kernel where it was (the pragma and signature lines are
replaced in place) below a short block of macro lines; the declared setting is the kernel as
written, so the space holds the initial kernel itself.  Nothing is assumed correct: every
setting goes through the gate like any candidate.  Settings per shape follow from the dispatch
rules the loop fits over any tuned kernel's gated settings.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from kernel_forge.model.candidate import Candidate, Launch
from kernel_forge.search.spaces import strip_comments

AXES = "xyz"
#: block sizes tried along x (warp multiples) and along y / z (where the kernel is 2-D or 3-D)
X_VALUES = (32, 64, 128, 256, 512, 1024)
YZ_VALUES = (1, 2, 4, 8, 16, 32)
UNROLL_VALUES = (1, 2, 4, 8)
MINB_VALUES = (1, 2, 4)

_PRAGMA = re.compile(r"^(\s*)#\s*pragma\s+unroll\s*(\(?\s*(\d+)\s*\)?)?\s*$")
_BOUNDS = re.compile(r"__launch_bounds__\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?(?:,\s*\d+\s*)?\)")
_NUMBER = r"(?<![\w.]){v}(?![\w.])"
_INSTANCE_ARGS = re.compile(r"^[ \t]*//[ \t]*kforge:[ \t]*instance\s+\w+\s*<(.*)>\s*$", re.M)


@dataclass
class Derived:
    """The rewritten kernel and what it tunes, in words for the budget line."""

    source: str
    tunables: dict[str, tuple[int, ...]] = field(default_factory=dict)
    what: list[str] = field(default_factory=list)       # "block shape x (KF_BX: 6 values)", ...

    def describe(self) -> str:
        return ", ".join(self.what)


def _literal(e) -> int | None:
    if isinstance(e, int):
        return e
    s = str(e).strip()
    return int(s) if s.isdigit() else None


def _uses(code: str, pattern: str) -> bool:
    return re.search(pattern, code) is not None


def _strides(code: str, axis: str) -> bool:
    """The kernel steps along ``axis`` by the block or the grid (it covers any extent itself)."""
    return (_uses(code, rf"gridDim\s*\.\s*{axis}")
            or _uses(code, rf"\+=\s*(?:\(\s*)?(?:\w+\s*\*\s*)?blockDim\s*\.\s*{axis}"))


def _block_axes(code: str, launch: Launch) -> list[tuple[int, int, str]]:
    """(axis index, its literal block size, the tunable's name) of every axis safe to tune."""
    out = []
    block = list(launch.block) + [1] * (3 - len(launch.block))
    grid = [str(g) for g in launch.grid] + ["1"] * (3 - len(launch.grid))
    without_bounds = _BOUNDS.sub("", code)
    for d, axis in enumerate(AXES):
        b = _literal(block[d])
        if b is None or not _uses(code, rf"blockDim\s*\.\s*{axis}"):
            continue
        if b > 1 and re.search(_NUMBER.format(v=b), without_bounds):
            continue             # the block size is written into the code: changing it is not safe
        follows = b > 1 and re.search(_NUMBER.format(v=b), grid[d]) is not None
        if not follows and not _strides(code, axis):
            continue
        out.append((d, b, f"KF_B{axis.upper()}"))
    return out


def derive(source: str, launch: Launch | None, *, name: str = "kernel.cu", own_defines: dict | None = None
           ) -> Derived | None:
    """The kernel with its tunables made explicit, or None when nothing of it is safe to tune
    (``launch``: the kernel's own header launch or the manifest's; ``own_defines``: its own
    ``// kforge: define`` values, kept)."""
    # a template's instance arguments are code too: a literal there (rms_norm<float, 256>) may size
    # the kernel's arrays like one written in its body
    code = strip_comments(source) + "".join(f"\n<{m.group(1)}>" for m in _INSTANCE_ARGS.finditer(source))
    lines = source.splitlines()
    tunables: dict[str, tuple[int, ...]] = {}
    defines: dict[str, int] = {}
    what: list[str] = []
    constraints: list[str] = []
    new_launch = launch
    threads_expr = None

    axes = _block_axes(code, launch) if launch is not None and not launch.cooperative else []
    if axes:
        grid = [str(g) for g in launch.grid]
        block = list(launch.block)
        smem = launch.shared_mem
        for d, b, macro in axes:
            values = X_VALUES if d == 0 else YZ_VALUES
            tunables[macro] = tuple(dict.fromkeys((b,) + values))
            defines[macro] = b
            block[d] = macro
            if d < len(grid):
                grid[d] = re.sub(_NUMBER.format(v=b), macro, grid[d])
            if b > 1 and isinstance(smem, str):
                smem = re.sub(_NUMBER.format(v=b), macro, smem)
            what.append(f"block {AXES[d]} ({macro}: {len(tunables[macro])} values)")
        while len(block) < len(grid):
            block.append(1)
        product = " * ".join(str(x) for x in block)
        constraints.append(f"{product} <= 1024")
        constraints.append(f"{product} >= {min(32, _threads(launch) or 32)}")
        new_launch = Launch(tuple(grid), tuple(block), smem, launch.cooperative)
        threads_expr = f"({product})"
    elif launch is not None and all(_literal(x) is not None for x in launch.block):
        threads = 1
        for x in launch.block:
            threads *= _literal(x)
        threads_expr = str(threads)

    # unroll factors: each `#pragma unroll [N]` line becomes a macro line
    pragmas = []
    for i, line in enumerate(lines):
        m = _PRAGMA.match(line)
        if m and "kforge:" not in line:
            pragmas.append((i, m.group(1), int(m.group(3)) if m.group(3) else 0))
    macro_lines = []
    if pragmas:
        macro_lines += ["#define KF_PRAGMA_(x) _Pragma(#x)", "#define KF_UNROLL_(n) KF_PRAGMA_(unroll n)"]
    for k, (i, indent, n) in enumerate(pragmas):
        macro = f"KF_U{k}"
        tunables[macro] = tuple(dict.fromkeys((n,) + UNROLL_VALUES))
        defines[macro] = n
        macro_lines += [f"#if {macro} == 0", f"#define KF_UNROLL{k} _Pragma(\"unroll\")", "#else",
                        f"#define KF_UNROLL{k} KF_UNROLL_({macro})", "#endif"]
        lines[i] = f"{indent}KF_UNROLL{k}"
    if pragmas:
        what.append(f"the unroll factor of {len(pragmas)} #pragma unroll loop{'s' if len(pragmas) > 1 else ''}")

    # __launch_bounds__: follow a tuned block, or add one with a minimum of resident blocks
    joined = "\n".join(lines)
    m = _BOUNDS.search(strip_comments(joined))
    if m is not None:
        if axes and threads_expr and launch is not None and _literal(m.group(1)) == _threads(launch):
            joined = _BOUNDS.sub(lambda mm: mm.group(0).replace(mm.group(1), threads_expr, 1), joined,
                                 count=len(_BOUNDS.findall(joined)))      # a declaration's and the definition's
            what.append("__launch_bounds__ following the block")
    elif threads_expr is not None and not re.search(r"__launch_bounds__\s*\(", strip_comments(joined)):
        # (bounds written over template parameters or macros, __launch_bounds__(THREADS), are the kernel's own)
        heads = list(re.finditer(r"(__global__\s+void\s+)(?=[A-Za-z_]\w*\s*\()", joined))
        for entry in reversed(heads):      # every head: a forward declaration's and the definition's agree
            joined = joined[:entry.end()] + f"__launch_bounds__({threads_expr}, KF_MINB) " + joined[entry.end():]
        if heads:
            tunables["KF_MINB"] = MINB_VALUES
            defines["KF_MINB"] = 1
            constraints.append(f"{threads_expr} * KF_MINB <= 2048")     # an SM holds 2048 threads at most
            what.append(f"__launch_bounds__ minimum blocks per SM (KF_MINB: {len(MINB_VALUES)} values)")
    if not tunables:
        return None
    body = "\n".join(macro_lines + [joined]) + ("\n" if source.endswith("\n") else "")
    cand = Candidate(source=body, name=name, launch=new_launch, tunables=tunables,
                     defines={**(own_defines or {}), **defines},
                     constraints=tuple(constraints))
    return Derived(source=cand.render(), tunables=tunables, what=what)


def _threads(launch: Launch) -> int | None:
    n = 1
    for x in launch.block:
        v = _literal(x)
        if v is None:
            return None
        n *= v
    return n
