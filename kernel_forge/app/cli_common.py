"""What every command module of the CLI shares: the error edge (:func:`handle_errors`, the only
place an exception becomes an exit code), the gate's options and the result printer."""
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


# -- eval --------------------------------------------------------------------------------------
def gate_options(f):
    opts = [
        click.option("--warmup", default=10, show_default=True, help="Untimed launches per performance case."),
        click.option("--reps", default=100, show_default=True,
                     help="Most timed launches per performance case (fewer once the median is tight: --max-noise)."),
        click.option("--max-noise", default=0.005, show_default=True, type=click.FloatRange(0, 1),
                     help="Stop timing a case once the median's 95 % confidence half-width is within this "
                          "fraction of it (checked after 10, 20, 40... launches); 0: always --reps."),
        click.option("--no-flush", is_flag=True, help="Keep the L2 warm between timed launches."),
        click.option("--seed", default=0, show_default=True, help="Seed of the first input draw."),
        click.option("--quick", is_flag=True, help="One input draw, no repeat-launch or post-timing checks."),
        click.option("--timeout", default=10.0, show_default=True, help="Seconds allowed for one checked launch."),
        click.option("--arch", default=None, help="Compile for this arch (default: the GPU's)."),
        click.option("--sanitize", is_flag=True, help="Run compute-sanitizer (memcheck, racecheck) first."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def make_gate_options(warmup, reps, max_noise, no_flush, seed, quick, timeout, arch, sanitize):
    from kernel_forge.gate.gate import GateOptions

    kw = dict(warmup=warmup, reps=reps, max_noise=max_noise, flush_l2=not no_flush, seed=seed,
              launch_timeout_s=timeout, arch=arch, sanitize=sanitize)
    return GateOptions.quick(**kw) if quick else GateOptions(**kw)


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
