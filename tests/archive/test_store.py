"""The kernel archive and retrieval across runs, on a machine without a GPU.

Run folders come from the real loop (``optimize.start_run``) with the scripted gate of
tests/fakes.py and replayed proposals, so run.json, env.json, manifest.json and history.json are
the real ones; ranking is checked on the bundled tasks' own descriptions, signatures and kernels.
"""
from __future__ import annotations

import hashlib
import json
import multiprocessing
import sqlite3
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from kernel_forge.archive import store as archive_mod
from kernel_forge.archive.store import SCHEMA_VERSION, Entry, add_entries, archive_run, content_hash, default_path, entries_from_run, export_jsonl, export_lines, get_entry, import_jsonl, integrity, list_entries, open_archive, prune, record_run, search
from kernel_forge.model.candidate import parse_candidate
from kernel_forge.app.cli import cli
from kernel_forge.common.errors import EnvironmentProblem, InputError
from kernel_forge.evidence.run_dir import schema
from kernel_forge.gate.gate import GateOptions
from kernel_forge.search.loop import LoopConfig
from kernel_forge.app.run_setup import ProposerConfig, resume_run, start_run
from kernel_forge.search.retrieval import MIN_EXAMPLE_CHARS, Example, Retrieved, TaskQuery, best_settings, examples_from_record, render_examples, retrieval_record, retrieve, retrieve_for_run, truncate_source, warm_start_configs
from kernel_forge.model.task import load_task

from conftest import gpu_present  # noqa: F401  (used by skipif strings)
from fakes import H200, ScriptedGate, vector_add, write_proposals

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
GPU = H200.name
TUNED_HEADER = ("// kforge: grid = [cdiv(n, BLOCK)]\n// kforge: block = [BLOCK]\n"
                "// kforge: tune BLOCK = [64, 128, 256, 512]")


def run_task(tmp_path: Path, name: str, sources, *, gate=None, **loop):
    """A finished run of the bundled task ``name`` with replayed ``sources`` and the scripted gate."""
    manifest = MANIFESTS / f"{name}.json"
    task = load_task(manifest)
    props = write_proposals(tmp_path / f"props-{name}-{len(list(tmp_path.glob('props-*')))}", sources)
    # archive "off": these runs are archived by the test itself (a run's own archiving is tested apart)
    opt = start_run(manifest, LoopConfig(**{"max_iterations": 10, "archive": "off", "candidates": 1, **loop}), GateOptions(),
                    ProposerConfig(replay=str(props)), runs_dir=tmp_path / "runs", gate=gate or ScriptedGate(task))
    opt.run()
    return opt


def history(opt) -> dict:
    return json.loads((opt.run_dir.path / "history.json").read_text())


