"""The launch a program gives its kernel, read from its host code for ``kforge init``.

A program written for nvcc launches the kernel as ``name<<<grid, block[, shared]>>>(args)``, its
sizes computed in the launching function (llm.c: ``const int N = B * T; const int grid_size =
ceil_div(N * 32, block_size);``).  :func:`read_launch` finds the first such launch and writes
grid, block and shared memory in the manifest's expression language over the kernel's own
parameters:

* each argument of the call that is a name (or an expression, ``B*T``) stands for the kernel
  parameter in its place, so ``N`` passed as the kernel's ``N`` is that parameter;
* other names are replaced by their last definition before the launch (``const int N = B * T;``,
  ``dim3 grid(x, y);``, a ``#define``), up to a few levels deep;
* a block size the program takes from outside (a launcher's parameter, a loop over block sizes)
  becomes 256 threads (16 x 16, 8 x 8 x 8 for 2-D and 3-D blocks), in the grid's expression too;
  so does a name with "block" or "threads" in it met inside another's value (``block_y =
  block_size / WARP_SIZE``: 256 / 32; a ``sqrt_block_size``: 16);
* ``ceil_div``-style helpers become ``cdiv``, C's integer ``/`` becomes ``//``, casts and integer
  suffixes go, ``sizeof`` of the usual types becomes its bytes.

Anything else (a name that cannot be resolved, a conditional, a member access) and the launch is
not read: None, and init keeps its guess of one thread per element.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from kernel_forge.common import expressions
from kernel_forge.common.errors import ExpressionError
from kernel_forge.common.static_rules import strip_comments_and_strings

#: threads per block where the program's block size comes from outside, by the block's dimensions
DEFAULT_BLOCK = {1: 256, 2: 16, 3: 8}
_CDIV = {"ceil_div", "CEIL_DIV", "div_up", "DIV_UP", "divUp", "iDivUp", "cdiv", "DIVUP", "ceilDiv", "CeilDiv",
         "ceildiv", "DIV_ROUND_UP", "div_round_up"}
_FUNCS = {"min": "min", "max": "max", "std::min": "min", "std::max": "max", "MIN": "min", "MAX": "max"}
_SIZEOF = {"float": 4, "int": 4, "unsigned": 4, "unsigned int": 4, "uint32_t": 4, "int32_t": 4, "double": 8,
           "long long": 8, "int64_t": 8, "uint64_t": 8, "size_t": 8, "half": 2, "__half": 2, "nv_bfloat16": 2,
           "__nv_bfloat16": 2, "floatX": 4, "float4": 16, "float2": 8, "char": 1, "short": 2}
_TYPES = (r"(?:const\s+)?(?:static\s+)?(?:constexpr\s+)?(?:unsigned\s+|signed\s+)?"
          r"(?:int|long\s+long|long|size_t|int64_t|int32_t|uint32_t|uint64_t|unsigned|auto|short)")
_IDENT = re.compile(r"(?:std::)?[A-Za-z_]\w*")
_DEPTH = 6
#: names a program may use without defining them in the file (a project header's WARP_SIZE)
_CONSTANTS = {"WARP_SIZE": "32", "warpSize": "32", "WARPSIZE": "32", "kWarpSize": "32"}
_MARK = "kf__param__"        #: a kernel parameter put in for an argument written as an expression


@dataclass(frozen=True)
class ReadLaunch:
    grid: list                  #: the manifest's launch.grid
    block: list                 #: the manifest's launch.block
    shared_mem: str | int | None
    line: int                   #: the program's line of the launch
    written: str                #: the launch as the program writes it (``<<<...>>>``)
    defaulted: tuple[str, ...]  #: names of a block size set from outside, taken as DEFAULT_BLOCK


def _split_top(text: str) -> list[str]:
    """``text`` split at its commas outside parentheses, brackets and braces."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur).strip())
    return [p for p in out if p]


