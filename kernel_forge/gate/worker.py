"""The parent's side of the gate's worker process: start it (``spawn``, without re-running the
parent's ``__main__``), send it a request and wait for its answer within the time each part of a
run is allowed, and stop it.  An answer that never comes, a worker that died or a reported
:class:`~kernel_forge.model.worker_protocol.Failure` is a :class:`WorkerError`.
"""
from __future__ import annotations

import multiprocessing as mp
import sys
import threading
from pathlib import Path

from kernel_forge.common.child_process import stop_child
from kernel_forge.common.errors import EnvironmentProblem, KForgeError
from kernel_forge.model.worker_protocol import ERROR, EXIT, EXPECTED, FATAL, NEED, OK, PROGRESS, Expected, Failure, Ready

__all__ = ["Worker", "WorkerError", "start_without_main"]


_START_LOCK = threading.Lock()


def start_without_main(proc) -> None:
    """``proc.start()`` for a spawned process that needs nothing from the parent's ``__main__``.

    ``spawn`` re-runs the parent's main script (or main module) in the child before the target,
    so that pickled objects defined there resolve.  The gate's worker needs none of it, and
    re-running it breaks in three ways a user embedding kforge meets: a script read from stdin
    (``python - <<EOF``: the child looks for a file named ``<stdin>`` and dies with
    FileNotFoundError), a main script without an ``if __name__ == "__main__":`` guard (the child
    starts a worker of its own while bootstrapping, and dies), and a slow or side-effecting main
    module (run again in every worker).  So ``__main__``'s ``__file__`` and ``__spec__`` are
    hidden while the process starts (spawn reads them only then), under a lock, and put back."""
    main = sys.modules.get("__main__")
    if main is None:
        proc.start()
        return
    with _START_LOCK:
        saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if k in main.__dict__}
        try:
            main.__dict__.pop("__file__", None)
            main.__dict__["__spec__"] = None
            proc.start()
        finally:
            main.__dict__.pop("__spec__", None)
            main.__dict__.update(saved)


class WorkerError(Exception):
    """No usable answer from the worker: it hung, died, or reported a :class:`Failure`."""

    def __init__(self, reason: str, message: str, code: str = "", sticky: bool = False,
                 failure: Failure | None = None):
        super().__init__(message)
        self.reason, self.message, self.code, self.sticky = reason, message, code, sticky
        self.failure = failure

    @classmethod
    def of(cls, failure: Failure) -> "WorkerError":
        from kernel_forge.gate.checks import failure_finding   # the reason table's reading of a failure

        found = failure_finding(failure)
        return cls(found.reason, found.message, failure.code, failure.sticky, failure)


class Worker:
    """A spawned worker process running :func:`kernel_forge.gpu.runner.worker_main`."""

    def __init__(self, task_path: Path, device: int = 0, start_timeout: float = 120.0, resident_bytes: int = 0):
        from kernel_forge.gpu.runner import worker_main

        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker_main, args=(child, str(task_path), device, resident_bytes),
                                daemon=True)
        start_without_main(self.proc)
        child.close()
        kind, payload = self._recv(start_timeout, "starting the GPU worker")
        if kind == FATAL:
            self.close()
            if payload.get("exit_code") == 3 or payload["type"] in ("NoGPUError", "EnvironmentProblem"):
                raise EnvironmentProblem(payload["message"])
            raise KForgeError(f"the GPU worker could not start: {payload['type']}: {payload['message']}")
        ready: Ready = payload
        self.device = ready.device
        self.pid = ready.pid
        self.clock = ready.clock
        self.resident_bytes = ready.resident_bytes
        self.clock_offset = ready.clock_offset
        self.flush = getattr(ready, "flush", "")

    def _recv(self, timeout: float, what: str):
        if not self.conn.poll(timeout):
            raise WorkerError("timeout", f"no answer after {timeout:.1f} s while {what}")
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            self.proc.join(1)
            raise WorkerError("worker_died", f"the worker exited (code {self.proc.exitcode}) while {what}") from None

    @property
    def alive(self) -> bool:
        return self.proc.is_alive()

    def request(self, op: str, payload, *, first_timeout: float, rest_timeout: float, what: str,
                launch_timeout: float | None = None, on_need=None):
        """Send a request and wait for its answer: ``first_timeout`` for the set-up (inputs, upload,
        module load), ``launch_timeout`` once the worker says the first checked launch started, then
        ``rest_timeout`` (or 20x the first launch's time per remaining launch) for the rest.  A
        ``need`` for expected outputs is answered with ``on_need(need)``."""
        try:
            self.conn.send((op, payload))
        except (BrokenPipeError, OSError):
            raise WorkerError("worker_died", "the worker is gone") from None
        timeout = first_timeout
        while True:
            kind, body = self._recv(timeout, what)
            if kind == PROGRESS:
                if body.stage == "launch":      # the first checked launch starts now
                    timeout = launch_timeout if launch_timeout is not None else first_timeout
                else:                           # it finished: allow the rest its share
                    timeout = max(rest_timeout, 20 * body.first_launch_s * 150)
                continue
            if kind == NEED:
                answer = on_need(body) if on_need else Expected(body.case, body.seed, None)
                try:
                    self.conn.send((EXPECTED, answer))
                except (BrokenPipeError, OSError):
                    raise WorkerError("worker_died", "the worker is gone") from None
                continue
            if kind == OK:
                return body
            if kind == ERROR:
                raise WorkerError.of(body)
            raise WorkerError("harness_error", f"unexpected answer {kind!r} while {what}")

    def close(self, kill: bool = False) -> None:
        stop_child(self.proc, self.conn, (EXIT, None), kill=kill)
