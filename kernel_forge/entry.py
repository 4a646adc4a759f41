"""The ``kforge`` entry point: light, so that Ctrl-C at any moment (even while the CLI is still
being imported) ends with "kforge: interrupted" and exit 130, never a traceback or click's
"Aborted!" with exit 1 (which CI would read as a failed gate).

Three moments, one outcome (issue 31):

* **Before** :func:`main` **runs** (the rest of the caller's line, the call itself): once this module's
  functions are defined, :func:`_on_sigint` takes the place of Python's handler, and until ``main`` starts it
  says "kforge: interrupted" and ends the process with 130 at once (nothing has started that would
  need stopping).  A KeyboardInterrupt there used to end in a traceback.
* **While** ``main`` **runs**: the handler raises KeyboardInterrupt, as Python's does, and ``main``
  words it (child processes are stopped on the way out).
* **Once the command's status is decided**: SIGINT is ignored for the rest of the process.  Python's
  teardown resets a handler written in Python to the default action before the process ends, so a
  Ctrl-C in those last milliseconds killed kforge by the signal with no message (exit -2: 3 of 8
  runs of a test at one delay).  A Ctrl-C that came just before is still an interrupt (130).

What no Python code can reach: the first milliseconds of the process, before the interpreter has
installed its handler (the signal's default action ends it, as it would any program), and the
import of ``kernel_forge/__init__.py`` (one line) and of this module up to its handler (a
KeyboardInterrupt there is Python's: a traceback).
"""
from __future__ import annotations

import os          # os and sys are loaded at the interpreter's start, signal is one small module
import signal
import sys

#: "loaded" until main starts, "running" while it runs
_state = "loaded"


def _on_sigint(signum, frame) -> None:
    if _state == "running":
        raise KeyboardInterrupt
    _interrupted()
    os._exit(130)                       # before main: nothing to stop, nothing to flush but stderr


def _install() -> None:
    """Our handler in place of Python's default one (a SIG_IGN inherited from a shell that started
    kforge in the background, or a handler someone else installed, is left alone)."""
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _on_sigint)
    except (AttributeError, ValueError):   # no SIGINT, or imported outside the main thread
        pass


def _interrupted() -> int:
    try:
        sys.stderr.write("kforge: interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    return 130


def _caused_by_interrupt(exc: BaseException) -> bool:
    from kernel_forge.common.errors import caused_by_interrupt   # only once something went wrong

    return caused_by_interrupt(exc)


def _ignore_sigint() -> None:
    """From here a Ctrl-C changes nothing, through the interpreter's teardown too (a handler that
    is SIG_IGN stays so; Python's own is reset to the default action there).  Raises the
    KeyboardInterrupt of a Ctrl-C that came just before, once (``signal.signal`` runs pending handlers)."""
    if hasattr(signal, "SIGINT"):
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _finish(code) -> None:
    try:
        _ignore_sigint()
    except KeyboardInterrupt:           # it came before the command's status was final: an interrupt
        _ignore_sigint()
        code = _interrupted()
    sys.exit(code)


def _run(argv) -> int:
    """The command's exit status (an internal error's exception propagates: its traceback is the report)."""
    try:
        import click

        from kernel_forge.app.cli import cli
    except KeyboardInterrupt:
        return _interrupted()
    except Exception as exc:  # noqa: BLE001 - only an interrupted import is ours to word
        if _caused_by_interrupt(exc):
            return _interrupted()
        raise
    try:
        cli.main(args=argv, prog_name="kforge", standalone_mode=False)
    except KeyboardInterrupt:
        return _interrupted()
    except click.exceptions.Abort:
        return _interrupted()
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except BrokenPipeError:          # `kforge ... | head`: the reader left; exit as a shell reports SIGPIPE
        try:
            sys.stdout = open(os.devnull, "w")      # noqa: SIM115 - nothing more may reach the closed pipe
        except OSError:
            pass
        return 141
    except Exception as exc:  # noqa: BLE001 - only an interrupt is ours to word; the rest is the CLI's
        if _caused_by_interrupt(exc):
            return _interrupted()
        raise
    return 0


def main(argv=None) -> None:
    global _state
    try:
        _state = "running"
        code = _run(argv)
    except KeyboardInterrupt:        # in the moment between two of _run's own handlers
        code = _interrupted()
    except SystemExit as exc:        # a command's own exit (its errors' exit codes)
        code = exc.code
    except BaseException:            # an internal error: its traceback is the report, uninterrupted
        try:
            _ignore_sigint()
        except KeyboardInterrupt:
            _ignore_sigint()
        raise
    _finish(code)


_install()         # as soon as what it calls is defined: from here on, every moment is covered

if __name__ == "__main__":
    main()
