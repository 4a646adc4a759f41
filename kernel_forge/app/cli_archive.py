"""``kforge archive``: list, search, show, add, export, import and prune the kernel archive."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from kernel_forge.app.cli_common import handle_errors


#: the most rows an option may name: SQLite's largest integer (a larger one cannot reach it)
MAX_ROWS = 2**63 - 1


def _archive_option(f):
    return click.option("--archive", "archive_path", type=click.Path(dir_okay=False), default=None,
                        help="The archive file (default: KFORGE_ARCHIVE, else the user's cache directory).")(f)


def _json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(f)


def _open(path, create: bool = False):
    from kernel_forge.archive.store import default_path, open_archive

    return open_archive(path or default_path(), create=create)


def _missing(path) -> bool:
    """No archive yet: no file, or an empty one (listing or searching it writes nothing)."""
    from kernel_forge.archive.store import default_path

    p = Path(path or default_path())
    return not p.exists() or (p.is_file() and p.stat().st_size == 0)


class _NewArchive:
    """Opens the archive for adding; when the file was created by this command and the command
    fails, it is removed again (with SQLite's side files), so a failed import leaves nothing."""

    def __init__(self, path):
        from kernel_forge.archive.store import default_path

        self.path = Path(path or default_path())
        self.existed = self.path.exists()
        self.arch = None

    def __enter__(self):
        self.arch = _open(self.path, create=True)
        return self.arch

    def __exit__(self, kind, exc, tb):
        self.arch.close()
        if kind is not None and not self.existed:
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(str(self.path) + suffix).unlink(missing_ok=True)
        return False


def _table(head: list[str], rows: list[list[str]]) -> str:
    rows = [head] + rows
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _short(entry) -> dict:
    return {"id": entry.id, "task": entry.task_name, "score_us": entry.score_us,
            "speedup_vs_initial": entry.speedup_vs_initial, "bound": entry.bound, "gpu": entry.gpu_name,
            "label": entry.label, "proposer": entry.proposer, "defines": entry.defines, "holdout": entry.holdout,
            "run": entry.run, "attempt": entry.attempt, "content_hash": entry.content_hash}


def _rows(entries, similarity: list[float] | None = None) -> str:
    head = ["id", "task", "score µs", "x initial", "bound", "gpu", "label", "defines", "holdout", "from"]
    if similarity is not None:
        head.insert(1, "match")
    rows = []
    for i, e in enumerate(entries):
        defines = " ".join(f"{k}={v}" for k, v in sorted(e.defines.items()))
        row = [str(e.id), e.task_name, f"{e.score_us:.2f}",
               f"{e.speedup_vs_initial:.2f}" if e.speedup_vs_initial else "-", e.bound, e.gpu_name or "-",
               e.label[:32], defines[:40] or "-", e.holdout, f"{Path(e.run).name}/{e.attempt}"]
        if similarity is not None:
            row.insert(1, f"{similarity[i]:.2f}")
        rows.append(row)
    return _table(head, rows)


@click.group("archive")
def archive_group():
    """The archive of kernels that passed the gate, shared by runs (and, exported, by a team)."""


@archive_group.command("list")
@click.option("--task", help="Only this task (name or manifest hash).")
@click.option("--gpu", help="Only kernels measured on this GPU (its name).")
@click.option("--limit", type=click.IntRange(min=1, max=MAX_ROWS), help="At most this many rows.")
@_archive_option
@_json_option
@handle_errors
def list_cmd(task, gpu, limit, archive_path, as_json):
    """Archived kernels by task and GPU, best first (holdout-checked, then fastest)."""
    from kernel_forge.archive.store import list_entries

    if _missing(archive_path):
        entries, where = [], archive_path
    else:
        with _open(archive_path) as arch:
            entries, where = list_entries(arch, task=task, gpu=gpu, limit=limit), arch.path
    if as_json:
        click.echo(json.dumps([_short(e) for e in entries], indent=2))
        return
    from kernel_forge.archive.store import default_path
    click.echo(f"archive {where or default_path()}: {len(entries)} kernel(s)", err=True)
    if entries:
        click.echo(_rows(entries))


@archive_group.command("search")
@click.argument("query")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=1, max=MAX_ROWS),
              help="At most this many rows.")
@click.option("--gpu", help="Only kernels measured on this GPU (its name).")
@_archive_option
@_json_option
@handle_errors
def search_cmd(query, limit, gpu, archive_path, as_json):
    """Kernels whose task name, description, signature or source match QUERY's words (BM25)."""
    from kernel_forge.archive.store import search

    hits = []
    if not _missing(archive_path):
        with _open(archive_path) as arch:
            hits = search(arch, query, limit=limit, gpu=gpu)
    if as_json:
        click.echo(json.dumps([{**_short(e), "similarity": s} for e, s in hits], indent=2))
        return
    click.echo(f"{len(hits)} match(es) for {query!r}", err=True)
    if hits:
        click.echo(_rows([e for e, _ in hits], [s for _, s in hits]))


