"""``runs/run-NNN/``: the evidence of one optimisation run, written atomically as it happens.

Layout::

    run.json              config, seeds, hashes of manifest/reference/harness, status
    manifest.json         snapshot of the manifest as loaded
    env.json              GPU, driver, CUDA/NVRTC, package versions, clocks
    history.json          every attempt (source file, compile log, launch, verdicts, timings),
                          written whole when a process of the run ends
    history.jsonl         the same, as it happens: an append-only log (history_log.py)
    attempts/aNNNN.cu     the source of every attempt, as it was run (with its kforge header)
    model-NNN.json        request, response and usage of every model call (secrets scrubbed)
    summary.json          best attempt, speedups, % of peak, holdout, stop reason, tokens, cost
    best.cu               the best kernel; replays on its own
    best-case-NAME.json   a request that replays best.cu on one case (`kforge replay FILE`)
    report.md, *.png      the report and its plots

Every JSON file has a schema in ``kernel_forge/schemas``; every write goes to a temporary file
that replaces the target, so a kill leaves either the old or the new file, never half of one.
Secrets are scrubbed from everything written.  Evidence holds prompts, model answers and
kernel source, so it is readable by its owner only: files 0600, run folders 0700.  Reading a
file back checks it against its schema, so a damaged or hand-edited file is an error that
names the file and the JSON path, not a crash later.
"""
from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path

from kernel_forge.common import finite, reads
from kernel_forge.common.errors import InputError, InternalError
from kernel_forge.common.json_path import json_path
from kernel_forge.common.writes import DIR_MODE, FILE_MODE, WriteFailed, write_file  # noqa: F401  (FILE_MODE: re-exported)
from kernel_forge.common.reads import MAX_RECORD, read_text_file

SCHEMA_FOR = {
    "run.json": "run.schema.json",
    "history.json": "history.schema.json",
    "summary.json": "summary.schema.json",
    "env.json": "env.schema.json",
    "manifest.json": "manifest.schema.json",
    "retrieval.json": "retrieval.schema.json",
}


def _scrub(obj):
    from kernel_forge.common.scrub import scrub

    return scrub(obj, tuple(v for k, v in os.environ.items() if k.endswith(("_API_KEY", "_AUTH_TOKEN")) and v))


def atomic_write(path: Path, data: bytes, *, private: bool = True, overwrite: bool = True) -> None:
    """Write ``data`` to ``path`` through a temporary file that replaces it (:mod:`kernel_forge.common.writes`).
    ``private`` files are created 0600 (folders 0700); others get the usual mode (0666 less the
    umask), for files a user shares, such as an approvals file or a kernel copied into a repository."""
    write_file(path, data, private=private, overwrite=overwrite)


@lru_cache(maxsize=None)
def schema(name: str) -> dict:
    """The published schema ``name``, with each schema it refers to (``"$ref": "other.schema.json#..."``)
    bundled into its ``$defs`` under that schema's own ``$id``, so that any validator resolves the
    reference without a registry (JSON Schema 2020-12 bundling)."""
    s = json.loads(resources.files("kernel_forge").joinpath(f"schemas/{name}").read_text())
    for other in sorted(_file_refs(s, set()) - {name}):
        s.setdefault("$defs", {})[other] = schema(other)
    return s


