"""A setting declared once reaches every entry point: the command line (optimize, eval, batch),
the config file, the run schema, MCP, and -- for a timing knob -- the GPU worker's plan, without
touching anything but its declaration."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kernel_forge.app.cli_run import optimize_options
from kernel_forge.config.sections import RUN_SECTIONS, command_line

ROOT = Path(__file__).resolve().parents[2]

#: a subprocess that adds a timing knob to the declaration before anything else imports it, as
#: if the field had been written in kernel_forge/config/gate_settings.py, then asks every entry point
NEW_KNOB = r'''
import dataclasses, json, random, sys, types
from click.testing import CliRunner
from kernel_forge.config import gate_settings as G
from kernel_forge.common.setting import setting

@dataclasses.dataclass
class TimingOptions(G.TimingOptions):
    widgets: int = setting(3, min=1, help="widgets to frob per timed launch")

@dataclasses.dataclass
class GateOptions(G.GateOptions, TimingOptions):
    pass

G.TimingOptions, G.GateOptions = TimingOptions, GateOptions

from kernel_forge.app.cli import cli
from kernel_forge.app.mcp_server import Service
from kernel_forge.common.errors import InputError
from kernel_forge.config import schema
from kernel_forge.gate.gate import Gate
from kernel_forge.model.worker_protocol import RunPlan

manifest, tmp = sys.argv[1], sys.argv[2]
runner = CliRunner()
out = {}
def said(*args):
    r = runner.invoke(cli, list(args), catch_exceptions=False)
    return [r.exit_code, r.stderr]
out["optimize --help"] = "--widgets INTEGER" in runner.invoke(cli, ["optimize", "--help"]).output
out["optimize"] = said("optimize", manifest, "--widgets", "0", "--runs-dir", tmp + "/runs")
out["eval"] = said("eval", manifest, "--widgets", "0")
out["batch"] = said("batch", manifest, "--widgets", "0", "--runs-dir", tmp + "/runs")
cfg = tmp + "/opt.json"
open(cfg, "w").write(json.dumps({"manifest": manifest, "gate": {"widgets": 0}}))
out["config"] = said("optimize", "--config", cfg, "--runs-dir", tmp + "/runs")
try:
    Service(tmp + "/runs").optimize(manifest, settings={"gate": {"widgets": 0}})
except InputError as exc:
    out["mcp"] = str(exc)
current = json.loads(schema.schema_path().read_text())
gate = schema.run_schema(current)["properties"]["gate"]
out["schema"] = [gate["properties"]["widgets"], "widgets" in gate["required"]]
opts = GateOptions(widgets=5)
fake = types.SimpleNamespace(options=opts, _rng=random.Random(0))
plan = Gate._plan(fake, types.SimpleNamespace(name="n16M"), 0, None, True)
out["worker"] = [type(plan) is RunPlan, plan.timing.widgets, RunPlan(case="c", seed=0).timing.widgets]
print(json.dumps(out))
'''


def test_every_setting_is_named_by_its_optimize_option_in_a_library_callers_message():
    flags = {(o.section, o.name): o.flag for o in optimize_options()}
    assert {k: v for k, v in command_line().flags.items() if k[0] != "describe"} == flags


def test_a_timing_knob_added_to_the_declaration_reaches_every_entry_point_and_the_worker(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    manifest = str(ROOT / "manifests" / "vector_add.json")
    p = subprocess.run([sys.executable, "-c", NEW_KNOB, manifest, str(tmp_path)], env=env, capture_output=True,
                       text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["optimize --help"] is True
    for command in ("optimize", "eval", "batch"):
        assert out[command] == [2, "kforge: error: --widgets 0: must be at least 1, got 0\n"], command
    assert out["config"] == [2, f"kforge: error: {tmp_path}/opt.json: $.gate.widgets: must be at least 1, got 0\n"]
    assert out["mcp"] == "settings: $.gate.widgets: must be at least 1, got 0"
    assert out["schema"] == [{"type": "integer", "minimum": 1, "default": 3,
                              "description": "Widgets to frob per timed launch. Absent in runs of earlier releases."},
                             False]
    assert out["worker"] == [True, 5, 3]           # handed to the worker whole, with no line that names it
    assert not (tmp_path / "runs").exists()


def test_roof_stop_is_declared_once_and_every_entry_point_takes_it_from_there():
    """The real option: `--roof-stop` (LoopConfig.roof_stop) is written in kernel_forge/config/loop_settings.py
    and read by its consumer (the loop's stop rule); nothing else in the package names it."""
    from kernel_forge.app.cli_batch import batch_options
    from kernel_forge.config import schema

    hits = {}
    for path in (ROOT / "kernel_forge").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if "roof_stop" in text or "roof-stop" in text:
            hits[str(path.relative_to(ROOT))] = text.count("roof_stop") + text.count("roof-stop")
    assert set(hits) - {"kernel_forge/app/mcp_server.py"} == {"kernel_forge/config/loop_settings.py",
                                                             "kernel_forge/search/stop_rules.py"}, hits
    assert hits["kernel_forge/config/loop_settings.py"] == 2              # the field, and --roof-stop in max_iterations' help
    for options in (optimize_options(), batch_options()):
        (opt,) = [o for o in options if o.name == "roof_stop"]
        assert opt.flag == "--roof-stop" and (opt.spec.min, opt.spec.max) == (0, 2)
    prop = schema.section_schema("loop", dict(RUN_SECTIONS)["loop"])["properties"]["roof_stop"]
    assert (prop["minimum"], prop["maximum"], prop["default"]) == (0, 2, 0.9)
