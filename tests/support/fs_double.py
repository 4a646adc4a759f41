"""A filesystem double for :mod:`kernel_forge.common.writes`: the system calls of a write fail the way a
full (``ENOSPC``) or read-only (``EROFS``) filesystem makes them fail, where no small tmpfs can be
mounted (CI without user namespaces).  Install it with ``monkeypatch.setattr(writes, "FS", ...)``."""
from __future__ import annotations

import errno
import os

from kernel_forge.common.writes import _OS


class FailingFS(_OS):
    """Writes fail with ``code`` once ``after_bytes`` bytes were written in all (a full disk keeps
    what fitted before, then refuses); with ``EROFS``/``EACCES`` nothing can be created at all."""

    def __init__(self, code: int = errno.ENOSPC, after_bytes: int = 0):
        self.code, self.left = code, after_bytes

    def _fail(self):
        raise OSError(self.code, os.strerror(self.code))

    def mkstemp(self, folder, prefix):
        if self.code in (errno.EROFS, errno.EACCES, errno.EPERM):
            self._fail()
        return super().mkstemp(folder, prefix)

    def mkdir(self, path, mode):
        if self.code in (errno.EROFS, errno.EACCES, errno.EPERM):
            self._fail()
        super().mkdir(path, mode)

    def open_append(self, path, mode):
        if self.code in (errno.EROFS, errno.EACCES, errno.EPERM):
            self._fail()
        return super().open_append(path, mode)

    def unlink(self, path):
        if self.code in (errno.EROFS, errno.EACCES, errno.EPERM):
            self._fail()
        super().unlink(path)

    def write(self, fd, data):
        if len(data) > self.left:
            os.write(fd, data[:self.left])      # what fitted, as a real full disk leaves it
            self.left = 0
            self._fail()
        self.left -= len(data)
        super().write(fd, data)
