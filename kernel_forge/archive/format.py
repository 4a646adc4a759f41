"""The archive's entry and its JSON Lines format: what one archived kernel is, and how it travels.

An :class:`Entry` is one kernel that passed the gate on one task and GPU.  ``kforge archive
export`` writes entries one JSON object a line (schemas/archive_entry.schema.json); ``kforge
archive import`` reads them back, checking every line (schema, format version, content hash)
before any goes in, and naming ``file:LINE`` for the first that does not.  The same kernel hashes
the same anywhere (:func:`content_hash`), which is what makes an import idempotent.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from pathlib import Path

from kernel_forge import __version__
from kernel_forge.common.errors import InputError
from kernel_forge.common.json_path import json_path
from kernel_forge.common.reads import read_jsonl

#: the version of the format this module writes (and the newest it reads): an entry line's
#: ``format_version``, and the archive file's ``schema_version`` (see archive/store.py)
SCHEMA_VERSION = 1


@dataclass
class Entry:
    """One archived kernel: a kernel that passed the gate on one task and GPU."""

    task_name: str                    #: the manifest's name
    task_description: str             #: the manifest's description
    task_signature: str               #: the kernel signature the task requires
    task_hash: str                    #: Task.hash(): manifest, reference and baselines
    source: str                       #: the kernel as it ran (its rendered kforge header included)
    launch: dict | None               #: Launch.to_json() of its own header, None: the manifest's launch
    defines: dict                     #: the -D values it was compiled with
    label: str                        #: the proposal's label (a template's file name for the tuner)
    proposer: str                     #: "initial", "tune", "replay" or the model proposer's name
    score_us: float                   #: geometric mean of the performance-case medians
    speedup_vs_initial: float | None  #: the run's initial kernel score / this score
    speedup_vs_baselines: dict        #: baseline name -> baseline score / this score
    cases: list                       #: per performance case: name, median_us, gbps, tflops, pct_peak_bw, pct_peak_flops, bound
    bound: str                        #: the most common per-case bound of the diagnosis ("unknown" without one)
    diagnosis: dict | None            #: Diagnosis.to_json() of this kernel, as diagnosis.diagnose gave it
    holdout: str                      #: "passed" (holdout cases run with fresh values) | "not_run"
    gpu_name: str                     #: the GPU's name from env.json ("" when unknown)
    gpu_arch: str                     #: e.g. sm_90
    driver: str                       #: the driver version from env.json
    nvrtc: str                        #: the NVRTC version from env.json
    run: str                          #: the run folder it came from
    attempt: str                      #: the attempt id in that run (aNNNN)
    kernel_forge: str = __version__   #: the kernel_forge version that ran it
    added: str = ""                   #: when it entered this archive (UTC, ISO 8601)
    content_hash: str = ""            #: sha256 of source, launch and defines (see content_hash())
    id: int | None = None             #: the row id in this archive (not exported)

    def __post_init__(self):
        if not self.content_hash:
            self.content_hash = content_hash(self.source, self.launch, self.defines)
        if not self.added:
            self.added = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def to_json(self, with_id: bool = False) -> dict:
        d = asdict(self)
        d["format_version"] = SCHEMA_VERSION
        if not with_id:
            d.pop("id")
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Entry":
        return cls(**{k: v for k, v in d.items() if k in _FIELDS})


_FIELDS = {f.name for f in fields(Entry)}


def content_hash(source: str, launch: dict | None, defines: dict) -> str:
    """sha256 over a kernel's source, launch and defines: the same kernel hashes the same anywhere."""
    blob = json.dumps([source, launch, defines], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


# -- JSON lines ----------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def entry_schema() -> dict:
    from importlib import resources
    return json.loads(resources.files("kernel_forge").joinpath("schemas/archive_entry.schema.json").read_text())


def _validator():
    import jsonschema
    return jsonschema.Draft202012Validator(entry_schema())


def _schema_problem(validator, obj) -> str | None:
    import jsonschema
    errors = list(validator.iter_errors(obj))
    if not errors:
        return None
    err = jsonschema.exceptions.best_match(errors)
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return f"{json_path(*err.absolute_path)}: {err.message}{more}"


def entry_lines(entries: list[Entry], *, where: str | Path) -> list[str]:
    """One JSON line per entry, each checked against the schema (``where``: the archive they come
    from, named when one does not fit)."""
    v = _validator()
    out = []
    for e in entries:
        d = e.to_json()
        problem = _schema_problem(v, d)
        if problem:
            raise InputError(f"{where}: archived kernel {e.id} does not fit the export schema: {problem}")
        out.append(json.dumps(d, sort_keys=True, ensure_ascii=False))
    return out


def write_export(file: str | Path, lines: list[str], *, force: bool = False) -> None:
    """Write ``lines`` to ``file`` as JSONL, atomically, with the usual mode (an export is for
    sharing); an existing ``file`` is refused unless ``force``."""
    from kernel_forge.common.writes import write_file

    write_file(Path(file), "".join(l + "\n" for l in lines).encode("utf-8"), private=False, overwrite=force,
               force_hint="choose another file, or pass --force to replace it")


def read_export(file: str | Path, text: str | None = None) -> list[Entry]:
    """Parse and check every line of an export (schema, format version, content hash); the error
    names file and line.  ``text``: the content when it was read already (stdin)."""
    p = Path(file)
    v = _validator()
    entries = []
    for lineno, obj in read_jsonl(p, "archive export", text=text, note="nothing was imported"):
        problem = _schema_problem(v, obj)
        if problem:
            raise InputError(f"{p}:{lineno}: {problem}; nothing was imported",
                             hint="lines come from kforge archive export (schema: "
                                  "kernel_forge/schemas/archive_entry.schema.json)")
        if obj["format_version"] > SCHEMA_VERSION:
            raise InputError(f"{p}:{lineno}: written by a newer kernel_forge (format {obj['format_version']}); "
                             "nothing was imported", hint="upgrade kernel_forge")
        want = content_hash(obj["source"], obj["launch"], obj["defines"])
        if obj["content_hash"] != want:
            raise InputError(f"{p}:{lineno}: $.content_hash does not match the line's source, launch and defines "
                             "(edited or damaged); nothing was imported")
        entries.append(Entry.from_json(obj))
    return entries
