"""``kforge optimize``, ``replay``, ``approve`` and ``gate``: thin commands over the loop."""
from __future__ import annotations

import json
import sys
from dataclasses import fields
from pathlib import Path

import click

from .cli import cli, gate_options, handle_errors, make_gate_options
from .errors import InputError


def _echo(msg: str) -> None:
    click.echo(msg, err=True)


@cli.command()
@click.argument("manifest", required=False, type=click.Path(dir_okay=False))
@click.option("--model", "models", multiple=True, help="anthropic:MODEL or openai:MODEL; repeat for an ensemble.")
@click.option("--base-url", help="OpenAI-compatible endpoint for openai:MODEL (vLLM, Ollama, llama.cpp).")
@click.option("--ensemble", type=click.Choice(["round-robin", "parallel"]), default=None,
              help="How several --model share iterations (default round-robin).")
@click.option("--replay", type=click.Path(), help="Replay proposals: a folder of .cu files or a JSONL of answers.")
@click.option("--resume", "resume", type=click.Path(file_okay=False), help="Continue runs/run-NNN after a stop or kill.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="JSON file with any of these options.")
@click.option("--candidates", type=int, help="Proposals per iteration (default 1).")
@click.option("--max-iterations", type=int, help="Iterations (default 7).")
@click.option("--budget-usd", type=float, help="Stop when model cost reaches this.")
@click.option("--max-tokens", type=int, help="Stop when model tokens reach this.")
@click.option("--time-limit", type=float, help="Stop after this many seconds.")
@click.option("--patience", type=int, help="Stop after this many iterations without improvement.")
@click.option("--target-speedup", type=float, help="Stop when the best is this much faster than the initial kernel.")
@click.option("--tune-budget", type=int, help="Most settings gated per proposal with tunables (default 24).")
@click.option("--hints", help="Extra guidance for the model.")
@click.option("--fix-turns", type=int, help="Turns a failed proposal gets to be fixed (default 1; 0: none).")
@click.option("--profile/--no-profile", "profile", default=None, help="Profile the best and each new best (default on).")
@click.option("--runs-dir", type=click.Path(file_okay=False), help="Where run-NNN folders go (default runs/).")
@click.option("--dry-run", is_flag=True, help="Print the prompt a model would get first, then stop (no GPU, no model call).")
@click.option("--device", "device_file", type=click.Path(dir_okay=False),
              help="With --dry-run: a device description JSON (e.g. kernel_forge/data/devices/h200.json) for the device section.")
@gate_options
@handle_errors
def optimize(manifest, models, base_url, ensemble, replay, resume, config_file, candidates, max_iterations,
             budget_usd, max_tokens, time_limit, patience, target_speedup, tune_budget, hints, fix_turns, profile,
             runs_dir, dry_run, device_file, warmup, reps, no_flush, seed, quick, timeout, arch, sanitize):
    """Make MANIFEST's kernel faster: propose, gate, record, repeat. Evidence goes to runs/run-NNN/."""
    from .loop import LoopConfig
    from .optimize import ProposerConfig, _build, load_config_file, resume_run, start_run

    if dry_run:
        from .optimize import first_prompt_parts
        if not manifest:
            raise InputError("--dry-run needs a MANIFEST")
        system, static, dynamic = first_prompt_parts(manifest, hints or "", device_file)
        click.echo(f"=== system prompt ===\n{system}\n=== user prompt: static prefix (the same for every call; "
                   f"cached) ===\n{static}\n=== user prompt: dynamic part ===\n{dynamic}")
        return
    if device_file:
        raise InputError("--device FILE is for --dry-run; a run describes the GPU it runs on")

    loop_over = {k: v for k, v in dict(candidates=candidates, max_iterations=max_iterations, budget_usd=budget_usd,
                                        max_tokens=max_tokens, time_limit_s=time_limit, patience=patience,
                                        target_speedup=target_speedup, tune_budget=tune_budget, hints=hints,
                                        fix_turns=fix_turns, profile=profile).items()
                 if v is not None}
    if resume:
        if manifest or models or replay or config_file:
            raise InputError("--resume takes the run's own manifest, proposer and config; give only stop rules with it")
        opt = resume_run(resume, progress=_echo, overrides=loop_over)
    else:
        cfg = load_config_file(config_file) if config_file else {}
        manifest = manifest or cfg.get("manifest")
        if not manifest:
            raise InputError("give a MANIFEST (or \"manifest\" in --config), or --resume RUN")
        loop = _build(LoopConfig, {**cfg.get("loop", {}), **loop_over}, "loop settings")
        gate_cfg = dict(cfg.get("gate", {}))
        defaults = make_gate_options(10, 100, False, 0, False, 10.0, None, False)
        cli_gate = make_gate_options(warmup, reps, no_flush, seed, quick, timeout, arch, sanitize)
        for f in fields(cli_gate):   # options given on the command line win over the file
            if getattr(cli_gate, f.name) != getattr(defaults, f.name):
                gate_cfg[f.name] = getattr(cli_gate, f.name)
        from .gate import GateOptions
        gate_opts = _build(GateOptions, {**{f.name: getattr(defaults, f.name) for f in fields(defaults)}, **gate_cfg},
                           "gate settings")
        prop_cfg = dict(cfg.get("proposer", {}))
        if models:
            prop_cfg["models"] = list(models)
        if base_url:
            prop_cfg["base_url"] = base_url
        if ensemble:
            prop_cfg["ensemble"] = ensemble
        if replay:
            prop_cfg["replay"] = replay
        prop = _build(ProposerConfig, prop_cfg, "proposer settings")
        if prop.replay and prop.models:
            raise InputError("--replay and --model are exclusive: a run replays recorded proposals or asks models")
        if prop.kind == "tune":
            _echo("[kforge] no model configured: using the built-in tuner over the task's templates. "
                  "To use an LLM: --model anthropic:claude-sonnet-4-5 (ANTHROPIC_API_KEY) or --model openai:gpt-5 "
                  "(OPENAI_API_KEY), or --base-url for a local OpenAI-compatible server.")
        opt = start_run(manifest, loop, gate_opts, prop, runs_dir=runs_dir or cfg.get("runs_dir", "runs"),
                        progress=_echo)
    try:
        summary = opt.run()
    except KeyboardInterrupt:
        _echo(f"[kforge] interrupted; resume with: kforge optimize --resume {opt.run_dir.path}")
        sys.exit(130)
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
    if summary["stop_reason"] == "unreachable":
        url = (opt.run_dir.read_json("run.json") or {}).get("proposer", {}).get("base_url") or "the provider's API"
        _echo(f"[kforge] no model call reached {url}: {opt.stop_detail or 'connection failed'}")
        sys.exit(3)


@cli.command()
@click.argument("request", type=click.Path(dir_okay=False))
@gate_options
@handle_errors
def replay(request, warmup, reps, no_flush, seed, quick, timeout, arch, sanitize):
    """Re-run a recorded best-case-NAME.json request: the best kernel on that case, same seeds."""
    from .candidate import load_candidate
    from .gate import Gate
    from .report import eval_table
    from .task import load_task

    p = Path(request)
    try:
        req = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{p}: not a readable replay request ({exc})") from None
    task = load_task(req["manifest"])
    cand = load_candidate(p.parent / req["kernel"])
    seeds = req.get("seeds") or [0]
    opts = make_gate_options(warmup, reps, no_flush, seeds[0], quick, timeout, arch, sanitize)
    opts.fresh_seeds = list(seeds[1:])
    opts.extra_draws = len(opts.fresh_seeds)
    with Gate(task, opts) as gate:
        gate.ensure_gpu()
        ev = gate.evaluate(cand, roles=(req.get("role", "performance"),), only={req["case"]})
    click.echo(eval_table(task, ev, None, {}))
    if req.get("median_us") and ev.cases and ev.cases[0].timing:
        click.echo(f"recorded median {req['median_us']:.2f} µs, now {ev.cases[0].timing.median:.2f} µs")
    if not ev.passed:
        sys.exit(1)


@cli.command()
@click.argument("run_path", type=click.Path(file_okay=False))
@click.option("--into", "approvals", default="approved.json", show_default=True, type=click.Path(dir_okay=False),
              help="Approvals file to add the run's best kernel to.")
@click.option("--copy-to", type=click.Path(file_okay=False), default="approved",
              show_default=True, help="Folder the approved kernel is copied into.")
@click.option("--tolerance", default=0.05, show_default=True, help="Allowed slowdown before the CI gate fails.")
@handle_errors
def approve(run_path, approvals, copy_to, tolerance):
    """Add a run's best kernel to an approvals file that `kforge gate` checks in CI."""
    from .regression import approve_run

    entry = approve_run(run_path, approvals, copy_to, tolerance)
    click.echo(f"approved {entry['kernel']} for {entry['task']}: x{entry['speedup_vs_initial']:.2f} vs initial "
               f"(fails CI below x{entry['speedup_vs_initial'] * (1 - tolerance):.2f})")


@cli.command("gate")
@click.argument("approvals", type=click.Path(dir_okay=False))
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="Write the verdicts here.")
@gate_options
@handle_errors
def gate_cmd(approvals, json_out, warmup, reps, no_flush, seed, quick, timeout, arch, sanitize):
    """CI regression gate: re-run every approved kernel; exit 1 if one is wrong or slower."""
    from .regression import run_regression

    opts = make_gate_options(warmup, reps, no_flush, seed, quick, timeout, arch, sanitize)
    results = run_regression(approvals, opts, progress=_echo)
    for r in results:
        click.echo(f"{'PASS' if r['ok'] else 'FAIL'} {r['task']}: {r['kernel']}: {r['detail']}")
    if json_out:
        Path(json_out).write_text(json.dumps(results, indent=2))
    if not all(r["ok"] for r in results):
        sys.exit(1)


@cli.command()
@click.argument("run_path", type=click.Path(file_okay=False))
@handle_errors
def report(run_path):
    """Redraw report.md and its plots for a run folder from its summary.json and history.json."""
    from .evidence import RunDir
    from .run_report import write_report

    run = RunDir.open(run_path)
    summary = run.read_json("summary.json")
    history = run.read_json("history.json")
    if not summary or not history:
        raise InputError(f"{run.path}: needs summary.json and history.json (resume the run to finish it first)")
    write_report(run, summary, history["attempts"])
    made = [p for p in ("report.md", "progress.png", "cases.png") if (run.path / p).is_file()]
    click.echo(f"wrote {', '.join(str(run.path / p) for p in made)}")
