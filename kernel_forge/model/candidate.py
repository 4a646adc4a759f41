"""A candidate kernel: one ``.cu`` file that carries its own launch and tunables.

Header lines (anywhere in the file, conventionally at the top) start with ``// kforge:``::

    // kforge: block = [BLOCK, 1, 1]
    // kforge: grid = [cdiv(n, BLOCK), 1, 1]
    // kforge: shared_mem = 0
    // kforge: tune BLOCK = [64, 128, 256, 512]
    // kforge: define BLOCK = 256
    // kforge: constraint BLOCK <= 1024
    // kforge: dispatch n >= 1048576 -> BLOCK=512
    // kforge: dispatch default -> BLOCK=256
    // kforge: cooperative = true
    // kforge: instance my_kernel<float, BLOCK>

``tune`` declares the values a tuner may try; ``define`` fixes the value used now (default: the
first tune value).  Every tunable reaches the compiler as ``-DNAME=VALUE`` and may be used in
launch expressions.  Lines without a header use the manifest's launch.  ``dispatch`` lines give
settings per shape (see :mod:`kernel_forge.model.dispatch`): each case runs with the setting of the
first line whose condition holds for its variables; the kernel's ``defines`` are then those of
the ``default`` line.  ``cooperative = true`` launches the kernel with ``cuLaunchCooperativeKernel``
so that ``cooperative_groups::this_grid().sync()`` works; the gate checks that the whole grid fits
on the GPU at once.  ``instance`` names the instance of a template kernel that runs (see
:mod:`kernel_forge.model.template_instance`); it stays where it is written.
"""
from __future__ import annotations

import hashlib
import itertools
import math
import random
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from kernel_forge.model import dispatch as dispatch_rule
from kernel_forge.common import expressions
from kernel_forge.common.errors import CandidateError, ExpressionError

_HEADER = re.compile(r"^\s*//\s*kforge:\s*(.*?)\s*$")
_ASSIGN = re.compile(r"^(grid|block|shared_mem)\s*=\s*(.+)$")
_TUNE = re.compile(r"^tune\s+([A-Za-z_]\w*)\s*=\s*(.+)$")
_DEFINE = re.compile(r"^define\s+([A-Za-z_]\w*)\s*=\s*(.+)$")
_CONSTRAINT = re.compile(r"^constraint\s+(.+)$")
#: names C++ reserves for the implementation (``__x``, ``_X``): the compiler's own macros
#: (``__CUDA_ARCH__``, ``__CUDACC__``, ``__NVCC__``) among them, which a header must not redefine
_RESERVED = re.compile(r"^(__|_[A-Z])")
_COOPERATIVE = re.compile(r"^cooperative\s*=\s*(\S+)$")
_INSTANCE = re.compile(r"^instance\b")


@dataclass(frozen=True)
class Launch:
    """Grid, block and dynamic shared memory as expressions over case variables and tunables."""

    grid: tuple[str | int, ...]
    block: tuple[str | int, ...]
    shared_mem: str | int = 0
    cooperative: bool = False          #: cuLaunchCooperativeKernel: every block co-resident, grid-wide sync allowed

    def resolve(self, variables: dict) -> tuple[tuple[int, int, int], tuple[int, int, int], int]:
        grid = tuple(expressions.evaluate_int(e, variables, what="grid size") for e in self.grid)
        block = tuple(expressions.evaluate_int(e, variables, what="block size") for e in self.block)
        smem = expressions.evaluate_int(self.shared_mem, variables, what="shared memory")
        pad = lambda t: tuple(t) + (1,) * (3 - len(t))  # noqa: E731
        return pad(grid), pad(block), smem

    def to_json(self) -> dict:
        d = {"grid": list(self.grid), "block": list(self.block), "shared_mem": self.shared_mem}
        if self.cooperative:
            d["cooperative"] = True
        return d


