"""Every file kforge writes goes through here.

A file is written to a temporary file in its target folder, flushed to disk (``fsync``) and
renamed over the target, so a kill, a full disk or a read-only filesystem leaves the old file
or the new one, never half of one, and never an empty one.  Folders that a write has to create
are created with the right mode (0700 for private evidence, the usual mode for files a user
shares) and removed again when the write fails, so a failed command leaves nothing behind.
:func:`write_files` stages several files before it renames any, so a set of files that belong
together (``init``'s three, ``approve``'s copy and approvals file) is written whole or not at all.
:func:`append_file` adds bytes to the end of a file kforge keeps growing (a run's attempt log), flushed
to disk before it returns; an append that fails is cut off again, so a complete file stays complete.

A write that the operating system refuses (``ENOSPC``, ``EROFS``, ``EACCES``, ``EDQUOT``, ...)
is a :class:`WriteFailed` (exit 2) that names the path and the error in words.
"""
from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from kernel_forge.common.errors import InputError

#: modes of evidence: readable by its owner only (prompts, API responses and source are private)
FILE_MODE = 0o600
DIR_MODE = 0o700


def _read_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()   # read once, at import: os.umask cannot be read without setting it


class WriteFailed(InputError):
    """A file or folder could not be written: the path and the operating system's reason."""

    def __init__(self, path: str | Path, exc: OSError | str, *, hint: str | None = None):
        self.path = Path(path)
        self.errno = exc.errno if isinstance(exc, OSError) else None
        why = describe_oserror(exc) if isinstance(exc, OSError) else exc
        if hint is None and self.errno in (errno.ENOSPC, errno.EDQUOT):
            hint = "free some space (or write somewhere else); nothing was left half-written"
        elif hint is None and self.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            hint = "write to a folder you can write to; nothing was changed"
        super().__init__(f"{self.path}: cannot write: {why}", hint=hint)


def describe_oserror(exc: OSError) -> str:
    """``No space left on device (ENOSPC)``: the error in words, then its name."""
    code = errno.errorcode.get(exc.errno or 0)
    words = exc.strerror or (os.strerror(exc.errno) if exc.errno else str(exc))
    return f"{words} ({code})" if code else words


