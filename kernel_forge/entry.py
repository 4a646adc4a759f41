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


def _caused_by_interrupt(exc: BaseException) -> bool:
    from kernel_forge.common.errors import caused_by_interrupt   # only once something went wrong

    return caused_by_interrupt(exc)


def main(argv=None) -> None:
    try:
        import click

        from kernel_forge.app.cli import cli
    except KeyboardInterrupt:
        _interrupted()
    except Exception as exc:  # noqa: BLE001 - only an interrupted import is ours to word
        if _caused_by_interrupt(exc):
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
        if _caused_by_interrupt(exc):
            _interrupted()
        raise
    sys.exit(0)


if __name__ == "__main__":
    main()
