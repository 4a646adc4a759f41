"""The kernel archive: every kernel that passed the gate, from every run, in one SQLite file.

One row per kernel, task and GPU (an :class:`~kernel_forge.archive.format.Entry`: the task's name,
description, signature and manifest hash, the source as it ran with its launch and defines, the
score and per-case results, the GPU, and the run and attempt it came from).  An FTS5 index over
name, description, signature and source serves ``kforge archive search`` and
:func:`kernel_forge.search.retrieval.retrieve` (BM25).  This module opens the file, adds, lists,
searches and prunes; the JSON Lines form of an entry is archive/format.py, and turning a run
folder into entries (only passing kernels go in) is archive/harvest.py.

Writes are short ``BEGIN IMMEDIATE`` transactions on a WAL database with a busy timeout, so runs
that share one archive (``--archive PATH``, on a local disk) do not corrupt it.  A file that is
not SQLite, or is SQLite without this module's tables or with a newer schema version, is refused
with an :class:`~kernel_forge.common.errors.InputError` and never modified.

Default place: ``KFORGE_ARCHIVE``, else ``$XDG_CACHE_HOME/kernel_forge/archive.sqlite`` (on
Windows ``%LOCALAPPDATA%``, elsewhere ``~/.cache``), like the compile cache.
"""
from __future__ import annotations

import json
import os
import re
import sqlite3
from dataclasses import fields
from functools import lru_cache
from pathlib import Path

from kernel_forge import __version__
from kernel_forge.archive.format import SCHEMA_VERSION, Entry, entry_lines, read_export, write_export
from kernel_forge.common.errors import EnvironmentProblem, InputError, KForgeError

#: what ``archive_meta.format`` holds in a kernel_forge archive
FORMAT = "kernel_forge-archive"
BUSY_TIMEOUT_S = 30.0
_SQLITE_MAGIC = b"SQLite format 3\x00"
_OUR_TABLES = {"archive_meta", "kernels", "kernels_fts"}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS archive_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS kernels (
    id INTEGER PRIMARY KEY,
    content_hash TEXT NOT NULL,
    task_name TEXT NOT NULL,
    task_description TEXT NOT NULL,
    task_signature TEXT NOT NULL,
    task_hash TEXT NOT NULL,
    source TEXT NOT NULL,
    launch TEXT,
    defines TEXT NOT NULL,
    label TEXT NOT NULL,
    proposer TEXT NOT NULL,
    score_us REAL NOT NULL,
    speedup_vs_initial REAL,
    speedup_vs_baselines TEXT NOT NULL,
    cases TEXT NOT NULL,
    bound TEXT NOT NULL,
    diagnosis TEXT,
    holdout TEXT NOT NULL,
    gpu_name TEXT NOT NULL,
    gpu_arch TEXT NOT NULL,
    driver TEXT NOT NULL,
    nvrtc TEXT NOT NULL,
    run TEXT NOT NULL,
    attempt TEXT NOT NULL,
    kernel_forge TEXT NOT NULL,
    added TEXT NOT NULL,
    UNIQUE (content_hash, task_hash, gpu_name)
);
CREATE INDEX IF NOT EXISTS kernels_by_task ON kernels (task_hash, gpu_name, score_us);
CREATE INDEX IF NOT EXISTS kernels_by_name ON kernels (task_name, gpu_name, score_us);
CREATE VIRTUAL TABLE IF NOT EXISTS kernels_fts USING fts5(
    task_name, task_description, task_signature, source,
    content='kernels', content_rowid='id', tokenize='porter unicode61');
CREATE TRIGGER IF NOT EXISTS kernels_ai AFTER INSERT ON kernels BEGIN
    INSERT INTO kernels_fts (rowid, task_name, task_description, task_signature, source)
    VALUES (new.id, new.task_name, new.task_description, new.task_signature, new.source);
END;
CREATE TRIGGER IF NOT EXISTS kernels_ad AFTER DELETE ON kernels BEGIN
    INSERT INTO kernels_fts (kernels_fts, rowid, task_name, task_description, task_signature, source)
    VALUES ('delete', old.id, old.task_name, old.task_description, old.task_signature, old.source);
