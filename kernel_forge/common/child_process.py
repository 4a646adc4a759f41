"""Stopping a child process that kforge talks to over a pipe (the gate's worker, the reference's
process): asked to exit first, then terminated, then killed; the pipe closed in every case."""
from __future__ import annotations


def stop_child(proc, conn, goodbye, *, kill: bool = False, wait_s: float = 5.0) -> None:
    """Send ``goodbye`` and wait (unless ``kill``), then terminate and kill what is still alive."""
    if proc.is_alive() and not kill:
        try:
            conn.send(goodbye)
            proc.join(wait_s)
        except (BrokenPipeError, OSError):
            pass
    for stop in (proc.terminate, proc.kill):
        if proc.is_alive():
            stop()
            proc.join(wait_s)
    try:
        conn.close()
    except OSError:
        pass