def by_label(hist: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for a in hist["attempts"]:
        out.setdefault(a["label"], []).append(a)
    return out


def kernel(name: str, fake: str, extra: str = "") -> str:
    """A bundled task's real initial kernel (or a template) carrying a ``// fake:`` verdict."""
    path = MANIFESTS / name if name.endswith(".cu") else MANIFESTS / f"{name}.cu"
    return f"// fake: {fake}\n{extra}" + path.read_text()


def entry(task: str, score: float, *, source: str | None = None, gpu: str = GPU, label: str = "l",
          defines: dict | None = None, description: str | None = None, signature: str | None = None,
          task_hash: str | None = None, proposer: str = "tune", attempt: str = "a0001") -> Entry:
    """A synthetic entry; description, signature and source default to the bundled task's own."""
    raw = json.loads((MANIFESTS / f"{task}.json").read_text()) if (MANIFESTS / f"{task}.json").exists() else {}
    src = source if source is not None else ((MANIFESTS / f"{task}.cu").read_text() + f"// {score} {defines}\n")
    return Entry(task_name=task, task_description=description if description is not None else raw.get("description", ""),
                 task_signature=signature or raw.get("signature", f"void {task}()"),
                 task_hash=task_hash or hashlib.sha256(task.encode()).hexdigest(), source=src, launch=None,
                 defines=dict(defines or {}), label=label, proposer=proposer, score_us=score,
                 speedup_vs_initial=600.0 / score, speedup_vs_baselines={"vendor": 250.0 / score},
                 cases=[{"name": "big", "median_us": score, "gbps": 100.0, "tflops": None, "pct_peak_bw": 42.0,
                         "pct_peak_flops": None, "bound": "memory"}],
                 bound="memory", diagnosis=None, holdout="passed", gpu_name=gpu, gpu_arch="sm_90", driver="13.0",
                 nvrtc="13.0", run=f"/runs/{task}", attempt=attempt)


@pytest.fixture
def arch(tmp_path):
    with open_archive(tmp_path / "archive.sqlite") as a:
        yield a


def dump(a) -> list[dict]:
    return sorted((e.to_json() for e in list_entries(a)), key=lambda d: d["content_hash"])


# ------------------------------------------------------------------------ archiving a run

def test_archive_run_keeps_every_passing_attempt_and_nothing_that_failed(tmp_path, arch):
    props = {"01_wrong.cu": vector_add("mismatch 300"), "02_fast.cu": vector_add("pass 400"),
             "03_overfit.cu": vector_add("pass 300", holdout="fail"), "04_broken.cu": vector_add("compile_error 0"),
             "05_slow.cu": vector_add("pass 700"), "06_tuned.cu": vector_add("pass 450", header=TUNED_HEADER)}
    opt = run_task(tmp_path, "vector_add", props)
    hist = history(opt)
    groups = by_label(hist)
    assert groups["03_overfit.cu"][0]["reason"] == "holdout_failed"        # the scripted verdicts happened
    passing = {a["id"] for a in hist["attempts"] if a["status"] == "passed" and not a["reason"] == "holdout_failed"}
    assert passing == {"a0000", groups["02_fast.cu"][0]["id"], groups["05_slow.cu"][0]["id"]} | \
        {a["id"] for a in groups["06_tuned.cu"]}

    rep = archive_run(opt.run_dir.path, arch, task=opt.task)
    assert rep.added == len(passing) == len(arch) and rep.present == 0
    assert rep.excluded == {"mismatch": 1, "holdout_failed": 1, "compile_error": 1}
    entries = {e.attempt: e for e in list_entries(arch)}
    assert set(entries) == passing

    run_json = json.loads((opt.run_dir.path / "run.json").read_text())
    env = json.loads((opt.run_dir.path / "env.json").read_text())
    fast = entries[groups["02_fast.cu"][0]["id"]]
    assert fast.task_name == "vector_add" and fast.task_hash == run_json["hashes"]["task"] == opt.task.hash()
    assert fast.task_description == opt.task.description and fast.task_signature == opt.task.signature.text
    assert fast.source == (opt.run_dir.path / groups["02_fast.cu"][0]["source_file"]).read_text()
    assert fast.content_hash == content_hash(fast.source, fast.launch, fast.defines)
    assert fast.score_us == pytest.approx(400) and fast.speedup_vs_initial == pytest.approx(1.5)
    assert fast.speedup_vs_baselines == {"cupy_add": pytest.approx(250 / 400)}
    assert [c["name"] for c in fast.cases] == ["n16M", "n64M"]
    assert fast.cases[0]["pct_peak_bw"] > 0 and fast.cases[0]["median_us"] == pytest.approx(200)
    assert {c["bound"] for c in fast.cases} <= {"memory", "compute", "latency", "unknown"}
    assert fast.diagnosis is not None and [c["name"] for c in fast.diagnosis["cases"]] == ["n16M", "n64M"]
    assert (fast.gpu_name, fast.gpu_arch, fast.driver) == (env["device"]["name"], "sm_90", "13.0")
    assert fast.nvrtc == str(env["nvrtc"] or "")
    assert fast.run == str(opt.run_dir.path.resolve())
    assert fast.holdout == "passed" and fast.proposer == "replay" and fast.label == "02_fast.cu"
    assert entries["a0000"].holdout == "passed"                 # the initial kernel ran its holdout cases
    assert entries[groups["05_slow.cu"][0]["id"]].holdout == "not_run"
    tuned = [entries[a["id"]] for a in groups["06_tuned.cu"]]
    assert sorted(e.defines["BLOCK"] for e in tuned) == [64, 128, 256, 512]
    assert all(e.launch == {"grid": ["cdiv(n, BLOCK)"], "block": ["BLOCK"], "shared_mem": 0} for e in tuned)
    assert integrity(arch) == []


def test_a_best_that_fails_the_final_holdout_stays_out(tmp_path, arch):
    opt = run_task(tmp_path, "vector_add", {"01_flaky.cu": vector_add("pass 300", holdout="flaky")})
    (flaky,) = by_label(history(opt))["01_flaky.cu"]
    assert flaky["best"] is True and flaky["holdout"] == {**flaky["holdout"], "passed": False, "final": True}
    rep = archive_run(opt.run_dir.path, arch)
    assert rep.excluded == {"holdout_failed": 1}
    assert [e.attempt for e in list_entries(arch)] == ["a0000"]


def test_archive_run_is_idempotent_and_takes_partial_runs(tmp_path, arch):
    task = load_task(MANIFESTS / "vector_add.json")
    props = [vector_add("pass 500"), vector_add("pass 450"), vector_add("pass 400")]
    # evaluations: the initial kernel, the first proposal, its holdout check; killed gating the second
    with pytest.raises(KeyboardInterrupt):
        run_task(tmp_path, "vector_add", props, gate=ScriptedGate(task, interrupt={"evaluate": 4}))
    (run,) = (tmp_path / "runs").iterdir()
    assert [a["status"] for a in json.loads((run / "history.json").read_text())["attempts"]] == \
        ["passed", "passed", "pending"]
    first = archive_run(run, arch)
    assert (first.added, first.present, first.excluded) == (2, 0, {"pending": 1})
    again = archive_run(run, arch)
    assert (again.added, again.present) == (0, 2)

    resume_run(run, gate=ScriptedGate(task)).run()
    done = archive_run(run, arch)
    assert (done.added, done.present, done.excluded) == (2, 2, {})
    assert sorted(e.score_us for e in list_entries(arch)) == pytest.approx([400, 450, 500, 600])
    assert integrity(arch) == []


def test_archive_run_without_the_task_loads_the_run_manifest(tmp_path, arch):
    opt = run_task(tmp_path, "vector_add", [vector_add("pass 400")])
    entries, excluded = entries_from_run(opt.run_dir.path)
    assert excluded == {} and len(entries) == 2
    assert all(e.diagnosis is not None for e in entries)       # the manifest still loads with the same hash


def test_a_folder_that_is_not_a_run_is_refused(tmp_path, arch):
    with pytest.raises(InputError, match=r"not a kforge run folder \(no run.json\)"):
        archive_run(tmp_path, arch)
    opt = run_task(tmp_path, "vector_add", [vector_add("pass 400")])
    (opt.run_dir.path / "history.json").write_text("{ damaged")
    with pytest.raises(InputError, match=r"history.json: damaged JSON"):
        archive_run(opt.run_dir.path, arch)
    assert len(arch) == 0


def test_record_run_never_raises_for_an_archive_problem(tmp_path):
    opt = run_task(tmp_path, "vector_add", [vector_add("pass 400")])
    bad = tmp_path / "not-an-archive.sqlite"
    bad.write_bytes(b"hello, world" * 10)
    lines: list[str] = []
    assert record_run(opt.run_dir.path, path=bad, progress=lines.append) is None
    assert "not archived" in lines[-1] and "not an SQLite database" in lines[-1]
    rep = record_run(opt.run_dir.path, path=tmp_path / "ok.sqlite", task=opt.task, progress=lines.append)
    assert rep.added == 2 and "2 kernel(s) added" in lines[-1]


# ------------------------------------------------------------------------ export / import

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
    r = schema("retrieval.schema.json")
    jsonschema.Draft202012Validator.check_schema(r)
    assert r["additionalProperties"] is False and set(r["required"]) == set(r["properties"])
    assert not [k for k, v in r["properties"].items() if not v.get("description")]
    assert set(r["properties"]) == set(retrieval_record([])) == set(Retrieved().to_json())
    assert set(r["properties"]["examples"]["items"]["properties"]) == set(Example.__dataclass_fields__)


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


# ------------------------------------------------------------------------ bad archive files

def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_a_file_that_is_not_sqlite_is_refused_and_left_alone(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("my precious notes\n" * 100)
    before = _sha(p)
    with pytest.raises(InputError, match=r"notes.txt: not an SQLite database.*left untouched"):
        open_archive(p)
    assert _sha(p) == before and not (tmp_path / "notes.txt-wal").exists()


def test_a_foreign_sqlite_database_is_refused_and_left_alone(tmp_path):
    p = tmp_path / "app.db"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE users (name TEXT)")
    con.execute("INSERT INTO users VALUES ('ada')")
    con.commit()
    con.close()
    before = _sha(p)
    with pytest.raises(InputError, match=r"app.db: an SQLite database but not a kernel_forge archive \(its tables: users\)"):
        open_archive(p)
    assert _sha(p) == before
    con = sqlite3.connect(p)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"     # not switched to WAL either
    assert con.execute("SELECT name FROM users").fetchall() == [("ada",)]
    con.close()


def test_an_archive_from_a_newer_kernel_forge_is_refused(tmp_path):
    p = tmp_path / "a.sqlite"
    with open_archive(p) as a:
        add_entries(a, [entry("softmax_rows", 100.0)])
        a.con.execute("UPDATE archive_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    with pytest.raises(InputError, match=rf"newer kernel_forge \(archive schema {SCHEMA_VERSION + 1}; this one reads up to"):
        open_archive(p)
    con = sqlite3.connect(p)
    assert con.execute("SELECT count(*) FROM kernels").fetchone()[0] == 1
    con.close()


def test_a_damaged_archive_gets_a_clear_error_and_is_not_truncated(tmp_path):
    p = tmp_path / "a.sqlite"
    with open_archive(p) as a:
        add_entries(a, [entry("softmax_rows", 100.0 + i, defines={"X": i}) for i in range(200)])
        a.con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(p.read_bytes())
    size = len(data)
    for off in range(4096, size, 4096):          # keep the header page, wreck every other page
        data[off:off + 100] = b"\xff" * 100
    p.write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"a.sqlite: the archive is damaged"):
        with open_archive(p) as a:
            list_entries(a)
            raise AssertionError(f"read a wrecked archive: {integrity(a)}")
    assert p.stat().st_size == size


def test_python_without_fts5_gets_a_clear_environment_error(tmp_path, monkeypatch):
    monkeypatch.setattr(archive_mod, "fts5_available", lambda: False)
    with pytest.raises(EnvironmentProblem, match="built without FTS5"):
        open_archive(tmp_path / "a.sqlite")
    assert not (tmp_path / "a.sqlite").exists()


def test_default_path_follows_the_cache_convention(monkeypatch, tmp_path):
    monkeypatch.setenv("KFORGE_ARCHIVE", str(tmp_path / "shared.sqlite"))
    assert default_path() == tmp_path / "shared.sqlite"
    monkeypatch.delenv("KFORGE_ARCHIVE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_path() == tmp_path / "xdg" / "kernel_forge" / "archive.sqlite"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(archive_mod.os, "name", "posix")
    assert default_path() == tmp_path / "home" / ".cache" / "kernel_forge" / "archive.sqlite"


def test_a_missing_archive_is_not_created_by_readers(tmp_path):
    p = tmp_path / "sub" / "a.sqlite"
    with pytest.raises(InputError, match="no archive here yet"):
        open_archive(p, create=False)
    assert not p.exists()
    got = retrieve_for_run("softmax_rows", path=p, gpu=GPU)
    assert got.examples == [] and got.settings == {} and got.error is None and not p.exists()
    assert got.to_json()["count"] == 0


# ------------------------------------------------------------------------ two writers

def _writer(path: str, tag: str, n: int, shared: int, start) -> None:
    """One process: ``n`` entries of its own and ``shared`` that the other writes too, one short
    transaction each, opening the archive itself (maybe creating it at the same moment)."""
    start.wait()
    with open_archive(path) as a:
        for i in range(n):
            add_entries(a, [entry("softmax_rows", 100.0 + i, defines={"W": ord(tag), "I": i}, attempt=f"a{i:04d}")])
            if i < shared:
                add_entries(a, [entry("layernorm", 50.0 + i, defines={"S": i})])


def test_two_processes_writing_at_once_do_not_corrupt_the_archive(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    path = str(tmp_path / "shared.sqlite")
    start = ctx.Event()
    procs = [ctx.Process(target=_writer, args=(path, tag, 40, 15, start)) for tag in "AB"]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with open_archive(path) as a:
        assert integrity(a) == []
        assert a.journal_mode == "wal"
        assert len(a) == 2 * 40 + 15
        assert len(list_entries(a, task="layernorm")) == 15
        assert len(search(a, "softmax", limit=1000)) == 80      # the search index kept up


# ------------------------------------------------------------------------ queries and prune

def test_get_entry_by_id_or_hash_prefix(arch):
    add_entries(arch, [entry("softmax_rows", 100.0), entry("layernorm", 90.0)])
    e = list_entries(arch, task="layernorm")[0]
    assert get_entry(arch, e.id).content_hash == e.content_hash
    assert get_entry(arch, e.content_hash[:8]).id == e.id
    with pytest.raises(InputError, match="no archived kernel '999'"):
        get_entry(arch, 999)
    with pytest.raises(InputError, match="give an archive id"):
        get_entry(arch, "softmax")


def test_prune_keeps_the_fastest_per_task_and_gpu(arch):
    add_entries(arch, [entry("softmax_rows", s, defines={"B": s}) for s in (300, 100, 200, 400)]
                + [entry("softmax_rows", s, defines={"B": s}, gpu="NVIDIA A100") for s in (90, 80)]
                + [entry("layernorm", 50.0)])
    assert prune(arch, 2) == (2, 5)
    left = [(e.task_name, e.gpu_name, e.score_us) for e in list_entries(arch)]
    assert left == [("layernorm", GPU, 50.0), ("softmax_rows", "NVIDIA A100", 80.0),
                    ("softmax_rows", "NVIDIA A100", 90.0), ("softmax_rows", GPU, 100.0), ("softmax_rows", GPU, 200.0)]
    assert prune(arch, 2) == (0, 5)
    assert integrity(arch) == [] and len(search(arch, "softmax")) == 4


def test_best_means_holdout_checked_first_then_fastest(arch):
    """A run's best was re-measured side by side and passed the holdout; a faster score that never
    faced the holdout (within noise, or not among the contenders re-measured) ranks after it."""
    checked = entry("softmax_rows", 200.0, label="t.cu", defines={"B": 2})
    unchecked = entry("softmax_rows", 190.0, label="t.cu", defines={"B": 1})
    unchecked.holdout = "not_run"
    add_entries(arch, [unchecked, checked])
    assert [e.defines for e in retrieve(arch, TaskQuery(name="softmax_rows"))] == [{"B": 2}]
    assert [s["defines"] for s in best_settings(arch, TaskQuery(name="softmax_rows"), GPU, label="t.cu")] == \
        [{"B": 2}, {"B": 1}]
    assert [e.defines for e in list_entries(arch)] == [{"B": 2}, {"B": 1}]
    assert prune(arch, 1) == (1, 1) and list_entries(arch)[0].defines == {"B": 2}


def test_the_same_kernel_is_one_entry_per_task_and_gpu(arch):
    src = (MANIFESTS / "softmax_rows.cu").read_text()
    e = entry("softmax_rows", 100.0, source=src)
    other_gpu = entry("softmax_rows", 120.0, source=src, gpu="NVIDIA A100")
    other_task = entry("softmax_rows", 110.0, source=src, task_hash="3" * 64)
    assert e.content_hash == other_gpu.content_hash == other_task.content_hash
    assert add_entries(arch, [e, entry("softmax_rows", 90.0, source=src), other_gpu, other_task]) == (3, 1)
    assert [x.score_us for x in list_entries(arch, gpu=GPU)] == [100.0, 110.0]       # the first one stays


# ------------------------------------------------------------------------ retrieval

TASKS = ("softmax_rows", "layernorm", "matmul_f32")
LOG_SOFTMAX = TaskQuery(name="log_softmax_rows", description="Row-wise log-softmax of a row-major float32 matrix x "
                        "(rows x cols) into y: y = x - max - log(sum(exp(x - max))), numerically stable.",
                        signature='extern "C" __global__ void log_softmax_rows(const float* x, float* y, int rows, int cols)')


@pytest.fixture
def three_tasks(arch):
    """Each of softmax_rows, layernorm and matmul_f32 with its real initial kernel and template(s)."""
    entries = []
    for t in TASKS:
        raw = json.loads((MANIFESTS / f"{t}.json").read_text())
        for i, tpl in enumerate(raw["templates"]):
            entries.append(entry(t, 100.0 + i, source=(MANIFESTS / tpl).read_text(), label=Path(tpl).name,
                                 defines={"V": i}))
        entries.append(entry(t, 600.0, proposer="initial", label=f"{t}.cu"))
    add_entries(arch, entries)
    return arch


def test_a_softmax_task_retrieves_softmax_first_then_layernorm(three_tasks):
    got = retrieve(three_tasks, LOG_SOFTMAX, k=3, max_chars=30000)
    assert [e.task_name for e in got] == ["softmax_rows", "layernorm", "matmul_f32"]
    assert not any(e.same_task for e in got)
    assert got[0].similarity > got[1].similarity > got[2].similarity
    assert all(e.label.endswith(".cu") and e.defines == {"V": 0} for e in got)   # the fastest of each task
    two = retrieve(three_tasks, LOG_SOFTMAX, k=2, max_chars=30000)
    assert [e.task_name for e in two] == ["softmax_rows", "layernorm"]


def test_tasks_with_many_archived_kernels_do_not_drown_the_ranking(arch):
    """Similarity counts tasks, not kernels: the tuner archives dozens of settings of a template,
    which in a per-kernel index would make a task's own words look common."""
    entries = []
    for m in sorted(MANIFESTS.glob("*.json")):
        raw = json.loads(m.read_text())
        many = raw["name"] in ("softmax_rows", "layernorm", "matmul_f32", "transpose")
        for i in range(60 if many else 1):
            for tpl in (t for t in raw["templates"] if t.startswith("templates/")):   # the bundled templates, not patterns
                entries.append(entry(raw["name"], 100.0 + i, source=(MANIFESTS / tpl).read_text() + f"// v{i}\n",
                                     label=Path(tpl).name, defines={"V": i}))
    add_entries(arch, entries)
    got = retrieve(arch, LOG_SOFTMAX, k=8, max_chars=100000)
    assert [e.task_name for e in got][:2] == ["softmax_rows", "layernorm"]
    assert len(got) == 8 and all(e.defines == {"V": 0} for e in got)
    assert got[1].similarity > 0                                 # layernorm's shared words still count


def test_the_same_task_comes_first_then_the_most_similar_others(three_tasks):
    task = load_task(MANIFESTS / "softmax_rows.json")
    got = retrieve(three_tasks, task, k=3, max_chars=30000)
    assert [(e.task_name, e.same_task) for e in got] == [("softmax_rows", True), ("layernorm", False),
                                                         ("matmul_f32", False)]
    assert got[0].similarity is None and got[0].score_us == 100.0
    assert all(e.label != f"{e.task_name}.cu" for e in got)      # naive initial kernels are never retrieved
    # by name when the manifest changed (another hash), and nothing from another GPU when one is asked for
    by_name = retrieve(three_tasks, TaskQuery(name="softmax_rows", task_hash="0" * 64), k=1)
    assert by_name[0].same_task and by_name[0].task_name == "softmax_rows"


def test_the_bundled_softmax_task_against_runs_of_layernorm_and_softmax(tmp_path, arch):
    """The closing note's question, answered by real runs of the loop (scripted verdicts)."""
    ln = run_task(tmp_path, "layernorm", {"01.cu": kernel("templates/layernorm_group.cu", "pass 300")}, tune_budget=3)
    sm = run_task(tmp_path, "softmax_rows", {"01.cu": kernel("templates/softmax_rows_group.cu", "pass 200"),
                                             "02.cu": kernel("softmax_rows", "pass 500")}, tune_budget=3)
    mm = run_task(tmp_path, "matmul_f32", {"01.cu": kernel("templates/matmul_f32_tiled.cu", "pass 300")}, tune_budget=3)
    for opt in (ln, sm, mm):
        archive_run(opt.run_dir.path, arch, task=opt.task)
    got = retrieve(arch, sm.task)
    assert [(e.task_name, e.same_task) for e in got] == [("softmax_rows", True), ("layernorm", False),
                                                         ("matmul_f32", False)]
    best = json.loads((sm.run_dir.path / "summary.json").read_text())["best"]
    assert (got[0].run, got[0].attempt) == (str(sm.run_dir.path.resolve()), best["id"])
    assert sum(len(e.source) for e in got) <= 6000 and all(e.truncated for e in got)


def test_retrieved_examples_are_bounded_in_number_and_characters(arch):
    long = "\n".join(f"    float v{i} = x[{i}] * {i}.0f;  // line {i} of a long kernel" for i in range(400))
    add_entries(arch, [entry(t, 100.0, source=f"// {t} head\n{long}\n}}\n", description=f"{t} rows cols softmax")
                       for t in ("t1", "t2", "t3", "t4", "t5", "t6")])
    q = TaskQuery(name="new", description="softmax rows cols")
    got = retrieve(arch, q, k=4, max_chars=3000)
    assert len(got) == 4 and sum(len(e.source) for e in got) <= 3000
    for e in got:
        assert e.truncated and e.source_chars > len(e.source)
        assert e.source.startswith(f"// {e.task_name} head\n") and e.source.endswith("}\n")   # top and bottom kept
        assert "characters cut here]" in e.source
    text = render_examples(got)
    assert text.count("## Example") == 4 and text.count("(source cut to") == 4
    assert len(text) <= 3000 + 4 * 900                             # headers, descriptions and case lines
    fewer = retrieve(arch, q, k=6, max_chars=2 * MIN_EXAMPLE_CHARS + 10)
    assert len(fewer) == 2                                         # fewer examples, not useless slivers
    assert retrieve(arch, q, k=0) == [] and retrieve(arch, q, max_chars=0) == []


def test_short_sources_keep_their_share_for_long_ones(arch):
    add_entries(arch, [entry("short", 100.0, source="// short kernel\n__global__ void s() {}\n", description="rows"),
                       entry("long", 100.0, source="// long\n" + "x = y;\n" * 2000, description="rows cols")])
    got = {e.task_name: e for e in retrieve(arch, TaskQuery(name="q", description="rows cols"), k=2, max_chars=2000)}
    assert not got["short"].truncated and got["short"].source.startswith("// short kernel")
    assert got["long"].truncated and len(got["long"].source) > 1900 - len(got["short"].source)
    assert sum(len(e.source) for e in got.values()) <= 2000


@pytest.mark.parametrize("limit", [120, 500, 2001])
def test_truncate_source_keeps_whole_lines_and_says_so(limit):
    src = "".join(f"line {i:04d}\n" for i in range(300))
    out, cut = truncate_source(src, limit)
    assert cut and len(out) <= limit
    head, marker, tail = out.partition("\n// [archive: ")
    assert src.startswith(head + "\n") and src.endswith(tail.split("]\n", 1)[1])
    left_out = len(src) - len(head) - len(tail.split("]\n", 1)[1])
    assert marker and tail.startswith(f"{left_out} of {len(src)} characters cut here]")
    assert truncate_source(src, len(src)) == (src, False)


def test_render_marks_other_tasks_and_shows_score_bound_and_source(three_tasks):
    got = retrieve(three_tasks, load_task(MANIFESTS / "softmax_rows.json"), k=3, max_chars=9000)
    text = render_examples(got)
    assert text.startswith("# Examples from other tasks (kernel archive)")
    assert "## Example 1, from an earlier run of this task (softmax_rows): 100.00 µs; x6.00 vs its task's initial" in text
    assert "## Example 2, from another task: layernorm: 100.00 µs" in text
    assert "## Example 3, from another task: matmul_f32" in text
    assert "bound: memory" in text and "big 100.00 µs (42% of measured bandwidth, memory)" in text
    assert "Its task: Layer normalisation of each row" in text
    for e in got:
        assert "```cuda\n" + e.source + "\n```" in text
    assert render_examples([]) == ""


def test_the_retrieval_record_is_what_the_evidence_keeps_and_rebuilds_the_prompt(three_tasks):
    got = retrieve(three_tasks, load_task(MANIFESTS / "softmax_rows.json"), k=3, max_chars=4000)
    rec = json.loads(json.dumps(retrieval_record(got, archive=str(three_tasks.path), k=3, max_chars=4000, gpu=None)))
    jsonschema.validate(rec, schema("retrieval.schema.json"))
    broken = json.loads(json.dumps(rec))
    broken["examples"][0].pop("source")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema("retrieval.schema.json"))
    assert rec["count"] == 3 and rec["chars"] == sum(len(e.source) for e in got) <= 4000
    assert [x["id"] for x in rec["examples"]] == [e.id for e in got]
    assert [x["same_task"] for x in rec["examples"]] == [True, False, False]
    assert render_examples(examples_from_record(rec)) == render_examples(got)


def test_retrieve_for_run_gives_examples_and_settings_and_survives_a_bad_archive(three_tasks, tmp_path):
    lines: list[str] = []
    task = load_task(MANIFESTS / "softmax_rows.json")
    add_entries(three_tasks, [entry("softmax_rows", 90.0, label="softmax_rows_group.cu", defines={"GROUP": 256},
                                    task_hash=task.hash())])
    got = retrieve_for_run(task, path=three_tasks.path, k=2, gpu=GPU, progress=lines.append)
    assert [(e.task_name, e.same_task) for e in got.examples] == [("softmax_rows", True), ("layernorm", False)]
    assert got.examples[0].defines == {"GROUP": 256}             # this manifest's own kernel first
    assert list(got.settings) == ["softmax_rows_group.cu"]
    assert [s["defines"] for s in got.settings["softmax_rows_group.cu"]] == [{"GROUP": 256}]
    rec = json.loads(json.dumps(got.to_json()))
    jsonschema.validate(rec, schema("retrieval.schema.json"))
    assert (rec["archive"], rec["k"], rec["gpu"], rec["count"]) == (str(three_tasks.path), 2, GPU, 2)
    back = Retrieved.from_json(rec)
    assert render_examples(back.examples) == render_examples(got.examples) and back.settings == got.settings
    assert any("softmax_rows#" in l and "(this task)" in l for l in lines)
    assert "settings to gate first for softmax_rows_group.cu (1)" in lines[-1]

    cand = parse_candidate((MANIFESTS / "templates" / "softmax_rows_group.cu").read_text())
    (warm,) = back.configs_for(cand, "softmax_rows_group.cu")
    assert warm == {**cand.defines, "GROUP": 256} and back.configs_for(cand, "other.cu") == []
    assert back.setting_for("softmax_rows_group.cu", warm)["score_us"] == 90.0

    bad = tmp_path / "junk.sqlite"
    bad.write_bytes(b"junk" * 100)
    got = retrieve_for_run("softmax_rows", path=bad, gpu=GPU, progress=lines.append)
    assert got.examples == [] and "not an SQLite database" in got.error and "warning" in lines[-1]
    jsonschema.validate(got.to_json(), schema("retrieval.schema.json"))


def test_examples_prefer_the_runs_gpu_and_fall_back_to_others(arch):
    add_entries(arch, [entry("softmax_rows", 100.0, gpu="NVIDIA A100", defines={"G": 1}),
                       entry("softmax_rows", 300.0, defines={"G": 2}),
                       entry("layernorm", 50.0, gpu="NVIDIA A100")])
    got = retrieve(arch, TaskQuery(name="softmax_rows", description="row softmax"), gpu=GPU)
    assert [(e.task_name, e.gpu_name, e.defines) for e in got] == [("softmax_rows", GPU, {"G": 2}),
                                                                   ("layernorm", "NVIDIA A100", {})]
    got = retrieve(arch, TaskQuery(name="softmax_rows"), gpu=None)
    assert got[0].defines == {"G": 1}


# ------------------------------------------------------------------------ tuner warm start

def test_best_settings_are_the_fastest_of_the_same_task_and_gpu_per_label(arch):
    h = hashlib.sha256(b"softmax_rows").hexdigest()
    add_entries(arch, [
        entry("softmax_rows", 300.0, label="group.cu", defines={"GROUP": 128}),
        entry("softmax_rows", 200.0, label="group.cu", defines={"GROUP": 256}),
        entry("softmax_rows", 250.0, label="group.cu", defines={"GROUP": 512}),
        entry("softmax_rows", 150.0, label="warp.cu", defines={"RPB": 4}),
        entry("softmax_rows", 100.0, label="group.cu", defines={"GROUP": 1024}, gpu="NVIDIA A100"),
        entry("softmax_rows", 90.0, label="group.cu", defines={"GROUP": 64}, task_hash="1" * 64),  # older manifest
        entry("softmax_rows", 50.0, label="softmax_rows.cu", proposer="initial"),                 # nothing to tune
    ])
    task = TaskQuery(name="softmax_rows", task_hash=h)
    per_label = best_settings(arch, task, GPU)
    assert [(s["label"], s["defines"], s["score_us"]) for s in per_label] == [
        ("warp.cu", {"RPB": 4}, 150.0), ("group.cu", {"GROUP": 256}, 200.0)]
    assert all(s["same_manifest"] for s in per_label)
    group = best_settings(arch, task, GPU, label="group.cu")
    assert [s["defines"]["GROUP"] for s in group] == [256, 512, 128]
    assert [s["defines"]["GROUP"] for s in best_settings(arch, task, GPU, label="group.cu", n=1)] == [256]
    assert [s["defines"] for s in best_settings(arch, task, "NVIDIA A100")] == [{"GROUP": 1024}]
    # a manifest the archive has never seen: the same task name's settings, marked as such
    renamed = best_settings(arch, TaskQuery(name="softmax_rows", task_hash="2" * 64), GPU, label="group.cu")
    assert renamed[0]["defines"] == {"GROUP": 64} and not renamed[0]["same_manifest"]
    assert best_settings(arch, TaskQuery(name="layernorm"), GPU) == []


def test_warm_start_configs_keep_what_the_template_still_accepts():
    cand = parse_candidate("// kforge: grid = [cdiv(n, BLOCK * ITEMS)]\n// kforge: block = [BLOCK]\n"
                           "// kforge: tune BLOCK = [128, 256, 512]\n// kforge: tune ITEMS = [1, 2, 4]\n"
                           "// kforge: constraint BLOCK * ITEMS <= 1024\nvoid k() {}\n")
    settings = [{"defines": {"BLOCK": 256, "ITEMS": 4}},      # fine
                {"defines": {"BLOCK": 512, "ITEMS": 4}},      # breaks the constraint
                {"defines": {"BLOCK": 1024, "ITEMS": 1}},     # 1024 is no longer a value
                {"defines": {"BLOCK": 128, "UNROLL": 2}},     # UNROLL is no longer a tunable
                {"BLOCK": 512},                               # a plain defines dict: ITEMS from the default
                {"defines": {"BLOCK": 256, "ITEMS": 4}}]      # a repeat
    assert warm_start_configs(cand, settings) == [{"BLOCK": 256, "ITEMS": 4}, {"BLOCK": 512, "ITEMS": 1}]
    assert all(d in cand.configurations() for d in warm_start_configs(cand, settings))


def test_a_second_run_can_start_from_the_first_runs_best_settings(tmp_path, arch):
    """What the lead wires into the tuner: the first run's best setting, gated first next time."""
    tuned = vector_add("pass 400", header=TUNED_HEADER) + "// fake-opt: BLOCK=512\n"
    first = run_task(tmp_path, "vector_add", {"tuned.cu": tuned}, tune_budget=4)
    archive_run(first.run_dir.path, arch, task=first.task)
    best = json.loads((first.run_dir.path / "summary.json").read_text())["best"]
    assert best["defines"] == {"BLOCK": 512}
    settings = best_settings(arch, first.task, first.gate.device_info()["name"], label="tuned.cu")
    cand = parse_candidate(tuned)
    assert warm_start_configs(cand, settings)[0] == {"BLOCK": 512}
    assert settings[0]["attempt"] == best["id"]


# ------------------------------------------------------------------------ the commands

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


# ------------------------------------------------------------------------ on a GPU

@pytest.mark.gpu
@pytest.mark.skipif("not gpu_present()", reason="needs an NVIDIA GPU")
def test_gpu_a_real_run_is_archived_with_its_device_and_retrieved(tmp_path):
    """The tuner on vector_add through the real gate: every passing kernel goes in with the real
    GPU, driver and NVRTC, and the run's best is what retrieval and the warm start give next."""
    from kernel_forge.gate.gate import Gate

    manifest = MANIFESTS / "vector_add.json"
    task = load_task(manifest)
    opts = GateOptions.quick(reps=20, warmup=3)
    gate = Gate(task, opts)
    try:
        gate.ensure_gpu()
        opt = start_run(manifest, LoopConfig(max_iterations=1, tune_budget=4), opts, ProposerConfig(),
                        runs_dir=tmp_path / "runs", gate=gate)
        opt.run()
    finally:
        gate.close()
    env = json.loads((opt.run_dir.path / "env.json").read_text())
    with open_archive(tmp_path / "a.sqlite") as a:
        rep = archive_run(opt.run_dir.path, a, task=task)
        hist = history(opt)
        assert rep.added == sum(x["status"] == "passed" and (x.get("holdout") or {}).get("passed", True)
                                for x in hist["attempts"])
        e = list_entries(a)[0]
        assert (e.gpu_name, e.driver, e.nvrtc) == (env["device"]["name"], env["device"]["driver_version"],
                                                 str(env["nvrtc"] or ""))
        best = json.loads((opt.run_dir.path / "summary.json").read_text())["best"]
        got = retrieve(a, task, gpu=env["device"]["name"])
        if best["proposer"] != "initial":
            assert got[0].same_task and got[0].attempt == best["id"]
            settings = best_settings(a, task, env["device"]["name"], label=best["label"])
            assert settings[0]["defines"] == best["defines"]
        assert integrity(a) == []


@pytest.mark.gpu
@pytest.mark.skipif("not gpu_present()", reason="needs an NVIDIA GPU")
def test_gpu_a_second_run_shows_the_first_runs_best_and_gates_its_setting_first(tmp_path):
    """Two tuner runs of vector_add through the real gate sharing one archive: the second's
    retrieval.json holds the first's best, its prompt shows it, and the archived setting of each
    template is the first of that template to be gated, with a rationale naming where it came from."""
    from kernel_forge.gate.gate import Gate

    manifest = MANIFESTS / "vector_add.json"
    task = load_task(manifest)
    db = tmp_path / "shared.sqlite"
    opts = GateOptions.quick(reps=20, warmup=3)
    runs = []
    for name in ("first", "second"):
        gate = Gate(task, opts)
        try:
            gate.ensure_gpu()
            opt = start_run(manifest, LoopConfig(max_iterations=2, tune_budget=3, archive=str(db)), opts,
                            ProposerConfig(), runs_dir=tmp_path / name, gate=gate)
            opt.run()
            opt.proposer.needs_prompt = True   # the tuner asks nothing; build what a model would be asked next
            prompt = opt._prompt()
        finally:
            gate.close()
        runs.append((opt, prompt))
    (first, _), (second, prompt) = runs
    got = json.loads((second.run_dir.path / "retrieval.json").read_text())
    assert got["examples"] and got["examples"][0]["same_task"], got
    assert "# Kernels from the archive" in prompt and "From an earlier run of this task" in prompt
    hist = history(second)
    for label, items in got["settings"].items():
        tuned = [a for a in hist["attempts"] if a["label"] == label]
        assert tuned[0]["defines"] == items[0]["defines"] and "archived setting" in tuned[0]["rationale"]
    assert got["settings"], "the first run archived its tuned settings"
