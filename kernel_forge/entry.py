"""The ``kforge`` entry point: light, so that Ctrl-C at any moment (even while the CLI is still
being imported) ends with "kforge: interrupted" and exit 130, never a traceback or click's
"Aborted!" with exit 1 (which CI would read as a failed gate)."""
from __future__ import annotations

import os
import sys


def _interrupted() -> None:
    try:
        sys.stderr.write("kforge: interrupted\n")
    except (OSError, ValueError):
        pass
    sys.exit(130)


def caused_by_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is, or was raised while handling or because of, a KeyboardInterrupt (Ctrl-C
    while a class is being created comes back as Python 3.11's RuntimeError "Error calling
    __set_name__ ...", caused by the KeyboardInterrupt)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def main(argv=None) -> None:
    try:
        import click

        from .cli import cli
    except KeyboardInterrupt:
        _interrupted()
    except Exception as exc:  # noqa: BLE001 - only an interrupted import is ours to word
        if caused_by_interrupt(exc):
            _interrupted()
        raise
    try:
        cli.main(args=argv, prog_name="kforge", standalone_mode=False)
    except KeyboardInterrupt:
        _interrupted()
    except click.exceptions.Abort:
        _interrupted()
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except BrokenPipeError:          # `kforge ... | head`: the reader left; exit as a shell reports SIGPIPE
        try:
            sys.stdout = open(os.devnull, "w")      # noqa: SIM115 - nothing more may reach the closed pipe
        except OSError:
            pass
        sys.exit(141)
    except Exception as exc:  # noqa: BLE001 - only an interrupt is ours to word; the rest is the CLI's
        if caused_by_interrupt(exc):
            _interrupted()
        raise
    sys.exit(0)


if __name__ == "__main__":
    main()
