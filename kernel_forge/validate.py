"""``kforge validate``: a manifest's schema and meaning, its initial kernel, and weak cases."""
from __future__ import annotations

from .candidate import load_candidate
from .errors import ManifestError, SignatureError
from .signature import check_matches, find_entry
from .task import Task, load_task
from .weak_cases import weak_case_warnings


def validate_manifest(path, *, deep: bool = False) -> tuple[Task, list[str]]:
    task = load_task(path)
    cand = load_candidate(task.initial)
    found = find_entry(cand.source, task.signature.name)
    if found is None:
        raise ManifestError(f"{task.initial} has no definition of {task.signature.name}", file=str(path),
                            json_path="$.initial")
    try:
        check_matches(task.signature, found[0])
    except SignatureError as exc:
        raise ManifestError(f"{task.initial}:{found[1]}: {exc.message}", file=str(path), json_path="$.initial") from None
    if cand.launch is None and task.launch is None:
        raise ManifestError("no launch: give \"launch\" in the manifest or a kforge header in the initial kernel",
                            file=str(path), json_path="$")
    warnings = weak_case_warnings(task, max_elements=(1 << 62) if deep else (1 << 22))
    return task, warnings