def _file_refs(node, out: set) -> set:
    """The schema files ``node``'s ``$ref`` s name (``other.schema.json#/...``)."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):
            out.add(ref.split("#", 1)[0])
        for v in node.values():
            _file_refs(v, out)
    elif isinstance(node, list):
        for v in node:
            _file_refs(v, out)
    return out


def validate_file(path: Path) -> None:
    """Validate one evidence file against its published schema (raises jsonschema errors)."""
    import jsonschema

    name = path.name
    if name.startswith("model-"):
        sname = "model_call.schema.json"
    elif name.startswith("best-case-"):
        sname = "replay_request.schema.json"
    else:
        sname = SCHEMA_FOR[name]
    jsonschema.validate(json.loads(path.read_text()), schema(sname))


def numbered_dir(root: str | Path, prefix: str) -> Path:
    """A new folder ``root/PREFIX-NNN`` numbered after the highest one there (created, mode 0700;
    safe against another process creating the same number at once)."""
    from kernel_forge.common.writes import make_dirs, new_dir, remove_dirs

    root = Path(root)
    created = make_dirs(root, private=False)
    pattern = re.compile(rf"^{re.escape(prefix)}-(\d{{3,}})$")
    n = max((int(m.group(1)) for q in root.iterdir() if (m := pattern.match(q.name))), default=0) + 1
    while True:
        p = root / f"{prefix}-{n:03d}"
        try:
            return new_dir(p)
        except FileExistsError:
            n += 1
        except WriteFailed:
            remove_dirs(created)
            raise


class RunDir:
    """One run's folder."""

    def __init__(self, path: Path):
        self.path = Path(path)

    # -- creation ---------------------------------------------------------------------------
    @classmethod
    def create(cls, root: str | Path = "runs") -> "RunDir":
        from kernel_forge.common.writes import make_dirs

        p = numbered_dir(root, "run")
        try:
            make_dirs(p / "attempts")
            os.chmod(p, DIR_MODE)
        except (WriteFailed, OSError):
            os.rmdir(p)
            raise
        return cls(p)

    @classmethod
    def open(cls, path: str | Path) -> "RunDir":
        p = Path(path)
        if not (p / "run.json").is_file():
            raise InputError(f"{p} is not a kforge run folder (no run.json)",
                             hint="pass a folder like runs/run-007")
        return cls(p)

    # -- writing ----------------------------------------------------------------------------
    def write_json(self, name: str, obj) -> Path:
        target = self.path / name
        clean = _scrub(obj)
        try:
            text = json.dumps(clean, indent=2, default=_default, allow_nan=False)
        except ValueError:
            # evidence is read back with every number finite: a NaN here is kforge's own bug
            found = finite.first_nonfinite(json.loads(json.dumps(clean, default=_default)))
            raise InternalError(f"{target}: kforge was about to write {found[1]} at {found[0]}, which could not be read "
                              "back; nothing was written (this is a bug: please report it)") from None
        atomic_write(target, (text + "\n").encode())
        return target

    def append_line(self, name: str, obj: dict, *, first: bool = False) -> int:
        """Append ``obj`` (scrubbed) as one JSON line to the run's file ``name``, on disk before
        it returns (:func:`~kernel_forge.common.writes.append_file`); ``first``: replace the file
        with that one line instead, atomically.  The bytes written."""
        from kernel_forge.common.patch_log import line
        from kernel_forge.common.writes import append_file

        target = self.path / name
        clean = _scrub(obj)
        try:
            data = line(clean, default=_default)
        except ValueError:
            found = finite.first_nonfinite(json.loads(json.dumps(clean, default=_default)))
            raise InternalError(f"{target}: kforge was about to write {found[1]} at {found[0]}, which could not be read "
                                "back; nothing was written (this is a bug: please report it)") from None
        if first:
            atomic_write(target, data)
            return len(data)
        return append_file(target, data)

    def write_text(self, name: str, text: str) -> Path:
        target = self.path / name
        atomic_write(target, _scrub(text).encode())
        return target

    def write_bytes(self, name: str, data: bytes) -> Path:
        target = self.path / name
        atomic_write(target, data)
        return target

    # -- reading ----------------------------------------------------------------------------
    def read_json(self, name: str, default=None, *, check: bool = True):
        """A JSON file of the run (``default`` when it is absent), checked against its schema
        when it has one: a damaged or wrong-typed file raises InputError naming it and where."""
        p = self.path / name
        if not p.is_file():
            return default
        return read_evidence(p, check=check)

    def model_calls(self) -> list[Path]:
        return sorted(self.path.glob("model-*.json"))

    def next_model_index(self) -> int:
        nums = [int(p.stem.split("-")[1]) for p in self.model_calls()]
        return max(nums, default=0) + 1

    def json_files(self) -> list[Path]:
        names = [n for n in SCHEMA_FOR if (self.path / n).is_file()]
        return ([self.path / n for n in names] + self.model_calls()
                + sorted(self.path.glob("best-case-*.json")))


