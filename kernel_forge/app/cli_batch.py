"""``kforge batch``: one optimize per task, here one after another or as Ray tasks."""
from __future__ import annotations

import json

import click

from kernel_forge.app.cli_common import handle_errors


@click.command()
@click.argument("manifests", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--ray", "ray_address", is_flag=False, flag_value="local", default=None, metavar="[ADDRESS]",
              help="Run each task as a Ray task with one GPU: alone for a local Ray, or a cluster ADDRESS.")
@click.option("--retries", default=2, show_default=True, help="Ray retries of a task whose worker died (it resumes).")
@click.option("--resume", type=click.Path(file_okay=False), help="Continue runs/batch-NNN (finished tasks are skipped).")
@click.option("--runs-dir", default="runs", show_default=True, type=click.Path(file_okay=False))
@click.option("--max-iterations", type=int, help="Iterations per task.")
@click.option("--time-limit", type=float, help="Seconds per task.")
@click.option("--tune-budget", type=int, help="Most settings gated per proposal with tunables.")
@click.option("--model", "models", multiple=True, help="anthropic:MODEL or openai:MODEL (default: the built-in tuner).")
@click.option("--quick", is_flag=True, help="The quick gate (one draw, no repeat or post-timing checks).")
@click.option("--json", "as_json", is_flag=True, help="Print the batch record as JSON.")
@handle_errors
def batch(manifests, ray_address, retries, resume, runs_dir, max_iterations, time_limit, tune_budget, models,
          quick, as_json):
    """Optimise several tasks: one run folder per task under runs/batch-NNN/, and batch.json."""
    from kernel_forge.app.batch import run_batch, table
    from kernel_forge.common.errors import InputError

    if resume and manifests:
        raise InputError("--resume takes the batch's own manifests; give no MANIFEST with it")
    if retries < 0:
        raise InputError(f"--retries must be >= 0, got {retries}")
    loop = {k: v for k, v in dict(max_iterations=max_iterations, time_limit_s=time_limit,
                                  tune_budget=tune_budget).items() if v is not None}
    gate = {"extra_draws": 0, "repeat_check": False, "check_after_timing": False} if quick else {}
    proposer = {"models": list(models)} if models else {}
    record = run_batch(list(manifests), runs_dir=runs_dir, loop=loop, gate=gate, proposer=proposer,
                       ray_address=ray_address, retries=retries, resume=resume,
                       progress=lambda m: click.echo(m, err=True))
    click.echo(json.dumps(record, indent=2, default=str) if as_json else table(record))
    if any(r.get("stop_reason") == "error" for r in record["results"].values()):
        raise SystemExit(1)
