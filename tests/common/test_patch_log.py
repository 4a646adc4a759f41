"""A JSON document kept as an append-only log of patches (common/patch_log.py): folding, a torn last
line dropped, a damaged complete line named by file and line."""
from __future__ import annotations

import pytest

from kernel_forge.common.errors import InputError
from kernel_forge.common.patch_log import fold, line, read_log


def test_a_record_replaces_the_one_with_its_id_and_new_ones_join_the_end():
    doc = fold([{"task": "t", "state": {"iteration": 0}, "attempts": [{"id": "a0", "status": "pending"}]},
                {"state": {"iteration": 1}, "attempts": [{"id": "a1", "status": "pending"}]},
                {"state": {"iteration": 2}, "attempts": [{"id": "a0", "status": "passed"}, {"id": "a2"}]}])
    assert doc == {"task": "t", "state": {"iteration": 2},
                   "attempts": [{"id": "a0", "status": "passed"}, {"id": "a1", "status": "pending"}, {"id": "a2"}]}


def test_no_line_folds_to_nothing():
    assert fold([]) is None


def write_log(path, patches, tail: bytes = b""):
    path.write_bytes(b"".join(line(p) for p in patches) + tail)
    return path


def test_a_line_cut_mid_write_is_dropped_and_its_bytes_counted(tmp_path):
    whole = line({"attempts": [{"id": "a1", "status": "passed", "message": "µs"}]})
    cut = whole[:whole.index("µ".encode()) + 1]          # inside a two-byte character, as a kill may leave it
    p = write_log(tmp_path / "h.jsonl", [{"task": "t", "attempts": [{"id": "a0"}]}], cut)
    got = read_log(p, "attempt log")
    assert got.document == {"task": "t", "attempts": [{"id": "a0"}]}
    assert (got.lines, got.torn_bytes) == (1, len(cut))


def test_a_complete_last_line_is_read(tmp_path):
    p = write_log(tmp_path / "h.jsonl", [{"task": "t", "attempts": []}, {"attempts": [{"id": "a0"}]}])
    got = read_log(p, "attempt log")
    assert got.document["attempts"] == [{"id": "a0"}] and (got.lines, got.torn_bytes) == (2, 0)


@pytest.mark.parametrize("bad, found", [
    (b'{"attempts": [\n', "damaged line at column"),
    (b'[1, 2]\n', "expected a JSON object, found list"),
    (b'{"attempts": 5}\n', "$.attempts: expected a list"),
    (b'{"state": {"x": NaN}}\n', "NaN"),
])
def test_a_damaged_complete_line_is_an_error_naming_file_and_line(tmp_path, bad, found):
    p = tmp_path / "h.jsonl"
    p.write_bytes(line({"task": "t", "attempts": []}) + bad + line({"attempts": []}))
    with pytest.raises(InputError) as err:
        read_log(p, "attempt log")
    assert f"{p}:2" in str(err.value) and found in str(err.value)