@dataclass(frozen=True)
class Candidate:
    """Kernel source plus the launch and tunable values it is to be run with."""

    source: str
    name: str = "candidate"           # a label for messages and evidence (file name, attempt id)
    launch: Launch | None = None       # None: the manifest's launch
    tunables: dict[str, tuple[int | float, ...]] = field(default_factory=dict)
    defines: dict[str, int | float] = field(default_factory=dict)
    constraints: tuple[str, ...] = ()
    dispatch: dispatch_rule.Rule | None = None   # settings per shape; None: ``defines`` for every case

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.render().encode()).hexdigest()

    def with_defines(self, defines: dict) -> "Candidate":
        merged = dict(self.defines)
        merged.update(defines)
        return replace(self, defines=merged)

    def satisfies_constraints(self, extra: dict | None = None) -> bool:
        env = dict(extra or {})
        env.update(self.defines)
        try:
            return all(bool(expressions.evaluate(c, env)) for c in self.constraints)
        except ExpressionError:
            return False

    def configurations(self) -> list[dict]:
        """Every combination of tune values that satisfies the constraints.  For small spaces
        only: :meth:`count_configurations` says how many there are without listing them, and
        :meth:`sample_configurations` draws some without listing them all."""
        if not self.tunables:
            return [dict(self.defines)]
        keys = sorted(self.tunables)
        out = []
        for combo in itertools.product(*(_values(self.tunables[k]) for k in keys)):
            d = dict(self.defines)
            d.update(zip(keys, combo))
            if replace(self, defines=d).satisfies_constraints():
                out.append(d)
        return out

    # -- large search spaces ----------------------------------------------------------------
    def _space(self) -> "_Space":
        return _Space.of(self)

    def count_configurations(self) -> "ConfigCount":
        """How many settings of the tunables satisfy the constraints, without listing them all.

        Tunables that no constraint ties together are counted by multiplication; each group of
        tunables tied by constraints is enumerated when it has at most :data:`ENUMERATE_LIMIT`
        combinations, else its share of valid settings is estimated from
        :data:`ESTIMATE_DRAWS` seeded random draws (then ``.exact`` is False)."""
        return self._space().count()

    def sample_configurations(self, budget: int, seed: int = 0, *, must=()) -> list[dict]:
        """At most ``budget`` distinct valid settings (each a full defines dict), drawn uniformly
        with ``seed`` without enumerating a large space.  The settings in ``must`` (dicts that
        override the defaults, e.g. the declared defaults and each tunable's extremes) come
        first, where they are valid."""
        return self._space().sample(budget, seed, must)

    def compile_defines(self) -> dict[str, int | float]:
        return dict(sorted(self.defines.items()))

    def render(self) -> str:
        """The source with its header rewritten to the current launch and defines, so the file
        replays on its own."""
        body = "\n".join(l for l in self.source.splitlines()
                          if not (m := _HEADER.match(l)) or _INSTANCE.match(m.group(1)))   # an instance stays put
        lines = []
        if self.launch is not None:
            fmt = lambda t: "[" + ", ".join(str(x) for x in t) + "]"  # noqa: E731
            lines.append(f"// kforge: grid = {fmt(self.launch.grid)}")
            lines.append(f"// kforge: block = {fmt(self.launch.block)}")
            if self.launch.shared_mem not in (0, "0"):
                lines.append(f"// kforge: shared_mem = {self.launch.shared_mem}")
            if self.launch.cooperative:
                lines.append("// kforge: cooperative = true")
        for k, values in sorted(self.tunables.items()):
            lines.append(f"// kforge: tune {k} = [{', '.join(str(v) for v in values)}]")
        for k, v in sorted(self.defines.items()):
            lines.append(f"// kforge: define {k} = {v}")
        for c in self.constraints:
            lines.append(f"// kforge: constraint {c}")
        if self.dispatch is not None:
            lines.extend(self.dispatch.header_lines())
        head = "\n".join(lines)
        return (head + "\n" + body.lstrip("\n")) if head else body
    # note: render() is idempotent: parse(render(c)) == c up to source whitespace


#: a group of tunables tied by constraints is enumerated when it has at most this many combinations
ENUMERATE_LIMIT = 50_000
#: seeded random draws that estimate a larger group's share of valid settings
ESTIMATE_DRAWS = 4_000


def _values(values) -> tuple:
    """Tune values without repeats, in their written order."""
    return tuple(dict.fromkeys(values))


