"""Starting and stopping a child process that kforge talks to over a pipe (the gate's worker, the
reference's process): stopped by being asked to exit first, then terminated, then killed; the
pipe closed in every case."""
from __future__ import annotations

import signal
import threading


def start_child(proc) -> None:
    """``proc.start()`` with Ctrl-C held back until the child has been handed what it starts from.

    An interrupt in the middle of ``start`` leaves a spawned child reading half its start-up
    data, and its traceback on the user's terminal; held back, it is raised here once ``start``
    returned, and the caller stops the child as usual.  The child starts with SIGINT blocked (the
    signal mask is inherited), so a Ctrl-C sent to the whole process group cannot interrupt its
    start either: use it for a child that leaves Ctrl-C to its parent."""
    if not hasattr(signal, "pthread_sigmask"):          # Windows: no signal masks
        proc.start()
        return
    main = threading.current_thread() is threading.main_thread()   # Python runs handlers only there
    held: list = []
    previous = signal.signal(signal.SIGINT, lambda *a: held.append(a)) if main else None
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        proc.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        if main:
            signal.signal(signal.SIGINT, previous)
    if held and callable(previous):
        previous(signal.SIGINT, None)                    # the default handler raises KeyboardInterrupt
    elif held and previous == signal.SIG_DFL:
        signal.raise_signal(signal.SIGINT)               # what the Ctrl-C would have done: end the process
    # SIG_IGN (a process started in the background by a shell without job control): it stays ignored


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
