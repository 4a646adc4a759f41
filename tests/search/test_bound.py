"""kernel_forge.search.bound: the task's kind's patterns bound to its signature and written where the tuner
finds them, each first gated at its default setting (gate_source, gate_label)."""
from __future__ import annotations

from pathlib import Path

from kernel_forge.model.task import load_task
from kernel_forge.search.bound import bound_templates, folder, gate_label, gate_source, is_bound_label

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
DATA = ROOT / "tests" / "data" / "kinds"


def test_the_gated_setting_pins_each_tunable_to_its_first_value_and_drops_the_constraints():
    template = ("// kforge: grid = [cdiv(n, BLOCK * ITEMS)]\n"
                "// kforge: tune BLOCK = [256 , 128, 512]\n"
                "  //kforge:tune ITEMS=[ 4,8]\n"
                "// kforge: constraint BLOCK * ITEMS <= 4096\n"
                "__global__ void k() {}")
    assert gate_source(template) == ("// kforge: grid = [cdiv(n, BLOCK * ITEMS)]\n"
                                     "// kforge: define BLOCK = 256\n"
                                     "// kforge: define ITEMS = 4\n"
                                     "__global__ void k() {}\n")
    assert gate_label(Path("/cache/kernel_forge/bound/0123/bound_row_norm.cu")) == "gate:bound_row_norm.cu"


def test_a_bound_pattern_s_attempts_are_told_from_the_task_s_own_kernels_by_their_label(tmp_path):
    task = load_task(DATA / "llmc_layernorm.json")
    [path] = bound_templates(task, [], where=tmp_path).templates
    assert is_bound_label(path.name) and is_bound_label(gate_label(path))      # its settings, and its gate
    for own in ("naive.cu", "tuned.cu", "layernorm_forward.cu", "rownorm_layernorm.cu", "best.cu"):
        assert not is_bound_label(own)


def test_bound_patterns_are_written_beside_the_compile_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert folder() == tmp_path / "xdg" / "kernel_forge" / "bound"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert folder() == tmp_path / "home" / ".cache" / "kernel_forge" / "bound"


def test_a_task_of_a_known_kind_gets_its_pattern_bound_and_written_under_its_source_s_hash(tmp_path):
    task = load_task(DATA / "llmc_layernorm.json")
    found = bound_templates(task, [], where=tmp_path)
    [path] = found.templates
    assert path.parent.parent == tmp_path and len(path.parent.name) == 16 and path.name == "bound_row_norm.cu"
    assert found.match.kind == "row_norm" and found.notes[0].startswith("kind: row_norm (x=inp, y=out")
    assert found.notes[-1] == ("bound patterns: bound_row_norm.cu (each gated at its default setting before its "
                               "settings are searched)")
    assert "__global__" in path.read_text() and "// kforge: tune" in path.read_text()
    again = bound_templates(task, [], where=tmp_path)
    assert again.templates == [path]                            # the same source: the same file


def test_a_bound_pattern_that_cannot_be_written_is_noted_not_raised(tmp_path):
    (tmp_path / "blocker").write_text("a file where the folder should be")
    found = bound_templates(load_task(DATA / "llmc_layernorm.json"), [], where=tmp_path / "blocker")
    assert found.templates == [] and found.match is not None
    assert found.notes[-1].startswith(f"bound patterns: cannot write {tmp_path / 'blocker'}/")


# moved from tests/kinds/test_kinds.py
def test_a_task_whose_templates_hold_its_kind_s_pattern_gets_no_bound_copy(tmp_path):
    task = load_task(MANIFESTS / "layernorm.json")
    found = bound_templates(task, task.templates, where=tmp_path)
    assert found.templates == [] and any("not needed" in n for n in found.notes)
    none = bound_templates(load_task(DATA / "sort_rows.json"), [], where=tmp_path)
    assert none.templates == [] and none.match is None
