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
    for i, path in enumerate(task.templates):
        tmpl = load_candidate(path)
        found_t = find_entry(tmpl.source, task.signature.name)
        if found_t is None:
            raise ManifestError(f"{path} has no definition of {task.signature.name}", file=str(task.path),
                                json_path=f"$.templates[{i}]")
        try:
            check_matches(task.signature, found_t[0])
        except SignatureError as exc:
            raise ManifestError(f"{path}:{found_t[1]}: {exc.message}", file=str(task.path),
                                json_path=f"$.templates[{i}]") from None
        if tmpl.launch is None and task.launch is None:
            raise ManifestError(f"{path} has no kforge launch header and the manifest no launch",
                                file=str(task.path), json_path=f"$.templates[{i}]")
        if not tmpl.configurations():
            raise ManifestError(f"{path}: no setting of its tunables satisfies its constraints",
                                file=str(task.path), json_path=f"$.templates[{i}]")
    if cand.launch is None and task.launch is None:
        raise ManifestError("no launch: give \"launch\" in the manifest or a kforge header in the initial kernel",
                            file=str(path), json_path="$")
    warnings = weak_case_warnings(task, max_elements=(1 << 62) if deep else (1 << 22))
    return task, warnings