class _OS:
    """The system calls a write makes.  Tests replace :data:`FS` with a double that fails the way a
    full or read-only filesystem does (``tests/support/fs_double.py``)."""

    def mkstemp(self, folder: Path, prefix: str) -> tuple[int, str]:
        return tempfile.mkstemp(dir=folder, prefix=prefix)

    def write(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def replace(self, src: str, dst: Path) -> None:
        os.replace(src, dst)

    def mkdir(self, path: Path, mode: int) -> None:
        os.mkdir(path, mode)

    def open_append(self, path: Path, mode: int) -> int:
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_BINARY", 0), mode)

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def unlink(self, path: Path) -> None:
        os.unlink(path)


FS = _OS()


def make_dirs(folder: str | Path, *, private: bool = True) -> list[Path]:
    """Create ``folder`` and any missing parents (0700 when ``private``, else the usual mode);
    return the folders created, outermost first, for :func:`remove_dirs` to undo."""
    folder = Path(folder)
    missing: list[Path] = []
    p = folder
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    if p.exists() and not p.is_dir():
        raise WriteFailed(p, "it is a file, not a folder")
    created: list[Path] = []
    try:
        for d in reversed(missing):
            try:
                FS.mkdir(d, DIR_MODE if private else 0o777)
            except FileExistsError:
                if not d.is_dir():
                    raise WriteFailed(d, "it is a file, not a folder") from None
                continue
            created.append(d)
            if private:
                os.chmod(d, DIR_MODE)     # the umask may have taken bits off; never added any
    except OSError as exc:
        remove_dirs(created)
        raise WriteFailed(d, exc) from None
    except WriteFailed:
        remove_dirs(created)
        raise
    return created


def new_dir(path: str | Path, *, private: bool = True) -> Path:
    """Create exactly one folder (its parent must exist); FileExistsError when it exists already
    (so callers can pick the next free name), :class:`WriteFailed` when it cannot be created."""
    path = Path(path)
    try:
        FS.mkdir(path, DIR_MODE if private else 0o777)
    except FileExistsError:
        raise
    except OSError as exc:
        raise WriteFailed(path, exc) from None
    if private:
        os.chmod(path, DIR_MODE)
    return path


def remove_dirs(created: list[Path]) -> None:
    """Remove folders :func:`make_dirs` created (innermost first), where they are still empty."""
    for d in reversed(created):
        try:
            os.rmdir(d)
        except OSError:
            pass


def _check_target(path: Path, overwrite: bool, force_hint: str | None) -> None:
    if path.is_dir():
        raise WriteFailed(path, "it is a folder, not a file", hint="remove it or choose another path")
    if not overwrite and (path.exists() or path.is_symlink()):
        raise InputError(f"{path}: already exists; nothing was written",
                         hint=force_hint or "remove it, or pass --force to overwrite it")


def _stage(path: Path, data: bytes, private: bool) -> str:
    """A temporary file beside ``path`` holding ``data``, on disk; removed again if anything fails."""
    try:
        fd, tmp = FS.mkstemp(path.parent, f".{path.name}.")
    except OSError as exc:
        raise WriteFailed(path, exc) from None
    try:
        try:
            os.chmod(tmp, FILE_MODE if private else 0o666 & ~_UMASK)
            FS.write(fd, data)
            FS.fsync(fd)
        finally:
            os.close(fd)
    except BaseException as exc:
        _unlink(tmp)
        if isinstance(exc, OSError):
            raise WriteFailed(path, exc) from None
        raise
    return tmp


def _unlink(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass


def _sync_folder(folder: Path) -> None:
    """Make a rename durable (POSIX); where a folder cannot be opened (Windows), the rename is."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_files(items: list[tuple[str | Path, bytes]], *, private: bool = True, overwrite: bool = True,
                force_hint: str | None = None) -> list[Path]:
    """Write every ``(path, data)`` or none: each file is staged beside its target first, and
    only when all are on disk are they renamed into place.  ``private`` files are 0600 in 0700
    folders; the others get the usual modes (0666 / 0777 less the umask).  Without ``overwrite``
    an existing target is refused (nothing is written).  Raises :class:`WriteFailed` naming the
    path that could not be written; folders created for it are removed again."""
    targets = [(Path(p), bytes(d)) for p, d in items]
    for path, _ in targets:
        _check_target(path, overwrite, force_hint)
    created: list[Path] = []
    staged: list[tuple[str, Path]] = []
    try:
        for path, data in targets:
            created += make_dirs(path.parent, private=private)
            staged.append((_stage(path, data, private), path))
        for tmp, path in staged:
            try:
                FS.replace(tmp, path)
            except OSError as exc:
                raise WriteFailed(path, exc) from None
    except BaseException:
        for tmp, _ in staged:
            _unlink(tmp)
        remove_dirs(created)
        raise
    for folder in dict.fromkeys(path.parent for _, path in staged):
        _sync_folder(folder)
    return [path for _, path in staged]


def check_within(folder: str | Path, paths, *, option: str = "--force") -> None:
    """Refuse, before anything is written, a target among ``paths`` that is a symbolic link (or
    lies under one) resolving outside ``folder``: replacing or removing it with ``option`` would
    reach what the user never handed over.  A link that stays inside ``folder`` is fine."""
    root = Path(os.path.realpath(folder))
    for p in map(Path, paths):
        if not (p.is_symlink() or p.exists()):
            continue
        real = Path(os.path.realpath(p))
        if real != root and root not in real.parents:
            raise InputError(f"{p}: a symbolic link to {real}, outside {folder}; {option} replaces files in that "
                             "folder only, so nothing was written", hint="remove the link, or choose another --dir")


def write_file(path: str | Path, data: bytes, *, private: bool = True, overwrite: bool = True,
               force_hint: str | None = None) -> Path:
    """Write one file atomically (see :func:`write_files`)."""
    return write_files([(path, data)], private=private, overwrite=overwrite, force_hint=force_hint)[0]


def write_text(path: str | Path, text: str, **kw) -> Path:
    return write_file(path, text.encode("utf-8"), **kw)


def append_file(path: str | Path, data: bytes) -> int:
    """Add ``data`` to the end of the private file ``path`` (created 0600 when absent; its folder
    must exist) and flush it to disk before returning the bytes written.  A write the operating
    system refuses part-way is cut back to the file's size before it, so the file holds all of
    ``data`` or none of it (only a hard kill mid-write leaves a partial tail, which the log's
    reader drops); :class:`WriteFailed` names the path."""
    path = Path(path)
    if path.is_dir():
        raise WriteFailed(path, "it is a folder, not a file", hint="remove it or choose another path")
    new = not path.exists()
    try:
        fd = FS.open_append(path, FILE_MODE)
    except OSError as exc:
        raise WriteFailed(path, exc) from None
    try:
        size = os.fstat(fd).st_size
        if new:
            os.chmod(path, FILE_MODE)
        try:
            FS.write(fd, data)
            FS.fsync(fd)
        except BaseException as exc:         # a refused write, or Ctrl-C between two partial writes
            try:
                FS.truncate(fd, size)
                FS.fsync(fd)
            except OSError:
                pass
            if isinstance(exc, OSError):
                raise WriteFailed(path, exc) from None
            raise
    finally:
        os.close(fd)
    if new:
        _sync_folder(path.parent)
    return len(data)


def remove_file(path: str | Path) -> bool:
    """Remove the file ``path`` (a folder's name is refused); False when it was not there."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        raise WriteFailed(path, "it is a folder, not a file")
    try:
        FS.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise WriteFailed(path, exc, hint="remove it by hand") from None
    _sync_folder(path.parent)
    return True


__all__ = ["WriteFailed", "check_within", "write_file", "write_files", "write_text", "append_file", "remove_file",
           "make_dirs", "remove_dirs",
           "describe_oserror", "FILE_MODE", "DIR_MODE"]
