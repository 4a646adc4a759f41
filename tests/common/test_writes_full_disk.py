"""The full-disk and read-only rows of the bad-input table on a real filesystem: a small tmpfs,
mounted in a user namespace (``unshare -r -m``) where this machine allows one, filled to the
brim or remounted read-only.  Each command must exit 2 naming the path and the error, print no
traceback, and leave the filesystem as it found it (no partial, empty or temporary file, no
folder).  Where no tmpfs can be mounted these tests skip; the same rows run everywhere through the
filesystem double (``tests/support/fs_double.py``) in ``test_bad_input.py``."""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from tests.support.task_folders import HAS_NVRTC, finished_run, make_task

ROOT = Path(__file__).resolve().parents[2]
MARK = "=== after ==="


@lru_cache(maxsize=1)
def _tmpfs_allowed() -> bool:
    if os.name != "posix" or not shutil.which("unshare"):
        return False
    probe = Path(f"/tmp/kforge-tmpfs-probe-{os.getpid()}")
    probe.mkdir(exist_ok=True)
    try:
        r = subprocess.run(["unshare", "-r", "-m", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {probe}"],
                           capture_output=True, timeout=30)
        return r.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        probe.rmdir()


needs_tmpfs = pytest.mark.skipif("not _tmpfs_allowed()", reason="no tmpfs can be mounted here (user namespaces off)")


def on_tmpfs(mnt: Path, kforge_args: list[str], *, setup: str = "", read_only: bool = False, fill: bool = True,
             size: str = "64k"):
    """Mount a ``size`` tmpfs at ``mnt``, run ``setup`` (shell), fill it (or remount it read-only),
    list it, run kforge, list it again.  Returns (exit code, stderr, listing before, listing after)."""
    mnt.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    kforge = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "kernel_forge", *kforge_args])
    listing = f"find {shlex.quote(str(mnt))} -mindepth 1 -printf '%P %s %y\\n' | sort"
    script = "\n".join([
        f"mount -t tmpfs -o size={size} tmpfs {shlex.quote(str(mnt))} || exit 99",
        setup + " || exit 97" if setup else "",
        f"dd if=/dev/zero of={shlex.quote(str(mnt / 'fill'))} bs=1k count=8192 2>/dev/null" if fill else "",
        f"mount -o remount,ro {shlex.quote(str(mnt))} || exit 98" if read_only else "",
        listing,
        f"{kforge} >/dev/null 2>{shlex.quote(str(mnt.parent / 'stderr'))}; echo \"rc=$?\"",
        f"echo '{MARK}'",
        listing,
    ])
    r = subprocess.run(["unshare", "-r", "-m", "sh", "-c", script], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0 and MARK in r.stdout, (r.returncode, r.stdout, r.stderr)
    before, after = r.stdout.split(MARK)
    lines = before.rstrip("\n").split("\n")          # an empty tmpfs lists nothing before the rc line
    before, rc_line = "\n".join(lines[:-1]), lines[-1]
    return int(rc_line.split("=")[1]), (mnt.parent / "stderr").read_text(), before.strip(), after.strip()


def _check(rc, err, before, after, *words):
    assert rc == 2, err
    assert "Traceback" not in err and "internal error" not in err, err
    for w in words:
        assert w in err, (w, err)
    assert after == before, "the filesystem changed"


SAXPY = 'extern "C" __global__ void saxpy(const float* x, float* y, float a, int n)'


@needs_tmpfs
def test_init_on_a_full_tmpfs(tmp_path):
    mnt = tmp_path / "mnt"
    rc, err, before, after = on_tmpfs(mnt, ["init", "saxpy", "--signature", SAXPY, "--dir", str(mnt / "task")])
    _check(rc, err, before, after, str(mnt / "task"), "No space left on device (ENOSPC)")


@needs_tmpfs
def test_init_on_a_read_only_tmpfs(tmp_path):
    mnt = tmp_path / "mnt"
    rc, err, before, after = on_tmpfs(mnt, ["init", "saxpy", "--signature", SAXPY, "--dir", str(mnt / "task")],
                                      read_only=True, fill=False)
    _check(rc, err, before, after, str(mnt / "task"), "Read-only file system (EROFS)")


@needs_tmpfs
@pytest.mark.skipif(not HAS_NVRTC, reason="needs NVRTC")
def test_compile_o_on_a_full_tmpfs_leaves_no_partial_cubin(tmp_path):
    mnt = tmp_path / "mnt"
    rc, err, before, after = on_tmpfs(mnt, ["compile", str(ROOT / "manifests" / "matmul_f32.cu"), "--arch", "sm_90",
                                            "-o", str(mnt / "k.cubin")])
    _check(rc, err, before, after, str(mnt / "k.cubin"), "(ENOSPC)")


@needs_tmpfs
def test_report_and_approve_on_a_read_only_tmpfs(tmp_path):
    run = finished_run(tmp_path, make_task(tmp_path / "task"))
    (run / "report.md").unlink()
    mnt = tmp_path / "mnt"
    copy = f"cp -r {shlex.quote(str(run))} {shlex.quote(str(mnt / 'run-001'))}"
    rc, err, before, after = on_tmpfs(mnt, ["report", str(mnt / "run-001")], setup=copy, read_only=True, fill=False,
                                      size="8m")
    _check(rc, err, before, after, str(mnt / "run-001"), "(EROFS)")
    rc, err, before, after = on_tmpfs(mnt, ["approve", str(mnt / "run-001"), "--into", str(mnt / "approved.json"),
                                            "--copy-to", str(mnt / "approved")], setup=copy, read_only=True, fill=False,
                                      size="8m")
    _check(rc, err, before, after, str(mnt / "approved"), "(EROFS)")


@needs_tmpfs
def test_approve_on_a_full_tmpfs_leaves_no_empty_folder(tmp_path):
    run = finished_run(tmp_path, make_task(tmp_path / "task"))
    mnt = tmp_path / "mnt"
    rc, err, before, after = on_tmpfs(mnt, ["approve", str(run), "--into", str(mnt / "approved.json"),
                                            "--copy-to", str(mnt / "approved")])
    _check(rc, err, before, after, "(ENOSPC)")
