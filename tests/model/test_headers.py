"""kernel_forge/model/headers.py: the task's own headers, checked at load and again when read."""
from __future__ import annotations

from pathlib import Path

import pytest

from kernel_forge.common.errors import IncludeRefused, ManifestError
from kernel_forge.model import headers
from kernel_forge.model.task import load_task
from tests.support.task_folders import task_with_headers

ROOT = Path(__file__).resolve().parents[2]
SECRET = "TOPSECRET_k3y_9f2c"


@pytest.fixture
def world(tmp_path):
    """A folder beside the task's holding a secret."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "token.txt").write_text(SECRET + "\n")
    return {"outside": outside}


def test_a_header_that_is_a_symlink_out_of_the_task_folder_is_refused_at_load(world, tmp_path):
    manifest = task_with_headers(tmp_path, ["common.cuh"])
    (manifest.parent / "common.cuh").symlink_to(world["outside"] / "token.txt")
    with pytest.raises(ManifestError) as info:
        load_task(manifest)
    assert info.value.json_path == "$.headers[0]" and "outside the task's folder" in info.value.message
    assert SECRET not in str(info.value)


def test_a_missing_header_is_refused_at_load_naming_the_json_path(world, tmp_path):
    manifest = task_with_headers(tmp_path, ["nope.cuh"])
    with pytest.raises(ManifestError) as info:
        load_task(manifest)
    assert info.value.json_path == "$.headers[0]" and "not found" in info.value.message


def test_a_header_named_by_a_parent_path_is_refused_at_load(world, tmp_path):
    manifest = task_with_headers(tmp_path, ["../outside/token.txt"])
    with pytest.raises(ManifestError) as info:
        load_task(manifest)
    assert "outside the task's folder" in info.value.message


def test_a_header_swapped_for_a_symlink_after_load_is_refused_when_read(world, tmp_path):
    manifest = task_with_headers(tmp_path, ["common.cuh"])
    (manifest.parent / "common.cuh").write_text("// fine\n")
    task = load_task(manifest)
    (manifest.parent / "common.cuh").unlink()
    (manifest.parent / "common.cuh").symlink_to(world["outside"] / "token.txt")
    with pytest.raises(IncludeRefused):
        task.header_sources()


def test_a_header_must_be_named_by_a_relative_path(tmp_path):
    for name in ("/etc/passwd", "C:common.cuh", "\\\\server\\common.cuh", ""):
        assert headers.problem(tmp_path, name) == f"{name!r} must be a path relative to the manifest's folder"


def test_a_header_must_be_a_regular_file_of_at_most_a_mebibyte(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "big.cuh").write_bytes(b"/" * (headers.MAX_BYTES + 1))
    (tmp_path / "ok.cuh").write_bytes(b"/" * headers.MAX_BYTES)
    assert headers.problem(tmp_path, "sub") == "sub is not a regular file"
    assert headers.problem(tmp_path, "big.cuh") == "big.cuh is larger than 1048576 bytes"
    assert headers.problem(tmp_path, "ok.cuh") is None
    assert headers.problem(tmp_path, "gone.cuh") == f"header not found: gone.cuh (looked for {tmp_path / 'gone.cuh'})"


def test_resolve_names_the_json_path_of_the_first_bad_header(tmp_path):
    (tmp_path / "a.cuh").write_text("// a\n")
    assert headers.resolve(tmp_path, ["a.cuh"], "t.json") == ("a.cuh",)
    with pytest.raises(ManifestError) as info:
        headers.resolve(tmp_path, ["a.cuh", "b.cuh"], "t.json")
    assert info.value.json_path == "$.headers[1]" and info.value.file == "t.json"
    assert info.value.message.startswith("t.json: $.headers[1]: header not found: b.cuh")
    assert "in the manifest's folder" in info.value.hint


def test_read_gives_each_header_s_text_and_refuses_one_that_is_not_utf8(tmp_path):
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "a.cuh").write_text("#define A 1\n")
    (tmp_path / "bad.cuh").write_bytes(b"\xff\xfe not text")
    assert headers.read(tmp_path, ("inc/a.cuh",)) == {"inc/a.cuh": "#define A 1\n"}
    with pytest.raises(IncludeRefused, match="^task header bad.cuh cannot be read as UTF-8 text"):
        headers.read(tmp_path, ("bad.cuh",))
