"""Settings per shape: a dispatch rule in a kernel's ``// kforge:`` header.

A kernel with tunables may carry several settings of the same source, each for a class of
shapes chosen by conditions on the case variables, as Triton's autotuner keys its choice on
the shape and cuBLAS picks its kernel by problem size::

    // kforge: dispatch m*n*k >= 1073741824 -> BK=16, BM=128, BN=128, MINB=1, TM=8, TN=8
    // kforge: dispatch default -> BK=32, BM=32, BN=32, MINB=1, TM=4, TN=4

For each case, the first line whose condition holds for the case's variables gives the setting
(its ``-D`` defines, hence also its launch through the header's expressions); ``default`` is the
last line and takes every other shape.  A line names only declared tunables (``tune NAME =
[...]``), with values among their tune values; names it leaves out keep the value of the
kernel's ``define`` lines (or the first tune value).  Conditions use the safe expression
language of :mod:`kernel_forge.common.expressions` over the case variables only.

This module is the rule itself: parsing and checking its lines (:func:`build_rule`, with the
kernel line of every problem), choosing a line for a case (:meth:`Rule.pick`) and checking a
rule against a task (:func:`problem`: only case variables, every line picked by some case so the
gate checks every setting it holds).  :mod:`kernel_forge.gate.dispatch_rule` runs a rule through a
gate; :mod:`kernel_forge.search.dispatch_fit` fits one to measured settings.
"""
from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from kernel_forge.common import expressions
from kernel_forge.common.errors import CandidateError, ExpressionError

#: the condition word of the last line
DEFAULT = "default"

_LINE = re.compile(r"^dispatch\s+(.*?)\s*->\s*(.*)$")
_ITEM = re.compile(r"^([A-Za-z_]\w*)\s*=\s*(\S+)$")
_COND_NODES = (ast.Compare, ast.BoolOp)


@dataclass(frozen=True)
class Branch:
    """One line of a rule: a condition (None: the default) and the full setting it selects."""

    when: str | None
    defines: dict[str, int | float]
    line: int | None = field(default=None, compare=False)   # the kernel line (for messages)

    @property
    def condition(self) -> str:
        return self.when if self.when is not None else DEFAULT

    def setting_text(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in sorted(self.defines.items()))

    def header_line(self) -> str:
        return f"// kforge: dispatch {self.condition} -> {self.setting_text()}"

    def to_json(self) -> dict:
        return {"when": self.when, "defines": dict(sorted(self.defines.items()))}


@dataclass(frozen=True)
class Rule:
    """Branches in order, the default last: the first whose condition holds is taken."""

    branches: tuple[Branch, ...]

    def pick(self, variables: Mapping[str, int | float]) -> int:
        """The index of the branch a case with ``variables`` runs with."""
        for i, b in enumerate(self.branches):
            if b.when is None or truth(b.when, variables):
                return i
        raise ValueError("a dispatch rule without a default line")   # build_rule forbids it

    def defines_for(self, variables: Mapping[str, int | float]) -> dict[str, int | float]:
        return dict(self.branches[self.pick(variables)].defines)

    @property
    def default(self) -> Branch:
        return self.branches[-1]

    def settings(self) -> list[dict]:
        """The distinct settings, in branch order (one compile each)."""
        out: list[dict] = []
        for b in self.branches:
            if b.defines not in out:
                out.append(dict(b.defines))
        return out

    def header_lines(self) -> list[str]:
        return [b.header_line() for b in self.branches]

    def describe(self) -> str:
        """One line: ``m*n*k >= 1073741824 -> BM=128, ...; default -> BM=32, ...``."""
        return "; ".join(f"{b.condition} -> {b.setting_text()}" for b in self.branches)

    def to_json(self) -> list[dict]:
        return [b.to_json() for b in self.branches]

    @classmethod
    def from_json(cls, items: list[dict]) -> "Rule":
        return cls(tuple(Branch(d.get("when"), dict(d.get("defines") or {})) for d in items))


def truth(condition: str, variables: Mapping[str, int | float]) -> bool:
    """A condition's value on ``variables``; an ExpressionError when it does not give a truth value."""
    value = expressions.evaluate(condition, variables)
    if not isinstance(value, bool):
        raise ExpressionError(f"a dispatch condition must be true or false, but it gives {value}",
                              expression=condition)
    return value


# ------------------------------------------------------------------------------ parsing

@dataclass
class RawLine:
    """A ``dispatch`` header line as written (a setting that may name only some tunables)."""

    when: str | None
    items: dict[str, int | float]
    line: int


def is_dispatch(text: str) -> bool:
    """Whether a header line's text (after ``// kforge:``) is a dispatch line."""
    return text == "dispatch" or text.startswith("dispatch ") or text.startswith("dispatch\t")


