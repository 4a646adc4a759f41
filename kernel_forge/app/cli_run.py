"""``kforge optimize``, ``replay``, ``approve`` and ``gate``: thin commands over the loop."""
from __future__ import annotations

import json
import sys

import click

from kernel_forge.app.cli_common import echo_result, gate_options, gate_options_from, handle_errors
from kernel_forge.common.errors import InputError


def _echo(msg: str) -> None:
    click.echo(msg, err=True)


def _echo_budget(budget) -> None:
    """The budget lines (worst case, before anything runs) on stderr."""
    from kernel_forge.app.budget_line import render

    for line in render(budget):
        _echo(line)


#: options of the command itself
RESERVED = {"--config", "--resume", "--runs-dir", "--dry-run", "--device", "--quick", "--help", "-h"}


def optimize_options(sections=None):
    """The generated options of ``optimize`` (one per field of its sections' dataclasses)."""
    from kernel_forge.app.cli_options import build_options
    from kernel_forge.config.sections import RUN_SECTIONS

    return build_options(sections or RUN_SECTIONS, reserved=RESERVED)


def resolve_configs(ctx: click.Context, params: dict, cfg: dict, *, config_file: str | None = None,
                    quick: bool = False, sections=None, options=None) -> dict:
    """Each section's dataclass: its defaults, then the --config file, then ``--quick``, then the
    values typed on the command line (which win)."""
    from kernel_forge.app.cli_options import given, layered
    from kernel_forge.config.gate_settings import QUICK
    from kernel_forge.config.sections import RUN_SECTIONS

    sections = sections or RUN_SECTIONS
    typed = given(ctx, options or optimize_options(sections), params)
    presets = {"gate": QUICK} if quick else {}
    return {name: layered(cls, cfg.get(name, {}), presets.get(name, {}), typed.get(name, {}))
            for name, cls in sections}


def _optimize_command(f):
    f = click.option("--dry-run", is_flag=True,
                     help="Print the prompt a model would get first, then stop (no GPU, no model call).")(f)
    f = click.option("--device", "device_file", type=click.Path(dir_okay=False),
                     help="With --dry-run: a device description JSON (e.g. kernel_forge/data/devices/h200.json) "
                          "for the device section.")(f)
    f = click.option("--quick", is_flag=True, help="One input draw, no repeat launch; the last timed launch is still checked.")(f)
    f = click.option("--runs-dir", type=click.Path(file_okay=False),
                     help="Where run-NNN folders go (default runs/).")(f)
    f = click.option("--config", "config_file", type=click.Path(dir_okay=False),
                     help="JSON file with any of these options (sections loop, gate, proposer); "
                          "the command line wins over it.")(f)
    f = click.option("--resume", "resume", type=click.Path(file_okay=False),
                     help="Continue runs/run-NNN after a stop or kill (with loop options only).")(f)
    f = click.argument("manifest", required=False, type=click.Path(dir_okay=False))(f)
    from kernel_forge.app.cli_options import apply_options
    return apply_options(optimize_options())(f)


