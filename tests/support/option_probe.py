"""A click command with kforge optimize's generated options that prints the configurations
``resolve_configs`` makes of its options and a --config file: how option tests read what a command
line resolves to."""
from __future__ import annotations

import dataclasses
import json

import click
from click.testing import CliRunner

from kernel_forge.app.cli_common import handle_errors
from kernel_forge.app.cli_options import apply_options
from kernel_forge.app.cli_run import optimize_options, resolve_configs
from kernel_forge.config.file import load_config_file
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.config.proposer import ProposerConfig

SECTIONS = [("loop", LoopConfig), ("proposer", ProposerConfig), ("gate", GateOptions)]


def probe(sections=SECTIONS):
    """A command with the generated options that prints the configurations resolve_configs makes."""
    options = optimize_options(sections)

    @click.command()
    @click.option("--config", "config_file")
    @click.option("--quick", is_flag=True)
    @apply_options(options)
    @click.pass_context
    @handle_errors
    def cmd(ctx, config_file, quick, **params):
        cfg = load_config_file(config_file) if config_file else {}
        conf = resolve_configs(ctx, params, cfg, quick=quick, sections=sections, options=options)
        click.echo(json.dumps({k: dataclasses.asdict(v) for k, v in conf.items()}))

    return cmd


def run_probe(*args, sections=SECTIONS):
    r = CliRunner().invoke(probe(sections), [str(a) for a in args], catch_exceptions=False)
    return r, (json.loads(r.stdout) if r.exit_code == 0 else None)
