"""Runs of the optimisation loop on vector_add with the scripted gate, for the loop's tests and those
built on them: a run started through ``run_setup.start_run`` (replayed or model proposals), its
files read back, the model specs and keys the loopback server is talked to with."""
from __future__ import annotations

import json
from pathlib import Path

from kernel_forge.app.run_setup import start_run
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.config.loop_settings import LoopConfig
from kernel_forge.config.proposer import ProposerConfig
from kernel_forge.evidence.run_dir import RunDir, validate_file
from kernel_forge.model.task import load_task
from kernel_forge.proposers.models import make_model_proposer

from tests.support.fakes import ScriptedGate, vector_add, write_proposals
from tests.support.paths import MANIFESTS

MANIFEST = MANIFESTS / "vector_add.json"
ANTHROPIC_KEY = "sk-ant-test-secret-123456789"
OPENAI_KEY = "sk-test-secret-123456789"
SPECS = {"anthropic": "anthropic:claude-sonnet-5-5", "openai": "openai:gpt-6.2-sol"}
KEYS = {"anthropic": ANTHROPIC_KEY, "openai": OPENAI_KEY}
TUNED_HEADER = ("// kforge: grid = [cdiv(n, BLOCK)]\n// kforge: block = [BLOCK]\n"
                "// kforge: tune BLOCK = [64, 32, 128, 256, 512, 1024]")
#: four replayed proposals for the resume tests: fast, wrong, faster, slow
RESUME_PROPS = {"01_fast.cu": vector_add("pass 400"), "02_wrong.cu": vector_add("mismatch 350"),
                "03_faster.cu": vector_add("pass 300"), "04_slow.cu": vector_add("pass 800")}


def new_run(tmp_path: Path, sources=None, *, gate=None, proposer=None, prop: ProposerConfig | None = None,
            props_dir: Path | None = None, **loop):
    """A run started through optimize.start_run with the scripted gate (and a replay folder)."""
    task = load_task(MANIFEST)
    if sources is not None:
        props_dir = write_proposals(props_dir or tmp_path / "props", sources)
    if prop is None:
        prop = ProposerConfig(replay=str(props_dir)) if props_dir else ProposerConfig()
    loop.setdefault("archive", "off")      # runs in one test must not feed each other through the archive
    loop.setdefault("candidates", 1)       # these tests count proposals per iteration one by one
    return start_run(MANIFEST, LoopConfig(**loop), GateOptions(), prop, runs_dir=tmp_path / "runs",
                     gate=gate or ScriptedGate(task), proposer=proposer)


def read(run: RunDir | Path, name: str):
    path = run.path if isinstance(run, RunDir) else Path(run)
    return json.loads((path / name).read_text())


def validate_all(run: RunDir) -> list[str]:
    names = []
    for f in run.json_files():
        validate_file(f)
        names.append(f.name)
    return names


def outline(hist: dict) -> list[tuple]:
    return [(a["id"], a["label"], a["status"], a["reason"], a["best"], a["defines"]) for a in hist["attempts"]]


def model_proposer(provider: str, server, **kw):
    url = server.anthropic_base_url if provider == "anthropic" else server.openai_base_url
    return make_model_proposer(SPECS[provider], base_url=url, api_key=KEYS[provider], request_timeout_s=5, **kw)


def prompt_of(provider: str, body: dict) -> str:
    """The first user turn's text (content blocks joined: the static prefix is a block of its own)."""
    msgs = body.get("messages") or body["input"]
    content = next(m["content"] for m in msgs if m["role"] == "user")
    if isinstance(content, list):
        return "\n\n".join(b.get("text", "") for b in content if isinstance(b, dict))
    return content
