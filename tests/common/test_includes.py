"""Tests of kernel_forge/common/includes.py: the include allow-list, on the text and on what NVRTC opened (no NVRTC)."""
from __future__ import annotations

import json
import os

import pytest

from kernel_forge.common import includes
from kernel_forge.common.includes import ALLOWED, BUILTIN, Allowed, check_source, opened_files, refused_opened, splice

NO_GUARDS = frozenset()          # no toolkit headers read for their computed includes


@pytest.fixture
def where(tmp_path):
    """An include folder with one header, a working folder (the task's) with a .env and the task's header, a
    secret outside both."""
    inc, work, outside = tmp_path / "inc", tmp_path / "work", tmp_path / "outside"
    for d in (inc, work, outside):
        d.mkdir()
    (inc / "toolkit.h").write_text("#pragma once\n")
    (work / ".env").write_text("KEY=1\n")
    (work / "task.cuh").write_text("#pragma once\n")      # the task's header, handed to NVRTC in memory
    (outside / "secret.h").write_text("KEY\n")
    allowed = Allowed.of([str(inc)], headers=["task.cuh"])
    return {"inc": inc, "work": work, "outside": outside, "allowed": allowed}


def refusals(source, where, **kw):
    return check_source(source, where["allowed"], cwd=str(where["work"]), guarded=NO_GUARDS, **kw)


def test_the_toolkit_s_and_the_task_s_headers_are_allowed(where):
    src = '#include <toolkit.h>\n#include "task.cuh"\n#include "absent.h"\n' f'#include "{where["inc"] / "toolkit.h"}"\n'
    assert refusals(src, where) == []


def test_a_file_in_the_working_folder_is_refused_naming_the_line_and_the_file(where):
    (r,) = refusals('int a;\n#include ".env"\n', where)
    env = where["work"] / ".env"
    assert (r.line, r.name) == (2, ".env")
    assert str(r) == f'line 2: #include ".env" would open {env}, outside the allowed headers; {ALLOWED}'
    # however the directive is spelled: a digraph, a comment inside it, __has_include, include_next
    for spelled in ('%:include ".env"', '# /* x */ include ".env"', '#if __has_include(".env")\n#endif',
                    '#include_next ".env"'):
        assert [x.name for x in refusals(spelled, where)] == [".env"], spelled


def test_an_include_in_a_line_comment_is_text_but_one_a_block_comment_leaves_as_code_is_refused(where):
    # a line that begins with // is a comment's text (a user's note: "// removed #include <x.h>")
    assert refusals('// #include ".env"\n  // removed: #include ".env"\n', where) == []
    # ... still read: after a block comment; after a line comment's */ that ends a block comment opened
    # above (the rest of that line is code); after code with a trailing comment (more is safe)
    assert [x.name for x in refusals('/* x */ #include ".env"\n', where)] == [".env"]
    assert [x.name for x in refusals('/*\n// */ #include ".env"\n', where)] == [".env"]
    assert [x.name for x in refusals('int a; // #include ".env"\n', where)] == [".env"]


def test_a_directive_split_by_a_line_continuation_is_refused_at_the_line_it_ends_on(where):
    # spliced: 'int a;\n#include ".env"\n'; "#inc" is on line 2, "lude" on line 3
    (r,) = refusals('int a;\n#inc\\\nlude ".env"\n', where)
    assert r.line == 3 and r.name == ".env"
    assert splice('a\\\nb\nc') == ("ab\nc", [(0, 1), (1, 2), (3, 3)])
    # blanks between the backslash and the newline: NVRTC would not join the lines, the check does (more is safe)
    (r,) = refusals('#include \\ \t\n".env"\n', where)
    assert r.line == 1 and r.name == ".env"         # the line the word include is on


