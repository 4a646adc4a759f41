"""What every command module of the CLI shares: the error edge (:func:`handle_errors`, the only
place an exception raised in a command becomes an exit code; ``tests/app/test_cli_common.py``
holds the package to it), the gate's options and the result printer.  What happens outside any
command -- Ctrl-C while kforge loads, a closed pipe, click's own usage errors -- is worded by
:mod:`kernel_forge.entry`, above the CLI."""
from __future__ import annotations

import functools
import json
import os
import sys

import click

from kernel_forge.common.errors import KForgeError, caused_by_interrupt


def handle_errors(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except KForgeError as exc:
            click.echo(f"kforge: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("kforge: interrupted", err=True)
            sys.exit(130)
        except click.exceptions.Exit:
            raise
        except Exception as exc:  # noqa: BLE001 - the edge: no raw tracebacks for users
            if caused_by_interrupt(exc):       # Ctrl-C inside an import (a class being created)
                click.echo("kforge: interrupted", err=True)
                sys.exit(130)
            if os.environ.get("KFORGE_DEBUG"):
                raise
            click.echo(f"kforge: internal error: {type(exc).__name__}: {exc}\n"
                       "  set KFORGE_DEBUG=1 for the traceback and please report it", err=True)
            sys.exit(4)
    return wrapper


# -- the gate's options (eval, replay, gate) -------------------------------------------------------
#: what the gate commands do not offer: a pool of GPUs is a run's (``kforge gate`` has its own --devices)
GATE_SKIP = {("gate", "devices")}
#: the gate commands' own options: a setting never takes these names
GATE_RESERVED = {"--quick", "--json", "--junit", "--devices", "--no-initial", "--no-baselines", "--holdout",
                 "--no-holdout", "--help", "-h"}


@functools.lru_cache(maxsize=1)
def gate_command_options():
    """The generated options of ``eval``, ``replay`` and ``gate``: every GateOptions field they use."""
    from kernel_forge.app.cli_options import build_options
    from kernel_forge.config.gate_settings import GateOptions

    return build_options([("gate", GateOptions)], reserved=GATE_RESERVED, skip=GATE_SKIP)


def gate_options(f):
    """The gate's options (generated from GateOptions) and ``--quick``."""
    from kernel_forge.app.cli_options import apply_options

    f = click.option("--quick", is_flag=True, help="One input draw, no repeat launch; the last timed launch is still checked.")(f)
    return apply_options(gate_command_options())(f)


def gate_options_from(ctx: click.Context, params: dict, quick: bool):
    """The GateOptions a gate command was given: the defaults, ``--quick``, then what was typed (checked)."""
    from kernel_forge.app.cli_options import given, layered
    from kernel_forge.config.gate_settings import QUICK, GateOptions

    typed = given(ctx, gate_command_options(), params).get("gate", {})
    return layered(GateOptions, QUICK if quick else {}, typed)


def write_error_junit(path: str, command: str, exc: BaseException, subject: str) -> None:
    """A JUnit file of one error test case saying why ``command`` could not run (never masking
    that reason: a failure to write it is only reported)."""
    from kernel_forge.reports import junit

    try:
        junit.write(path, junit.error_suites(command, exc, subject=subject), name=f"kforge {command}")
        click.echo(f"wrote {path} (kforge {command} could not run)", err=True)
    except KForgeError as werr:
        click.echo(f"kforge: could not write {path} either: {werr}", err=True)


def echo_result(result: dict, table: str, json_out: str | None) -> None:
    """The table on stdout, or the JSON (``-``: on stdout instead of the table; a path: written too)."""
    if json_out == "-":
        click.echo(json.dumps(result, indent=2, default=str))
        return
    click.echo(table)
    if json_out:
        from kernel_forge.common.writes import write_text
        write_text(json_out, json.dumps(result, indent=2, default=str) + "\n", private=False)
        click.echo(f"wrote {json_out}")
