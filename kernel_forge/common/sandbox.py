"""The sandbox model-written Python runs in (a generated task's reference), in layers.

Always, on every platform, the process starts from a **scrubbed environment** (an allow-list:
no API key, no token, no ``PYTHONPATH``; :func:`scrubbed_env`) in a **private temporary folder**
that is its working folder, its ``HOME`` and its ``TMPDIR``.  Where Python has :mod:`resource`
(Linux, macOS) it also gets **limits**: CPU seconds, address space, file size, no core file,
no new process (``RLIMIT_NPROC`` 0: not enforced for root).  On Linux, where the kernel permits:

* **namespaces** -- new user, network and mount namespaces (:func:`enter_namespaces`, first,
  while the process has one thread): no network at all, not even loopback;
* **Landlock** -- read-only access to the interpreter, the standard library, site-packages,
  kernel_forge, the system's libraries and the reference's own file; the private folder is the
  only place it may write; nothing may be executed; no TCP; no signal out of the sandbox;
* **seccomp** -- no execve, fork or non-thread clone, no socket, no ptrace, no io_uring.

Each layer is optional: one the kernel refuses is reported as off, with why
(:class:`Layer`), and the others still hold.  On Windows only the environment and the folder
apply, and the report says so.
"""
from __future__ import annotations

import os
import signal
import site
import sys
import sysconfig
from dataclasses import dataclass

#: environment variables passed through as they are (none holds a secret)
ENV_KEEP = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "SYSTEMROOT", "WINDIR", "PATHEXT")
#: variables set in the sandbox: one BLAS thread (no thread pool to start), no bytecode written
ENV_SET = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1"}
#: system folders of shared libraries a NumPy import may open
SYSTEM_READ = ("/usr/lib", "/usr/lib64", "/usr/local/lib", "/lib", "/lib64", "/etc/ld.so.cache",
               "/usr/share/zoneinfo")


@dataclass(frozen=True)
class Limits:
    """Resource limits of the sandboxed process (its whole life: it serves many calls)."""

    cpu_s: int = 3600                 #: CPU seconds (the manifest's time limit bounds each call's wall time)
    address_space: int = 32 << 30     #: bytes of virtual memory
    file_size: int = 64 << 20         #: bytes of the largest file it may write (in its private folder)
    processes: int = 0                #: processes it may start (RLIMIT_NPROC)


@dataclass(frozen=True)
class Layer:
    """One layer of the sandbox: whether it holds, and what it set or why it is off."""

    name: str
    active: bool
    detail: str

    def describe(self) -> str:
        return f"{self.name} ({self.detail})" if self.active else f"{self.name} off: {self.detail}"


def scrubbed_env(folder: str) -> dict[str, str]:
    """The sandbox's whole environment: :data:`ENV_KEEP` as it is, :data:`ENV_SET`, a minimal
    ``PATH``, and ``folder`` as ``HOME``, ``TMPDIR`` (``TEMP``/``TMP`` on Windows)."""
    env = {k: os.environ[k] for k in ENV_KEEP if k in os.environ}
    env.update(ENV_SET)
    env.update(PATH=os.defpath, HOME=folder, TMPDIR=folder, TEMP=folder, TMP=folder)
    return env


def read_paths(*extra: str) -> list[str]:
    """What the sandbox may read (Landlock): the interpreter's prefixes, the standard library,
    site-packages, kernel_forge and NumPy, the system's libraries, and ``extra``."""
    import kernel_forge

    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable)),
             os.path.dirname(os.path.abspath(kernel_forge.__file__)), *SYSTEM_READ, *extra}
    paths.update(v for k, v in sysconfig.get_paths().items() if k in ("stdlib", "platstdlib", "purelib", "platlib"))
    try:
        paths.update(site.getsitepackages())
    except AttributeError:          # an old virtualenv's site module
        pass
    numpy = sys.modules.get("numpy")
    if numpy is not None and getattr(numpy, "__file__", None):
        paths.add(os.path.dirname(os.path.dirname(os.path.abspath(numpy.__file__))))
    return sorted(p for p in paths if p)


def enter_namespaces() -> Layer:
    """The namespaces layer (Linux); call while the process has a single thread."""
    from kernel_forge.common import linux_sandbox as ls
    try:
        return Layer("namespaces", True, ls.unshare_namespaces() + ", no network")
    except (ls.Refused, OSError) as exc:
        return Layer("namespaces", False, str(exc))


def set_limits(limits: Limits) -> Layer:
    """The resource limits (where Python has :mod:`resource`)."""
    try:
        import resource
    except ImportError:
        return Layer("limits", False, f"no resource limits on {sys.platform}")
    wanted = [("RLIMIT_CPU", limits.cpu_s, f"{limits.cpu_s} CPU s"),
              ("RLIMIT_AS", limits.address_space, f"{limits.address_space >> 30} GiB address space"),
              ("RLIMIT_FSIZE", limits.file_size, f"{limits.file_size >> 20} MiB files"),
              ("RLIMIT_CORE", 0, "no core file"),
              ("RLIMIT_NPROC", limits.processes, f"{limits.processes} new processes"
               + (" (not enforced for root)" if hasattr(os, "geteuid") and os.geteuid() == 0 else ""))]
    done, off = [], []
    if hasattr(signal, "SIGXFSZ"):     # a write past the file-size limit fails (EFBIG) instead of killing the process:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # its inherited stderr may be a log already past the limit
    for name, value, words in wanted:
        kind = getattr(resource, name, None)
        if kind is None:
            off.append(name)
            continue
        try:
            _soft, hard = resource.getrlimit(kind)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(kind, (value, value))
            done.append(words)
        except (OSError, ValueError):
            off.append(name)
    return Layer("limits", bool(done), ", ".join(done) + (f"; refused: {', '.join(off)}" if off else ""))


def confine(folder: str, readable: list[str], limits: Limits) -> list[Layer]:
    """Landlock, the limits and seccomp, in that order (Linux; elsewhere the limits only)."""
    from kernel_forge.common import linux_sandbox as ls
    layers = []
    if sys.platform.startswith("linux"):
        try:
            layers.append(Layer("landlock", True, ls.landlock(read_paths(*readable), [folder])
                                + f"; writes only in {folder}"))
        except (ls.Refused, OSError) as exc:
            layers.append(Layer("landlock", False, str(exc)))
    layers.append(set_limits(limits))
    if sys.platform.startswith("linux"):
        try:
            layers.append(Layer("seccomp", True, ls.seccomp_filter()))
        except (ls.Refused, OSError) as exc:
            layers.append(Layer("seccomp", False, str(exc)))
    else:
        layers.append(Layer("namespaces, landlock, seccomp", False, f"Linux only (this is {sys.platform})"))
    return layers


def summary(layers: list[Layer]) -> str:
    """One line: which layers hold, which are off and why."""
    on = [x.describe() for x in layers if x.active]
    off = [x.describe() for x in layers if not x.active]
    return "sandbox: " + "; ".join(on) + (" | " + "; ".join(off) if off else "")
