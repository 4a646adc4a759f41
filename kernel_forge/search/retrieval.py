"""What earlier runs give a new one: examples for the prompt, and settings for the tuner.

:func:`retrieve` picks the best kernels of the most similar archived tasks ("best": those that
also passed the holdout cases first, then the fastest; ``archive.BEST_FIRST``): first the best
earlier kernel of this very task (same manifest hash, else same name), then the best kernel of
each other task in order of BM25 similarity (FTS5 ``bm25()`` over name, description, signature
and source, the query being this task's own name, description, signature and initial kernel).
The number of examples and the characters of their sources are bounded; a source cut short
says so.  :func:`render_examples` is the prompt section, :func:`retrieval_record` what the
evidence keeps (enough for :func:`examples_from_record` to rebuild the same section on resume).

:func:`best_settings` gives the tuner the best archived defines of the same task and GPU,
per template label, and :func:`warm_start_configs` keeps those a template still accepts.

:func:`with_pattern` puts the expert pattern of the task's kind (:mod:`kernel_forge.kinds.fit`)
first among the examples when the archive holds no kernel of this very task, so a first run
starts from how an expert writes this kind of operation; other tasks' kernels follow it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from kernel_forge.archive.format import Entry
from kernel_forge.archive.store import Archive, best_of_task, similar_tasks

#: examples whose share of the character budget would be smaller than this are dropped instead
MIN_EXAMPLE_CHARS = 400
#: characters of another task's description shown with its example
DESCRIPTION_CHARS = 300
#: per-case lines shown with an example
CASES_SHOWN = 4
#: proposers whose kernels are never retrieved: a task's own naive kernel teaches nothing
NOT_RETRIEVED = ("initial",)


@dataclass(frozen=True)
class TaskQuery:
    """What retrieval needs to know about the task a run is about to optimise."""

    name: str                 #: the manifest's name
    description: str = ""     #: the manifest's description
    signature: str = ""       #: the kernel signature
    task_hash: str = ""       #: Task.hash() ("" when unknown)
    source: str = ""          #: the task's initial kernel: its identifiers join the query

    @classmethod
    def of(cls, task) -> "TaskQuery":
        """From a :class:`~kernel_forge.model.task.Task`, a TaskQuery, or a task name."""
        if isinstance(task, TaskQuery):
            return task
        if isinstance(task, str):
            return cls(name=task)
        sig = getattr(task.signature, "text", task.signature)
        try:
            source = task.initial.read_text(encoding="utf-8")
        except (OSError, AttributeError, UnicodeDecodeError):
            source = ""
        return cls(name=task.name, description=task.description or "", signature=str(sig),
                   task_hash=task.hash(), source=source)

    def text(self) -> str:
        return "\n".join((self.name.replace("_", " "), self.description, self.signature, self.source))


@dataclass
class Example:
    """One archived kernel shown to a proposer."""

    id: int                          #: the archive's row id
    content_hash: str                #: the archive's content hash (source, launch, defines)
    task_name: str                   #: the task it was optimised for
    description: str                 #: that task's description
    source: str                      #: its source, cut to the character budget (then it says so)
    launch: dict | None              #: its own launch, None: its manifest's
    defines: dict                    #: its -D values
    score_us: float                  #: its score on its own task and GPU
    speedup_vs_initial: float | None  #: vs its own task's initial kernel
    cases: list                      #: per-case results: name, median_us, pct_peak_bw, pct_peak_flops, bound
    bound: str                       #: the most common per-case bound
    run: str                         #: the run folder it came from
    attempt: str                     #: the attempt id there
    label: str                       #: its proposal's label
    gpu_name: str                    #: the GPU it was measured on
    same_task: bool                  #: True: an earlier kernel of this task; False: from another task
    similarity: float | None = None  #: -bm25 of its task against this one (None for same-task picks)
    truncated: bool = False          #: its source was cut to fit the budget
    source_chars: int = 0            #: characters of its full source
    pattern: str = ""                #: the expert pattern's name when this example is one (not archived)
    kind: str = ""                   #: a pattern's kind of operation
    technique: str = ""              #: a pattern's technique, one line

    @classmethod
    def of(cls, e: Entry, *, same_task: bool, similarity: float | None) -> "Example":
        return cls(id=e.id, content_hash=e.content_hash, task_name=e.task_name, description=e.task_description,
                   source=e.source, launch=e.launch, defines=dict(e.defines), score_us=e.score_us,
                   speedup_vs_initial=e.speedup_vs_initial, cases=list(e.cases), bound=e.bound, run=e.run,
                   attempt=e.attempt, label=e.label, gpu_name=e.gpu_name, same_task=same_task,
                   similarity=similarity, source_chars=len(e.source))

    def to_json(self) -> dict:
        return asdict(self)


def _best(archive: Archive, gpu: str | None, **kw) -> list[Entry]:
    """The best kernel of a task, measured on ``gpu`` when it has one there, else on any GPU."""
    if gpu:
        rows = best_of_task(archive, gpu=gpu, exclude_proposers=NOT_RETRIEVED, **kw)
        if rows:
            return rows
    return best_of_task(archive, exclude_proposers=NOT_RETRIEVED, **kw)


def retrieve(archive: Archive, task, *, k: int = 3, max_chars: int = 6000, gpu: str | None = None) -> list[Example]:
    """At most ``k`` examples whose sources hold at most ``max_chars`` characters in all: the
    best earlier kernel of this task first (``same_task``), then the best kernel of each
    other task, most similar first.  ``gpu``: prefer kernels measured on this GPU (by name);
    a task with none there gives its best from another GPU (the example says which)."""
    if k <= 0 or max_chars <= 0:
        return []
    q = TaskQuery.of(task)
    picks: list[Example] = []
    same = _best(archive, gpu, task_hash=q.task_hash) if q.task_hash else []
    if not same and q.name:
        same = _best(archive, gpu, task_name=q.name)
    if same:
        picks.append(Example.of(same[0], same_task=True, similarity=None))
    seen_names = {q.name}
    for task_hash, name, sim in similar_tasks(archive, q.text(), limit=4 * k + 8, exclude_names=(q.name,),
                                               exclude_hashes=(q.task_hash,), exclude_proposers=NOT_RETRIEVED):
        if len(picks) >= k:
            break
        if name in seen_names:            # another manifest version of a task already shown
            continue
        best = _best(archive, gpu, task_hash=task_hash)
        if best:
            picks.append(Example.of(best[0], same_task=False, similarity=sim))
            seen_names.add(name)
    return fit_budget(picks[:k], max_chars)


#: characters a pattern example may keep (patterns are written to fit: their main loop is never cut)
PATTERN_CHARS = 10000


def pattern_example(task) -> Example | None:
    """The expert pattern of ``task``'s kind as an example (the one with the task's signature
    first), or None when there is none for its kind."""
    import hashlib

    from kernel_forge.kinds import fit

    found = fit.for_task(task) if not isinstance(task, (str, TaskQuery)) else []
    if not found:
        return None
    p = found[0]
    src = p.source()
    src, cut = truncate_source(src, PATTERN_CHARS)
    return Example(id=0, content_hash=hashlib.sha256(p.source().encode()).hexdigest(), task_name=p.task,
                   description=fit.KINDS.get(p.kind, ""), source=src, launch=None, defines={}, score_us=0.0,
                   speedup_vs_initial=None, cases=[], bound="", run="", attempt="", label=p.file, gpu_name="",
                   same_task=False, similarity=None, truncated=cut, source_chars=len(p.source()), pattern=p.stem,
                   kind=p.kind, technique=p.technique)


def with_pattern(examples: list[Example], task, k: int) -> list[Example]:
    """``examples`` with the pattern of the task's kind added when none of them is an archived
    kernel of this very task (the archive has nothing better): first, the other tasks' kernels
    after it, at most ``k`` in all.  A pattern already among the examples is not repeated."""
    if k <= 0 or any(e.same_task for e in examples):
        return examples
    ex = pattern_example(task)
    if ex is None or any(e.content_hash == ex.content_hash or e.pattern == ex.pattern for e in examples):
        return examples
    return [ex, *examples][:k]


def fit_budget(examples: list[Example], max_chars: int) -> list[Example]:
    """Cut the sources so that they hold at most ``max_chars`` characters in all: fewer examples
    when each would get less than :data:`MIN_EXAMPLE_CHARS`, and the budget shared so that short
    sources keep all of theirs and the rest is split among the long ones."""
    n = min(len(examples), max(1, max_chars // MIN_EXAMPLE_CHARS))
    examples = examples[:n]
    budget: dict[int, int] = {}
    left = max_chars
    order = sorted(range(n), key=lambda i: len(examples[i].source))
    for j, i in enumerate(order):
        share = left // (n - j)
        budget[i] = min(len(examples[i].source), share)
        left -= budget[i]
    for i, e in enumerate(examples):
        e.source, cut = truncate_source(e.source, budget[i])
        e.truncated = e.truncated or cut
    return examples


def truncate_source(source: str, limit: int) -> tuple[str, bool]:
    """``source`` in at most ``limit`` characters, cut at line ends: a third from the top (the
    kforge header and the comments that explain the technique) and two thirds from the bottom
    (where the ``extern "C" __global__`` entry point usually sits, after its helpers), with a
    line in between that says how much was left out.  Returns (text, whether it was cut)."""
    if len(source) <= limit:
        return source, False
    marker = "\n// [archive: {} of {} characters cut here]\n"
    room = limit - len(marker.format(len(source), len(source)))
    if room < 2:
        return source[:max(0, limit)], True
    head_room = room // 3
    head_end = source.rfind("\n", 0, head_room + 1)
    if head_end < head_room // 2:
        head_end = head_room
    tail_room = room - head_end
    tail_start = source.find("\n", len(source) - tail_room) + 1
    if tail_start <= 0 or len(source) - tail_start < tail_room // 2:
        tail_start = len(source) - tail_room
    head, tail = source[:head_end], source[tail_start:]
    return head + marker.format(len(source) - len(head) - len(tail), len(source)) + tail, True


def _score_line(e: Example) -> str:
    parts = [f"{e.score_us:.2f} µs"]
    if e.speedup_vs_initial:
        parts.append(f"x{e.speedup_vs_initial:.2f} vs its task's initial kernel")
    parts.append(f"bound: {e.bound}")
    if e.gpu_name:
        parts.append(f"on {e.gpu_name}")
    return "; ".join(parts)


def _case_line(c: dict) -> str:
    extra = []
    if c.get("pct_peak_bw") is not None:
        extra.append(f"{c['pct_peak_bw']:.0f}% of measured bandwidth")
    if c.get("pct_peak_flops") is not None:
        extra.append(f"{c['pct_peak_flops']:.0f}% of fp32 peak")
    if c.get("bound") and c["bound"] != "unknown":
        extra.append(c["bound"])
    return f"{c['name']} {c['median_us']:.2f} µs" + (f" ({', '.join(extra)})" if extra else "")


def render_examples(examples: list[Example]) -> str:
    """The prompt section for retrieved examples ("" when there are none): each marked as from
    another task or from an earlier run of this one, with its score, bound and source."""
    if not examples:
        return ""
    lines = ["# Examples from other tasks (kernel archive)",
             "Kernels that passed the gate earlier: on other tasks, or on this task in an earlier run. "
             "They show techniques that worked; another task's signature, sizes and tolerances differ from "
             "this one's, so adapt what applies instead of copying."]
    for i, e in enumerate(examples, start=1):
        if e.pattern:
            lines.append(f"\n## Example {i}, expert pattern {e.pattern} for {e.kind} kernels (written for task "
                         f"{e.task_name}; passes its gate, hidden cases included): {e.technique}")
            lines.append("```cuda\n" + e.source + "\n```")
            continue
        where = (f"from an earlier run of this task ({e.task_name})" if e.same_task
                 else f"from another task: {e.task_name}")
        lines.append(f"\n## Example {i}, {where}: {_score_line(e)}")
        if not e.same_task and e.description:
            d = " ".join(e.description.split())
            lines.append("Its task: " + (d if len(d) <= DESCRIPTION_CHARS else d[:DESCRIPTION_CHARS - 3] + "..."))
        if e.cases:
            shown = "; ".join(_case_line(c) for c in e.cases[:CASES_SHOWN])
            more = f"; and {len(e.cases) - CASES_SHOWN} more case(s)" if len(e.cases) > CASES_SHOWN else ""
            lines.append(f"Cases: {shown}{more}")
        if e.truncated:
            lines.append(f"(source cut to {len(e.source)} of {e.source_chars} characters)")
        lines.append("```cuda\n" + e.source + "\n```")
    return "\n".join(lines)


def retrieval_record(examples: list[Example], *, archive: str | None = None, k: int | None = None,
                     max_chars: int | None = None, gpu: str | None = None, error: str | None = None,
                     settings: dict | None = None, kind: dict | None = None) -> dict:
    """What the evidence records about retrieval (``retrieval.json``, schema
    ``schemas/retrieval.schema.json``): the examples as shown, sources included (so a resumed run
    shows the same ones), with their archive ids, scores and similarities; the archived tuner
    settings offered per template label; and the settings used."""
    out = {"archive": archive, "k": k, "max_chars": max_chars, "gpu": gpu, "error": error,
           "count": len(examples), "chars": sum(len(e.source) for e in examples),
           "examples": [e.to_json() for e in examples], "settings": dict(settings or {}), "kind": kind}
    return out


@dataclass
class Retrieved:
    """What a run takes from the archive when it starts; ``to_json()`` is ``retrieval.json``."""

    examples: list = field(default_factory=list)   #: Example list for the prompt (render_examples)
    settings: dict = field(default_factory=dict)   #: template label -> best_settings items for the tuner
    archive: str | None = None                     #: the archive file
    k: int | None = None                           #: the most examples asked for
    max_chars: int | None = None                   #: the character budget of their sources
    gpu: str | None = None                         #: the run's GPU name
    error: str | None = None                       #: why nothing was retrieved (an unreadable archive)
    kind: dict | None = None                       #: the task's kind of operation (patterns.classify), as JSON

    def configs_for(self, candidate, label: str) -> list[dict]:
        """The archived settings of template ``label`` that ``candidate`` accepts, best first:
        the tuner gates these before its own choice (see :func:`warm_start_configs`)."""
        return warm_start_configs(candidate, self.settings.get(label, []))

    def setting_for(self, label: str, defines: dict) -> dict | None:
        """The archived item an expanded setting came from (for the attempt's rationale), if any."""
        return next((s for s in self.settings.get(label, [])
                     if all(defines.get(k) == v for k, v in s["defines"].items())), None)

    def to_json(self) -> dict:
        return retrieval_record(self.examples, archive=self.archive, k=self.k, max_chars=self.max_chars,
                                gpu=self.gpu, error=self.error, settings=self.settings, kind=self.kind)

    @classmethod
    def from_json(cls, record: dict | None) -> "Retrieved":
        """Back from ``retrieval.json`` (a resumed run uses what its start retrieved)."""
        r = record or {}
        return cls(examples=examples_from_record(r), settings=dict(r.get("settings") or {}),
                   archive=r.get("archive"), k=r.get("k"), max_chars=r.get("max_chars"), gpu=r.get("gpu"),
                   error=r.get("error"), kind=r.get("kind"))


def retrieve_for_run(task, *, path=None, k: int = 3, max_chars: int = 6000, gpu: str | None = None,
                     settings_per_label: int = 3, progress=lambda msg: None) -> Retrieved:
    """Everything a new run takes from the archive at ``path`` (default
    :func:`~kernel_forge.archive.store.default_path`), opened without creating it: the prompt's
    examples (:func:`retrieve`, preferring kernels measured on ``gpu``) and, when ``gpu`` is
    given, up to ``settings_per_label`` archived settings per template label measured on it
    (:func:`best_settings`).  Never raises for an archive problem: no archive gives nothing; an
    unreadable one a warning through ``progress`` and the reason in ``error``."""
    from kernel_forge.archive.store import default_path, open_archive
    from kernel_forge.common.errors import KForgeError

    p = Path(path) if path else default_path()
    out = Retrieved(archive=str(p), k=k, max_chars=max_chars, gpu=gpu)
    if not isinstance(task, (str, TaskQuery)):
        from kernel_forge.kinds.fit import classify
        out.kind = dict(vars(classify(task)))
    if p.exists():
        try:
            with open_archive(p, create=False) as arch:
                out.examples = retrieve(arch, task, k=k, max_chars=max_chars, gpu=gpu)
                if gpu and settings_per_label > 0:
                    for s in best_settings(arch, task, gpu):
                        out.settings[s["label"]] = best_settings(arch, task, gpu, label=s["label"],
                                                                 n=settings_per_label)
        except KForgeError as exc:
            progress(f"[kforge] warning: nothing retrieved from the archive: {exc}")
            out = Retrieved(archive=str(p), k=k, max_chars=max_chars, gpu=gpu, error=str(exc), kind=out.kind)
    out.examples = with_pattern(out.examples, task, k)
    if any(e.pattern for e in out.examples):
        e = next(e for e in out.examples if e.pattern)
        progress(f"[kforge] expert pattern {e.pattern} for {e.kind} kernels joins the prompt's examples")
    if any(not e.pattern for e in out.examples):
        progress(f"[kforge] archive {p}: examples " + ", ".join(
            f"{e.task_name}#{e.id}{' (this task)' if e.same_task else ''}" for e in out.examples if not e.pattern))
    if out.settings:
        progress(f"[kforge] archive {p}: settings to gate first for " + ", ".join(
            f"{label} ({len(v)})" for label, v in sorted(out.settings.items())))
    return out


def examples_from_record(record: dict | None) -> list[Example]:
    """The examples of a :func:`retrieval_record` (a resumed run shows what its start retrieved)."""
    names = {f.name for f in fields(Example)}
    return [Example(**{k: v for k, v in d.items() if k in names}) for d in (record or {}).get("examples", [])]


# -- the tuner's warm start ----------------------------------------------------------------------

def best_settings(archive: Archive, task, gpu_name: str, label: str | None = None, *, n: int = 3) -> list[dict]:
    """The best archived defines (``archive.BEST_FIRST``) of the same task (manifest hash; by
    name only when the hash has none) on the GPU named ``gpu_name``: with ``label``, up to ``n``
    distinct settings of that template, best first; without, the best setting of each label.
    Each item: label, defines, score_us, id, content_hash, run, attempt, same_manifest."""
    q = TaskQuery.of(task)
    rows: list[Entry] = []
    same_manifest = False
    if q.task_hash:
        rows = best_of_task(archive, task_hash=q.task_hash, gpu=gpu_name, label=label, limit=1000)
        same_manifest = bool(rows)
    if not rows and q.name:
        rows = best_of_task(archive, task_name=q.name, gpu=gpu_name, label=label, limit=1000)
    out: list[dict] = []
    seen: set = set()
    for e in rows:
        if not e.defines:
            continue
        key = (e.label, tuple(sorted(e.defines.items()))) if label is not None else e.label
        if key in seen:
            continue
        seen.add(key)
        out.append({"label": e.label, "defines": dict(e.defines), "score_us": e.score_us, "id": e.id,
                    "content_hash": e.content_hash, "run": e.run, "attempt": e.attempt,
                    "same_manifest": same_manifest})
        if label is not None and len(out) >= n:
            break
    return out


def warm_start_configs(candidate, settings: list[dict]) -> list[dict]:
    """The archived settings (items of :func:`best_settings`, or plain defines dicts) that
    ``candidate`` accepts: every name one of its tunables, every value among that tunable's
    values, its constraints satisfied; as full defines, in order, without repeats."""
    out: list[dict] = []
    for s in settings:
        d = s.get("defines", s) if isinstance(s, dict) else {}
        if not d or any(k not in candidate.tunables or v not in candidate.tunables[k] for k, v in d.items()):
            continue
        merged = {**candidate.defines, **d}
        if merged in out or not candidate.with_defines(merged).satisfies_constraints():
            continue
        out.append(merged)
    return out