@archive_group.command("show")
@click.argument("key", metavar="ID")
@_archive_option
@_json_option
@handle_errors
def show_cmd(key, archive_path, as_json):
    """One archived kernel (by id, or 6+ hex digits of its content hash): its record and source."""
    from kernel_forge.archive.store import get_entry

    with _open(archive_path) as arch:
        e = get_entry(arch, key)
    if as_json:
        click.echo(json.dumps(e.to_json(with_id=True), indent=2))
        return
    lines = [f"#{e.id} {e.task_name}: {e.score_us:.2f} µs"
             + (f", x{e.speedup_vs_initial:.2f} vs initial" if e.speedup_vs_initial else "")
             + f"; bound: {e.bound}; holdout: {e.holdout}",
             f"GPU {e.gpu_name or '-'} ({e.gpu_arch or '-'}), driver {e.driver or '-'}, NVRTC {e.nvrtc or '-'}",
             f"from {e.run} attempt {e.attempt} ({e.proposer}, {e.label}); added {e.added}",
             f"task hash {e.task_hash}", f"content hash {e.content_hash}",
             f"defines: {json.dumps(e.defines)}; launch: {json.dumps(e.launch)}"]
    for c in e.cases:
        pct = f", {c['pct_peak_bw']:.1f}% of measured bandwidth" if c.get("pct_peak_bw") is not None else ""
        lines.append(f"  {c['name']}: {c['median_us']:.2f} µs{pct}; bound {c.get('bound', 'unknown')}")
    click.echo("\n".join(lines) + "\n\n" + e.source.rstrip("\n"))


@archive_group.command("add")
@click.argument("runs", nargs=-1, required=True, type=click.Path(file_okay=False))
@_archive_option
@_json_option
@handle_errors
def add_cmd(runs, archive_path, as_json):
    """Archive the passing kernels of run folders (idempotent; optimize does this at its end)."""
    from kernel_forge.archive.harvest import archive_run

    reports = []
    with _NewArchive(archive_path) as arch:
        for r in runs:
            reports.append(archive_run(r, arch))
        where = arch.path
    if as_json:
        click.echo(json.dumps([r.to_json() for r in reports], indent=2))
        return
    for r in reports:
        left = ", ".join(f"{k} {v}" for k, v in sorted(r.excluded.items())) or "none"
        click.echo(f"{r.run}: {r.added} added, {r.present} already archived; left out: {left}")
    click.echo(f"archive {where}", err=True)


@archive_group.command("export")
@click.argument("file", required=False, type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--task", help="Only this task (name or manifest hash).")
@click.option("--force", is_flag=True, help="Replace FILE if it exists.")
@_archive_option
@_json_option
@handle_errors
def export_cmd(file, task, force, archive_path, as_json):
    """Write the archive as JSONL (one entry a line; schemas/archive_entry.schema.json) to FILE or stdout.
    An existing FILE is left as it is unless --force."""
    from kernel_forge.archive.store import default_path, export_jsonl, export_lines
    from kernel_forge.app.option_checks import check_output_path

    if file and file != "-":
        # the archive itself (by another name, a symlink or a hard link) is never the export's target
        check_output_path(file, option="FILE", inputs=(archive_path or default_path(),))
        if Path(file).exists() and not force:
            from kernel_forge.common.errors import InputError
            raise InputError(f"{file}: already exists; nothing was written",
                             hint="choose another file, or pass --force to replace it")
    with _open(archive_path) as arch:
        if not file or file == "-":
            lines = export_lines(arch, task=task)
            click.echo("".join(l + "\n" for l in lines), nl=False)
            click.echo(f"exported {len(lines)} kernel(s)", err=True)
            return
        n = export_jsonl(arch, file, task=task, force=force)
    if as_json:
        click.echo(json.dumps({"file": str(file), "entries": n}))
    else:
        click.echo(f"exported {n} kernel(s) to {file}")


@archive_group.command("import")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@_archive_option
@_json_option
@handle_errors
def import_cmd(file, archive_path, as_json):
    """Add the kernels of a JSONL export; those already archived are skipped (by content hash).
    Every line is checked first; one bad line imports nothing."""
    from kernel_forge.archive.format import read_export
    from kernel_forge.archive.store import add_entries

    from kernel_forge.common.reads import MAX_RECORD

    text = sys.stdin.read(MAX_RECORD + 1) if file == "-" else None     # bounded as a file is
    if text is not None and len(text) > MAX_RECORD:
        from kernel_forge.common.errors import InputError
        raise InputError(f"<stdin>: the archive export has more than {MAX_RECORD >> 20} MiB, over what kforge reads; "
                         "nothing was imported")
    entries = read_export("<stdin>" if file == "-" else file, text)   # every line checked before the archive is opened
    with _NewArchive(archive_path) as arch:
        added, present = add_entries(arch, entries)
        where = arch.path
    if as_json:
        click.echo(json.dumps({"file": str(file), "added": added, "present": present, "archive": str(where)}))
    else:
        click.echo(f"imported {added} new kernel(s) into {where}; {present} already there")


@archive_group.command("prune")
@click.option("--keep", type=click.IntRange(min=0, max=MAX_ROWS), required=True, help="Kernels kept per task and GPU (the best).")
@_archive_option
@_json_option
@handle_errors
def prune_cmd(keep, archive_path, as_json):
    """Keep only the best KEEP kernels of each task (manifest hash) and GPU (holdout-checked, then fastest)."""
    from kernel_forge.archive.store import prune

    with _open(archive_path) as arch:
        removed, kept = prune(arch, keep)
    if as_json:
        click.echo(json.dumps({"removed": removed, "kept": kept}))
    else:
        click.echo(f"removed {removed} kernel(s); {kept} kept")
