"""The gate's worker starts from any kind of main program an embedder runs kforge from.

``spawn`` re-runs the parent's ``__main__`` in every child unless told otherwise; the worker needs
nothing from it.  Each case below runs a small program that starts the gate's Worker: on a machine
with a GPU it starts, without one it answers that there is no GPU.  Either way the worker itself
ran: it must never die while starting (``the worker exited (code 1) while starting the GPU
worker``), which is what a script read from stdin did on the H200 (FileNotFoundError for
``<stdin>``, bench/evidence/h200-2026-12-02-s6).
"""
from __future__ import annotations

import os
import subprocess
import sys

from tests.support.paths import ROOT

# kernel_forge comes from this checkout: _run puts it on PYTHONPATH
PROGRAM = f"""
from kernel_forge.common.errors import EnvironmentProblem
from kernel_forge.gate.worker import Worker
try:
    w = Worker({str(ROOT / "manifests" / "vector_add.json")!r}, start_timeout=120)
except EnvironmentProblem as exc:
    print("ANSWERED: no GPU:", exc)
except Exception as exc:
    print("FAILED:", type(exc).__name__, exc)
else:
    print("ANSWERED: started on", w.device["name"])
    w.close()
"""


def _run(args, **kw) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env, cwd=str(ROOT), **kw)
    return proc.stdout + proc.stderr


def _check(out: str) -> None:
    assert "ANSWERED:" in out and "FAILED" not in out, out
    assert "FileNotFoundError" not in out and "bootstrapping phase" not in out, out


def test_a_program_read_from_stdin_starts_the_worker():
    _check(_run([sys.executable, "-"], input=PROGRAM))


def test_a_main_script_without_a_main_guard_starts_the_worker(tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(PROGRAM)          # top-level code, no `if __name__ == "__main__":`
    _check(_run([sys.executable, str(script)]))


def test_a_python_c_program_starts_the_worker():
    _check(_run([sys.executable, "-c", PROGRAM]))


def test_the_main_module_is_put_back_after_the_worker_started():
    out = _run([sys.executable, "-"], input=PROGRAM + "\nimport __main__\nprint('MAIN', __main__.__file__, __main__.__spec__)\n")
    _check(out)
    assert "MAIN <stdin> None" in out, out


def test_a_plain_spawned_process_started_from_stdin_dies_the_trap_guarded_here():
    """The trap itself, with a plain spawned process: what the tests above would meet without
    worker.start_without_main."""
    prog = ("import multiprocessing as mp\n"
            "def f():\n    pass\n"
            "if __name__ == '__main__':\n"
            "    p = mp.get_context('spawn').Process(target=print)\n    p.start(); p.join()\n"
            "    print('EXIT', p.exitcode)\n")
    out = _run([sys.executable, "-"], input=prog)
    assert "EXIT 1" in out and "<stdin>" in out, out