class ConfigCount(int):
    """A number of configurations (an int), with ``exact`` False where part of it was estimated
    and ``product`` the size of the unconstrained space."""

    exact: bool
    product: int

    def __new__(cls, n: int, *, exact: bool = True, product: int | None = None):
        obj = super().__new__(cls, n)
        obj.exact = exact
        obj.product = n if product is None else product
        return obj

    def describe(self) -> str:
        return f"{int(self)}" if self.exact else f"about {int(self)} (estimated)"


def configuration_message(count: int, budget: int) -> str:
    """What to say before expanding a search space: "N configurations, gating a sample of B"."""
    n = count.describe() if isinstance(count, ConfigCount) else str(int(count))
    if int(count) <= budget:
        return f"{n} configurations, gating all of them"
    return f"{n} configurations, gating a sample of {budget}"


@dataclass
class _Group:
    keys: tuple[str, ...]
    constraints: tuple[str, ...]
    valid: list[tuple] | None = None        # enumerated valid combinations (small groups)
    estimate: float | None = None           # estimated count (large groups)

    def product(self, tunables) -> int:
        return math.prod(len(_values(tunables[k])) for k in self.keys)


@dataclass
class _Space:
    cand: "Candidate"
    groups: list[_Group]
    global_ok: bool

    @classmethod
    def of(cls, cand: "Candidate") -> "_Space":
        keys = sorted(cand.tunables)
        parent = {k: k for k in keys}

        def find(k):
            while parent[k] != k:
                parent[k] = parent[parent[k]]
                k = parent[k]
            return k

        tied: dict[str, list[str]] = {}
        global_constraints = []
        for c in cand.constraints:
            try:
                used = sorted(expressions.names(c) & set(keys))
            except ExpressionError:
                used = []
            if not used:
                global_constraints.append(c)
                continue
            for k in used[1:]:
                parent[find(k)] = find(used[0])
            tied.setdefault(used[0], []).append(c)
        members: dict[str, list[str]] = {}
        for k in keys:
            members.setdefault(find(k), []).append(k)
        constraints: dict[str, list[str]] = {}
        for first, cs in tied.items():
            constraints.setdefault(find(first), []).extend(cs)
        groups = [_Group(tuple(ks), tuple(constraints.get(root, ()))) for root, ks in sorted(members.items())]
        ok = replace(cand, constraints=tuple(global_constraints)).satisfies_constraints()
        return cls(cand, groups, ok)

    def _valid(self, group: _Group, combo: tuple) -> bool:
        if not group.constraints:
            return True
        env = dict(self.cand.defines)
        env.update(zip(group.keys, combo))
        try:
            return all(bool(expressions.evaluate(c, env)) for c in group.constraints)
        except ExpressionError:
            return False

    def _prepare(self, group: _Group) -> None:
        if group.valid is not None or group.estimate is not None:
            return
        lists = [_values(self.cand.tunables[k]) for k in group.keys]
        if not group.constraints:
            group.estimate = float(math.prod(len(v) for v in lists))
            return
        if group.product(self.cand.tunables) <= ENUMERATE_LIMIT:
            group.valid = [c for c in itertools.product(*lists) if self._valid(group, c)]
            return
        rng = random.Random(0x6B666F72)
        hits = sum(self._valid(group, tuple(rng.choice(v) for v in lists)) for _ in range(ESTIMATE_DRAWS))
        group.estimate = hits / ESTIMATE_DRAWS * group.product(self.cand.tunables)

    def count(self) -> ConfigCount:
        product = math.prod(g.product(self.cand.tunables) for g in self.groups) if self.groups else 1
        if not self.global_ok:
            return ConfigCount(0, product=product)
        n, exact = 1.0, True
        for g in self.groups:
            self._prepare(g)
            if g.valid is not None:
                n *= len(g.valid)
            else:
                n *= g.estimate
                exact = exact and not g.constraints
        return ConfigCount(int(round(n)), exact=exact, product=product)

    def _full(self, override: dict) -> dict | None:
        d = dict(self.cand.defines)
        d.update(override)
        for k, values in self.cand.tunables.items():
            if d.get(k) not in values:
                return None
        return d if replace(self.cand, defines=d).satisfies_constraints() else None

    def sample(self, budget: int, seed: int, must) -> list[dict]:
        if budget <= 0 or not self.global_ok:
            return []
        if not self.cand.tunables:
            d = dict(self.cand.defines)
            return [d] if self.cand.satisfies_constraints() else []
        key = lambda d: tuple(sorted(d.items()))  # noqa: E731
        chosen, seen = [], set()
        for m in must:
            d = self._full(dict(m))
            if d is not None and key(d) not in seen and len(chosen) < budget:
                chosen.append(d)
                seen.add(key(d))
        rng = random.Random(seed)
        product = math.prod(g.product(self.cand.tunables) for g in self.groups)
        if product <= ENUMERATE_LIMIT:
            rest = [d for d in self.cand.configurations() if key(d) not in seen]
            rng.shuffle(rest)
            return chosen + rest[:budget - len(chosen)]
        for g in self.groups:
            self._prepare(g)
        if any(g.valid == [] for g in self.groups):
            return chosen
        lists = {k: _values(v) for k, v in self.cand.tunables.items()}
        tries, limit = 0, 200 * budget + 1000
        while len(chosen) < budget and tries < limit:
            tries += 1
            d = dict(self.cand.defines)
            ok = True
            for g in self.groups:
                if g.valid is not None:
                    combo = g.valid[rng.randrange(len(g.valid))]
                else:
                    combo = tuple(rng.choice(lists[k]) for k in g.keys)
                    ok = ok and self._valid(g, combo)
                d.update(zip(g.keys, combo))
            if ok and key(d) not in seen:
                chosen.append(d)
                seen.add(key(d))
        return chosen


