"""A manifest's ``templates`` (model/task.py): a kernel of kforge's library by its name
(``KIND/NAME``), or a file of the user's own by its path relative to the manifest."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_forge.common.errors import ManifestError
from kernel_forge.kernels import library
from kernel_forge.model.task import load_task

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"


def manifest(tmp_path: Path, templates: list) -> Path:
    """The bundled vector_add task, written in ``tmp_path`` (its files named by absolute path), with ``templates``."""
    data = json.loads((MANIFESTS / "vector_add.json").read_text())
    data["reference"] = {"python": str(MANIFESTS / data["reference"]["python"])}
    data["baselines"] = {k: {"python": str(MANIFESTS / v["python"])} for k, v in data.get("baselines", {}).items()}
    data["initial"] = str(MANIFESTS / data["initial"])
    data.pop("$schema", None)
    data["templates"] = templates
    path = tmp_path / "task.json"
    path.write_text(json.dumps(data))
    return path


def refused(path) -> ManifestError:
    with pytest.raises(ManifestError) as info:
        load_task(path)
    return info.value


def test_a_library_name_resolves_to_the_library_s_file_wherever_the_manifest_is(tmp_path):
    task = load_task(manifest(tmp_path, ["elementwise/vector_add_vec4", "elementwise/elementwise_vec"]))
    assert task.templates == (library.by_name("vector_add_vec4").path, library.by_name("elementwise_vec").path)
    assert task.templates[0] == ROOT / "kernel_forge" / "kernels" / "elementwise" / "vector_add_vec4.cu"


def test_a_file_of_one_s_own_is_named_by_its_path_and_wins_over_a_library_name(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "fast.cu").write_text("// mine\n")
    (tmp_path / "elementwise").mkdir()
    (tmp_path / "elementwise" / "vector_add_vec4").write_text("// a file without an extension, beside the manifest\n")
    task = load_task(manifest(tmp_path, ["mine/fast.cu", "elementwise/vector_add_vec4"]))
    assert task.templates == ((tmp_path / "mine" / "fast.cu").resolve(),
                              (tmp_path / "elementwise" / "vector_add_vec4").resolve())


def test_a_library_name_the_library_does_not_hold_is_refused_naming_the_json_path_and_the_kernels(tmp_path):
    exc = refused(manifest(tmp_path, ["elementwise/vector_add_vec4", "gemm/nothing_here"]))
    assert exc.json_path == "$.templates[1]" and exc.exit_code == 2
    assert "no kernel named gemm/nothing_here in kforge's library" in str(exc)
    assert "gemm/matmul_f32_tiled" in exc.hint and "row_norm/rownorm_layernorm" in exc.hint and "gemm/gemm," not in exc.hint


def test_a_bound_template_cannot_be_listed_as_it_is(tmp_path):
    exc = refused(manifest(tmp_path, ["row_norm/row_norm"]))
    assert exc.json_path == "$.templates[0]" and "bound template" in str(exc)


def test_a_name_that_is_neither_a_library_name_nor_a_cu_file_is_refused_by_the_schema(tmp_path):
    exc = refused(manifest(tmp_path, ["Gemm/Tiled"]))
    assert exc.json_path == "$.templates[0]"


def test_the_paths_bundled_manifests_of_earlier_releases_used_still_name_the_library_s_kernels(tmp_path):
    """Recorded runs keep the manifest they ran with: templates/NAME.cu and ../kernel_forge/patterns/NAME.cu."""
    task = load_task(manifest(tmp_path, ["../kernel_forge/patterns/elementwise_vec.cu", "templates/vector_add_vec4.cu"]))
    assert task.templates == (library.by_name("elementwise/elementwise_vec").path,
                              library.by_name("elementwise/vector_add_vec4").path)
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "vector_add_vec4.cu").write_text("// the user's own, beside the manifest\n")
    assert load_task(manifest(tmp_path, ["templates/vector_add_vec4.cu"])).templates == (
        (tmp_path / "templates" / "vector_add_vec4.cu").resolve(),)
    for missing in ("templates/mine.cu", "templates/row_norm.cu", "other/vector_add_vec4.cu"):
        assert refused(manifest(tmp_path, [missing])).json_path == "$.templates[0]", missing


def test_kforge_validate_exits_2_naming_the_file_and_the_json_path_of_an_unknown_library_kernel(tmp_path):
    from click.testing import CliRunner

    from kernel_forge.app.cli import cli

    path = manifest(tmp_path, ["elementwise/vector_add_vec4", "elementwise/vector_add_vec8"])
    before = sorted(p.name for p in tmp_path.iterdir())
    res = CliRunner().invoke(cli, ["validate", "--no-compile", str(path)])
    assert res.exit_code == 2, res.output
    assert f"{path}: $.templates[1]: no kernel named elementwise/vector_add_vec8" in res.output
    assert "Traceback" not in res.output and sorted(p.name for p in tmp_path.iterdir()) == before