END;
"""
#: FTS5 bm25() weights of (task_name, task_description, task_signature, source)
BM25_WEIGHTS = (2.0, 4.0, 2.0, 1.0)
#: what "the best kernels of a task" means everywhere (retrieval, warm start, prune, list): those
#: that also passed the holdout cases first (a run's bests: re-measured side by side, then checked
#: with fresh values), then the fastest
BEST_FIRST = "(holdout = 'passed') DESC, score_us, id"


_JSON_COLUMNS = ("launch", "defines", "speedup_vs_baselines", "cases", "diagnosis")
_COLUMNS = [f.name for f in fields(Entry) if f.name != "id"]


def default_path() -> Path:
    """``KFORGE_ARCHIVE``, else the user's cache directory (see the module docstring)."""
    env = os.environ.get("KFORGE_ARCHIVE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME")
    if not base and os.name == "nt":
        base = os.environ.get("LOCALAPPDATA")
    if not base:
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kernel_forge" / "archive.sqlite"


@lru_cache(maxsize=1)
def fts5_available() -> bool:
    try:
        con = sqlite3.connect(":memory:")
        try:
            con.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
        finally:
            con.close()
        return True
    except sqlite3.OperationalError:
        return False


def require_fts5() -> None:
    if sqlite3.sqlite_version_info < (3, 25, 0):
        raise EnvironmentProblem(f"this Python's SQLite is {sqlite3.sqlite_version}; the kernel archive needs 3.25 "
                                 "or newer (window functions)", hint="use a newer Python build")
    if not fts5_available():
        raise EnvironmentProblem(
            f"this Python's sqlite3 module (SQLite {sqlite3.sqlite_version}) was built without FTS5, "
            "which the kernel archive needs for its search index",
            hint="use a Python whose SQLite has FTS5 (python.org, conda and most Linux distributions' builds do)")


# -- opening -------------------------------------------------------------------------------------

class Archive:
    """An open archive (use :func:`open_archive`); a context manager that closes it."""

    def __init__(self, path: Path, con: sqlite3.Connection):
        self.path, self.con = path, con
        self.journal_mode = ""          #: "wal" once opened (see _pragmas)

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> "Archive":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- low level ---------------------------------------------------------------------------
    def _fail(self, exc: sqlite3.Error, doing: str) -> KForgeError:
        return _db_error(self.path, exc, doing)

    def query(self, sql: str, params=(), doing: str = "reading") -> list[sqlite3.Row]:
        try:
            return self.con.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._fail(exc, doing) from None

    def write(self, doing: str, fn):
        """Run ``fn(con)`` in one short ``BEGIN IMMEDIATE`` transaction; roll back on any error."""
        try:
            self.con.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self._fail(exc, doing) from None
        try:
            out = fn(self.con)
            self.con.execute("COMMIT")
            return out
        except BaseException as exc:
            try:
                self.con.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            if isinstance(exc, sqlite3.Error):
                raise self._fail(exc, doing) from None
            raise

    def __len__(self) -> int:
        return self.query("SELECT count(*) FROM kernels")[0][0]


def _db_error(path: Path, exc: sqlite3.Error, doing: str) -> KForgeError:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return EnvironmentProblem(f"{path}: the archive stayed locked by another process for "
                                  f"{BUSY_TIMEOUT_S:.0f} s while {doing}",
                                  hint="try again when the other run has finished writing")
    if type(exc) is sqlite3.DatabaseError or "malformed" in text or "not a database" in text:
        return InputError(f"{path}: the archive is damaged ({text}) while {doing}; nothing was changed",
                          hint="move it aside and pass --archive NEW_PATH; kforge archive add RUN... "
                               "re-adds the kernels of run folders, kforge archive import FILE an export")
    return InputError(f"{path}: archive error while {doing}: {text}")


def _connect(path: Path, create: bool) -> sqlite3.Connection:
    if create:
        from kernel_forge.common.writes import make_dirs
        make_dirs(path.parent, private=False)
        return sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
    uri = path.resolve().as_uri() + "?mode=rw"
    return sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)


