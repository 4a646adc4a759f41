"""kernel_forge.common.reads: the files a user gives kforge, read with errors that name the file
and the line. Here: the one JSON Lines reader (archive exports, recorded answers to replay)."""
from __future__ import annotations

import pytest

from kernel_forge.common.errors import InputError
from kernel_forge.common.reads import read_jsonl


def test_each_line_comes_back_with_its_line_number(tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_text('{"a": 1}\n[2, 3]\n"four"\n')
    assert read_jsonl(f, "test file") == [(1, {"a": 1}), (2, [2, 3]), (3, "four")]


def test_blank_lines_are_skipped_but_still_counted(tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_text('\n{"a": 1}\n   \n\n{"b": 2}\n')
    assert read_jsonl(f, "test file") == [(2, {"a": 1}), (5, {"b": 2})]


def test_a_trailing_newline_or_none_reads_the_same(tmp_path):
    with_nl, without = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    with_nl.write_text('{"a": 1}\n{"b": 2}\n')
    without.write_text('{"a": 1}\n{"b": 2}')
    assert read_jsonl(with_nl, "test file") == read_jsonl(without, "test file") == [(1, {"a": 1}), (2, {"b": 2})]


def test_windows_line_ends_are_read_as_line_ends(tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_bytes(b'{"a": 1}\r\n{"b": 2}\r\n')
    assert read_jsonl(f, "test file") == [(1, {"a": 1}), (2, {"b": 2})]


def test_a_line_separator_inside_a_string_does_not_end_the_line(tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_text('{"source": "x\u2028y\x85z"}\n{"b": 2}\n', encoding="utf-8")
    assert read_jsonl(f, "test file") == [(1, {"source": "x\u2028y\x85z"}), (2, {"b": 2})]


def test_a_bad_line_names_the_file_the_line_and_the_column(tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_text('{"a": 1}\n\n{not json\n{"c": 3}\n')
    with pytest.raises(InputError) as err:
        read_jsonl(f, "test file")
    assert str(err.value) == (f"{f}:3: invalid JSON at column 2: "
                              "Expecting property name enclosed in double quotes")


def test_a_note_follows_the_reason(tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_text("[1,\n")
    with pytest.raises(InputError, match=r"a.jsonl:1: invalid JSON at column 4: .*; nothing was imported$"):
        read_jsonl(f, "test file", note="nothing was imported")


def test_a_non_finite_number_names_the_line_and_its_json_path(tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_text('{"a": 1}\n{"cases": [{"us": 1.0}, {"us": Infinity}]}\n')
    with pytest.raises(InputError) as err:
        read_jsonl(f, "test file")
    assert str(err.value).startswith(f"{f}:2: $.cases[1].us: Infinity is not a finite number")


def test_text_already_read_is_parsed_and_the_path_only_names_it():
    assert read_jsonl("<stdin>", "test input", text='{"a": 1}\n') == [(1, {"a": 1})]
    with pytest.raises(InputError, match=r"^<stdin>:1: invalid JSON"):
        read_jsonl("<stdin>", "test input", text="nope\n")


def test_a_missing_file_is_named_with_what_it_is(tmp_path):
    with pytest.raises(InputError, match=r"missing.jsonl: cannot read the replay file"):
        read_jsonl(tmp_path / "missing.jsonl", "replay file")


def test_an_empty_file_has_no_values(tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_text("")
    assert read_jsonl(f, "test file") == []


def test_json_nested_past_the_limit_is_refused_naming_the_file_and_line_and_brackets_in_strings_do_not_count():
    from kernel_forge.common.reads import MAX_JSON_DEPTH, loads

    deep_enough = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert loads(deep_enough, "f.json") == eval(deep_enough)
    in_text = '{"source": "' + "[{" * 100_000 + '", "x": [1]}'
    assert loads(in_text, "f.json")["x"] == [1]
    with pytest.raises(InputError) as err:
        loads('{\n"a":\n' + "[" * 100_000 + "]" * 100_000 + "}", "f.json")
    assert str(err.value) == f"f.json: JSON nested more than {MAX_JSON_DEPTH} levels deep at line 3"
    with pytest.raises(InputError, match="f.json: .*NaN is not a finite number"):
        loads('{"a": NaN}', "f.json")


def test_a_jsonl_line_nested_past_the_limit_names_its_line(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"a": 1}\n' + "[" * 200 + "]" * 200 + "\n")
    with pytest.raises(InputError) as err:
        read_jsonl(p, "archive export", note="nothing was imported")
    assert str(err.value) == f"{p}:2: JSON nested more than 100 levels deep; nothing was imported"


# ------------------------------------------------------------------------------ issue 35: the one bounded door

def test_a_regular_file_within_the_limit_is_read_whole(tmp_path):
    from kernel_forge.common.reads import read_input_bytes

    f = tmp_path / "k.cu"
    f.write_bytes(b"x" * 100)
    assert read_input_bytes(f, "kernel file", limit=100) == b"x" * 100


@pytest.mark.parametrize("special, kind", [("/dev/zero", "a character device"), ("fifo", "a FIFO (named pipe)"),
                                           ("folder", "a folder")])
def test_what_is_not_a_regular_file_is_refused_without_reading_or_waiting(tmp_path, special, kind):
    """/dev/zero was read until memory ran out; a FIFO blocked the open forever."""
    import os

    from kernel_forge.common.reads import Unreadable, read_text_file

    path = {"/dev/zero": "/dev/zero", "fifo": str(tmp_path / "fifo"), "folder": str(tmp_path)}[special]
    if special == "fifo":
        os.mkfifo(path)
    with pytest.raises(Unreadable) as err:
        read_text_file(path, "manifest")
    assert str(err.value).startswith(f"{path}: the manifest is {kind}")


def test_a_file_over_the_limit_is_refused_naming_both_sizes(tmp_path):
    from kernel_forge.common.reads import Unreadable, read_input_bytes

    f = tmp_path / "big.json"
    f.write_bytes(b" " * (3 << 20))
    with pytest.raises(Unreadable) as err:
        read_input_bytes(f, "config", limit=1 << 20)
    assert err.value.reason == "the config has 3 MiB, over the 1 MiB kforge reads"