def _schema_name(path: Path) -> str | None:
    name = path.name
    if name.startswith("model-"):
        return "model_call.schema.json"
    if name.startswith("best-case-"):
        return "replay_request.schema.json"
    return SCHEMA_FOR.get(name)


#: files up to this size are checked against their whole schema; larger ones (a long run's
#: history.json) down to their records' own fields, the nested parts only by type
FULL_CHECK_BYTES = 1 << 20


def _refs(node, out: set) -> set:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            out.add(ref.rsplit("/", 1)[-1])
        elif isinstance(ref, str) and not ref.startswith("#"):
            out.add(ref.split("#", 1)[0])          # a bundled schema (see schema())
        for k, v in node.items():
            if k != "$defs":
                _refs(v, out)
    elif isinstance(node, list):
        for v in node:
            _refs(v, out)
    return out


@lru_cache(maxsize=None)
def _validator(name: str, full: bool):
    """A validator of schema ``name``; not ``full``: the definitions the top level does not
    name directly are reduced to their type (a large file is checked in seconds, not minutes)."""
    import copy

    import jsonschema

    s = schema(name)
    if not full:
        s = copy.deepcopy(s)
        defs = s.get("$defs", {})
        direct = _refs({k: v for k, v in s.items() if k != "$defs"}, set())
        for key in list(defs):
            if key not in direct:
                defs[key] = {"type": defs[key]["type"]} if "type" in defs[key] else {}
    return jsonschema.Draft202012Validator(s)


def read_evidence(path: str | Path, *, check: bool = True, what: str = "evidence file"):
    """Read one evidence JSON file; with ``check``, validate it against its published schema.
    Any problem (unreadable, not UTF-8, not JSON, wrong shape) is an InputError that names the
    file, the line or JSON path, and what was wrong."""
    p = Path(path)
    text = read_text_file(p, what, limit=MAX_RECORD)
    try:
        data = reads.loads(text, str(p))
    except json.JSONDecodeError as exc:
        raise InputError(f"{p}: damaged JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
                         hint="restore the file (or start a new run); kforge never half-writes one") from None
    sname = _schema_name(p) if check else None
    if sname:
        check_schema(data, sname, p, size=len(text))
    return data


def check_schema(data, sname: str, where: Path, *, size: int) -> None:
    """Check ``data`` (read from ``where``, ``size`` bytes) against the schema ``sname``: wholly up
    to :data:`FULL_CHECK_BYTES`, above it down to its records' own fields; an InputError names the
    file and the JSON path."""
    import jsonschema

    validator = _validator(sname, size <= FULL_CHECK_BYTES)
    err = None if validator.is_valid(data) else jsonschema.exceptions.best_match(validator.iter_errors(data))
    if err is not None:
        msg = err.message if len(err.message) <= 300 else err.message[:297] + "..."
        raise InputError(f"{where}: {json_path(*err.absolute_path)}: {msg} "
                         f"(the file does not match {sname})") from None


def _default(o):
    if hasattr(o, "to_json"):
        return o.to_json()
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, (set, tuple)):
        return list(o)
    try:
        import dataclasses
        if dataclasses.is_dataclass(o):
            return dataclasses.asdict(o)
    except Exception:  # noqa: BLE001
        pass
    if hasattr(o, "item"):
        return o.item()
    return str(o)


def environment_fingerprint(device: dict | None, calibration: dict | None) -> dict:
    """GPU, driver, CUDA/NVRTC and package versions, clocks (from the device attributes)."""
    import platform
    from importlib import metadata

    from kernel_forge import __version__

    pkgs = {}
    for dist in ("cuda-bindings", "cuda-pathfinder", "cupy-cuda13x", "cupy-cuda12x", "nvidia-cuda-nvrtc",
                 "nvidia-cuda-nvrtc-cu12", "numpy", "jsonschema", "click", "anthropic", "openai"):
        try:
            pkgs[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    nvrtc = None
    try:
        from kernel_forge.gpu.nvrtc import nvrtc_version
        nvrtc = nvrtc_version()
    except Exception:  # noqa: BLE001
        pass
    return {"kernel_forge": __version__, "python": platform.python_version(), "platform": platform.platform(),
            "packages": pkgs, "nvrtc": nvrtc, "device": device, "calibration": calibration}
