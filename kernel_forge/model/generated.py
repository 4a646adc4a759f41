"""The ``generated`` block of a task written by ``kforge init --describe``: the hashes of its files,
who and when, and whether it was reviewed (:func:`review`).  Refusing or accepting such a task is
:mod:`kernel_forge.authoring.acceptance`'s job."""
from __future__ import annotations

import getpass
import hashlib
import json
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from kernel_forge.model.task import Task


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
