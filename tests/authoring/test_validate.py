"""Tests of kernel_forge/authoring/validate.py: what `kforge validate` checks of a manifest, and what it says."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from kernel_forge.app.cli import cli
from kernel_forge.authoring.validate import Validation, generated_witness, validate_manifest
from kernel_forge.common.errors import InputError, ManifestError
from kernel_forge.gate import preflight

from tests.support.task_folders import make_task

ROOT = Path(__file__).resolve().parents[2]



def edit(manifest: Path, fn) -> Path:
    data = json.loads(manifest.read_text())
    fn(data)
    manifest.write_text(json.dumps(data, indent=2))
    return manifest


@pytest.fixture
def kforge():
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_validate_prints_where_files_resolve_and_marks_those_outside(kforge, tmp_path):
    m = make_task(tmp_path / "task")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.move(m.parent / "vector_add.py", outside / "ref.py")
    np.save(m.parent / "a.npy", np.random.default_rng(0).standard_normal(37).astype(np.float32))

    def change(d):
        d["reference"] = {"python": "../elsewhere/ref.py:reference"}
        d["cases"] = [c for c in d["cases"] if c["name"] == "tiny"] + [
            {"name": "perf", "role": "performance", "vars": {"n": 37}}]
        d["args"]["a"]["init"] = {"kind": "npy", "path": "a.npy"}
    edit(m, change)
    r = kforge("validate", "--no-compile", m)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert f"  reference  {outside / 'ref.py'}:reference  (outside the manifest's folder)" in lines
    assert f"  npy a      {m.parent / 'a.npy'}" in lines
    assert f"  initial    {m.parent / 'vector_add.cu'}" in lines


def test_validate_never_allocates_a_large_case(kforge, tmp_path):
    """Half a billion elements took 15 s and 6.4 GB; now sizes are estimated and the reference is
    not run on it (it is over the quick limit and --deep is not given)."""
    import resource

    m = edit(make_task(tmp_path / "task"), lambda d: d["cases"].append(
        {"name": "n500M", "role": "performance", "vars": {"n": 5 * 10**8}}))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    r = kforge("validate", "--no-compile", m)
    assert r.exit_code == 0, r.output
    assert time.perf_counter() - t0 < 10
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 1_000_000, f"peak memory grew by {grown_kib} KiB"
    assert "reference not run on n16M, n64M, holdout, n500M: over 4194304 elements" in r.stdout


def test_deep_validation_runs_references_only_on_cases_that_fit(kforge, tmp_path, monkeypatch):
    m = make_task(tmp_path / "task")
    # 3 GiB: every case fits (n64M needs 2.3 GiB), but only those under half of it are run deep
    monkeypatch.setattr(preflight, "host_memory", lambda: 3 * 2**30)
    r = kforge("validate", "--no-compile", "--deep", m)
    assert r.exit_code == 0, r.output
    assert "reference not run on n64M: too large for this host's memory" in r.stdout
    assert "n16M" not in r.stdout


def test_the_lines_under_the_ok_line_say_where_files_are_what_was_compiled_and_what_was_not_run():
    v = Validation(task=None, resolved=[("reference", "/x/ref.py:reference", True), ("initial", "/t/k.cu", False)],
                   arch="sm_90", compiled=[("k.cu", {"registers": 32, "spill_stores": 8}), ("t.cu", {})],
                   skipped=[("n16M", "over 4194304 elements"), ("big", "too large"), ("n64M", "over 4194304 elements")],
                   kind="kind: elementwise", notes=["no initial kernel: ..."])
    assert v.lines() == ["reference  /x/ref.py:reference  (outside the manifest's folder)",
                         "initial    /t/k.cu",
                         "compiled for sm_90: k.cu (32 registers, 8 B spill stores), t.cu (? registers)",
                         "reference not run on n16M, n64M: over 4194304 elements",
                         "reference not run on big: too large",
                         "kind: elementwise",
                         "no initial kernel: ..."]
    assert Validation(task=None, not_compiled="--no-compile").lines() == ["not compiled: --no-compile"]
    task, warnings = Validation(task="t", warnings=["w"])           # the older (task, warnings) pair
    assert (task, warnings) == ("t", ["w"])


def test_a_bad_arch_is_refused_before_the_manifest_is_read_named_as_the_caller_spells_it(tmp_path):
    with pytest.raises(InputError) as info:
        validate_manifest(tmp_path / "missing.json", arch="sm_9x", arch_where="arch")
    assert str(info.value) == "arch: must be like sm_90, got 'sm_9x'"


def test_without_compiling_the_report_says_why_and_files_resolve_inside_the_task_folder(tmp_path):
    m = make_task(tmp_path / "task")
    v = validate_manifest(m, compile=False, reference=False)
    assert (v.arch, v.not_compiled, v.compiled, v.warnings) == (None, "--no-compile", [], [])
    assert v.resolved == [("reference", f"{m.parent / 'vector_add.py'}:reference", False),
                          ("initial", str(m.parent / "vector_add.cu"), False)]
    assert validate_manifest(m, arch=None, reference=False).not_compiled == "no arch given"


def test_a_task_without_an_initial_kernel_is_noted_as_starting_from_a_translation(tmp_path):
    m = make_task(tmp_path / "task")
    edit(m, lambda d: d.pop("initial"))
    v = validate_manifest(m, compile=False, reference=False)
    assert v.notes[0].startswith("no initial kernel: the first proposals translate the reference, and the first "
                                 "translation that passes the gate and the holdout becomes the baseline")
    assert [what for what, _, _ in v.resolved] == ["reference"]


def test_a_generated_task_s_witness_must_be_there(tmp_path):
    task = SimpleNamespace(generated={"witness": "relu_witness.cu"}, path=tmp_path / "relu.json")
    with pytest.raises(ManifestError) as info:
        generated_witness(task)
    assert str(info.value) == (f"{tmp_path / 'relu.json'}: $.generated.witness: the witness kernel relu_witness.cu is "
                               f"missing (looked in {tmp_path / 'relu_witness.cu'})\n  hint: restore it from the "
                               "exchange folder, or run kforge init --describe again")
    (tmp_path / "relu_witness.cu").write_text("// witness\n")
    assert generated_witness(task) == (tmp_path / "relu_witness.cu").resolve()
    assert generated_witness(SimpleNamespace(generated=None, path=task.path)) is None
    assert generated_witness(SimpleNamespace(generated={"witness": None}, path=task.path)) is None


def test_a_template_for_hopper_alone_is_compiled_for_sm_90_and_named_not_checked_for_another_arch(tmp_path):
    """gemm_f16_wgmma stops itself unless compiled for sm_90a: validate --arch sm_90 compiles it (kforge
    asks NVRTC for sm_90a there); for sm_86 it says so instead of failing on the launch or the compile."""
    root = Path(__file__).resolve().parents[2]
    raw = json.loads((root / "manifests" / "matmul_f16.json").read_text())
    raw["templates"] = [str(root / "kernel_forge" / "kernels" / "gemm" / "gemm_f16_wgmma.cu")]
    raw["reference"]["python"] = str(root / "references" / "matmul_f16.py") + ":reference"
    raw["baselines"] = {}
    raw["initial"] = str(root / "manifests" / "matmul_f16.cu")
    raw.pop("$schema", None)
    (tmp_path / "t.json").write_text(json.dumps(raw))
    if preflight.nvrtc_available():
        pytest.skip("NVRTC is not available here")
    other = validate_manifest(tmp_path / "t.json", arch="sm_86", reference=False)
    assert [n for n in other.notes if "gemm_f16_wgmma.cu is for sm_90a only" in n and "not checked for sm_86" in n]
    assert [k for k, _ in other.compiled] == ["matmul_f16.cu"]
    hopper = validate_manifest(tmp_path / "t.json", arch="sm_90", reference=False)
    assert [k for k, _ in hopper.compiled] == ["matmul_f16.cu", "gemm_f16_wgmma.cu"]
    assert not [n for n in hopper.notes if "only" in n]