def parse_line(text: str, *, file: str, line: int) -> RawLine:
    """One ``dispatch COND -> NAME=VALUE, ...`` line (or ``dispatch default -> ...``)."""
    m = _LINE.match(text)
    if not m:
        raise CandidateError(f"bad dispatch line {text!r}", file=file, line=line,
                             hint="write `// kforge: dispatch CONDITION -> NAME=VALUE, ...`, "
                                  "e.g. `dispatch m*n >= 1048576 -> BM=128, BN=128`, and end with "
                                  "`dispatch default -> ...`")
    cond, setting = m.group(1).strip(), m.group(2).strip()
    when = None if cond == DEFAULT else cond
    if when is not None:
        if not when:
            raise CandidateError("a dispatch line needs a condition before `->` (or the word default)",
                                 file=file, line=line)
        try:
            tree = expressions.parse(when)
        except ExpressionError as exc:
            raise CandidateError(f"bad dispatch condition: {exc}", file=file, line=line) from None
        body = tree.body
        if not (isinstance(body, _COND_NODES) or (isinstance(body, ast.UnaryOp) and isinstance(body.op, ast.Not))):
            raise CandidateError(f"the dispatch condition {when!r} is not a comparison", file=file, line=line,
                                 hint="compare the case variables, e.g. `m*n*k >= 1073741824` or "
                                      "`n <= 4096 and m > 64`")
    items: dict[str, int | float] = {}
    for part in (p.strip() for p in setting.split(",")):
        if not part:
            continue
        im = _ITEM.match(part)
        if not im:
            raise CandidateError(f"bad setting {part!r} in a dispatch line: expected NAME=VALUE", file=file, line=line)
        name, raw = im.group(1), im.group(2)
        try:
            value: int | float = int(raw)
        except ValueError:
            try:
                value = float(raw)
            except ValueError:
                raise CandidateError(f"the value of {name} in a dispatch line must be a number, got {raw!r}",
                                     file=file, line=line) from None
        if name in items:
            raise CandidateError(f"{name} is set twice in one dispatch line", file=file, line=line)
        items[name] = value
    if not items and when is not None:
        raise CandidateError("a dispatch line needs a setting after `->`, e.g. BLOCK=256", file=file, line=line)
    return RawLine(when, items, line)


def build_rule(raw: list[RawLine], *, tunables: dict, defines: dict, constraints: tuple[str, ...],
               file: str) -> Rule:
    """The rule of a kernel's dispatch lines, checked against its own header: a default line,
    last and once; conditions over no tunable; settings of declared tunables, with values among
    their tune values, that satisfy every constraint.  Errors name the kernel line."""
    defaults = [r for r in raw if r.when is None]
    if not defaults:
        raise CandidateError("a dispatch rule needs a last line `// kforge: dispatch default -> ...` for the "
                             "shapes no condition takes", file=file, line=raw[-1].line)
    if len(defaults) > 1:
        raise CandidateError(f"a second dispatch default line (the first is line {defaults[0].line})",
                             file=file, line=defaults[1].line)
    if raw[-1].when is not None:
        after = next(r for r in raw if r.line > defaults[0].line)
        raise CandidateError(f"a dispatch line after the default (line {defaults[0].line}) is never reached",
                             file=file, line=after.line, hint="put `dispatch default -> ...` last")
    branches = []
    for r in raw:
        if r.when is not None:
            used = sorted(expressions.names(r.when) & (set(tunables) | set(defines)))
            if used:
                raise CandidateError(f"the dispatch condition uses {used[0]}, a tunable or define; conditions "
                                     "choose a setting from the case variables only", file=file, line=r.line)
        for name, value in r.items.items():
            if name not in tunables:
                known = ", ".join(sorted(tunables)) or "none"
                raise CandidateError(f"dispatch sets {name}, which is not a tunable of this kernel (tunables: {known})",
                                     file=file, line=r.line, hint=f"declare it: // kforge: tune {name} = [...]")
            if value not in tunables[name]:
                raise CandidateError(f"dispatch sets {name}={value}, which is not among its tune values "
                                     f"{list(tunables[name])}", file=file, line=r.line)
        setting = dict(defines)
        setting.update(r.items)
        for c in constraints:
            try:
                ok = bool(expressions.evaluate(c, setting))
            except ExpressionError as exc:
                raise CandidateError(f"the dispatch setting leaves constraint {c!r} unevaluable: {exc}",
                                     file=file, line=r.line) from None
            if not ok:
                raise CandidateError(f"the dispatch setting {_text(setting)} breaks the constraint {c}",
                                     file=file, line=r.line)
        branches.append(Branch(r.when, setting, r.line))
    return Rule(tuple(branches))


def _text(d: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(d.items()))


# ------------------------------------------------------------------------------ against a task

def problem(task, rule: Rule | None) -> tuple[str, int | None] | None:
    """The first reason ``rule`` cannot run on ``task``'s cases, as (message, kernel line), or None:
    a condition that uses a name that is not a variable of every case or gives no truth value,
    or a line no case picks (the gate could never check its setting)."""
    if rule is None:
        return None
    names = set.intersection(*(set(c.vars) for c in task.cases)) if task.cases else set()
    for b in rule.branches:
        if b.when is None:
            continue
        unknown = sorted(expressions.names(b.when) - names)
        if unknown:
            return (f"the dispatch condition {b.when!r} uses {unknown[0]}, which is not a variable of every case "
                    f"of task {task.name} (case variables: {', '.join(sorted(names)) or 'none'})", b.line)
        for case in task.cases:
            try:
                truth(b.when, case.vars)
            except ExpressionError as exc:
                return f"the dispatch condition fails on case {case.name}: {exc}", b.line
    picked = {rule.pick(c.vars) for c in task.cases}
    for i, b in enumerate(rule.branches):
        if i not in picked:
            return (f"no case of task {task.name} takes the dispatch line `{b.condition} -> {b.setting_text()}`, so "
                    "the gate could never check its setting; remove it or add a case of that shape", b.line)
    return None


def variant_record(rule: Rule, index: int) -> dict:
    """What an evaluation records on a case that ran under ``rule``: the branch, its condition and setting."""
    b = rule.branches[index]
    return {"branch": index, "when": b.condition, "defines": dict(sorted(b.defines.items()))}


def holdout_variants(ev) -> dict:
    """``{"variants": {case: branch}}`` for a holdout record of an evaluation that ran under a rule,
    else ``{}`` (so a record of a kernel without a rule is unchanged)."""
    got = {c.name: c.variant["branch"] for c in getattr(ev, "cases", []) if getattr(c, "variant", None)}
    return {"variants": got} if got else {}
