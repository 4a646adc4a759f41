"""kernel_forge.archive.store: the SQLite archive: opening (and refusing what is not an archive,
untouched), adding, listing, searching and pruning, and two writers at once."""
from __future__ import annotations

import hashlib
import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from kernel_forge.archive import store as archive_mod
from kernel_forge.archive.store import SCHEMA_VERSION, add_entries, default_path, get_entry, integrity, list_entries, open_archive, prune, search
from kernel_forge.common.errors import EnvironmentProblem, InputError
from kernel_forge.search.retrieval import TaskQuery, best_settings, retrieve, retrieve_for_run

from tests.support.archive_fakes import GPU, entry
from tests.support.paths import MANIFESTS


# ------------------------------------------------------------------------ bad archive files

def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_a_file_that_is_not_sqlite_is_refused_and_left_alone(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("my precious notes\n" * 100)
    before = _sha(p)
    with pytest.raises(InputError, match=r"notes.txt: not an SQLite database.*left untouched"):
        open_archive(p)
    assert _sha(p) == before and not (tmp_path / "notes.txt-wal").exists()


def test_a_foreign_sqlite_database_is_refused_and_left_alone(tmp_path):
    p = tmp_path / "app.db"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE users (name TEXT)")
    con.execute("INSERT INTO users VALUES ('ada')")
    con.commit()
    con.close()
    before = _sha(p)
    with pytest.raises(InputError, match=r"app.db: an SQLite database but not a kernel_forge archive \(its tables: users\)"):
        open_archive(p)
    assert _sha(p) == before
    con = sqlite3.connect(p)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"     # not switched to WAL either
    assert con.execute("SELECT name FROM users").fetchall() == [("ada",)]
    con.close()


def test_an_archive_from_a_newer_kernel_forge_is_refused(tmp_path):
    p = tmp_path / "a.sqlite"
    with open_archive(p) as a:
        add_entries(a, [entry("softmax_rows", 100.0)])
        a.con.execute("UPDATE archive_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    with pytest.raises(InputError, match=rf"newer kernel_forge \(archive schema {SCHEMA_VERSION + 1}; this one reads up to"):
        open_archive(p)
    con = sqlite3.connect(p)
    assert con.execute("SELECT count(*) FROM kernels").fetchone()[0] == 1
    con.close()


def test_a_damaged_archive_gets_a_clear_error_and_is_not_truncated(tmp_path):
    p = tmp_path / "a.sqlite"
    with open_archive(p) as a:
        add_entries(a, [entry("softmax_rows", 100.0 + i, defines={"X": i}) for i in range(200)])
        a.con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(p.read_bytes())
    size = len(data)
    for off in range(4096, size, 4096):          # keep the header page, wreck every other page
        data[off:off + 100] = b"\xff" * 100
    p.write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"a.sqlite: the archive is damaged"):
        with open_archive(p) as a:
            list_entries(a)
            raise AssertionError(f"read a wrecked archive: {integrity(a)}")
    assert p.stat().st_size == size


def test_python_without_fts5_gets_a_clear_environment_error(tmp_path, monkeypatch):
    monkeypatch.setattr(archive_mod, "fts5_available", lambda: False)
    with pytest.raises(EnvironmentProblem, match="built without FTS5"):
        open_archive(tmp_path / "a.sqlite")
    assert not (tmp_path / "a.sqlite").exists()


def test_default_path_follows_the_cache_convention(monkeypatch, tmp_path):
    monkeypatch.setenv("KFORGE_ARCHIVE", str(tmp_path / "shared.sqlite"))
    assert default_path() == tmp_path / "shared.sqlite"
    monkeypatch.delenv("KFORGE_ARCHIVE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_path() == tmp_path / "xdg" / "kernel_forge" / "archive.sqlite"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(archive_mod.os, "name", "posix")
    assert default_path() == tmp_path / "home" / ".cache" / "kernel_forge" / "archive.sqlite"


def test_a_missing_archive_is_not_created_by_readers(tmp_path):
    p = tmp_path / "sub" / "a.sqlite"
    with pytest.raises(InputError, match="no archive here yet"):
        open_archive(p, create=False)
    assert not p.exists()
    got = retrieve_for_run("softmax_rows", path=p, gpu=GPU)
    assert got.examples == [] and got.settings == {} and got.error is None and not p.exists()
    assert got.to_json()["count"] == 0


# ------------------------------------------------------------------------ two writers

def _writer(path: str, tag: str, n: int, shared: int, start) -> None:
    """One process: ``n`` entries of its own and ``shared`` that the other writes too, one short
    transaction each, opening the archive itself (maybe creating it at the same moment)."""
    start.wait()
    with open_archive(path) as a:
        for i in range(n):
            add_entries(a, [entry("softmax_rows", 100.0 + i, defines={"W": ord(tag), "I": i}, attempt=f"a{i:04d}")])
            if i < shared:
                add_entries(a, [entry("layernorm", 50.0 + i, defines={"S": i})])


def test_two_processes_writing_at_once_do_not_corrupt_the_archive(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    path = str(tmp_path / "shared.sqlite")
    start = ctx.Event()
    procs = [ctx.Process(target=_writer, args=(path, tag, 40, 15, start)) for tag in "AB"]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with open_archive(path) as a:
        assert integrity(a) == []
        assert a.journal_mode == "wal"
        assert len(a) == 2 * 40 + 15
        assert len(list_entries(a, task="layernorm")) == 15
        assert len(search(a, "softmax", limit=1000)) == 80      # the search index kept up


# ------------------------------------------------------------------------ queries and prune

def test_get_entry_by_id_or_hash_prefix(arch):
    add_entries(arch, [entry("softmax_rows", 100.0), entry("layernorm", 90.0)])
    e = list_entries(arch, task="layernorm")[0]
    assert get_entry(arch, e.id).content_hash == e.content_hash
    assert get_entry(arch, e.content_hash[:8]).id == e.id
    with pytest.raises(InputError, match="no archived kernel '999'"):
        get_entry(arch, 999)
    with pytest.raises(InputError, match="give an archive id"):
        get_entry(arch, "softmax")


def test_prune_keeps_the_fastest_per_task_and_gpu(arch):
    add_entries(arch, [entry("softmax_rows", s, defines={"B": s}) for s in (300, 100, 200, 400)]
                + [entry("softmax_rows", s, defines={"B": s}, gpu="NVIDIA A100") for s in (90, 80)]
                + [entry("layernorm", 50.0)])
    assert prune(arch, 2) == (2, 5)
    left = [(e.task_name, e.gpu_name, e.score_us) for e in list_entries(arch)]
    assert left == [("layernorm", GPU, 50.0), ("softmax_rows", "NVIDIA A100", 80.0),
                    ("softmax_rows", "NVIDIA A100", 90.0), ("softmax_rows", GPU, 100.0), ("softmax_rows", GPU, 200.0)]
    assert prune(arch, 2) == (0, 5)
    assert integrity(arch) == [] and len(search(arch, "softmax")) == 4


def test_best_means_holdout_checked_first_then_fastest(arch):
    """A run's best was re-measured side by side and passed the holdout; a faster score that never
    faced the holdout (within noise, or not among the contenders re-measured) ranks after it."""
    checked = entry("softmax_rows", 200.0, label="t.cu", defines={"B": 2})
    unchecked = entry("softmax_rows", 190.0, label="t.cu", defines={"B": 1})
    unchecked.holdout = "not_run"
    add_entries(arch, [unchecked, checked])
    assert [e.defines for e in retrieve(arch, TaskQuery(name="softmax_rows"))] == [{"B": 2}]
    assert [s["defines"] for s in best_settings(arch, TaskQuery(name="softmax_rows"), GPU, label="t.cu")] == \
        [{"B": 2}, {"B": 1}]
    assert [e.defines for e in list_entries(arch)] == [{"B": 2}, {"B": 1}]
    assert prune(arch, 1) == (1, 1) and list_entries(arch)[0].defines == {"B": 2}


def test_the_same_kernel_is_one_entry_per_task_and_gpu(arch):
    src = (MANIFESTS / "softmax_rows.cu").read_text()
    e = entry("softmax_rows", 100.0, source=src)
    other_gpu = entry("softmax_rows", 120.0, source=src, gpu="NVIDIA A100")
    other_task = entry("softmax_rows", 110.0, source=src, task_hash="3" * 64)
    assert e.content_hash == other_gpu.content_hash == other_task.content_hash
    assert add_entries(arch, [e, entry("softmax_rows", 90.0, source=src), other_gpu, other_task]) == (3, 1)
    assert [x.score_us for x in list_entries(arch, gpu=GPU)] == [100.0, 110.0]       # the first one stays
