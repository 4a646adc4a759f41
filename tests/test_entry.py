"""Tests of kernel_forge/entry.py: the kforge entry point, and Ctrl-C at any moment."""
from __future__ import annotations

import io
import os
import signal
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import click
import pytest

from kernel_forge import __version__

from tests.support.task_folders import make_task

ROOT = Path(__file__).resolve().parents[1]



@pytest.fixture
def entry(monkeypatch):
    """kernel_forge.entry in this process, as before main runs; the SIGINT handler it installs (on import,
    and main's SIG_IGN) is put back afterwards."""
    before = signal.getsignal(signal.SIGINT)
    from kernel_forge import entry as module
    monkeypatch.setattr(module, "_state", "loaded")
    yield module
    signal.signal(signal.SIGINT, before)


@pytest.fixture
def command(monkeypatch):
    """Make the CLI's main do what a test says instead of running a command."""
    from kernel_forge.app.cli import cli

    def use(effect):
        def main(*args, **kwargs):
            raise effect
        monkeypatch.setattr(cli, "main", main)
    return use


def test_ctrl_c_while_kforge_starts_is_interrupted_not_a_traceback(tmp_path):
    """SIGINT at any moment after Python is up (the first 0.4 s are the CLI's imports): exit 130
    and 'kforge: interrupted', never a traceback or click's 'Aborted!'."""
    import signal
    import subprocess
    import sys

    if not hasattr(signal, "SIGINT") or os.name == "nt":
        pytest.skip("POSIX signals")
    m = make_task(tmp_path / "task")
    # "up" once kforge's entry point is loaded (two small modules): from there on, Ctrl-C is kforge's to handle
    code = "import sys; from kernel_forge.entry import main; sys.stdout.write('up\\n'); sys.stdout.flush(); main()"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    for delay in (0.0, 0.05, 0.1, 0.2, 0.3, 0.4):
        p = subprocess.Popen([sys.executable, "-c", code, "validate", "--no-compile", str(m)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        assert p.stdout.readline() == "up\n"
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
        if p.returncode == 0:
            continue                                   # it finished before the signal came
        assert p.returncode == 130, (delay, p.returncode, err)
        assert "Traceback" not in err and "Aborted" not in err and err.strip().endswith("kforge: interrupted"), err


def test_ctrl_c_while_kforge_exits_changes_nothing_and_prints_no_traceback(tmp_path):
    """Issue 31: once the command's status is decided, a Ctrl-C in Python's teardown (here: sent from
    the last exit handler, as a late Ctrl-C lands) is ignored: before, it raised in the exit handler
    (a traceback) or, once Python had reset its handler, killed kforge by the signal (exit -2, no
    message)."""
    import signal
    import subprocess
    import sys

    if not hasattr(signal, "SIGINT") or os.name == "nt":
        pytest.skip("POSIX signals")
    m = make_task(tmp_path / "task")
    code = ("import atexit, signal, sys, time\n"
            "from kernel_forge.entry import main\n"
            "def late():\n"
            "    signal.raise_signal(signal.SIGINT)\n"
            "    time.sleep(0.05)\n"
            "    sys.stdout.write('after\\n')\n"
            "atexit.register(late)\n"
            "main()\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    for args in (["validate", "--no-compile", str(m)], ["validate", "--no-compile", str(tmp_path / "missing.json")]):
        p = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        want = 0 if args[-1] == str(m) else 2
        assert p.returncode == want, (args, p.returncode, p.stderr)
        assert "Traceback" not in p.stderr and "interrupted" not in p.stderr and p.stdout.endswith("after\n"), p.stderr


def test_a_command_s_status_comes_back_and_click_s_own_errors_are_shown(entry, capsys):
    assert entry._run(["--version"]) == 0
    assert capsys.readouterr().out == f"kforge, version {__version__}\n"
    assert entry._run(["no-such-command"]) == 2
    assert "No such command 'no-such-command'" in capsys.readouterr().err


@pytest.mark.parametrize("raised", [KeyboardInterrupt(), click.exceptions.Abort()], ids=["interrupt", "abort"])
def test_an_interrupt_in_a_command_is_exit_130_with_one_line(entry, command, capsys, raised):
    command(raised)
    assert entry._run(["validate", "x.json"]) == 130
    assert capsys.readouterr().err == "kforge: interrupted\n"


def test_an_error_caused_by_an_interrupt_is_one_and_any_other_error_is_left_to_propagate(entry, command, capsys):
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt as ki:
        wrapped = RuntimeError("Error calling __set_name__")
        wrapped.__cause__ = ki
    command(wrapped)
    assert entry._run([]) == 130 and capsys.readouterr().err == "kforge: interrupted\n"
    command(RuntimeError("a bug"))
    with pytest.raises(RuntimeError, match="a bug"):
        entry._run([])


def test_a_reader_that_left_the_pipe_is_exit_141_and_nothing_more_is_written_to_it(entry, command, monkeypatch):
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    command(BrokenPipeError())
    assert entry._run(["archive", "list"]) == 141
    assert sys.stdout.name == os.devnull
    sys.stdout.close()


def test_main_exits_with_the_command_s_status_and_then_ignores_ctrl_c(entry, command):
    command(click.exceptions.Exit(3))
    with pytest.raises(SystemExit) as out:
        entry.main(["doctor"])
    assert out.value.code == 3
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_ctrl_c_before_main_ends_the_process_with_130_and_while_main_runs_raises(entry, monkeypatch, capsys):
    exits = []
    monkeypatch.setattr(entry, "os", SimpleNamespace(_exit=exits.append))
    entry._on_sigint(signal.SIGINT, None)
    assert exits == [130] and capsys.readouterr().err == "kforge: interrupted\n"
    monkeypatch.setattr(entry, "_state", "running")
    with pytest.raises(KeyboardInterrupt):
        entry._on_sigint(signal.SIGINT, None)
    assert exits == [130]


def test_the_handler_replaces_only_python_s_default_one(entry):
    signal.signal(signal.SIGINT, signal.SIG_IGN)              # a shell started kforge in the background
    entry._install()
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    signal.signal(signal.SIGINT, signal.default_int_handler)
    entry._install()
    assert signal.getsignal(signal.SIGINT) is entry._on_sigint