def open_archive(path: str | Path | None = None, *, create: bool = True) -> Archive:
    """Open (and, for a new file with ``create``, initialise) the archive at ``path``
    (default :func:`default_path`).  Refuses files that are not kernel_forge archives."""
    require_fts5()
    p = Path(path) if path else default_path()
    exists = p.exists()
    if exists and p.is_dir():
        raise InputError(f"{p}: is a folder, not an archive file", hint="pass --archive FILE.sqlite")
    if not exists and not create:
        raise InputError(f"{p}: no archive here yet", hint="kernels are added when runs pass the gate; "
                                                            "or kforge archive import FILE.jsonl")
    if exists and not create and p.stat().st_size == 0:
        raise InputError(f"{p}: an empty file (0 bytes), not an archive yet; it was left untouched",
                         hint="kernels are added when runs pass the gate; or kforge archive import FILE.jsonl")
    if exists and p.stat().st_size > 0:
        try:
            with open(p, "rb") as f:
                head = f.read(len(_SQLITE_MAGIC))
        except OSError as exc:
            raise InputError(f"{p}: cannot read the archive: {exc.strerror}") from None
        if head != _SQLITE_MAGIC:
            raise InputError(f"{p}: not an SQLite database, so not a kernel_forge archive; it was left untouched",
                             hint="pass --archive with another path")
    try:
        con = _connect(p, create=not exists or p.stat().st_size == 0)
    except sqlite3.Error as exc:
        raise _db_error(p, exc, "opening") from None
    con.row_factory = sqlite3.Row
    arch = Archive(p, con)
    try:
        _check_or_init(arch)
    except BaseException:
        con.close()
        raise
    return arch


