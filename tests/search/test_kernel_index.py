"""The run's kernels by content (search/kernel_index.py): the first attempt with each kernel, the
settings of a tunable kernel already tried, and a kernel that never parsed left out."""
from __future__ import annotations

from pathlib import Path

from kernel_forge.evidence.run_dir import RunDir
from kernel_forge.model.candidate import parse_candidate
from kernel_forge.model.task import load_task
from kernel_forge.records.attempt import Attempt
from kernel_forge.search.kernel_index import KernelIndex

from tests.support.fakes import vector_add

MANIFEST = Path(__file__).resolve().parents[2] / "manifests" / "vector_add.json"
TUNED = "// kforge: tune BLOCK = [128, 256, 512]\n" + vector_add("pass 500")


def index(tmp_path) -> tuple[KernelIndex, RunDir]:
    run = RunDir.create(tmp_path)
    return KernelIndex(load_task(MANIFEST), run), run


def recorded(run: RunDir, i: int, source: str, **kw) -> Attempt:
    a = Attempt(id=f"a{i:04d}", iteration=1, proposer="scripted", source_file=f"attempts/a{i:04d}.cu", **kw)
    run.write_text(a.source_file, source)
    return a


def test_the_first_attempt_with_a_kernel_is_the_one_a_duplicate_names(tmp_path):
    kernels, run = index(tmp_path)
    first, again = recorded(run, 0, vector_add("pass 500")), recorded(run, 1, vector_add("pass 500", note="same"))
    kernels.remember(first)
    kernels.remember(again)
    assert kernels.first_with(kernels.candidate(again)) == "a0000"
    assert kernels.body(first) == kernels.body(again)


def test_the_settings_of_a_tunable_kernel_already_tried_are_excluded(tmp_path):
    kernels, run = index(tmp_path)
    cand = parse_candidate(TUNED, name="t.cu")
    tried = []
    for i, block in enumerate((128, 512)):
        a = recorded(run, i, cand.with_defines({"BLOCK": block}).render(), defines={"BLOCK": block})
        kernels.remember(a)
        tried.append(a)
    assert kernels.tried(cand, tried) == {(("BLOCK", 128),), (("BLOCK", 512),)}
    assert kernels.first_with(cand.with_defines({"BLOCK": 512})) == "a0001"


def test_a_kernel_whose_own_setting_is_new_is_named_by_the_first_with_another_of_its_settings(tmp_path):
    kernels, run = index(tmp_path)
    cand = parse_candidate(TUNED, name="t.cu")
    assert cand.defines == {"BLOCK": 128}
    kernels.remember(recorded(run, 0, cand.with_defines({"BLOCK": 256}).render(), defines={"BLOCK": 256}))
    assert kernels.first_with(cand) == "a0000"


def test_a_kernel_that_never_parsed_is_not_indexed(tmp_path):
    kernels, run = index(tmp_path)
    bad = recorded(run, 0, "not a kernel", reason="bad_candidate")
    kernels.remember(bad)
    assert kernels.body(bad) == "a0000" and kernels.seen == {}
    assert kernels.source_or_none(bad) == "not a kernel" and kernels.source_or_none(None) is None