def _split_list(text: str, *, file: str, line: int) -> list[str]:
    text = text.strip()
    if not (text.startswith("[") and text.endswith("]")):
        return [text]
    inner = text[1:-1]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    if not parts:
        raise CandidateError("empty list", file=file, line=line)
    return parts


def _expr(text: str, *, file: str, line: int) -> str | int | float:
    try:
        expressions.parse(text)
    except ExpressionError as exc:
        raise CandidateError(f"bad expression in kforge header: {exc}", file=file, line=line) from None
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def _number(text: str, *, file: str, line: int) -> int | float:
    value = _expr(text, file=file, line=line)
    if isinstance(value, str):
        raise CandidateError(f"tunable values must be numbers, got {text!r}", file=file, line=line)
    if not math.isfinite(value):
        raise CandidateError(f"tunable values must be finite numbers, got {text!r} ({value})", file=file, line=line,
                             hint="-D NAME=inf or nan would reach the compiler; give a whole or a finite number")
    return value


def _check_name(macro: str, what: str, *, file: str, line: int) -> None:
    """A ``tune``/``define`` name becomes ``-DNAME=VALUE``: a name reserved for the compiler is refused."""
    if _RESERVED.match(macro):
        raise CandidateError(f"{what} {macro}: names starting with __ or _ and a capital letter are reserved for "
                             "the compiler (__CUDA_ARCH__, __CUDACC__, __NVCC__ among them) and cannot be set here",
                             file=file, line=line, hint="choose a plain name such as BLOCK or TILE_M")


