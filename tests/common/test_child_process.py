"""Starting a child kforge talks to: a Ctrl-C during the start is held back until it is done."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from kernel_forge.common.child_process import start_child


class _SlowStart:
    """A process whose start is interrupted by a Ctrl-C half-way."""

    finished = False

    def start(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)                  # the interrupt would be raised here, mid-start
        self.finished = True


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