def _check_or_init(arch: Archive) -> None:
    tables = {r[0] for r in arch.query("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')",
                                       doing="reading the schema")}
    if tables and "archive_meta" not in tables:
        shown = ", ".join(sorted(tables)[:6])
        raise InputError(f"{arch.path}: an SQLite database but not a kernel_forge archive (its tables: {shown}); "
                         "it was left untouched", hint="pass --archive with another path")
    if "archive_meta" in tables:
        meta = dict((r[0], r[1]) for r in arch.query("SELECT key, value FROM archive_meta", doing="reading the schema"))
        if meta.get("format") != FORMAT:
            raise InputError(f"{arch.path}: an SQLite database with an archive_meta table that is not "
                             f"kernel_forge's (format {meta.get('format')!r}); it was left untouched")
        try:
            version = int(meta.get("schema_version", ""))
        except ValueError:
            raise InputError(f"{arch.path}: archive schema version {meta.get('schema_version')!r} is not a number") from None
        if version > SCHEMA_VERSION:
            raise InputError(f"{arch.path}: written by a newer kernel_forge (archive schema {version}; this one "
                             f"reads up to {SCHEMA_VERSION}); it was left untouched",
                             hint="upgrade kernel_forge, or pass --archive with another path")
        missing = _OUR_TABLES - tables
        if missing:
            raise InputError(f"{arch.path}: a kernel_forge archive with tables missing "
                             f"({', '.join(sorted(missing))}); it was left untouched",
                             hint="move it aside and pass --archive NEW_PATH; kforge archive add RUN... "
                                  "re-adds the kernels of run folders")
        _pragmas(arch)
        return
    # an empty database (new file, or SQLite with no tables yet): ours to initialise
    _pragmas(arch)

    def init(con):
        # another process may have initialised it between our check and our write lock: IF NOT EXISTS
        for stmt in _statements(_SCHEMA):
            con.execute(stmt)
        con.execute("INSERT OR IGNORE INTO archive_meta (key, value) VALUES ('format', ?)", (FORMAT,))
        con.execute("INSERT OR IGNORE INTO archive_meta (key, value) VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),))
        con.execute("INSERT OR IGNORE INTO archive_meta (key, value) VALUES ('created_by', ?)",
                    (f"kernel_forge {__version__}",))
    arch.write("creating the archive", init)


def _statements(script: str) -> list[str]:
    """Split the schema script into statements (triggers hold ';' inside BEGIN ... END)."""
    out, cur = [], []
    for line in script.strip().splitlines():
        cur.append(line)
        text = "\n".join(cur).strip()
        if text.endswith(";") and (not text.upper().startswith("CREATE TRIGGER") or text.upper().endswith("END;")):
            out.append(text)
            cur = []
    return out


def _pragmas(arch: Archive) -> None:
    try:
        arch.con.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        # WAL needs shared memory, which some network file systems refuse: then SQLite keeps its
        # rollback journal, which is slower for concurrent writers but just as safe
        arch.journal_mode = str(arch.con.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
        arch.con.execute("PRAGMA synchronous = NORMAL")
    except sqlite3.Error as exc:
        raise _db_error(arch.path, exc, "opening") from None


# -- rows ----------------------------------------------------------------------------------------

def _row_to_entry(row: sqlite3.Row) -> Entry:
    d = dict(row)
    for k in _JSON_COLUMNS:
        d[k] = json.loads(d[k]) if d.get(k) is not None else None
    d["defines"] = d["defines"] or {}
    d["speedup_vs_baselines"] = d["speedup_vs_baselines"] or {}
    d["cases"] = d["cases"] or []
    return Entry.from_json(d)


def _entry_values(e: Entry) -> list:
    d = e.to_json()
    return [json.dumps(d[k], sort_keys=True) if k in _JSON_COLUMNS and d[k] is not None else d[k]
            for k in _COLUMNS]


def _insert(con: sqlite3.Connection, e: Entry) -> bool:
    """Insert unless the same kernel is already archived for this task and GPU; True if added."""
    cols = ", ".join(_COLUMNS)
    marks = ", ".join("?" for _ in _COLUMNS)
    cur = con.execute(f"INSERT OR IGNORE INTO kernels ({cols}) VALUES ({marks})", _entry_values(e))
    return cur.rowcount == 1


def add_entries(archive: Archive, entries: list[Entry]) -> tuple[int, int]:
    """Add entries in one transaction; returns (added, already present)."""
    def go(con):
        added = sum(_insert(con, e) for e in entries)
        return added, len(entries) - added
    return archive.write("adding kernels", go)


#: SQLite's largest integer: an id (or any integer) beyond it cannot be looked up
SQLITE_MAX_INT = 2**63 - 1


def get_entry(archive: Archive, key: str | int) -> Entry:
    """An entry by row id, or by a prefix (6+ characters) of its content hash."""
    text = str(key).strip()
    if text.isdigit() and int(text) > SQLITE_MAX_INT:
        raise InputError(f"ID {text}: no archive id is that large (ids are at most {SQLITE_MAX_INT})",
                         hint="kforge archive list shows the ids")
    if text.isdigit():
        rows = archive.query("SELECT * FROM kernels WHERE id = ?", (int(text),))
    elif re.fullmatch(r"[0-9a-fA-F]{6,64}", text):
        rows = archive.query("SELECT * FROM kernels WHERE content_hash LIKE ? ORDER BY id", (text.lower() + "%",))
        if len({r["content_hash"] for r in rows}) > 1:
            raise InputError(f"{archive.path}: {text!r} matches {len(rows)} kernels; give more of the hash or the id")
    else:
        raise InputError(f"{text!r}: give an archive id (a number) or 6+ hex digits of a content hash")
    if not rows:
        raise InputError(f"{archive.path}: no archived kernel {text!r}", hint="kforge archive list")
    return _row_to_entry(rows[0])


def list_entries(archive: Archive, *, task: str | None = None, gpu: str | None = None,
                 limit: int | None = None) -> list[Entry]:
    """Entries by task and GPU, best first (:data:`BEST_FIRST`)."""
    where, params = [], []
    if task:
        where.append("(task_name = ? OR task_hash = ?)")
        params += [task, task]
    if gpu:
        where.append("gpu_name = ?")
        params.append(gpu)
    sql = "SELECT * FROM kernels" + (" WHERE " + " AND ".join(where) if where else "")
    sql += f" ORDER BY task_name, gpu_name, {BEST_FIRST}"
    if limit:
        sql += f" LIMIT {int(limit)}"
    return [_row_to_entry(r) for r in archive.query(sql, params)]


_WORD = re.compile(r"[A-Za-z0-9]+")


def fts_query(text: str, max_terms: int = 96) -> str:
    """An FTS5 query that ORs the distinct words of ``text`` (quoted: no query syntax gets through)."""
    seen: list[str] = []
    for w in _WORD.findall(text):
        w = w.lower()
        if len(w) < 2 or w.isdigit() or w in seen:
            continue
        seen.append(w)
        if len(seen) >= max_terms:
            break
    return " OR ".join(f'"{w}"' for w in seen)


def search(archive: Archive, query: str, *, limit: int = 20, gpu: str | None = None,
           exclude_proposers: tuple[str, ...] = ()) -> list[tuple[Entry, float]]:
    """Entries matching any word of ``query``, best BM25 match first, with their similarity
    (``-bm25``: higher is more similar)."""
    q = fts_query(query)
    if not q:
        raise InputError(f"search query {query!r} has no words to look for")
    where, params = ["kernels_fts MATCH ?"], [q]
    if gpu:
        where.append("k.gpu_name = ?")
        params.append(gpu)
    for p in exclude_proposers:
        where.append("k.proposer != ?")
        params.append(p)
    w = ", ".join(str(x) for x in BM25_WEIGHTS)
    sql = (f"SELECT k.*, bm25(kernels_fts, {w}) AS rank FROM kernels_fts JOIN kernels k ON k.id = kernels_fts.rowid "
           f"WHERE {' AND '.join(where)} ORDER BY rank, k.score_us, k.id LIMIT {int(limit)}")
    return [(_row_to_entry(r), -float(r["rank"])) for r in archive.query(sql, params, doing="searching")]


def similar_tasks(archive: Archive, text: str, *, limit: int, gpu: str | None = None,
                  exclude_names: tuple[str, ...] = (), exclude_hashes: tuple[str, ...] = (),
                  exclude_proposers: tuple[str, ...] = ("initial",)) -> list[tuple[str, str, float]]:
    """Archived tasks most similar to ``text`` first: (task_hash, task_name, similarity = -bm25).

    BM25 runs over one document per task (its name, description, signature and the source of its
    best kernel) in a temporary FTS5 table, so that document frequencies count tasks: a task
    the tuner archived 300 settings of would otherwise make its own words look common."""
    q = fts_query(text)
    if not q:
        return []
    where, params = [], []
    if gpu:
        where.append("gpu_name = ?")
        params.append(gpu)
    for col, values in (("task_name", exclude_names), ("task_hash", exclude_hashes), ("proposer", exclude_proposers)):
        for v in values:
            if v:
                where.append(f"{col} != ?")
                params.append(v)
    cond = " WHERE " + " AND ".join(where) if where else ""
    w = ", ".join(str(x) for x in (0.0, *BM25_WEIGHTS))
    con = archive.con
    try:
        con.execute("DROP TABLE IF EXISTS temp.task_docs")
        con.execute("CREATE VIRTUAL TABLE temp.task_docs USING fts5(task_hash UNINDEXED, task_name, task_description, "
                    "task_signature, source, tokenize='porter unicode61')")
        try:
            con.execute("INSERT INTO temp.task_docs SELECT task_hash, task_name, task_description, task_signature, source "
                        f"FROM (SELECT *, row_number() OVER (PARTITION BY task_hash ORDER BY {BEST_FIRST}) AS n "
                        f"FROM main.kernels{cond}) WHERE n = 1", params)
            # as many empty documents again (8 at least): FTS5 gives a word found in half the
            # documents or more an IDF of ~0, which in an archive of a few tasks silences the
            # words that tell row-wise kernels from the others; padding halves every document
            # frequency instead (a word in every task then counts ~0, one in half of them log 3)
            n_docs = con.execute("SELECT count(*) FROM temp.task_docs").fetchone()[0]
            con.executemany("INSERT INTO temp.task_docs (task_hash, source) VALUES ('', '')", [()] * max(n_docs, 8))
            rows = con.execute(f"SELECT task_hash, task_name, bm25(task_docs, {w}) AS rank FROM temp.task_docs "
                               f"WHERE task_docs MATCH ? AND task_hash != '' ORDER BY rank, task_name LIMIT {int(limit)}", (q,)).fetchall()
        finally:
            con.execute("DROP TABLE IF EXISTS temp.task_docs")
    except sqlite3.Error as exc:
        raise archive._fail(exc, "searching") from None
    return [(r[0], r[1], -float(r[2])) for r in rows]


def best_of_task(archive: Archive, *, task_hash: str | None = None, task_name: str | None = None,
            gpu: str | None = None, label: str | None = None, exclude_proposers: tuple[str, ...] = (),
            limit: int = 1) -> list[Entry]:
    """The best entries of one task (by manifest hash, or by name; :data:`BEST_FIRST`), optionally
    on one GPU and with one label."""
    where, params = [], []
    if task_hash:
        where.append("task_hash = ?")
        params.append(task_hash)
    if task_name:
        where.append("task_name = ?")
        params.append(task_name)
    if gpu:
        where.append("gpu_name = ?")
        params.append(gpu)
    if label is not None:
        where.append("label = ?")
        params.append(label)
    for p in exclude_proposers:
        where.append("proposer != ?")
        params.append(p)
    if not where:
        raise ValueError("best_of_task() needs a task")
    sql = f"SELECT * FROM kernels WHERE {' AND '.join(where)} ORDER BY {BEST_FIRST} LIMIT {int(limit)}"
    return [_row_to_entry(r) for r in archive.query(sql, params)]


def prune(archive: Archive, keep: int) -> tuple[int, int]:
    """Keep the ``keep`` best entries (:data:`BEST_FIRST`) of each task (manifest hash) and GPU;
    returns (removed, kept)."""
    if keep < 0:
        raise InputError(f"--keep {keep}: give 0 or more")

    def go(con):
        cur = con.execute(f"""
            DELETE FROM kernels WHERE id IN (
                SELECT id FROM (SELECT id, row_number() OVER (PARTITION BY task_hash, gpu_name
                                                             ORDER BY {BEST_FIRST}) AS n FROM kernels)
                WHERE n > ?)""", (keep,))
        removed = cur.rowcount
        return removed, con.execute("SELECT count(*) FROM kernels").fetchone()[0]
    return archive.write("pruning", go)


def integrity(archive: Archive) -> list[str]:
    """Problems found by SQLite's integrity check and FTS5's (empty: none)."""
    problems = [r[0] for r in archive.query("PRAGMA integrity_check", doing="checking") if r[0] != "ok"]
    try:
        archive.con.execute("INSERT INTO kernels_fts (kernels_fts, rank) VALUES ('integrity-check', 1)")
    except sqlite3.Error as exc:
        problems.append(f"search index: {exc}")
    return problems


# -- export / import (the lines: archive/format.py) -------------------------------------------

def export_lines(archive: Archive, *, task: str | None = None) -> list[str]:
    """One JSON line per entry (schemas/archive_entry.schema.json), each checked against the schema."""
    return entry_lines(list_entries(archive, task=task), where=archive.path)


def export_jsonl(archive: Archive, file: str | Path, *, task: str | None = None, force: bool = False) -> int:
    """Write the archive (or one task's entries) to ``file`` as JSONL (:func:`write_export`);
    returns the count."""
    lines = export_lines(archive, task=task)
    write_export(file, lines, force=force)
    return len(lines)


def import_jsonl(archive: Archive, file: str | Path, text: str | None = None) -> tuple[int, int]:
    """Import an export: every line is checked first (:func:`read_export`), then all go in one
    transaction, skipping kernels already archived (same content hash, task and GPU).  Returns
    (added, already present)."""
    return add_entries(archive, read_export(file, text))