def test_a_computed_include_and_a_link_out_of_the_folder_are_refused(where):
    (r,) = refusals("#define H <toolkit.h>\n#include H\n", where)
    assert r.line == 2 and r.name == "" and "names its file with a macro (a computed include)" in r.why
    secret = where["outside"] / "secret.h"
    os.symlink(secret, where["work"] / "link.h")
    (r,) = refusals('#include "link.h"\n', where)
    assert r.why == (f'#include "link.h" would open {where["work"] / "link.h"} (a link to {os.path.realpath(secret)}), '
                     f"outside the allowed headers; {ALLOWED}")
    (r,) = refusals(f'#include <{secret}>\n', where)                  # an absolute path outside
    assert r.name == str(secret)


def test_a_define_of_a_macro_a_toolkit_header_includes_by_is_refused(where):
    guarded = frozenset({"_CCCL_HEADER"})
    (r,) = check_source("int a;\n#define _CCCL_HEADER <x.h>\n", where["allowed"], cwd=str(where["work"]),
                        guarded=guarded)
    assert (r.line, r.name) == (2, "_CCCL_HEADER") and r.why.startswith("defines _CCCL_HEADER, a macro a toolkit")
    (r,) = check_source("", where["allowed"], cwd=str(where["work"]), guarded=guarded, defines=["_CCCL_HEADER"])
    assert (r.line, str(r)) == (0, "the setting defines _CCCL_HEADER, a macro a toolkit header uses to name a file "
                                   "it includes")
    assert check_source("#define OTHER 1\n", where["allowed"], cwd=str(where["work"]), guarded=guarded) == []


def test_a_folder_beside_an_include_folder_is_not_inside_it(where, tmp_path):
    beside = tmp_path / "inc2"
    beside.mkdir()
    assert where["allowed"].path_ok(str(where["inc"] / "sub" / "x.h"))
    assert not where["allowed"].path_ok(str(beside / "x.h"))


def test_what_nvrtc_opened_is_read_from_its_trace_and_checked_once_each(where, tmp_path):
    trace = tmp_path / "trace"
    trace.mkdir()
    assert opened_files(str(trace)) is None and opened_files(str(tmp_path / "none")) is None   # no trace written
    toolkit, secret = str(where["inc"] / "toolkit.h"), str(where["outside"] / "secret.h")
    events = [{"name": "Processing Header File", "args": {"detail": d}} for d in (toolkit, secret, secret)]
    (trace / "k.json").write_text(json.dumps({"traceEvents": events + [{"name": "Frontend", "args": {"detail": "kernel.cu"}}]}))
    files = opened_files(str(trace))
    assert files == [toolkit, secret, secret]
    opened = ["kernel.cu", BUILTIN, "task.cuh", *files, "relative.h"]
    assert refused_opened(opened, where["allowed"], "kernel.cu") == [secret, "relative.h"]
    (trace / "k.json").write_text("{not json")
    assert opened_files(str(trace)) is None


def test_cut_log_withholds_messages_located_in_a_file_outside_the_allow_list():
    log = ('/home/u/.env(1): error: identifier "TOPSECRET" is undefined\n  TOPSECRET\n  ^\n\n'
           'kernel.cu(3): error: expected a ";"\n  int x\n       ^\n\n2 errors detected in the compilation of "kernel.cu".\n')
    cut = includes.cut_log(log, "kernel.cu", includes.Allowed.of([]))
    assert "TOPSECRET" not in cut
    assert "/home/u/.env(1): error: (message withheld" in cut
    assert 'kernel.cu(3): error: expected a ";"' in cut and "  int x" in cut
    assert includes.log_files(log) == ["/home/u/.env", "kernel.cu"]


def test_cut_log_cuts_the_quoted_text_after_a_note_in_a_header():
    log = ('/inc/ops.h(52): note #3327-D: candidate failed\n    secret_looking_header_text();\n        ^\n'
           'kernel.cu(2): error: bad\n  kernel_text();\n  ^\n')
    cut = includes.cut_log(log, "kernel.cu", includes.Allowed.of(["/inc"]))
    assert "secret_looking_header_text" not in cut and "kernel_text();" in cut
    assert "/inc/ops.h(52): note #3327-D: candidate failed" in cut
