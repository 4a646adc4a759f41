"""The ``kforge`` command line. Thin: it fills option dataclasses, calls the library, prints,
and is the only place where exceptions become exit codes:
0 success, 1 a case or gate failed, 2 bad input, 3 environment (no GPU, driver, library)."""
from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

import click

from . import __version__
from .errors import CaseFailed, InputError, KForgeError


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
            if os.environ.get("KFORGE_DEBUG"):
                raise
            click.echo(f"kforge: internal error: {type(exc).__name__}: {exc}\n"
                       "  set KFORGE_DEBUG=1 for the traceback and please report it", err=True)
            sys.exit(4)
    return wrapper


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
    from .doctor import collect, render

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
@handle_errors
def validate(manifests, deep, strict, arch, no_compile, gpu_memory, quiet):
    """Check manifests without a GPU: schema, meaning, files, sizes, the kernels (static rules,
    signature, NVRTC), weak cases. Prints where each reference and data file resolves to."""
    from .preflight import check_value
    from .validate import validate_manifest

    check_value("arch", arch, str, where=f"--arch {arch!r}")
    if not gpu_memory > 0:
        raise InputError(f"--gpu-memory {gpu_memory}: must be above 0 GiB")
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
@click.option("--mix", is_flag=True, help="Also print the instruction mix (FFMA, LDS, LDG... with vector widths, "
              "whole kernel and hot loop), from SASS when nvdisasm is installed, else from PTX.")
@handle_errors
def compile_cmd(source, arch, defines, output, no_cache, mix):
    """Compile a kernel with NVRTC to CUBIN (works without a GPU when --arch is given). The
    static rules apply first: nothing they refuse (path includes, vendor libraries) reaches NVRTC."""
    from .candidate import load_candidate
    from .gpu.nvrtc import compile_source
    from .preflight import check_output_path, check_static

    if output:
        check_output_path(output, option="-o")
    cand = load_candidate(source)
    d = cand.compile_defines()
    for item in defines:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise InputError(f"--define {item!r}: expected NAME=VALUE")
        d[k] = v
    check_static(cand.source, file=source)
    if not arch:
        from .doctor import gpu_arch
        arch = gpu_arch()
    res = compile_source(cand.source, arch=arch, defines=d, use_cache=not no_cache,
                         file_label=Path(source).name)
    r = res.resources
    click.echo(f"compiled {source} for {arch} with NVRTC {res.nvrtc_version} in {res.seconds * 1000:.1f} ms"
               f"{' (cached)' if res.cached else ''}: {len(res.cubin)} bytes CUBIN, "
               f"{r.get('registers', '?')} registers, {r.get('spill_stores', 0)} B spill stores, "
               f"{r.get('stack', 0)} B stack, {r.get('smem', 0)} B static shared")
    if mix:
        from .instruction_mix import mix_of, render
        click.echo(render(mix_of(cand.source, arch=arch, entry=None, defines=d, file_label=Path(source).name)))
    if output:
        Path(output).write_bytes(res.cubin)
        click.echo(f"wrote {output}")


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
    from .gate import GateOptions

    kw = dict(warmup=warmup, reps=reps, max_noise=max_noise, flush_l2=not no_flush, seed=seed,
              launch_timeout_s=timeout, arch=arch, sanitize=sanitize)
    return GateOptions.quick(**kw) if quick else GateOptions(**kw)


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
@handle_errors
def eval_cmd(manifest, kernel, warmup, reps, max_noise, no_flush, seed, quick, timeout, arch, sanitize,
             json_out, no_initial, no_baselines, holdout, junit_out):
    """Compile, run, verify and time KERNEL (default: the task's initial kernel) on every case."""
    from .evaluate import run_eval
    from .preflight import check_output_path

    for path, option in ((json_out, "--json"), (junit_out, "--junit")):
        if path and path != "-":
            check_output_path(path, option=option)
    options = make_gate_options(warmup, reps, max_noise, no_flush, seed, quick, timeout, arch, sanitize)
    result, table = run_eval(manifest, kernel, options, with_initial=not no_initial,
                             with_baselines=not no_baselines, with_holdout=holdout,
                             progress=lambda msg: click.echo(msg, err=True), gate_factory=_real_gate)
    echo_result(result, table, json_out)
    if junit_out:
        from . import junit
        junit.write(junit_out, junit.eval_suites(result))
        click.echo(f"wrote {junit_out}", err=json_out == "-")
    if not result["passed"]:
        sys.exit(CaseFailed.exit_code)


def _real_gate(task, options):
    from . import evaluate
    return evaluate.default_gate(task, options)   # looked up at call time (tests replace it)


# -- init --------------------------------------------------------------------------------------
@cli.command("init")
@click.argument("name")
@click.option("--from", "from_file", type=click.Path(dir_okay=False), help="A .cu file holding the kernel NAME.")
@click.option("--signature", help='The kernel\'s signature: extern "C" __global__ void NAME(...).')
@click.option("--dir", "folder", default=".", show_default=True, type=click.Path(file_okay=False),
              help="Folder to write NAME.json, NAME.cu and NAME_reference.py into.")
@click.option("--force", is_flag=True, help="Overwrite files that already exist.")
@handle_errors
def init_cmd(name, from_file, signature, folder, force):
    """Start a new task: a manifest, a reference stub and the initial kernel, from a kernel file
    (--from) or a signature, with each argument's role guessed; then validate them."""
    from .init import init_task

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
@handle_errors
def mcp_cmd(runs_dir):
    """Serve kforge to coding agents over MCP (stdio): doctor, validate_manifest, eval_kernel,
    optimize, run_status, replay; run summaries and reports as resources."""
    from .mcp_server import serve

    serve(runs_dir=runs_dir)


def echo_result(result: dict, table: str, json_out: str | None) -> None:
    """The table on stdout, or the JSON (``-``: on stdout instead of the table; a path: written too)."""
    if json_out == "-":
        click.echo(json.dumps(result, indent=2, default=str))
        return
    click.echo(table)
    if json_out:
        Path(json_out).write_text(json.dumps(result, indent=2, default=str))
        click.echo(f"wrote {json_out}")


def main(argv=None):
    cli.main(args=argv, prog_name="kforge", standalone_mode=True)


def _register_optional():
    """Commands that live in other modules register themselves here (keeps this file thin)."""
    try:
        from . import cli_loop  # noqa: F401  (registers its commands)
    except ImportError:
        pass
    from . import cli_archive  # noqa: F401,E402  (registers `kforge archive`)
    from . import cli_batch  # noqa: F401  (registers `kforge batch`)


_register_optional()
