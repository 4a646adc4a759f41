"""kernel_forge.app.cli_archive: ``kforge archive add | list | search | show | export | import |
prune``, and their exit codes on bad input."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kernel_forge.app.cli import cli
from kernel_forge.archive.store import add_entries, list_entries, open_archive

from tests.support.archive_fakes import entry, run_task
from tests.support.fakes import vector_add


@pytest.fixture
def kforge(monkeypatch, tmp_path):
    monkeypatch.setenv("KFORGE_ARCHIVE", str(tmp_path / "default.sqlite"))
    runner = CliRunner()

    def _run(*args):
        return runner.invoke(cli, ["archive", *map(str, args)], catch_exceptions=False)
    return _run


def test_cli_add_list_search_show(kforge, tmp_path):
    opt = run_task(tmp_path, "vector_add", {"01.cu": vector_add("pass 400"), "02.cu": vector_add("mismatch 300")})
    db = tmp_path / "team.sqlite"
    r = kforge("add", opt.run_dir.path, "--archive", db)
    assert r.exit_code == 0, r.output
    assert f"{opt.run_dir.path}: 2 added, 0 already archived; left out: mismatch 1" in r.stdout
    r = kforge("add", opt.run_dir.path, "--archive", db, "--json")
    assert json.loads(r.stdout)[0] | {"ids": []} == {"run": str(opt.run_dir.path), "added": 0, "present": 2,
                                                    "excluded": {"mismatch": 1}, "ids": []}

    r = kforge("list", "--archive", db)
    assert r.exit_code == 0 and "2 kernel(s)" in r.stderr
    head, rule, *rows = r.stdout.splitlines()
    assert head.split()[:5] == ["id", "task", "score", "µs", "x"] and set(rule) <= {"-", " "}
    assert [row.split()[1:3] for row in rows] == [["vector_add", "400.00"], ["vector_add", "600.00"]]
    listed = json.loads(kforge("list", "--archive", db, "--json").stdout)
    assert [(x["task"], x["attempt"], x["holdout"]) for x in listed] == [("vector_add", "a0001", "passed"),
                                                                        ("vector_add", "a0000", "passed")]
    assert json.loads(kforge("list", "--archive", db, "--json", "--task", "softmax_rows").stdout) == []

    hits = json.loads(kforge("search", "elementwise addition", "--archive", db, "--json").stdout)
    assert len(hits) == 2 and all(h["similarity"] > 0 for h in hits)
    r = kforge("search", "histogram", "--archive", db)
    assert r.exit_code == 0 and "0 match(es)" in r.stderr and r.stdout == ""

    r = kforge("show", listed[0]["id"], "--archive", db)
    assert r.exit_code == 0 and r.stdout.startswith(f"#{listed[0]['id']} vector_add: 400.00 µs, x1.50 vs initial")
    assert "n16M: 200.00 µs" in r.stdout and 'extern "C" __global__ void vector_add' in r.stdout
    shown = json.loads(kforge("show", listed[0]["content_hash"][:10], "--archive", db, "--json").stdout)
    assert shown["id"] == listed[0]["id"] and shown["source"].rstrip().endswith("}")

    assert json.loads(kforge("list", "--json").stdout) == []          # KFORGE_ARCHIVE: a fresh default
    assert not (tmp_path / "default.sqlite").exists()                 # listing does not create it


def test_cli_export_import_prune(kforge, tmp_path):
    db = tmp_path / "a.sqlite"
    with open_archive(db) as a:
        add_entries(a, [entry("softmax_rows", s, defines={"B": s}) for s in (300, 100, 200)] + [entry("layernorm", 50.0)])
    out = tmp_path / "x.jsonl"
    r = kforge("export", out, "--archive", db)
    assert r.exit_code == 0 and r.stdout.strip() == f"exported 4 kernel(s) to {out}"
    r = kforge("export", "--archive", db, "--task", "layernorm")
    assert r.exit_code == 0 and len(r.stdout.splitlines()) == 1 and json.loads(r.stdout)["task_name"] == "layernorm"

    other = tmp_path / "b.sqlite"
    assert json.loads(kforge("import", out, "--archive", other, "--json").stdout) == {
        "file": str(out), "added": 4, "present": 0, "archive": str(other)}
    r = kforge("import", out, "--archive", other)
    assert r.stdout.strip() == f"imported 0 new kernel(s) into {other}; 4 already there"

    assert json.loads(kforge("prune", "--keep", "1", "--archive", other, "--json").stdout) == {"removed": 2, "kept": 2}
    r = kforge("prune", "--keep", "1", "--archive", other)
    assert r.stdout.strip() == "removed 0 kernel(s); 2 kept"
    with open_archive(other) as b:
        assert [(e.task_name, e.score_us) for e in list_entries(b)] == [("layernorm", 50.0), ("softmax_rows", 100.0)]


def test_cli_bad_input_is_exit_2_with_the_file_and_line(kforge, tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_text("definitely not sqlite")
    for args in (["list"], ["search", "x"], ["show", "1"], ["export"], ["prune", "--keep", "1"]):
        r = kforge(*args, "--archive", junk)
        assert r.exit_code == 2 and "not an SQLite database" in r.stderr and "Traceback" not in r.output, args
    assert junk.read_text() == "definitely not sqlite"
    db = tmp_path / "a.sqlite"
    bad = tmp_path / "bad.jsonl"
    good = json.dumps(entry("layernorm", 50.0).to_json())
    bad.write_text(good + "\n" + good.replace('"score_us": 50.0', '"score_us": "x"') + "\n")
    r = kforge("import", bad, "--archive", db)
    assert r.exit_code == 2 and f"{bad}:2: $.score_us: 'x' is not of type 'number'" in r.stderr
    assert not db.exists(), "a failed import leaves no empty archive behind"
    with open_archive(db):
        pass
    r = kforge("show", "42", "--archive", db)
    assert r.exit_code == 2 and "no archived kernel '42'" in r.stderr
    r = kforge("show", "1", "--archive", tmp_path / "nowhere.sqlite")
    assert r.exit_code == 2 and "no archive here yet" in r.stderr
