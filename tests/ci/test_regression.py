"""examples/ci/: the GitHub Actions workflow parses, and every kforge command in it is one the
CLI has, with options the command takes (checked by click's own parser, not by eye)."""
from __future__ import annotations

import shlex
from pathlib import Path

import click
import pytest

yaml = pytest.importorskip("yaml")

from kernel_forge.app.cli import cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "examples" / "ci" / "kforge.yml"


def kforge_commands(text: str) -> list[list[str]]:
    """Every ``kforge ...`` command line in a workflow's ``run:`` scripts, as argument lists."""
    doc = yaml.safe_load(text)
    out = []
    for job in doc["jobs"].values():
        for step in job.get("steps", []):
            script = step.get("run")
            if not script:
                continue
            for line in script.replace("\\\n", " ").splitlines():
                words = shlex.split(line, comments=True)
                if words and words[0] == "kforge":
                    out.append(words[1:])
    return out


def check_command(words: list[str]) -> None:
    """Parse ``kforge WORDS`` with click without running it: raises click.UsageError if the
    command or an option does not exist or a value is malformed."""
    name, *rest = words
    cmd = cli.get_command(click.Context(cli), name)
    if cmd is None:
        raise click.UsageError(f"no such command: kforge {name}")
    ctx = cmd.make_context(f"kforge {name}", list(rest), resilient_parsing=False)
    ctx.close()


def test_the_workflow_parses_and_has_the_three_parts():
    doc = yaml.safe_load(WORKFLOW.read_text())
    assert set(doc["jobs"]) == {"validate", "gate"}
    assert doc["jobs"]["validate"]["runs-on"] == "ubuntu-latest"             # CPU runners
    assert doc["jobs"]["gate"]["runs-on"] == ["self-hosted", "gpu"]           # a self-hosted GPU runner
    on = doc.get("on", doc.get(True))                                         # YAML 1.1 reads `on:` as True
    assert {"push", "pull_request"} <= set(on)
    steps = doc["jobs"]["gate"]["steps"]
    published = [s for s in steps if "junit" in str(s.get("uses", "")).lower()]
    assert published and published[0]["with"]["report_paths"] == "kforge-junit.xml"
    assert published[0]["if"] == "always()"


def test_every_kforge_command_in_it_is_real():
    commands = kforge_commands(WORKFLOW.read_text())
    assert [c[0] for c in commands] == ["validate", "compile", "doctor", "gate"]
    for words in commands:
        check_command(words)
    gate = next(c for c in commands if c[0] == "gate")
    assert "--junit" in gate and gate[gate.index("--junit") + 1] == "kforge-junit.xml"


@pytest.mark.parametrize("line", ["kforge gate approved.json --junit-xml out.xml", "kforge validatee manifests/x.json",
                                  "kforge eval m.json --reps many"])
def test_the_check_catches_a_wrong_command(line):
    with pytest.raises(click.UsageError):
        for words in kforge_commands(f"jobs:\n  j:\n    steps:\n      - run: {line}\n"):
            check_command(words)