@click.command()
@_optimize_command
@click.pass_context
@handle_errors
def optimize(ctx, manifest, resume, config_file, runs_dir, quick, dry_run, device_file, **params):
    """Make MANIFEST's kernel faster: propose, gate, record, repeat. Evidence goes to runs/run-NNN/."""
    from kernel_forge.app.cli_options import given
    from kernel_forge.app.run_setup import check_budget_prices, check_proposer, resume_run, run_budget, start_run
    from kernel_forge.config.file import load_config_file

    options = optimize_options()
    typed = given(ctx, options, params)          # checks every typed value, before anything runs
    if dry_run:
        from kernel_forge.app.budget_line import recorded_budget
        from kernel_forge.app.run_setup import first_prompt_parts, next_prompt_parts
        if resume:     # the next iteration's prompt of a recorded run (its best's profile, the ledger)
            if manifest or device_file or config_file:
                raise InputError("--dry-run --resume RUN takes the run's own manifest, device and config; give none "
                                 "of them")
            system, static, dynamic = next_prompt_parts(resume, typed.get("loop", {}))
            _echo_budget(recorded_budget(resume, typed.get("loop", {})))
        else:          # the config is read and checked as a real run reads it, and its hints are shown
            from kernel_forge.app.option_checks import check_optimize_params
            check_optimize_params(click.get_current_context().params)
            cfg = load_config_file(config_file) if config_file else {}
            manifest = manifest or cfg.get("manifest")
            if not manifest:
                raise InputError("--dry-run needs a MANIFEST (or \"manifest\" in --config) for the first prompt, or "
                                 "--resume RUN for the next one")
            conf = resolve_configs(ctx, params, cfg, config_file=config_file, quick=quick, options=options)
            loop = conf["loop"]
            system, static, dynamic = first_prompt_parts(manifest, loop.hints, device_file, loop.candidates)
            from kernel_forge.app.budget_line import estimate
            from kernel_forge.model.task import load_task
            _echo_budget(estimate(loop, conf["proposer"], load_task(manifest)))
        parts = dynamic if isinstance(dynamic, list) else [dynamic]
        click.echo(f"=== system prompt ===\n{system}\n=== user prompt: static prefix (the same for every call; "
                   f"cached) ===\n{static}")
        for i, d in enumerate(parts, 1):
            click.echo(f"=== user prompt: dynamic part" + (f" of proposal {i} of {len(parts)}" if len(parts) > 1 else "")
                       + f" ===\n{d}")
        return
    if device_file:
        raise InputError("--device FILE is for --dry-run; a run describes the GPU it runs on")

    from kernel_forge.app.option_checks import check_optimize_params
    check_optimize_params(click.get_current_context().params)   # every no-GPU check, before the GPU probe

    if resume:
        others = [o.flag for o in options if o.section != "loop" and o.name in typed.get(o.section, {})]
        if manifest or config_file or quick or others:
            given_ = ", ".join(others + [n for n, v in (("MANIFEST", manifest), ("--config", config_file),
                                                         ("--quick", quick)) if v])
            raise InputError(f"--resume takes the run's own manifest, proposer, gate and config; give only stop "
                             f"rules and loop options with it (not {given_})")
        from kernel_forge.app.budget_line import recorded_budget
        _echo_budget(recorded_budget(resume, typed.get("loop", {})))    # what it may spend from here
        opt = resume_run(resume, progress=_echo, overrides=typed.get("loop", {}))
    else:
        cfg = load_config_file(config_file) if config_file else {}
        manifest = manifest or cfg.get("manifest")
        if not manifest:
            raise InputError("give a MANIFEST (or \"manifest\" in --config), or --resume RUN")
        conf = resolve_configs(ctx, params, cfg, config_file=config_file, quick=quick, options=options)
        loop, gate_opts, prop = conf["loop"], conf["gate"], conf["proposer"]
        check_proposer(prop)
        check_budget_prices(prop, run_budget(loop, prop))
        if prop.kind == "tune":
            _echo("[kforge] no model configured: using the built-in tuner (the task's templates and its own kernel: "
                  "the budget line names them). To use an LLM: --model anthropic:claude-sonnet-5-5 (ANTHROPIC_API_KEY) "
                  "or --model openai:gpt-6.2-sol (OPENAI_API_KEY), or --base-url for a local OpenAI-compatible server.")
        from kernel_forge.app.budget_line import estimate
        from kernel_forge.authoring.acceptance import check_usable
        from kernel_forge.model.task import load_task
        task = load_task(manifest)
        check_usable(task)          # a generated task not yet accepted: exit 2 before anything runs its reference
        _echo_budget(estimate(loop, prop, task))   # what it may spend, before it starts
        opt = start_run(manifest, loop, gate_opts, prop, runs_dir=runs_dir or cfg.get("runs_dir", "runs"),
                        progress=_echo)
    try:
        summary = opt.run()
    except KeyboardInterrupt:          # exit 130 at the error edge (handle_errors), after the hint
        _echo(f"[kforge] interrupted; resume with: kforge optimize --resume {opt.run_dir.path}")
        raise
    finally:
        opt.gate.close()
    best = summary.get("best") or {}
    click.echo(json.dumps({"run": str(opt.run_dir.path), "stop_reason": summary["stop_reason"],
                           "best": best.get("id"), "score_us": best.get("score_us"),
                           "speedup_vs_initial": best.get("speedup_vs_initial"),
                           "speedup_vs_baselines": best.get("speedup_vs_baselines"),
                           "cost_usd": summary["cost_usd"]}, indent=2))
    if summary["stop_reason"] == "error":
        sys.exit(4)
    if summary.get("initial") is None and summary["stop_reason"] not in ("interrupted", "unreachable"):
        _echo(f"[kforge] no baseline: no translation of the reference passed the gate and the holdout "
              f"({summary['stop_reason']}); see {opt.run_dir.path / 'report.md'}, then resume with more iterations: "
              f"kforge optimize --resume {opt.run_dir.path} --max-iterations N")
        sys.exit(1)
    if summary["stop_reason"] == "unreachable":
        url = (opt.run_dir.read_json("run.json") or {}).get("proposer", {}).get("base_url") or "the provider's API"
        _echo(f"[kforge] no model call reached {url}: {opt.stop_detail or 'connection failed'}")
        sys.exit(3)


