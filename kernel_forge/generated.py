"""A task written by ``kforge init --describe``: its ``generated`` block and whether it may be used.

The trust rules:

* A generated task is marked in its manifest (``$.generated``: the model, a hash of every prompt,
  when, the exchange folder, the SHA-256 of every generated file, the cross-check of the two
  witnesses and the weak-case lint, ``accepted: false``) and in every run's evidence (run.json,
  summary.json).
* ``kforge optimize`` refuses it (exit 2, saying how to accept it) until the user has reviewed
  it: ``kforge validate --accept`` (:func:`accept`) re-runs every check -- schema, kernels,
  weak-case lint (a warning refuses), the cross-check (needs a GPU) -- and records who accepted it
  and when; or the user edits a generated file (its SHA-256 no longer matches the block: the
  manifest's is taken over its content without the block, so reformatting is not an edit),
  which counts as review but re-checks nothing, and the run's evidence says so.
* A task whose recorded cross-check disagreed (or failed) is refused even after an edit: only
  ``--accept``, which runs the cross-check again, can clear it.
"""
from __future__ import annotations

import getpass
import hashlib
import json
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from .errors import EnvironmentProblem, InputError
from .task import Task, load_task


def body_hash(data: dict) -> str:
    """SHA-256 of a manifest's content without its ``generated`` block (key order and spacing aside)."""
    body = {k: v for k, v in data.items() if k not in ("generated", "$schema")}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def file_hashes(manifest: Path, data: dict, names: list[str]) -> dict[str, str]:
    """The ``files`` of a block: the manifest (its body) and every other generated file by name."""
    out = {manifest.name: body_hash(data)}
    for name in names:
        if name != manifest.name:
            out[name] = hashlib.sha256((manifest.parent / name).read_bytes()).hexdigest()
    return out


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def who() -> str:
    """user@host of whoever accepts (what ``accepted_by`` records)."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name (a container): say so
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


@dataclass
class Review:
    """What a generated task's block says, checked against its files now."""

    block: dict
    edited: list[str] = field(default_factory=list)     #: generated files that differ (or are gone)

    @property
    def accepted(self) -> bool:
        return bool(self.block.get("accepted"))

    @property
    def crosscheck(self) -> str:
        return (self.block.get("crosscheck") or {}).get("status", "pending")

    @property
    def usable(self) -> bool:
        """Accepted, or edited after a cross-check that did not find the witnesses apart."""
        return self.accepted or (bool(self.edited) and self.crosscheck not in ("disagreed", "failed"))

    def evidence(self) -> dict:
        """What run.json and summary.json record of it."""
        b = self.block
        return {"model": b.get("model", ""), "replayed_from": b.get("replayed_from"), "created": b.get("created", ""),
                "accepted": self.accepted, "accepted_by": b.get("accepted_by"), "accepted_at": b.get("accepted_at"),
                "review": "accepted" if self.accepted else "edited", "edited": list(self.edited),
                "crosscheck": self.crosscheck}


def review(task: Task) -> Review | None:
    """The review state of ``task`` (None: not a generated task)."""
    block = task.generated
    if block is None:
        return None
    edited = []
    for name, digest in (block.get("files") or {}).items():
        path = task.path.parent / name
        if name == task.path.name:
            now_digest = body_hash(task.raw)
        elif path.is_file():
            now_digest = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            now_digest = None
        if now_digest != digest:
            edited.append(name)
    return Review(block, edited)


def refusal(task: Task, r: Review) -> InputError:
    """Why ``task`` may not be optimised yet, and how to accept it."""
    from .crosscheck import block_lines

    b = r.block
    head = (f"{task.path}: $.generated: this task was written by {b.get('model', 'a model')} from the description "
            f"{b.get('description', '')[:120]!r} and has not been accepted, so no speedup can be claimed against "
            "its reference yet")
    lines = [head]
    status = r.crosscheck
    if status in ("disagreed", "failed"):
        lines.append("its two witnesses (the NumPy reference and the naive CUDA kernel) did not agree when it was "
                     "generated" + (" (the files were edited since; the cross-check must run again)" if r.edited else "")
                     + ":")
        lines += ["  " + x for x in block_lines(b.get("crosscheck") or {})]
        hint = (f"fix the reference ({task.reference.path.name}) or the witness ({b.get('witness')}), whichever is "
                f"wrong, then run: kforge validate --accept {task.path}  (it runs the cross-check again, on a GPU)")
    else:
        lines.append(f"cross-check: {status}" + (f" ({(b.get('crosscheck') or {}).get('detail', '')})"
                                                 if status != "agreed" else ""))
        hint = (f"review {task.path.name}, {task.reference.path.name} and {b.get('witness')}, then run: "
                f"kforge validate --accept {task.path}  (re-runs every check and records who accepted it); "
                "editing a generated file also counts as review")
    return InputError("\n".join(lines), hint=hint)