def parse_candidate(source: str, *, name: str = "candidate") -> Candidate:
    """Read the ``// kforge:`` header of ``source``; raise :class:`CandidateError` with the line."""
    grid = block = None
    smem: str | int = 0
    tunables: dict[str, tuple] = {}
    defines: dict[str, int | float] = {}
    constraints: list[str] = []
    rule_lines: list[dispatch_rule.RawLine] = []
    cooperative = False
    lines_of: dict[str, int] = {}
    for lineno, raw in enumerate(source.splitlines(), start=1):
        m = _HEADER.match(raw)
        if not m:
            continue
        text = m.group(1)
        if a := _ASSIGN.match(text):
            key, value = a.group(1), a.group(2)
            if key == "shared_mem":
                smem = _expr(value, file=name, line=lineno)
            else:
                items = tuple(_expr(p, file=name, line=lineno)
                              for p in _split_list(value, file=name, line=lineno))
                if not 1 <= len(items) <= 3:
                    raise CandidateError(f"{key} needs 1 to 3 dimensions", file=name, line=lineno)
                if key == "grid":
                    grid = items
                else:
                    block = items
                lines_of[key] = lineno
        elif t := _TUNE.match(text):
            _check_name(t.group(1), "tune", file=name, line=lineno)
            values = tuple(_number(p, file=name, line=lineno)
                           for p in _split_list(t.group(2), file=name, line=lineno))
            twice = sorted({repr(v) for i, v in enumerate(values) if v in values[:i]})
            if twice:
                raise CandidateError(f"tune {t.group(1)} lists {', '.join(twice)} more than once", file=name,
                                     line=lineno, hint="give each value once (the tuner would gate it twice)")
            tunables[t.group(1)] = values
        elif d := _DEFINE.match(text):
            _check_name(d.group(1), "define", file=name, line=lineno)
            defines[d.group(1)] = _number(d.group(2), file=name, line=lineno)
            lines_of["define " + d.group(1)] = lineno
        elif c := _CONSTRAINT.match(text):
            constraints.append(str(_expr(c.group(1), file=name, line=lineno)))
        elif dispatch_rule.is_dispatch(text):
            rule_lines.append(dispatch_rule.parse_line(text, file=name, line=lineno))
        elif _INSTANCE.match(text):     # read where the kernel is compiled and its entry found (template_instance)
            if not re.match(r"^instance\s+[A-Za-z_]\w*\s*<.*>$", text):
                raise CandidateError(f"{text!r} must read `instance KERNEL<ARGUMENTS>`", file=name, line=lineno,
                                     hint="e.g. // kforge: instance rms_norm<float, 256>")
        elif co := _COOPERATIVE.match(text):
            value = co.group(1).lower()
            if value not in ("true", "false"):
                raise CandidateError(f"cooperative must be true or false, got {co.group(1)!r}", file=name,
                                     line=lineno)
            cooperative = value == "true"
            lines_of["cooperative"] = lineno
        else:
            raise CandidateError(
                f"unknown kforge header {text!r}", file=name, line=lineno,
                hint="use grid = [...], block = [...], shared_mem = EXPR, cooperative = true, tune NAME = [...], "
                     "define NAME = VALUE, constraint EXPR, dispatch CONDITION -> NAME=VALUE, ... or instance "
                     "KERNEL<ARGS>")
    if (grid is None) != (block is None):
        raise CandidateError("a kforge header needs both grid and block", file=name,
                             line=lines_of.get("grid") or lines_of.get("block"))
    for k, values in tunables.items():
        if k in defines and defines[k] not in values:
            raise CandidateError(f"define {k} = {defines[k]} is not among its tune values {list(values)}",
                                 file=name, line=lines_of.get("define " + k))
        defines.setdefault(k, values[0])
    rule = None
    if rule_lines:
        rule = dispatch_rule.build_rule(rule_lines, tunables=tunables, defines=defines,
                                        constraints=tuple(constraints), file=name)
        defines = dict(rule.default.defines)
    if cooperative and grid is None:
        raise CandidateError("cooperative = true needs the kernel's own grid and block in its kforge header",
                             file=name, line=lines_of["cooperative"],
                             hint="add // kforge: grid = [...] and // kforge: block = [...] sized so every block "
                                  "fits on the GPU at once")
    launch = Launch(grid, block, smem, cooperative) if grid is not None else None
    return Candidate(source=source, name=name, launch=launch, tunables=tunables,
                     defines=defines, constraints=tuple(constraints), dispatch=rule)


def load_candidate(path: str | Path) -> Candidate:
    from kernel_forge.common.reads import MAX_KERNEL, Unreadable, read_input_bytes

    p = Path(path)
    try:
        text = read_input_bytes(p, "kernel file", limit=MAX_KERNEL).decode("utf-8")
    except Unreadable as exc:
        raise CandidateError(exc.reason, file=str(p)) from None
    except UnicodeDecodeError:
        raise CandidateError("kernel file is not UTF-8 text", file=str(p)) from None
    return parse_candidate(text, name=str(p))
