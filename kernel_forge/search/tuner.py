"""The built-in tuner: searches the tunable parameters kernels declare.

With no model configured it proposes the task's templates (manifest ``templates``): every
iteration, each template that still has settings nobody gated or ruled out (the loop names the
others in ``ProposalRequest.spent``).  Which settings of a template are gated, and how the
iteration's settings are split between templates, is the search strategy's choice
(:mod:`kernel_forge.search.strategies`, ``--search``).  It is exhausted only when every setting of every
template was gated or ruled out (constraints, an invalid launch, a duplicate kernel).
``configurations_to_try`` and ``neighbours`` live in :mod:`kernel_forge.search.spaces` and are
re-exported here.

The user's kernel is always searched (:func:`own_templates`): an initial kernel's own ``tune``
lines are a template of their own, with no ``templates`` entry needed; an initial kernel with no
``tune`` lines, on a task no template or pattern fits, is searched through a space derived from
its source (:mod:`kernel_forge.search.own_space`).

Bound patterns (:mod:`kernel_forge.search.bound`: the task's kind's patterns written for its own
signature) are proposed after a gate: first each one's default setting alone (label
``gate:NAME``), then, once that attempt passed (``ProposalRequest.passed``), the template with
its tunables.  A bound pattern whose gate attempt failed is not proposed again.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernel_forge.common.errors import KForgeError
from kernel_forge.model.candidate import load_candidate, parse_candidate
from kernel_forge.search.bound import gate_label, gate_source
from kernel_forge.search.spaces import configurations_to_try, neighbours  # noqa: F401  (re-exported)
from kernel_forge.proposers.base import Exhausted, Proposal, ProposalRequest, ProposalResult


@dataclass(frozen=True)
class TunerTemplate:
    """A kernel the tuner searches: a template file, or a source held in memory (the initial
    kernel's own tune lines, a space derived from it).  ``name`` labels its attempts."""

    name: str
    text: str
    origin: str = "template"         #: template | own tune lines | derived | bound (budget only)
    what: str = ""                   #: what is searched, in words (derived spaces)
    path: Path | None = None

    @classmethod
    def of(cls, item) -> "TunerTemplate":
        if isinstance(item, TunerTemplate):
            return item
        path = Path(item)
        return cls(name=path.name, text=path.read_text(encoding="utf-8"), path=path)

    def settings(self) -> int:
        """How many valid settings its tunables have."""
        return int(parse_candidate(self.text, name=self.name).count_configurations())


def own_templates(task, listed: list) -> list[TunerTemplate]:
    """The initial kernel as the tuner searches it, beside the ``listed`` templates: its own
    ``tune`` lines (unless it is listed already), or, when nothing is listed and it has none, a
    space derived from its source (none when nothing of it is safe to tune)."""
    from kernel_forge.search.own_space import derive

    initial = getattr(task, "initial", None)
    if initial is None:
        return []
    listed_paths = {Path(t.path if isinstance(t, TunerTemplate) else t).resolve() for t in listed
                    if not isinstance(t, TunerTemplate) or t.path is not None}
    if Path(initial).resolve() in listed_paths:
        return []
    try:
        cand = load_candidate(initial)
    except (KForgeError, OSError):
        return []
    if cand.tunables:
        taken = {t.name if isinstance(t, TunerTemplate) else Path(t).name for t in listed}
        name = Path(initial).name if Path(initial).name not in taken else f"{Path(initial).stem}.initial.cu"
        return [TunerTemplate(name=name, text=Path(initial).read_text(encoding="utf-8"),
                              origin="own tune lines", path=Path(initial))]
    if listed:
        return []
    derived = derive(cand.source, cand.launch or task.launch, name=Path(initial).name, own_defines=cand.defines)
    if derived is None:
        return []
    return [TunerTemplate(name=f"{Path(initial).stem}.own-space.cu", text=derived.source, origin="derived",
                          what=derived.describe())]


class TuneProposer:
    """Proposes the task's templates that have settings left; the loop picks their settings."""

    name = "tune"
    needs_prompt = False        #: proposes the task's templates whatever the prompt says

    def __init__(self, templates: list, skip: int = 0, bound: list[Path] = ()):
        self.templates = [TunerTemplate.of(t) for t in templates]
        self.bound = [Path(t) for t in bound]
        self.skip = skip         # kept for callers of earlier releases; the loop's records decide now

    def keep_buildable(self, arch: str) -> list[str]:
        """Drop the templates and bound patterns that refuse to compile for ``arch``'s target (a
        Hopper-only ``wgmma`` kernel on another GPU): every setting of theirs would fail to compile.
        Returns a note per kernel dropped."""
        from kernel_forge.model.limits import needed_target, target_arch

        target = target_arch(arch)
        notes = []

        def keep(name: str, text: str) -> bool:
            needs = needed_target(text)
            if needs is None or needs == target:
                return True
            notes.append(f"{name} is not searched: it needs {needs}, and this GPU ({arch}) compiles for {target}")
            return False

        self.templates = [t for t in self.templates if keep(t.name, t.text)]
        self.bound = [p for p in self.bound if keep(p.name, p.read_text(encoding="utf-8"))]
        return notes

    def _bound_proposals(self, spent: set, passed: set) -> list[Proposal]:
        out = []
        for path in self.bound:
            if path.name in spent:
                continue
            text = path.read_text(encoding="utf-8")
            gate = gate_label(path)
            if gate in passed:
                cand = parse_candidate(text, name=path.name)
                out.append(Proposal(source=text, rationale=f"tuning bound pattern {path.name} (its default setting "
                                    f"passed the gate) over {', '.join(sorted(cand.tunables)) or 'no tunables'}",
                                    proposer="tune", label=path.name))
            elif gate not in spent:          # not gated yet; a gated one that failed is dropped
                out.append(Proposal(source=gate_source(text), rationale=f"gating bound pattern {path.name} at its "
                                    "default setting before searching its settings", proposer="tune", label=gate))
        return out

    def propose(self, request: ProposalRequest) -> ProposalResult:
        if not self.templates and not self.bound:
            raise Exhausted("nothing to search: the task lists no templates, no expert pattern carries its "
                            "signature or its kind, and its initial kernel has no tune lines and nothing the "
                            "tuner can safely tune (add // kforge: tune lines to it)")
        spent = set(request.spent)
        left = [p for p in self.templates if p.name not in spent]
        bound = self._bound_proposals(spent, set(getattr(request, "passed", ()) or ()))
        if not left and not bound:
            raise Exhausted(f"every setting of every template the task declares ({len(self.templates)}) "
                            + (f"and of the bound patterns that passed their gate ({len(self.bound)}) " if self.bound else "")
                            + "was gated or ruled out")
        out = []                 # the task's own templates and kernel first, then the bound patterns
        for t in left:
            cand = parse_candidate(t.text, name=t.name)
            what = {"own tune lines": "the initial kernel's own tune lines",
                    "derived": "a space derived from the initial kernel"}.get(t.origin, "template")
            out.append(Proposal(source=t.text, rationale=f"tuning {what} {t.name} over "
                                f"{', '.join(sorted(cand.tunables)) or 'no tunables'}",
                                proposer="tune", label=t.name))
        return ProposalResult(proposals=out + bound)