def _matching(text: str, start: int) -> int | None:
    """The index of the parenthesis closing the one at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    return None


def _norm(expr: str) -> str:
    return re.sub(r"\s+", "", expr)


def _definition(code: str, name: str, before: int) -> str | None:
    """The last value given to ``name`` before offset ``before`` (a definition or an assignment:
    ``const int N = B * T;``, ``sqrt_block_size = 16;``), else its #define, else a CUDA constant."""
    found = None
    start = _scope_start(code, before)        # the launching function's own body: another's values do not count
    for m in re.finditer(r"(?<![\w.>])" + re.escape(name) + r"\s*=(?!=)\s*([^;{}]+);", code[start:before]):
        found = m.group(1)
    if found is None:
        for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+" + re.escape(name) + r"[ \t]+([^\n]+)$", code[:before], re.M):
            found = m.group(1)
    return found if found is not None else _CONSTANTS.get(name)


def _scope_start(code: str, before: int) -> int:
    """The offset where the outermost block around ``before`` opens (a function's body), or 0."""
    depth, start = 0, 0
    for m in re.finditer(r"[{}]", code[:before]):
        if m.group(0) == "{":
            if depth == 0:
                start = m.start()
            depth += 1
        else:
            depth = max(0, depth - 1)
    return start if depth > 0 else before


def _dim3(code: str, name: str, before: int) -> list[str] | None:
    """The components of ``dim3 name(x, y, z)`` (or ``= dim3(...)``, ``{...}``) defined before ``before``."""
    found = None
    start = _scope_start(code, before)
    for m in re.finditer(r"\bdim3\s+" + re.escape(name) + r"\s*(?:=\s*dim3\s*)?[({]([^;]*)[)}]\s*;", code[start:before]):
        found = _split_top(m.group(1))
    return found


class _Unread(Exception):
    """The launch cannot be read."""


class _Defaulted(Exception):
    """A block-size name with no definition: taken as the default block."""


def _resolve(expr: str, code: str, before: int, passed: dict[str, str], block_names: set[str],
             defaulted: dict[str, int], depth: int = 0) -> str:
    """``expr`` over the kernel's parameters (see the module docstring); raises _Unread."""
    if depth > _DEPTH:
        raise _Unread("nested too deep")
    e = expr.strip()
    if "?" in e or "." in re.sub(r"\d+\.\d*|\.\d+", "", e).replace("...", "") or "->" in e or "[" in e:
        raise _Unread(f"`{expr}`")
    e = re.sub(r"\bsizeof\s*\(\s*([\w ]+?)\s*\)", lambda m: str(_SIZEOF.get(m.group(1).strip(), "?")), e)
    if "?" in e:
        raise _Unread(f"`{expr}`")
    e = re.sub(r"static_cast\s*<\s*[\w ]+\s*>", "", e)
    e = re.sub(r"\(\s*(?:unsigned\s+)?(?:int|long long|long|size_t|unsigned|int64_t|uint32_t)\s*\)", "", e)
    e = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b", r"\1", e)
    for arg, param in passed.items():            # an argument written as an expression: B*T passed as BT
        if not _IDENT.fullmatch(arg) and arg in _norm(e):
            e = _norm(e).replace(arg, f"({_MARK}{param})")
    out, pos = [], 0
    for m in _IDENT.finditer(e):
        out.append(e[pos:m.start()])
        name = m.group(0)
        follows = e[m.end():].lstrip()[:1]
        if name.startswith(_MARK):
            out.append(name[len(_MARK):])
        elif name in _CDIV and follows == "(":
            out.append("cdiv")
        elif name in _FUNCS and follows == "(":
            out.append(_FUNCS[name])
        elif name in passed:
            out.append(passed[name])
        elif name in defaulted:
            out.append(str(defaulted[name]))
        else:
            d = _definition(code, name, before)
            if d is not None:
                out.append("(" + _resolve(d, code, before, passed, block_names, defaulted, depth + 1) + ")")
            elif name in block_names:
                raise _Defaulted(name)
            elif re.search(r"block|threads", name, re.I):   # a block size set outside, met inside another name's value
                defaulted[name] = 16 if "sqrt" in name.lower() else DEFAULT_BLOCK[1]
                out.append(str(defaulted[name]))
            else:
                raise _Unread(f"`{name}`")
        pos = m.end()
    out.append(e[pos:])
    text = "".join(out)
    return re.sub(r"(?<![/])/(?![/])", "//", text)