@click.command()
@click.argument("request", type=click.Path(dir_okay=False))
@gate_options
@click.option("--json", "json_out", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write the result and the claim's verdict as JSON to this file ('-' for stdout).")
@click.pass_context
@handle_errors
def replay(ctx, request, quick, json_out, **params):
    """Re-run a recorded best-case-NAME.json request (the best kernel on that case, same seeds)
    and say whether its recorded median still holds within the measured noise; exit 1 if not."""
    from kernel_forge.app.option_checks import check_output_path
    from kernel_forge.ci.replay_check import replay as run_replay

    if json_out and json_out != "-":
        check_output_path(json_out, option="--json", kind="json", inputs=[request])
    opts = gate_options_from(ctx, params, quick)
    result, table = run_replay(request, opts, gate_factory=_real_gate)
    echo_result(result, table, json_out)
    if not result["ok"]:
        sys.exit(1)


def _real_gate(task, options):
    from kernel_forge.ci import evaluate
    return evaluate.default_gate(task, options)   # looked up at call time (tests replace it)


@click.command()
@click.argument("run_path", type=click.Path(file_okay=False))
@click.option("--into", "approvals", default="approved.json", show_default=True, type=click.Path(dir_okay=False),
              help="Approvals file to add the run's best kernel to.")
@click.option("--copy-to", type=click.Path(file_okay=False), default="approved",
              show_default=True, help="Folder the approved kernel is copied into.")
@click.option("--tolerance", default=0.05, show_default=True, help="Allowed slowdown before the CI gate fails.")
@handle_errors
def approve(run_path, approvals, copy_to, tolerance):
    """Add a run's best kernel to an approvals file that `kforge gate` checks in CI."""
    from kernel_forge.ci.regression import approve_run

    entry = approve_run(run_path, approvals, copy_to, tolerance)
    click.echo(f"approved {entry['kernel']} for {entry['task']}: x{entry['speedup_vs_initial']:.2f} vs initial "
               f"(fails CI below x{entry['speedup_vs_initial'] * (1 - tolerance):.2f})")
    if entry.get("dispatch"):      # settings per shape: kforge gate runs each case with the rule's pick
        from kernel_forge.model.dispatch import Rule
        click.echo(f"  with its dispatch rule: {Rule.from_json(entry['dispatch']).describe()}")


@click.command("gate")
@click.argument("approvals", type=click.Path(dir_okay=False))
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="Write the verdicts here.")
@click.option("--junit", "junit_out", type=click.Path(dir_okay=False),
              help="Write a JUnit XML report here: a test case per approved kernel and case.")
@click.option("--devices", default="", help="GPUs to spread the approved kernels over: 0,1 or all (default: GPU 0).")
@gate_options
@click.pass_context
@handle_errors
def gate_cmd(ctx, approvals, json_out, junit_out, devices, quick, **params):
    """CI regression gate: re-run every approved kernel; exit 1 if one is wrong or slower."""
    from kernel_forge.app.option_checks import check_output_path
    for path, option, kind in ((json_out, "--json", "json"), (junit_out, "--junit", "junit")):
        if path:
            check_output_path(path, option=option, kind=kind, inputs=[approvals])
    try:
        results = _gate_rows(approvals, devices, gate_options_from(ctx, params, quick))
    except (Exception, KeyboardInterrupt) as exc:
        if junit_out:               # CI publishes the file either way: it says why the gate could not run
            from kernel_forge.app.cli_common import write_error_junit
            write_error_junit(junit_out, "gate", exc, str(approvals))
        raise
    for r in results:
        click.echo(f"{'PASS' if r['ok'] else 'FAIL'} {r['task']}: {r['kernel']}: {r['detail']}")
    if json_out:
        from kernel_forge.common.writes import write_text
        write_text(json_out, json.dumps(results, indent=2, default=str) + "\n", private=False)
    if junit_out:
        from kernel_forge.reports import junit
        junit.write(junit_out, junit.gate_suites(results), name="kforge gate")
        click.echo(f"wrote {junit_out}")
    if not all(r["ok"] for r in results):
        sys.exit(1)


def _gate_rows(approvals, devices, opts):
    from kernel_forge.ci.regression import run_regression

    ids = None
    if devices:
        from kernel_forge.app.option_checks import check_devices
        check_devices(devices)                   # its form before the GPU probe; the ordinals after it
        from kernel_forge.gate.pool import parse_devices
        from kernel_forge.gpu.driver import device_count
        ids = parse_devices(devices, device_count())
    return run_regression(approvals, opts, progress=_echo, gate_factory=_real_gate, devices=ids)


@click.command()
@click.argument("run_path", type=click.Path(file_okay=False))
@handle_errors
def report(run_path):
    """Redraw report.md and its plots for a run folder from its summary.json and history.json."""
    from kernel_forge.evidence.history_log import read_history
    from kernel_forge.evidence.run_dir import RunDir
    from kernel_forge.reports.run_report import write_report

    run = RunDir.open(run_path)
    summary = run.read_json("summary.json")   # schema-checked: a damaged or wrong-typed file is exit 2
    history = read_history(run)
    if not summary or not history:
        raise InputError(f"{run.path}: needs summary.json and history.json (resume the run to finish it first)")
    write_report(run, summary, history["attempts"])
    made = [p for p in ("report.md", "progress.png", "cases.png", "heatmap.png") if (run.path / p).is_file()]
    click.echo(f"wrote {', '.join(str(run.path / p) for p in made)}")
