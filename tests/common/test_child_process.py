"""Starting a child kforge talks to: a Ctrl-C during the start is held back until it is done."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kernel_forge.common.child_process import start_child


class _SlowStart:
    """A process whose start is interrupted by a Ctrl-C half-way."""

    finished = False

    def start(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)                  # the interrupt would be raised here, mid-start
        self.finished = True


@pytest.fixture(autouse=True)
def python_sigint():
    """Python's own Ctrl-C handler for the test, whatever the suite was started with: a shell
    without job control starts a background job with SIGINT ignored, and Python then keeps it
    ignored (how CI's `.ci/run` failed these tests when it was started with `&`)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signal masks")
def test_a_ctrl_c_during_the_start_of_a_child_is_raised_once_it_has_started():
    proc = _SlowStart()
    with pytest.raises(KeyboardInterrupt):
        start_child(proc)
    assert proc.finished
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())   # the mask is as before


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signal masks")
def test_the_ctrl_c_is_held_back_while_other_threads_could_take_the_signal():
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)     # a thread that does not block SIGINT
    other.start()
    try:
        proc = _SlowStart()
        with pytest.raises(KeyboardInterrupt):
            start_child(proc)
        assert proc.finished
    finally:
        stop.set()
        other.join()


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signal masks")
def test_a_ctrl_c_that_the_process_ignores_stays_ignored():
    signal.signal(signal.SIGINT, signal.SIG_IGN)        # as under `nohup kforge ... &`
    proc = _SlowStart()
    start_child(proc)                                   # nothing raised
    assert proc.finished and signal.getsignal(signal.SIGINT) == signal.SIG_IGN


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signal masks")
def test_a_ctrl_c_with_the_default_action_ends_the_process_once_the_child_has_started(tmp_path):
    """SIGINT at its default action (no Python handler): the held Ctrl-C ends the process as it
    would have, after the start finished."""
    marker = tmp_path / "started"
    script = (
        "import os, signal, time, sys\n"
        "from kernel_forge.common.child_process import start_child\n"
        "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
        "class P:\n"
        "    def start(self):\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(0.05)\n"
        f"        open({str(marker)!r}, 'w').write('done')\n"
        "start_child(P())\n"
        "print('survived')\n")
    root = Path(__file__).resolve().parents[2]
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=str(root)))
    assert res.returncode == -signal.SIGINT, (res.returncode, res.stdout, res.stderr)
    assert marker.read_text() == "done" and "survived" not in res.stdout