def read_launch(program: str, name: str, params) -> ReadLaunch | None:
    """The first launch of kernel ``name`` in ``program`` over ``params`` (the signature's
    parameters), or None (see the module docstring)."""
    code = strip_comments_and_strings(program, keep_strings=True)
    m = re.search(r"\b" + re.escape(name) + r"\s*(?:<[^<>;()]*>)?\s*<<<(.*?)>>>\s*\(", code, re.S)
    if m is None:
        return None
    close = _matching(code, m.end() - 1)
    if close is None:
        return None
    config = _split_top(m.group(1))
    args = _split_top(code[m.end():close])
    if not 2 <= len(config) <= 4 or len(args) != len(params):
        return None
    passed: dict[str, str] = {}
    for arg, p in zip(args, params):
        if not p.pointer and not p.dtype.is_float and p.dtype.name != "bool":
            key = arg if _IDENT.fullmatch(arg) else _norm(arg)
            passed.setdefault(key, p.name)
    before = m.start()
    block = _dim3(code, config[1], before) if _IDENT.fullmatch(config[1]) else None
    if block is None:
        inner = re.fullmatch(r"dim3\s*\((.*)\)", config[1].strip(), re.S)
        block = _split_top(inner.group(1)) if inner else [config[1]]
    grid = _dim3(code, config[0], before) if _IDENT.fullmatch(config[0]) else None
    if grid is None:
        inner = re.fullmatch(r"dim3\s*\((.*)\)", config[0].strip(), re.S)
        grid = _split_top(inner.group(1)) if inner else [config[0]]
    default = DEFAULT_BLOCK.get(len(block))
    if default is None or len(grid) > 3:
        return None
    defaulted: dict[str, int] = {}
    block_names = {n for b in block for n in _IDENT.findall(b)}
    try:
        blk = [_with_defaults(b, code, before, passed, block_names, defaulted, default) for b in block]
        grd = [_with_defaults(g, code, before, passed, block_names, defaulted, default) for g in grid]
        shared = (_with_defaults(config[2], code, before, passed, block_names, defaulted, default)
                  if len(config) >= 3 else None)
    except _Unread:
        return None
    if not _evaluates([*grd, *blk], params, blk) or (shared and not _evaluates([f"({shared}) + 1"], params, [])):
        return None
    line = code.count("\n", 0, m.start()) + 1
    return ReadLaunch([_tidy(g) for g in grd], [_tidy(b) for b in blk],
                      _tidy(shared) if shared and shared.strip() != "0" else None, line,
                      f"<<<{m.group(1).strip()}>>>", tuple(sorted(defaulted)))


def _with_defaults(expr, code, before, passed, block_names, defaulted, default) -> str:
    while True:
        try:
            return _resolve(expr, code, before, passed, block_names, defaulted)
        except _Defaulted as d:
            defaulted[str(d)] = default


def _tidy(expr: str) -> str | int:
    text = re.sub(r"\(\s*(\w+)\s*\)", r"\1", re.sub(r"\s+", " ", expr).strip())
    text = re.sub(r"\bcdiv\b", "cdiv", text)
    while text.startswith("(") and _matching(text, 0) == len(text) - 1:
        text = text[1:-1].strip()
    return int(text) if re.fullmatch(r"\d+", text) else text


def _evaluates(exprs, params, block) -> bool:
    """Whether each expression evaluates to a positive number with every size parameter at 64, and
    the block to at most 1,024 threads."""
    values = {p.name: 64 for p in params if not p.pointer}
    try:
        threads = 1
        for b in block:
            threads *= expressions.evaluate(b, values)
        if threads > 1024:
            return False
    except (ExpressionError, ZeroDivisionError, TypeError, ValueError, OverflowError):
        return False
    for e in exprs:
        try:
            v = expressions.evaluate(e, values)
        except (ExpressionError, ZeroDivisionError, TypeError, ValueError, OverflowError):
            return False
        if not isinstance(v, (int, float)) or v <= 0:
            return False
    return True
