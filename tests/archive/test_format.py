"""kernel_forge.archive.format: an archived kernel as one JSON line, written and read back with
every line checked (schema, format version, content hash) and a bad one named by file and line."""
from __future__ import annotations

import json

import jsonschema
import pytest

from kernel_forge.archive.format import SCHEMA_VERSION, Entry, content_hash, entry_lines, read_export, write_export
from kernel_forge.archive.harvest import archive_run
from kernel_forge.archive.store import add_entries, export_jsonl, import_jsonl, integrity, open_archive
from kernel_forge.common.errors import InputError
from kernel_forge.evidence.run_dir import schema

from tests.support.archive_fakes import TUNED_HEADER, dump, entry, run_task
from tests.support.fakes import vector_add


def test_export_import_round_trip_is_idempotent(tmp_path, arch):
    opt = run_task(tmp_path, "vector_add", {"01.cu": vector_add("pass 400"),
                                            "02.cu": vector_add("pass 450", header=TUNED_HEADER)})
    archive_run(opt.run_dir.path, arch)
    n = len(arch)
    out = tmp_path / "team.jsonl"
    assert export_jsonl(arch, out) == n
    lines = out.read_text().splitlines()
    assert len(lines) == n
    s = schema("archive_entry.schema.json")
    for line in lines:
        jsonschema.validate(json.loads(line), s)

    with open_archive(tmp_path / "other.sqlite") as other:
        assert import_jsonl(other, out) == (n, 0)
        assert import_jsonl(other, out) == (0, n)               # idempotent by content hash
        assert dump(other) == dump(arch)
        again = tmp_path / "again.jsonl"
        export_jsonl(other, again)
        assert again.read_bytes() == out.read_bytes()
        assert integrity(other) == []
    assert import_jsonl(arch, out) == (0, n)


def test_export_schema_is_strict_and_matches_entry():
    s = schema("archive_entry.schema.json")
    jsonschema.Draft202012Validator.check_schema(s)
    assert set(s["required"]) == set(s["properties"])
    assert set(s["properties"]) == set(entry("vector_add", 1.0).to_json())
    assert not [k for k, v in s["properties"].items() if not v.get("description")]


@pytest.mark.parametrize("damage, message", [
    (lambda d: d.pop("score_us"), r"team.jsonl:2: \$: 'score_us' is a required property"),
    (lambda d: d.update(score_us="fast"), r"team.jsonl:2: \$.score_us: 'fast' is not of type 'number'"),
    (lambda d: d["cases"][0].update(median_us=-1), r"team.jsonl:2: \$.cases\[0\].median_us: -1 is less than"),
    (lambda d: d.update(source=d["source"] + "// edited\n"), r"team.jsonl:2: \$.content_hash does not match"),
    (lambda d: d.update(format_version=SCHEMA_VERSION + 1), r"team.jsonl:2: written by a newer kernel_forge"),
    (lambda d: d.update(extra=1), r"team.jsonl:2: \$: Additional properties are not allowed"),
])
def test_a_bad_import_line_names_file_and_line_and_imports_nothing(tmp_path, arch, damage, message):
    add_entries(arch, [entry("layernorm", 90.0)])
    before = dump(arch)
    good = [entry("softmax_rows", 100.0).to_json(), entry("softmax_rows", 80.0).to_json(),
            entry("matmul_f32", 70.0).to_json()]
    damage(good[1])
    path = tmp_path / "team.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in good))
    with pytest.raises(InputError, match=message) as info:
        import_jsonl(arch, path)
    assert "nothing was imported" in str(info.value)
    assert dump(arch) == before                                 # line 1 did not go in either


def test_an_import_line_that_is_not_json(tmp_path, arch):
    path = tmp_path / "team.jsonl"
    path.write_text(json.dumps(entry("softmax_rows", 100.0).to_json()) + "\n\n{not json\n")
    with pytest.raises(InputError, match=r"team.jsonl:3: invalid JSON at column 2: .*; nothing was imported"):
        import_jsonl(arch, path)
    assert len(arch) == 0


def test_lines_written_are_the_entries_read_back(tmp_path):
    entries = [entry("softmax_rows", 100.0), entry("layernorm", 90.0, defines={"B": 2})]
    out = tmp_path / "x.jsonl"
    write_export(out, entry_lines(entries, where="test"))
    back = read_export(out)
    assert [e.to_json() for e in back] == [e.to_json() for e in entries]
    assert read_export("<stdin>", out.read_text()) == back             # text already read (stdin)


def test_an_existing_export_is_replaced_only_when_forced(tmp_path):
    out = tmp_path / "x.jsonl"
    out.write_text("old\n")
    with pytest.raises(InputError, match="pass --force to replace it"):
        write_export(out, entry_lines([entry("layernorm", 90.0)], where="test"))
    assert out.read_text() == "old\n"
    write_export(out, [], force=True)
    assert out.read_text() == ""


def test_an_entry_that_does_not_fit_the_schema_is_not_exported():
    bad = entry("layernorm", 90.0)
    bad.score_us = "fast"
    bad.id = 7
    with pytest.raises(InputError, match=r"^a.sqlite: archived kernel 7 does not fit the export schema: "
                                         r"\$.score_us: 'fast' is not of type 'number'"):
        entry_lines([bad], where="a.sqlite")


def test_the_content_hash_is_the_same_kernel_anywhere_and_changes_with_it():
    h = content_hash("src", {"grid": [1]}, {"B": 1})
    assert h == content_hash("src", {"grid": [1]}, {"B": 1})
    assert len({h, content_hash("src ", {"grid": [1]}, {"B": 1}), content_hash("src", None, {"B": 1}),
                content_hash("src", {"grid": [1]}, {"B": 2})}) == 4
    e = entry("t", 1.0, source="src")
    assert e.content_hash == content_hash("src", None, {})               # an entry hashes itself


def test_an_entry_survives_its_json_and_unknown_keys_are_dropped():
    e = entry("layernorm", 90.0, defines={"B": 2})
    d = e.to_json()
    assert d["format_version"] == SCHEMA_VERSION and "id" not in d
    assert Entry.from_json({**d, "something_new": 1}) == e
    assert e.to_json(with_id=True)["id"] is None


def test_lines_from_a_newer_format_are_refused():
    d = entry("layernorm", 90.0).to_json()
    d["format_version"] = SCHEMA_VERSION + 1
    with pytest.raises(InputError, match=r"<stdin>:1: written by a newer kernel_forge \(format 2\); nothing was imported"):
        read_export("<stdin>", json.dumps(d) + "\n")
