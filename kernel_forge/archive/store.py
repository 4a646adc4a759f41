"""The kernel archive: every kernel that passed the gate, from every run, in one SQLite file.

One row per kernel, task and GPU (:class:`Entry`): the task's name, description, signature and
manifest hash (:meth:`Task.hash`), the source as it ran with its launch and defines, the score
and per-case results with % of peak and the diagnosed bound, the GPU, driver and NVRTC, and the
run and attempt it came from.  An FTS5 index over name, description, signature and source serves
``kforge archive search`` and :func:`kernel_forge.search.retrieval.retrieve` (BM25).

Only passing kernels go in (:func:`archive_run` checks each attempt's evaluation and holdout
record).  Writes are short ``BEGIN IMMEDIATE`` transactions on a WAL database with a busy
timeout, so runs that share one archive (``--archive PATH``, on a local disk) do not corrupt it.
A file that is not SQLite, or is SQLite without this module's tables or with a newer schema
version, is refused with an :class:`~kernel_forge.common.errors.InputError` and never modified.

Default place: ``KFORGE_ARCHIVE``, else ``$XDG_CACHE_HOME/kernel_forge/archive.sqlite`` (on
Windows ``%LOCALAPPDATA%``, elsewhere ``~/.cache``), like the compile cache.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from pathlib import Path

from kernel_forge import __version__
from kernel_forge.common import finite
from kernel_forge.common.errors import EnvironmentProblem, InputError, KForgeError
from kernel_forge.common.json_path import json_path

#: the schema version this module writes (and the newest it reads)
SCHEMA_VERSION = 1
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
_JSON_COLUMNS = ("launch", "defines", "speedup_vs_baselines", "cases", "diagnosis")
_COLUMNS = [f.name for f in fields(Entry) if f.name != "id"]


def content_hash(source: str, launch: dict | None, defines: dict) -> str:
    """sha256 over a kernel's source, launch and defines: the same kernel hashes the same anywhere."""
    blob = json.dumps([source, launch, defines], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


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


def get_entry(archive: Archive, key: str | int) -> Entry:
    """An entry by row id, or by a prefix (6+ characters) of its content hash."""
    text = str(key).strip()
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


# -- export / import -----------------------------------------------------------------------------

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


def export_lines(archive: Archive, *, task: str | None = None) -> list[str]:
    """One JSON line per entry (schemas/archive_entry.schema.json), each checked against the schema."""
    v = _validator()
    out = []
    for e in list_entries(archive, task=task):
        d = e.to_json()
        problem = _schema_problem(v, d)
        if problem:
            raise InputError(f"{archive.path}: archived kernel {e.id} does not fit the export schema: {problem}")
        out.append(json.dumps(d, sort_keys=True, ensure_ascii=False))
    return out


def export_jsonl(archive: Archive, file: str | Path, *, task: str | None = None, force: bool = False) -> int:
    """Write the archive (or one task's entries) to ``file`` as JSONL, atomically, with the usual
    mode (an export is for sharing); an existing ``file`` is refused unless ``force``.  Returns
    the count."""
    from kernel_forge.common.writes import write_file

    lines = export_lines(archive, task=task)
    write_file(Path(file), "".join(l + "\n" for l in lines).encode("utf-8"), private=False, overwrite=force,
               force_hint="choose another file, or pass --force to replace it")
    return len(lines)


def read_jsonl(file: str | Path, text: str | None = None) -> list[Entry]:
    """Parse and check every line of an export (schema, content hash); the error names file and line."""
    from kernel_forge.common.reads import read_jsonl

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


def import_jsonl(archive: Archive, file: str | Path, text: str | None = None) -> tuple[int, int]:
    """Import an export: every line is checked first, then all go in one transaction, skipping
    kernels already archived (same content hash, task and GPU).  Returns (added, already present)."""
    return add_entries(archive, read_jsonl(file, text))


# -- from a run folder ---------------------------------------------------------------------------

@dataclass
class ArchiveReport:
    """What :func:`archive_run` did with one run folder."""

    run: str                                             #: the run folder
    added: int = 0                                       #: kernels new to the archive
    present: int = 0                                     #: passing kernels already archived (same hash, task, GPU)
    excluded: dict = field(default_factory=dict)         #: why the other attempts stayed out: status/reason -> count
    ids: list = field(default_factory=list)              #: content hashes of the passing attempts

    def to_json(self) -> dict:
        return asdict(self)


def _read(run: Path, name: str, required: bool):
    p = run / name
    if not p.is_file():
        if required:
            raise InputError(f"{run}: not a kforge run folder (no {name})", hint="pass a folder like runs/run-007")
        return None
    try:
        text = p.read_text(encoding="utf-8")
        return finite.loads(text, str(p))
    except (OSError, ValueError) as exc:
        raise InputError(f"{p}: damaged JSON ({exc}); nothing was archived from this run") from None


def _all_cases_passed(ev: dict | None) -> bool:
    return bool(ev) and ev.get("passed") is True and all(c.get("passed") for c in ev.get("cases", []))


def _exclusion(a: dict, bad_holdout: set[str]) -> str | None:
    """Why attempt ``a`` (history.json) may not go in, or None when it passed everything."""
    if a.get("status") != "passed":
        return a.get("status") if a.get("status") == "pending" else (a.get("reason") or "failed")
    if not _all_cases_passed(a.get("evaluation")) or a.get("score_us") is None:
        return "failed_case"
    hold = a.get("holdout")
    if (hold is not None and not hold.get("passed")) or a.get("sha256") in bad_holdout:
        return "holdout_failed"
    return None


def _holdout_state(a: dict) -> str:
    if (a.get("holdout") or {}).get("passed"):
        return "passed"
    if any(c.get("role") == "holdout" for c in (a.get("evaluation") or {}).get("cases", [])):
        return "passed"     # the initial kernel's own evaluation includes the holdout cases
    return "not_run"


def _cases(ev: dict, diag: dict | None) -> list[dict]:
    bounds = {c["name"]: c.get("bound", "unknown") for c in (diag or {}).get("cases", [])}
    out = []
    for c in ev.get("cases", []):
        if c.get("role") != "performance" or not c.get("timing"):
            continue
        out.append({"name": c["name"], "median_us": c["timing"]["median"], "gbps": c.get("gbps"),
                    "tflops": c.get("tflops"), "pct_peak_bw": c.get("pct_peak_bw"),
                    "pct_peak_flops": c.get("pct_peak_flops"), "bound": bounds.get(c["name"], "unknown")})
    return out


def _overall_bound(cases: list[dict]) -> str:
    known = Counter(c["bound"] for c in cases if c.get("bound") and c["bound"] != "unknown")
    return known.most_common(1)[0][0] if known else "unknown"


def _load_task_for(meta: dict):
    """The run's Task when its manifest still loads with the same hash, else None."""
    from kernel_forge.model.task import load_task
    try:
        task = load_task(meta["manifest"])
        return task if task.hash() == meta.get("hashes", {}).get("task") else None
    except Exception:  # noqa: BLE001 - a moved or changed manifest: archive without a diagnosis
        return None


def _diagnose(task, ev: dict, initial: dict | None, baselines: dict, env: dict) -> dict | None:
    if task is None:
        return None
    from kernel_forge.gate.diagnosis import diagnose
    try:
        return diagnose(task, ev, initial=initial, baselines=baselines, device=env.get("device"),
                        calibration=env.get("calibration"), profile=None).to_json()
    except Exception:  # noqa: BLE001 - a diagnosis is extra information, never a reason to lose a kernel
        return None


def entries_from_run(run_dir: str | Path, *, task=None) -> tuple[list[Entry], dict]:
    """The passing attempts of a run folder as entries, and why the others were left out.
    ``task`` (the run's :class:`Task`) gives each its diagnosis; without it the run's manifest is
    loaded when it is still there unchanged."""
    run = Path(run_dir)
    meta = _read(run, "run.json", True)
    manifest = _read(run, "manifest.json", True)
    env = _read(run, "env.json", False) or {}
    hist = _read(run, "history.json", False) or {}
    attempts = hist.get("attempts", [])
    if task is None:
        task = _load_task_for(meta)
    task_hash = meta.get("hashes", {}).get("task") or (task.hash() if task is not None else "")
    if not task_hash:
        raise InputError(f"{run / 'run.json'}: $.hashes.task missing; cannot tell which task this run is")
    device = env.get("device") or {}
    initial = next((a for a in attempts if a.get("proposer") == "initial" or a.get("baseline")), None)
    initial_ev = initial.get("evaluation") if initial else None
    baselines = hist.get("baselines", {}) or {}
    bad_holdout = {a.get("sha256") for a in attempts if a.get("reason") == "holdout_failed"
                   or ((a.get("holdout") or {}).get("passed") is False)} - {None, ""}
    excluded: Counter = Counter()
    out = []
    for a in attempts:
        why = _exclusion(a, bad_holdout)
        if why:
            excluded[why] += 1
            continue
        try:
            source = (run / a["source_file"]).read_text(encoding="utf-8")
        except (OSError, KeyError, UnicodeDecodeError):
            excluded["source_missing"] += 1
            continue
        ev = a["evaluation"]
        diag = _diagnose(task, ev, initial_ev, baselines, env)
        cases = _cases(ev, diag)
        score = a["score_us"]
        init_score = initial.get("score_us") if initial else None
        out.append(Entry(
            task_name=manifest.get("name") or meta.get("task", ""),
            task_description=manifest.get("description", "") or "",
            task_signature=manifest.get("signature", ""), task_hash=task_hash,
            source=source, launch=a.get("launch"), defines=a.get("defines") or {},
            label=a.get("label", "") or "", proposer=a.get("proposer", "") or "",
            score_us=score, speedup_vs_initial=(init_score / score if init_score and score else None),
            speedup_vs_baselines={k: (b.get("score_us") / score if b.get("score_us") and score else None)
                                  for k, b in baselines.items()},
            cases=cases, bound=_overall_bound(cases), diagnosis=diag, holdout=_holdout_state(a),
            gpu_name=str(device.get("name") or ""), gpu_arch=str(device.get("arch") or ""),
            driver=str(device.get("driver_version") or ""), nvrtc=str(env.get("nvrtc") or ""),
            run=str(run.resolve()), attempt=a.get("id", ""),
            kernel_forge=hist.get("kernel_forge") or meta.get("kernel_forge") or __version__))
    return out, dict(excluded)


def archive_run(run_dir: str | Path, archive: Archive, *, task=None) -> ArchiveReport:
    """Add every passing attempt of a finished or partial run folder (reads run.json,
    manifest.json, env.json, history.json); idempotent: a second call adds nothing."""
    entries, excluded = entries_from_run(run_dir, task=task)
    added, present = add_entries(archive, entries) if entries else (0, 0)
    return ArchiveReport(run=str(Path(run_dir)), added=added, present=present, excluded=excluded,
                         ids=[e.content_hash for e in entries])


def record_run(run_dir: str | Path, *, path: str | Path | None = None, task=None,
               progress=lambda msg: None) -> ArchiveReport | None:
    """:func:`archive_run` for the end of ``kforge optimize``: opens the archive at ``path``
    (default :func:`default_path`), reports through ``progress``, and never raises for an
    archive problem (a run's evidence matters more than its archiving): returns None then."""
    try:
        with open_archive(path) as arch:
            rep = archive_run(run_dir, arch, task=task)
            progress(f"[kforge] archive {arch.path}: {rep.added} kernel(s) added, {rep.present} already there")
            return rep
    except KForgeError as exc:
        progress(f"[kforge] warning: the run was not archived: {exc}")
        return None
