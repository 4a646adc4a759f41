"""The ``kforge`` command line. Thin: it fills option dataclasses, calls the library, prints,
and sets the exit status from what a command found: 0 success, 1 a case or gate failed, 2 bad
input, 3 environment (no GPU, driver, library).  An exception a command raises becomes its exit
code in one place only, :func:`kernel_forge.app.cli_common.handle_errors` (each error class
carries its code: :mod:`kernel_forge.common.errors`)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from kernel_forge import __version__
from kernel_forge.common.errors import CaseFailed, InputError
from kernel_forge.app import cli_archive, cli_batch, cli_run
from kernel_forge.app.cli_common import echo_result, gate_options, gate_options_from, handle_errors, write_error_junit


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kforge")
def cli():
    """kernel_forge: make one CUDA kernel faster, and prove it."""


# -- doctor ------------------------------------------------------------------------------------
@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@handle_errors
def doctor(as_json):
    """What this machine has: GPU, driver, CUDA/NVRTC, bindings, CuPy, LLM keys."""
    from kernel_forge.app.doctor import collect, render

    report = collect()
    click.echo(json.dumps(report, indent=2) if as_json else render(report))
    if not report["gpu"].get("ok"):
        sys.exit(3)


# -- validate ----------------------------------------------------------------------------------
@cli.command()
@click.argument("manifests", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--deep", is_flag=True, help="Run the reference on every case that fits this host, large ones too.")
@click.option("--strict", is_flag=True, help="Treat weak-case warnings as errors (exit 2).")
@click.option("--arch", default="sm_90", show_default=True,
              help="Compile the initial kernel and the templates with NVRTC for this arch.")
@click.option("--no-compile", is_flag=True, help="Do not compile the kernels (static rules and signature only).")
@click.option("--gpu-memory", type=float, default=80.0, show_default=True,
              help="GiB of GPU memory a case may need (refused beyond it).")
@click.option("--quiet", "-q", is_flag=True, help="Only the ok/FAIL line and warnings of each manifest.")
@click.option("--accept", is_flag=True,
              help="For a task kforge init --describe wrote, once you have reviewed it: run every check, its "
                   "model-written reference in a sandbox (the witnesses' cross-check needs a GPU), and, when all "
                   "pass, record that you accepted it, so that kforge optimize takes it.")
@handle_errors
def validate(manifests, deep, strict, arch, no_compile, gpu_memory, quiet, accept):
    """Check manifests without a GPU: schema, meaning, files, sizes, the kernels (static rules,
    signature, NVRTC), weak cases. Prints where each reference and data file resolves to."""
    from kernel_forge.authoring.validate import validate_manifest
    from kernel_forge.config.gate_settings import check_arch

    check_arch(arch)   # the gate's own rule
    if not (gpu_memory > 0 and gpu_memory < float("inf")):
        raise InputError(f"--gpu-memory {gpu_memory}: must be a finite number above 0 (GiB)")
    if accept:
        from kernel_forge.authoring.acceptance import accept as accept_task

        refused = 0
        for m in manifests:
            try:
                res = accept_task(m, progress=lambda msg: click.echo(msg, err=True))
            except InputError as exc:
                click.echo(f"FAIL {exc}", err=True)
                refused += 1
                continue
            click.echo(f"{'ok  ' if res.status == 'accepted' else 'ok  '} {m}: {res.status}")
            for line in res.lines:
                click.echo(f"  {line}")
        if refused:
            sys.exit(2)
        return
    bad = 0
    warned = 0
    for m in manifests:
        try:
            report = validate_manifest(m, deep=deep, arch=arch, compile=not no_compile,
                                       gpu_memory=int(gpu_memory * 2**30))
        except InputError as exc:
            click.echo(f"FAIL {exc}", err=True)
            bad += 1
            continue
        task = report.task
        roles = {r: len(task.cases_with(r)) for r in ("correctness", "performance", "holdout")}
        click.echo(f"ok   {m}: {task.name} ({roles['correctness']} correctness, {roles['performance']} "
                   f"performance, {roles['holdout']} holdout)")
        if not quiet:
            for line in report.lines():
                click.echo(f"  {line}")
        for w in report.warnings:
            click.echo(f"  warning: {w}")
        warned += bool(report.warnings)
    if bad or (strict and warned):
        sys.exit(2)


# -- compile -----------------------------------------------------------------------------------
@cli.command("compile")
@click.argument("source", type=click.Path(dir_okay=False))
@click.option("--arch", help="Target, e.g. sm_90. Default: the GPU's (needs a GPU).")
@click.option("-D", "--define", "defines", multiple=True, help="NAME=VALUE, overrides the file's kforge defines.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the CUBIN here.")
@click.option("--no-cache", is_flag=True, help="Ignore the compile cache.")
@click.option("--manifest", type=click.Path(dir_okay=False),
              help='The task whose own "headers" the kernel may include by name (#include "common.cuh"). '
                   "Besides those, a kernel may include only the CUDA toolkit's and CCCL's headers.")
@click.option("--mix", is_flag=True, help="Also print the instruction mix (FFMA, LDS, LDG... with vector widths, "
              "whole kernel and hot loop), from SASS when nvdisasm is installed, else from PTX.")
@handle_errors
def compile_cmd(source, arch, defines, output, no_cache, manifest, mix):
    """Compile a kernel with NVRTC to CUBIN (works without a GPU when --arch is given). The
    static rules apply first: nothing they refuse (path includes, vendor libraries) reaches NVRTC,
    and NVRTC reads no file outside the include allow-list (exit 2 naming the line); the rules on
    the compiled code (device heap, device launches, timers, printf) apply to its PTX."""
    from kernel_forge.model.candidate import load_candidate
    from kernel_forge.gpu.nvrtc import compile_source
    from kernel_forge.gate.preflight import check_compiled, check_static
    from kernel_forge.app.option_checks import check_output_path
    from kernel_forge.config.gate_settings import check_arch

    if arch is not None:
        check_arch(arch)
    if output:
        check_output_path(output, option="-o", kind="cubin", inputs=[source])
    cand = load_candidate(source)
    given = {}
    for item in defines:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise InputError(f"--define {item!r}: expected NAME=VALUE")
        given[k] = v
    d = {**cand.compile_defines(), **given}
    check_static(cand.source, file=source)
    headers = {}
    if manifest:
        from kernel_forge.model.task import load_task
        headers = load_task(manifest).header_sources()
    if not arch:
        from kernel_forge.app.doctor import gpu_arch
        arch = gpu_arch()
    # a dispatch rule (settings per shape): every line's setting is compiled, the default's last
    settings = [(d, "")]
    if cand.dispatch is not None:      # each distinct setting once, named by its first line
        from kernel_forge.gate.preflight import distinct_settings
        settings = [({**b.defines, **given}, f" (dispatch line {b.line}: {b.condition})")
                    for b in distinct_settings(cand.dispatch)]
    from kernel_forge.model.limits import target_arch
    for d, what in settings:
        res = compile_source(cand.source, arch=arch, defines=d, use_cache=not no_cache,
                             file_label=Path(source).name, headers=headers)
        check_compiled(res, file=source)     # what the program does, however it is spelled: exit 2 with the line
        r = res.resources
        target = f" (target {target_arch(arch)})" if target_arch(arch) != arch else ""
        click.echo(f"compiled {source}{what} for {arch}{target} with NVRTC {res.nvrtc_version} in {res.seconds * 1000:.1f} ms"
                   f"{' (cached)' if res.cached else ''}: {len(res.cubin)} bytes CUBIN, "
                   f"{r.get('registers', '?')} registers, {r.get('spill_stores', 0)} B spill stores, "
                   f"{r.get('stack', 0)} B stack, {r.get('smem', 0)} B static shared")
        if "registers" not in r:
            _no_kernel_note(cand.source)
        if mix:
            from kernel_forge.gpu.instruction_mix import mix_of, render
            click.echo(render(mix_of(cand.source, arch=arch, entry=None, defines=d, file_label=Path(source).name,
                                     headers=headers)))
    if output:
        from kernel_forge.common.writes import write_file
        write_file(output, res.cubin, private=False)
        click.echo(f"wrote {output}")


def _no_kernel_note(source: str) -> None:
    """Say why a compile made no kernel: template kernels that no ``// kforge: instance`` line names."""
    from kernel_forge.common.static_rules import strip_comments_and_strings
    from kernel_forge.model.kernel_heads import templated_heads
    from kernel_forge.model.template_instance import declared_instances

    named = declared_instances(source)
    left = sorted({h.name for h in templated_heads(strip_comments_and_strings(source, keep_strings=True))} - set(named))
    if left:
        click.echo(f"  no kernel was compiled: template kernel {', '.join(left)} runs as one instance, which no line "
                   f"names; add `// kforge: instance {left[0]}<...>`")