def check_usable(task: Task, progress=lambda msg: None) -> Review | None:
    """Raise :class:`InputError` (exit 2) for a generated task that is not usable yet; say so when an
    edited one is used without its checks re-run.  None for a hand-written task."""
    r = review(task)
    if r is None:
        return None
    if not r.usable:
        raise refusal(task, r)
    if not r.accepted:
        progress(f"[kforge] note: {task.name} was generated by {r.block.get('model')} and edited since "
                 f"({', '.join(r.edited)}); taken as reviewed, its checks were not re-run "
                 f"(kforge validate --accept {task.path} re-runs them)")
    return r


# ------------------------------------------------------------------------------ accepting

@dataclass
class Acceptance:
    manifest: Path
    status: str                         #: accepted | already
    lines: list[str] = field(default_factory=list)


def accept(manifest: str | Path, *, runner=None, extra_shapes: int | None = None, by: str | None = None,
           progress=lambda msg: None) -> Acceptance:
    """``kforge validate --accept``: re-run every check of a generated task and, when all pass,
    record its acceptance (``accepted``, ``accepted_by``, ``accepted_at``; the file hashes of what
    was accepted).  Nothing is written unless every check passes.  ``runner`` runs the CUDA
    witness (default: the real gate; without a GPU this is an :class:`EnvironmentProblem`)."""
    from .crosscheck import EXTRA_SHAPES, GateWitness, run_crosscheck
    from .validate import generated_witness, validate_manifest

    path = Path(manifest)
    task = load_task(path)
    r = review(task)
    if r is None:
        raise InputError(f"{path}: not a generated task (no $.generated block): there is nothing to accept",
                         hint="--accept is for tasks written by kforge init --describe")
    if r.accepted and not r.edited:
        b = r.block
        return Acceptance(path, "already", [f"already accepted by {b.get('accepted_by')} at {b.get('accepted_at')}"])
    report = validate_manifest(path)
    if report.warnings:
        raise InputError(f"{path}: a generated task is accepted only without weak-case warnings:\n"
                         + "\n".join(f"  warning: {w}" for w in report.warnings),
                         hint="make the cases stronger (signed inputs, sizes that reach every branch), then "
                              "accept again")
    witness = generated_witness(task)
    if witness is None:
        raise InputError(f"{path}: $.generated.witness: the task names no CUDA witness to cross-check against")
    check = run_crosscheck(task, witness, runner or GateWitness(),
                           extra=EXTRA_SHAPES if extra_shapes is None else extra_shapes, progress=progress)
    if check.status == "pending":
        raise EnvironmentProblem(f"{path}: not accepted: {check.detail}; the two witnesses must agree first",
                                 hint=f"run kforge validate --accept {path} on a machine with an NVIDIA GPU")
    if check.status != "agreed":
        raise InputError(f"{path}: not accepted: the two witnesses do not agree:\n" + "\n".join(check.lines()),
                         hint=f"fix the reference ({task.reference.path.name}) or the witness "
                              f"({r.block.get('witness')}), whichever is wrong, then accept again")
    data = json.loads(path.read_text(encoding="utf-8-sig"))
    block = dict(data["generated"])
    block.update(accepted=True, accepted_by=by or who(), accepted_at=now(), crosscheck=check.block(), lint=[],
                 files=file_hashes(path, data, list(block.get("files") or {})))
    data["generated"] = block
    from .evidence import atomic_write
    exchange = path.parent / block.get("exchange", "")
    if block.get("exchange") and exchange.is_dir():
        atomic_write(exchange / "crosscheck-accept.json",
                     (json.dumps({"when": block["accepted_at"], **check.to_json()}, indent=2) + "\n").encode(),
                     private=False)
    atomic_write(path, (json.dumps(data, indent=2) + "\n").encode(), private=False)
    lines = check.lines() + [f"accepted by {block['accepted_by']} at {block['accepted_at']}"
                             + (f" (edited since it was generated: {', '.join(r.edited)})" if r.edited else "")]
    return Acceptance(path, "accepted", lines)
