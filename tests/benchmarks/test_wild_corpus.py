"""The corpus of kernels from the wild (bench/wild): every manifest validates as ``kforge
validate`` sees it (exit 0, its reference run on the small cases), every kernel (naive, expert,
tuned) compiles with NVRTC for sm_90 as its project wrote it, defines the task's entry with the
manifest's exact signature, passes the static rules and launches legally on every case, and
SOURCES.md names each one with its project, commit and licence.  CPU only."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernel_forge.app.cli import cli
from kernel_forge.common import static_rules
from kernel_forge.gpu.nvrtc import compile_source
from kernel_forge.model.candidate import load_candidate
from kernel_forge.model.signature import check_matches, find_entry
from kernel_forge.model.task import load_task

ROOT = Path(__file__).resolve().parents[2]
WILD = ROOT / "bench" / "wild"
ENTRIES = sorted(d for d in WILD.iterdir() if d.is_dir())
KERNELS = [(d, f) for d in ENTRIES for f in ("naive.cu", "expert.cu", "tuned.cu") if (d / f).is_file()]


def manifest(d: Path) -> Path:
    found = list(d.glob("*.json"))
    assert len(found) == 1, f"{d}: one manifest expected, found {found}"
    return found[0]


def test_the_corpus_holds_at_least_twelve_kernels_most_with_their_projects_expert_version():
    assert len(ENTRIES) >= 12
    assert sum((d / "expert.cu").is_file() for d in ENTRIES) >= 9
    assert all((d / "naive.cu").is_file() and (d / "reference.py").is_file() for d in ENTRIES)


@pytest.mark.parametrize("d", ENTRIES, ids=[d.name for d in ENTRIES])
def test_every_corpus_manifest_validates_with_its_reference_run(d):
    res = CliRunner().invoke(cli, ["validate", str(manifest(d))])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("ok ") and "compiled for sm_90: naive.cu" in res.output
    task = load_task(manifest(d))
    assert task.initial.name == "naive.cu" and task.reference.path.name == "reference.py"
    small = [c.name for c in task.cases if c.role == "correctness"]
    assert not any(f"reference not run on {n}" in res.output for n in small)


@pytest.mark.parametrize("d, f", KERNELS, ids=[f"{d.name}/{f}" for d, f in KERNELS])
def test_every_corpus_kernel_compiles_with_nvrtc_and_carries_the_tasks_signature(d, f):
    task = load_task(manifest(d))
    cand = load_candidate(d / f)
    sig, _ = find_entry(cand.source, task.signature.name)
    check_matches(task.signature, sig)
    assert static_rules.check(cand.source) == []
    res = compile_source(cand.source, arch="sm_90", defines=cand.compile_defines(), file_label=f)
    assert res.cubin and "spill" not in res.log.replace("0 bytes spill", "")
    launch = cand.launch or task.launch
    for case in task.cases:
        grid, block, smem = launch.resolve({**case.vars, **cand.defines})
        assert all(g >= 1 for g in grid) and 1 <= block[0] * block[1] * block[2] <= 1024 and smem <= 48 * 1024


def test_sources_names_every_corpus_kernel_with_its_project_commit_and_licence():
    text = (WILD / "SOURCES.md").read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| (\w+) \|.*$", text, re.M)}
    for d in ENTRIES:
        assert d.name in rows, d.name
        row = rows[d.name]
        assert re.search(r"\| (MIT|BSD-3-Clause|Apache-2\.0)", row) or "BSD-3-Clause (semantics)" in row, row
        for f in ("naive.cu", "expert.cu"):
            if (d / f).is_file() and d.name != "blur3x3":
                head = (d / f).read_text()[:600]
                assert "github.com" in head or "written for this corpus" in head, f"{d.name}/{f}"