@cli.command("eval")
@click.argument("manifest", type=click.Path(dir_okay=False))
@click.argument("kernel", required=False, type=click.Path(dir_okay=False))
@gate_options
@click.option("--json", "json_out", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write the result as JSON to this file ('-' for stdout).")
@click.option("--no-initial", is_flag=True, help="Do not time the task's initial kernel for comparison.")
@click.option("--no-baselines", is_flag=True, help="Do not time the vendor baselines.")
@click.option("--holdout/--no-holdout", default=True, show_default=True, help="Also run the holdout cases.")
@click.option("--junit", "junit_out", type=click.Path(dir_okay=False),
              help="Write a JUnit XML report here: one test case per case.")
@click.pass_context
@handle_errors
def eval_cmd(ctx, manifest, kernel, quick, json_out, no_initial, no_baselines, holdout, junit_out, **params):
    """Compile, run, verify and time KERNEL (default: the task's initial kernel) on every case."""
    from kernel_forge.ci.evaluate import run_eval
    from kernel_forge.app.option_checks import check_output_path

    for path, option, kind in ((json_out, "--json", "json"), (junit_out, "--junit", "junit")):
        if path and path != "-":
            check_output_path(path, option=option, kind=kind, inputs=[manifest, kernel])
    try:
        options = gate_options_from(ctx, params, quick)
        result, table = run_eval(manifest, kernel, options, with_initial=not no_initial,
                                 with_baselines=not no_baselines, with_holdout=holdout,
                                 progress=lambda msg: click.echo(msg, err=True), gate_factory=_real_gate)
    except (Exception, KeyboardInterrupt) as exc:
        if junit_out:               # CI publishes the file either way: it says why eval could not run
            write_error_junit(junit_out, "eval", exc, str(kernel or manifest))
        raise
    echo_result(result, table, json_out)
    if junit_out:
        from kernel_forge.reports import junit
        junit.write(junit_out, junit.eval_suites(result))
        click.echo(f"wrote {junit_out}", err=json_out == "-")
    if not result["passed"]:
        sys.exit(CaseFailed.exit_code)


def _real_gate(task, options):
    from kernel_forge.ci import evaluate
    return evaluate.default_gate(task, options)   # looked up at call time (tests replace it)


# -- init --------------------------------------------------------------------------------------
def _describe_options():
    from kernel_forge.app.cli_options import build_options
    from kernel_forge.config.describe import DescribeConfig

    return build_options([("describe", DescribeConfig)],
                         reserved={"--from", "--signature", "--dir", "--force", "--describe", "--help", "-h"})


def _with_describe_options(f):
    from kernel_forge.app.cli_options import apply_options
    return apply_options(_describe_options())(f)


@cli.command("init")
@click.argument("name")
@click.option("--from", "from_file", type=click.Path(dir_okay=False), help="A .cu file holding the kernel NAME.")
@click.option("--signature", help='The kernel\'s signature: extern "C" __global__ void NAME(...).')
@click.option("--describe", "description", default=None,
              help="What the kernel computes, in words: a model (--model or --replay) writes the signature, cases, "
                   "tolerance, NumPy reference and a naive CUDA witness; nothing of it runs until you review it and "
                   "run kforge validate --accept, which checks them against each other.")
@click.option("--dir", "folder", default=".", show_default=True, type=click.Path(file_okay=False),
              help="Folder to write NAME.json, NAME.cu and NAME_reference.py into.")
@click.option("--force", is_flag=True, help="Overwrite files that already exist.")
@_with_describe_options
@click.pass_context
@handle_errors
def init_cmd(ctx, name, from_file, signature, description, folder, force, **params):
    """Start a new task: a manifest, a reference stub and the initial kernel, from a kernel file
    (--from) or a signature, with each argument's role guessed; then validate them.  Or, with
    --describe, a whole task written by a model, checked without running any of it; you review it,
    then kforge validate --accept runs its reference in a sandbox and its checks."""
    from kernel_forge.app.cli_options import given, layered
    from kernel_forge.authoring.from_kernel import init_task

    typed = given(ctx, _describe_options(), params).get("describe", {})
    if description is not None:
        if from_file is not None or signature is not None:
            raise InputError("--describe writes the whole task: give it without --from or --signature")
        from kernel_forge.authoring.from_description import describe_task
        from kernel_forge.config.describe import DescribeConfig

        cfg = layered(DescribeConfig, typed)
        res = describe_task(name, description, folder, cfg, force=force, progress=lambda m: click.echo(m, err=True))
        for path in res.written:
            click.echo(f"wrote {path}")
        for line in res.lines:
            click.echo(line)
        click.echo("next:")
        for line in res.next_steps:
            click.echo(f"  - {line}")
        return
    if typed:
        flags = {o.name: o.flag for o in _describe_options()}
        raise InputError(f"{', '.join(flags[k] for k in typed)}: only with --describe")
    result = init_task(name, folder, from_file=from_file, signature=signature, force=force)
    for path in result.written:
        click.echo(f"wrote {path}")
    for line in result.guesses:
        click.echo(f"  guessed: {line}")
    click.echo(result.status)
    if result.todo:
        click.echo("to fill in:")
        for line in result.todo:
            click.echo(f"  - {line}")


# -- mcp ---------------------------------------------------------------------------------------
@cli.command("mcp")
@click.option("--runs-dir", default="runs", show_default=True, type=click.Path(file_okay=False),
              help="Where runs started by the optimize tool go (and whose summaries are resources).")
@click.option("--allow", "allow", multiple=True, type=click.Path(exists=True, file_okay=False),
              help="A folder agents' paths may name besides the working folder and --runs-dir (repeatable).")
@handle_errors
def mcp_cmd(runs_dir, allow):
    """Serve kforge to coding agents over MCP (stdio): doctor, validate_manifest, eval_kernel,
    optimize, run_status, replay; run summaries and reports as resources. Every path an agent
    gives must resolve inside the working folder, --runs-dir or an --allow folder."""
    from kernel_forge.app.mcp_server import serve

    serve(runs_dir=runs_dir, allow=tuple(allow))


# The commands defined in their own modules, registered here by name: a broken import is an error,
# never a command that silently vanishes.
for _command in (cli_run.optimize, cli_run.replay, cli_run.approve, cli_run.gate_cmd, cli_run.report,
                 cli_archive.archive_group, cli_batch.batch):
    cli.add_command(_command)
