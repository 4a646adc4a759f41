"""``kforge batch``: one optimize per task, here one after another or as Ray tasks."""
from __future__ import annotations

import functools
import json

import click

from kernel_forge.app.cli_common import handle_errors

#: options of the command itself
RESERVED = {"--ray", "--retries", "--resume", "--runs-dir", "--quick", "--json", "--help", "-h"}


@functools.lru_cache(maxsize=1)
def batch_options():
    """Every setting of a run, as ``optimize`` has them: each run of the batch takes them."""
    from kernel_forge.app.cli_options import build_options
    from kernel_forge.config.sections import RUN_SECTIONS

    return build_options(RUN_SECTIONS, reserved=RESERVED)


def _with_batch_options(f):
    from kernel_forge.app.cli_options import apply_options
    return apply_options(batch_options())(f)


@click.command()
@click.argument("manifests", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--ray", "ray_address", is_flag=False, flag_value="local", default=None, metavar="[ADDRESS]",
              help="Run each task as a Ray task with one GPU: alone for a local Ray, or a cluster ADDRESS.")
@click.option("--retries", default=2, show_default=True, help="Ray retries of a task whose worker died (it resumes).")
@click.option("--resume", type=click.Path(file_okay=False), help="Continue runs/batch-NNN (finished tasks are skipped).")
@click.option("--runs-dir", default="runs", show_default=True, type=click.Path(file_okay=False))
@click.option("--quick", is_flag=True, help="The quick gate (one draw, no repeat launch; the last timed launch is still checked).")
@click.option("--json", "as_json", is_flag=True, help="Print the batch record as JSON.")
@_with_batch_options
@click.pass_context
@handle_errors
def batch(ctx, manifests, ray_address, retries, resume, runs_dir, quick, as_json, **params):
    """Optimise several tasks: one run folder per task under runs/batch-NNN/, and batch.json.
    Every optimize option applies to every task's run."""
    from kernel_forge.app.batch import run_batch, table
    from kernel_forge.app.cli_options import given
    from kernel_forge.common.errors import InputError
    from kernel_forge.config.gate_settings import QUICK

    typed = given(ctx, batch_options(), params)      # every value checked as optimize checks it
    if resume and manifests:
        raise InputError("--resume takes the batch's own manifests; give no MANIFEST with it")
    if resume and (typed or quick):
        flags = [o.flag for o in batch_options() if o.name in typed.get(o.section, {})] + ["--quick"] * quick
        raise InputError(f"--resume takes the batch's own options (its batch.json); give none with it "
                         f"(not {', '.join(flags)})")
    if retries < 0:
        raise InputError(f"--retries must be >= 0, got {retries}")
    gate = {**(QUICK if quick else {}), **typed.get("gate", {})}
    record = run_batch(list(manifests), runs_dir=runs_dir, loop=typed.get("loop", {}), gate=gate,
                       proposer=typed.get("proposer", {}), ray_address=ray_address, retries=retries, resume=resume,
                       progress=lambda m: click.echo(m, err=True))
    click.echo(json.dumps(record, indent=2, default=str) if as_json else table(record))
    if any(r.get("stop_reason") == "error" for r in record["results"].values()):
        raise SystemExit(1)
