"""Every file kforge writes goes through one helper (``kernel_forge/common/writes.py``): a temporary file
in the target folder, fsync, rename.  These tests hold the helper to that, and hold the package to
the helper: a new direct write anywhere in ``kernel_forge/`` fails :func:`test_no_module_writes_a_file_past_the_helper`."""
from __future__ import annotations

import ast
import errno
import os
from pathlib import Path

import pytest

from kernel_forge.common import writes
from kernel_forge.common.errors import InputError
from kernel_forge.common.writes import WriteFailed, append_file, remove_file, write_file, write_files

from tests.support.fs_double import FailingFS

PACKAGE = Path(__file__).resolve().parents[2] / "kernel_forge"

#: (file under kernel_forge/, the call) -> why it may write without the helper
ALLOWED = {
    ("writes.py", "*"): "the helper itself",
    ("entry.py", "open(..., 'w')"): "stdout pointed at the null device once the reader of a pipe has left",
    ("store.py", "sqlite3.connect"): "SQLite writes through its own journal (WAL), atomically; its errors are "
                                       "turned into exit codes by archive.store._db_error",
    ("sanitizer.py", "tempfile.TemporaryDirectory"): "a private temporary folder for the sanitizer's child, removed "
                                                     "when it ends (the files in it go through the helper)",
    ("profiler.py", "tempfile.TemporaryDirectory"): "a private temporary folder for ncu's child, removed when it "
                                                   "ends (the files in it go through the helper)",
    ("crosscheck.py", "tempfile.TemporaryDirectory"): "a private folder for the derived task the witness is gated "
                                                      "on, removed at the end (its files go through the helper)",
    ("from_description.py", "tempfile.TemporaryDirectory"): "the staging folder of init --describe, removed at the end (its "
                                                    "files go through the helper; the results are written whole)",
    ("disasm.py", "tempfile.TemporaryDirectory"): "a private folder for the CUBIN nvdisasm reads, removed when it "
                                                  "returns (the file goes through the helper)",
    ("reference_sandbox.py", "tempfile.mkdtemp"): "the sandboxed reference child's private folder, its only writable "
                                                  "place, removed when the child ends (SandboxedChild.cleanup)",
    ("reference_process.py", "tempfile.mkdtemp"): "the same private folder for the sandboxed child on Windows, where "
                                                  "it is started by multiprocessing",
    ("linux_sandbox.py", "os.open"): "an O_PATH descriptor of a folder Landlock's rule names (opens nothing for "
                                     "reading or writing)",
    ("linux_sandbox.py", "open(..., 'w')"): "the sandboxed child's own /proc/self/uid_map and gid_map (not a file "
                                            "on disk)",
    ("reads.py", "os.open"): "the one reader of input files opens them O_RDONLY (and O_NONBLOCK, so a FIFO is "
                             "refused instead of waited on); it writes nothing",
    ("reads.py", "os.fdopen"): "the same read-only descriptor, wrapped as a binary file object to read",
    ("nvrtc.py", "tempfile.TemporaryDirectory"): "a private folder NVRTC writes its time trace into (the headers "
                                                 "it opened, for the include allow-list), removed when it returns",
}

_MODULE_CALLS = {
    "os": {"replace", "rename", "renames", "mkdir", "makedirs", "link", "symlink", "fdopen", "truncate"},
    "shutil": {"copy", "copy2", "copyfile", "copytree", "move", "copyfileobj"},
    "json": {"dump"},
    "np": {"save", "savez", "savez_compressed", "savetxt"},
    "numpy": {"save", "savez", "savez_compressed", "savetxt"},
    "tempfile": {"mkstemp", "mkdtemp", "NamedTemporaryFile", "TemporaryDirectory", "TemporaryFile"},
    "sqlite3": {"connect"},
    "pickle": {"dump"},
}
_METHODS = {"mkdir", "touch", "savefig", "tofile", "symlink_to", "hardlink_to", "rename"}


def _open_mode(call: ast.Call) -> str | None:
    """The mode of an ``open(...)`` call when it is a constant (None: read-only default)."""
    mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
    if mode is None:
        return None
    return mode.value if isinstance(mode, ast.Constant) and isinstance(mode.value, str) else "?"


def direct_writes(source: str) -> list[tuple[int, str]]:
    """(line, call) of every call in ``source`` that writes a file or folder itself."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id == "open":
            mode = _open_mode(node)
            if mode is not None and set(mode) & set("wax+?"):
                out.append((node.lineno, f"open(..., {mode!r})"))
        elif isinstance(f, ast.Attribute):
            owner = f.value.id if isinstance(f.value, ast.Name) else None
            if owner in _MODULE_CALLS and f.attr in _MODULE_CALLS[owner]:
                out.append((node.lineno, f"{owner}.{f.attr}"))
            elif owner == "os" and f.attr == "open":
                out.append((node.lineno, "os.open"))
            elif f.attr in _METHODS and owner not in ("os", "shutil"):
                if f.attr == "savefig" and node.args and not _is_buffer(node.args[0]):
                    out.append((node.lineno, ".savefig(path)"))
                elif f.attr != "savefig":
                    out.append((node.lineno, f".{f.attr}"))
            elif f.attr in ("write_text", "write_bytes") and len(node.args) < 2:
                # Path.write_text(data) takes one argument; RunDir.write_text(name, text) and
                # writes.write_text(path, text) take two and go through the helper
                out.append((node.lineno, f".{f.attr}"))
            elif f.attr == "open" and _open_mode(node) and set(_open_mode(node)) & set("wax+?"):
                out.append((node.lineno, f".open(..., {_open_mode(node)!r})"))
    return out


def _is_buffer(arg: ast.expr) -> bool:
    return isinstance(arg, ast.Name) and arg.id in ("buf", "buffer", "out")


def test_no_module_writes_a_file_past_the_helper():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE))
        name = path.name
        for line, call in direct_writes(path.read_text(encoding="utf-8")):
            if (name, "*") in ALLOWED or (name, call) in ALLOWED:
                continue
            found.append(f"kernel_forge/{rel}:{line}: {call}")
    assert not found, ("write through kernel_forge.common.writes (write_file / write_files / make_dirs / RunDir), "
                       "or add the call to ALLOWED with the reason:\n" + "\n".join(found))


def test_the_scan_finds_each_kind_of_direct_write():
    src = "\n".join([
        "from pathlib import Path", "import os, json, shutil, numpy as np",
        "Path('a').write_text('x')", "Path('a').write_bytes(b'x')", "open('a', 'w')", "open('a', mode='ab')",
        "os.replace('a', 'b')", "shutil.copy('a', 'b')", "json.dump({}, f)", "np.save('a.npy', x)",
        "Path('d').mkdir()", "os.makedirs('d')", "fig.savefig('p.png')", "os.open('a', 1)",
        # not writes: reading, RunDir's and the helper's two-argument calls, a plot into a buffer
        "open('a')", "open('a', 'rb')", "run_dir.write_text('x.md', text)", "writes.write_text(p, text)",
        "fig.savefig(buf, format='png')", "'a'.replace('b', 'c')"])
    calls = [c for _, c in direct_writes(src)]
    assert calls == [".write_text", ".write_bytes", "open(..., 'w')", "open(..., 'ab')", "os.replace", "shutil.copy",
                     "json.dump", "np.save", ".mkdir", "os.makedirs", ".savefig(path)", "os.open"]


# ------------------------------------------------------------------------------ the helper

def test_a_write_replaces_the_file_whole_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "f.json"
    p.write_bytes(b"old")
    write_file(p, b"new")
    assert p.read_bytes() == b"new"
    assert [q.name for q in tmp_path.iterdir()] == ["f.json"]


def test_private_files_are_0600_in_0700_folders_and_shared_ones_get_the_usual_mode(tmp_path):
    old = os.umask(0o022)
    try:
        write_file(tmp_path / "ev" / "deep" / "x.json", b"{}")
        write_file(tmp_path / "shared" / "k.cu", b"//", private=False)
    finally:
        os.umask(old)
    assert (tmp_path / "ev").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "ev" / "deep").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "ev" / "deep" / "x.json").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "shared").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "shared" / "k.cu").stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("code, words", [(errno.ENOSPC, "No space left on device (ENOSPC)"),
                                         (errno.EROFS, "Read-only file system (EROFS)"),
                                         (errno.EACCES, "Permission denied (EACCES)"),
                                         (errno.EDQUOT, "(EDQUOT)")])
def test_a_refused_write_names_the_path_and_the_error_and_leaves_nothing(tmp_path, monkeypatch, code, words):
    target = tmp_path / "new" / "sub" / "k.cubin"
    monkeypatch.setattr(writes, "FS", FailingFS(code, after_bytes=3))
    with pytest.raises(WriteFailed) as err:
        write_file(target, b"0123456789")
    # a full disk fails the file; a read-only one already the first folder it had to create
    named = target if code in (errno.ENOSPC, errno.EDQUOT) else tmp_path / "new"
    assert str(err.value).startswith(f"{named}: cannot write: ") and words in str(err.value)
    assert err.value.exit_code == 2
    assert list(tmp_path.iterdir()) == [], "the folders it created and its temporary file are gone"


def test_a_set_of_files_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    (tmp_path / "a").write_bytes(b"old a")
    fs = FailingFS(errno.ENOSPC, after_bytes=8)          # the second file does not fit
    monkeypatch.setattr(writes, "FS", fs)
    with pytest.raises(WriteFailed) as err:
        write_files([(tmp_path / "a", b"new a"), (tmp_path / "b", b"new b")])
    assert str(err.value).startswith(f"{tmp_path / 'b'}: cannot write")
    assert sorted(q.name for q in tmp_path.iterdir()) == ["a"] and (tmp_path / "a").read_bytes() == b"old a"


def test_a_folder_in_the_way_or_an_existing_file_without_overwrite_is_refused(tmp_path):
    (tmp_path / "p.png").mkdir()
    with pytest.raises(WriteFailed, match="p.png: cannot write: it is a folder"):
        write_file(tmp_path / "p.png", b"x")
    (tmp_path / "keep.txt").write_text("notes")
    with pytest.raises(InputError, match="keep.txt: already exists; nothing was written"):
        write_file(tmp_path / "keep.txt", b"x", overwrite=False)
    assert (tmp_path / "keep.txt").read_text() == "notes"
    (tmp_path / "file").write_text("")
    with pytest.raises(WriteFailed, match="file: cannot write: it is a file, not a folder"):
        write_file(tmp_path / "file" / "x", b"x")


# ------------------------------------------------------------------------------ appending

def test_an_append_adds_to_the_end_of_a_private_file_and_says_how_much(tmp_path):
    p = tmp_path / "log.jsonl"
    assert append_file(p, b"one\n") == 4 and append_file(p, b"two\n") == 4
    assert p.read_bytes() == b"one\ntwo\n" and p.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_an_append_the_disk_cannot_hold_is_cut_back_so_the_file_stays_whole(tmp_path, monkeypatch, code):
    p = tmp_path / "log.jsonl"
    p.write_bytes(b'{"a": 1}\n')
    monkeypatch.setattr(writes, "FS", FailingFS(code, after_bytes=5))     # 5 bytes of the line fit
    with pytest.raises(WriteFailed) as err:
        append_file(p, b'{"a": 2}\n')
    assert str(err.value).startswith(f"{p}: cannot write: ") and err.value.exit_code == 2
    assert p.read_bytes() == b'{"a": 1}\n', "no partial line is left for the next append to continue"


def test_an_append_on_a_read_only_disk_names_the_file_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(writes, "FS", FailingFS(errno.EROFS))
    with pytest.raises(WriteFailed, match="Read-only file system"):
        append_file(tmp_path / "log.jsonl", b"x\n")
    assert list(tmp_path.iterdir()) == []


def test_remove_file_removes_a_file_and_refuses_a_folder(tmp_path):
    (tmp_path / "f").write_text("x")
    assert remove_file(tmp_path / "f") is True and not (tmp_path / "f").exists()
    assert remove_file(tmp_path / "f") is False
    (tmp_path / "d").mkdir()
    with pytest.raises(WriteFailed, match="it is a folder"):
        remove_file(tmp_path / "d")
