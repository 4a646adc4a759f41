"""``kforge mcp`` through the MCP SDK's own client, over stdio, against ``python -m kernel_forge mcp``.

On the CPU the server answers from the test suite's scripted gate or from a recorded run
(``KFORGE_MCP_TEST_GATE``, a test hook); the one GPU test evaluates a real kernel.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

import pytest

mcp = pytest.importorskip("mcp")
import anyio  # noqa: E402
from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

from kernel_forge.config.gate_settings import GateOptions  # noqa: E402
from kernel_forge.config.loop_settings import LoopConfig  # noqa: E402
from kernel_forge.config.proposer import ProposerConfig  # noqa: E402
from kernel_forge.app.run_setup import start_run  # noqa: E402
from kernel_forge.model.task import load_task  # noqa: E402

from tests.support.fakes import ScriptedGate, vector_add, write_proposals  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "manifests" / "vector_add.json"
SCRIPTED = "python:tests.support.fakes:ScriptedGate"
TOOLS = {"doctor", "validate_manifest", "eval_kernel", "optimize", "run_status", "replay"}


@contextlib.asynccontextmanager
async def server(runs_dir: Path, gate: str | None = SCRIPTED, allow=None, cwd: Path = ROOT):
    """A server in ``cwd`` (the repository: its manifests) that lets agents use ``allow`` too
    (default: the test's own folder, which holds ``runs_dir``)."""
    env = {k: v for k, v in os.environ.items() if k != "KFORGE_MCP_TEST_GATE"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])      # kernel_forge, tests.support
    if gate:
        env["KFORGE_MCP_TEST_GATE"] = gate
    allowed = [runs_dir.parent] if allow is None else allow
    args = ["-m", "kernel_forge", "mcp", "--runs-dir", str(runs_dir)] + [a for d in allowed for a in ("--allow", str(d))]
    params = StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(cwd))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=300) as session:
            await session.initialize()
            yield session


def talk(runs_dir: Path, script, gate: str | None = SCRIPTED, **kw):
    """Run ``script(session)`` (a coroutine function) against a fresh server; return its result."""
    async def main():
        async with server(runs_dir, gate, **kw) as s:
            return await script(s)
    return anyio.run(main)


def ok(result) -> dict:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    # the text content carries the same object, for clients that read only text
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


def error_text(result) -> str:
    assert result.is_error, result.structured_content
    return result.content[0].text


def test_tools_resources_and_validation(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": 1}')

    async def script(s):
        tools = {t.name: t for t in (await s.list_tools()).tools}
        templates = {t.uri_template for t in (await s.list_resource_templates()).resource_templates}
        good = await s.call_tool("validate_manifest", {"manifest": "manifests/vector_add.json"})
        broken = await s.call_tool("validate_manifest", {"manifest": str(bad)})
        doctor = await s.call_tool("doctor", {})
        return tools, templates, good, broken, doctor

    tools, templates, good, broken, doctor = talk(tmp_path / "runs", script)
    assert set(tools) == TOOLS
    assert {"manifest", "source", "path"} <= set(tools["eval_kernel"].input_schema["properties"])
    assert templates == {"kforge://runs/{run}/summary", "kforge://runs/{run}/report"}
    v = ok(good)
    assert v["task"] == "vector_add" and [c["role"] for c in v["cases"]].count("performance") == 2
    assert {"what": "initial", "path": str(ROOT / "manifests" / "vector_add.cu"), "outside_manifest_folder": False} in v["files"]
    assert any(f["what"] == "reference" and f["outside_manifest_folder"] for f in v["files"])
    msg = error_text(broken)
    assert "ManifestError (exit code 2 in the CLI)" in msg and f"{bad}: $" in msg
    assert ok(doctor)["gate"].startswith("test: python:tests.support.fakes:ScriptedGate")


def test_eval_kernel_verdicts_times_peak_bound_and_resources(tmp_path):
    fast = vector_add("pass 300")
    wrong = vector_add("mismatch 300")
    cublas = "#include <cublas_v2.h>\n" + fast
    kfile = tmp_path / "fast.cu"
    kfile.write_text(fast)

    async def script(s):
        out = []
        for args in ({"source": fast}, {"path": str(kfile), "baselines": False}, {"source": wrong}, {"source": cublas},
                     {}, {"source": fast, "reps": 0}):
            out.append(await s.call_tool("eval_kernel", {"manifest": str(MANIFEST), **args}))
        return out

    by_source, by_path, wrong_r, cublas_r, neither, zero_reps = talk(tmp_path / "runs", script)
    r = ok(by_source)
    assert (r["passed"], r["verdict"], r["reason"]) == (True, "passed", "passed")
    assert r["gate"] == "test: python:tests.support.fakes:ScriptedGate (not measured)"
    assert r["score_us"] == pytest.approx(300) and r["speedup_vs_initial"] == pytest.approx(2.0)
    perf = {c["name"]: c for c in r["cases"] if c["role"] == "performance"}
    assert set(perf) == {"n16M", "n64M"}
    c = perf["n16M"]
    assert c["median_us"] == pytest.approx(150) and c["p20_us"] < c["median_us"] < c["p80_us"]
    assert c["pct_peak_bw"] > 0 and c["bound"] in ("memory", "compute", "latency", "unknown")
    assert r["bound"]["cases"][0]["name"] in perf and r["compile"]["resources"] == {"registers": 16}
    assert {c["role"] for c in r["cases"]} == {"correctness", "performance", "holdout"}
    assert ok(by_path)["baselines_us"] == {} and ok(by_path)["kernel"] == str(kfile)

    w = ok(wrong_r)
    assert (w["passed"], w["reason"]) == (False, "mismatch") and "7 elements differ" in w["message"]
    s = ok(cublas_r)
    assert (s["passed"], s["reason"]) == (False, "static_rule") and "kernel.cu:1:" in s["message"]
    assert "needs the kernel as source (text) or path" in error_text(neither)
    assert "reps: must be at least 1, got 0" in error_text(zero_reps)


def _recorded_run(tmp_path: Path) -> Path:
    task = load_task(MANIFEST)
    props = write_proposals(tmp_path / "props", [vector_add("pass 400"), vector_add("mismatch 300")])
    opt = start_run(MANIFEST, LoopConfig(max_iterations=3), GateOptions(), ProposerConfig(replay=str(props)),
                    runs_dir=tmp_path / "recorded", gate=ScriptedGate(task))
    opt.run()
    return opt.run_dir.path


def test_eval_kernel_against_a_recorded_run(tmp_path):
    run = _recorded_run(tmp_path)
    hist = json.loads((run / "history.json").read_text())
    by_label = {a["label"]: a for a in hist["attempts"]}
    good, bad = run / by_label["01.cu"]["source_file"], run / by_label["02.cu"]["source_file"]
    never = tmp_path / "never.cu"
    never.write_text(vector_add("pass 250"))

    async def script(s):
        return [await s.call_tool("eval_kernel", {"manifest": str(MANIFEST), "path": str(p)})
                for p in (good, bad, never)]

    g, b, unrecorded = talk(tmp_path / "runs", script, gate=f"recorded:{run}")
    g, b = ok(g), ok(b)
    assert g["gate"].startswith("test: recorded:") and g["passed"] and g["score_us"] == pytest.approx(400)
    assert g["speedup_vs_initial"] == pytest.approx(1.5)
    assert b["passed"] is False and b["reason"] == "mismatch"
    # a kernel the run never gated has no recorded verdict: an error, never a made-up one
    assert "no recorded verdict" in error_text(unrecorded)


def test_optimize_runs_in_the_background_status_resources_and_replay(tmp_path):
    runs = tmp_path / "runs"
    props = write_proposals(tmp_path / "props", [vector_add("pass 400")])

    async def script(s):
        started = ok(await s.call_tool("optimize", {"manifest": str(MANIFEST), "replay": str(props),
                                                    "max_iterations": 2, "settings": {"loop": {"roof_stop": 1.5}}}))
        status = ok(await s.call_tool("run_status", {"run": started["run"], "wait_s": 120}))
        name = Path(started["run"]).name
        listed = {str(r.uri) for r in (await s.list_resources()).resources}
        summary = (await s.read_resource(f"kforge://runs/{name}/summary")).contents[0].text
        report = (await s.read_resource(f"kforge://runs/{name}/report")).contents[0].text
        by_name = ok(await s.call_tool("run_status", {"run": name}))
        replayed = ok(await s.call_tool("replay", {"request": str(Path(started["run"]) / "best-case-n16M.json")}))
        refused = await s.call_tool("optimize", {"manifest": str(MANIFEST), "max_iterations": -1})
        refused_setting = await s.call_tool("optimize", {"manifest": str(MANIFEST), "settings": {"loop": {"roof_stop": 3}}})
        not_a_run = await s.call_tool("run_status", {"run": str(tmp_path)})
        escaped = []
        for uri in ("kforge://runs/..%2F..%2Fetc/summary", "kforge://runs/passwd/summary"):
            try:
                await s.read_resource(uri)
                escaped.append("read")
            except Exception as exc:  # noqa: BLE001 - the SDK raises its MCPError
                escaped.append(str(exc))
        return (started, status, name, listed, summary, report, by_name, replayed, refused, refused_setting, not_a_run,
                escaped)

    (started, status, name, listed, summary, report, by_name, replayed, refused, refused_setting, not_a_run,
     escaped) = talk(runs, script)
    assert started["status"] == "started" and Path(started["run"]).parent == runs and started["proposer"] == "replay"
    assert status["state"] == "finished" and status["stop_reason"].startswith(("proposer_exhausted", "max_iterations"))
    assert status["best"]["id"] == "a0001" and status["best"]["speedup_vs_initial"] == pytest.approx(1.5)
    assert status["best"]["holdout"]["passed"] is True
    assert f"kforge://runs/{name}/summary" in listed and f"kforge://runs/{name}/report" in listed
    assert json.loads(summary)["best"]["id"] == "a0001"
    assert report.startswith(f"# kforge run {name}: vector_add")
    assert by_name["run"] == started["run"] and by_name["gated"] == status["gated"]
    assert replayed["passed"] is True and replayed["claim"]["holds"] is True and replayed["ok"] is True
    assert "max_iterations: must be at least 1, got -1" in error_text(refused)
    # any other setting through `settings`, as in a config file, checked by the same validator
    assert json.loads((Path(started["run"]) / "run.json").read_text())["loop"]["roof_stop"] == 1.5
    assert "settings: $.loop.roof_stop: must be at most 2, got 3.0" in error_text(refused_setting)
    assert sorted(p.name for p in runs.iterdir()) == [name]             # the refused run made no folder
    assert "not a kforge run folder" in error_text(not_a_run)
    assert "read" not in escaped and "'passwd' is not a run name like run-007" in escaped[1]


def test_the_test_hook_is_refused_when_malformed(tmp_path):
    async def script(s):
        return await s.call_tool("doctor", {})

    with pytest.raises(BaseException):   # the server exits at start: the client sees the connection close
        talk(tmp_path / "runs", script, gate="scripted")


@pytest.mark.gpu
def test_eval_a_real_kernel_through_the_mcp_client(tmp_path):
    async def script(s):
        return await s.call_tool("eval_kernel", {"manifest": str(MANIFEST), "path": str(ROOT / "manifests" / "vector_add.cu"),
                                                 "quick": True, "reps": 20, "warmup": 3, "baselines": False})

    r = ok(talk(tmp_path / "runs", script, gate=None))
    assert r["gate"] == "gpu" and r["passed"] and r["reason"] == "passed", r
    perf = [c for c in r["cases"] if c["role"] == "performance"]
    assert perf and all(c["median_us"] > 0 and c["p20_us"] <= c["median_us"] <= c["p80_us"] for c in perf)
    assert all(c["pct_peak_bw"] and 1 < c["pct_peak_bw"] < 125 for c in perf)
    assert r["compile"]["resources"].get("registers", 0) > 0 and r["device"], {**r["compile"], "log": r["compile"]["log"][-600:]}


def test_every_tool_refuses_unknown_arguments_naming_the_known_ones(tmp_path):
    """``{"model": [...]}`` instead of ``models`` silently ran the tuner; now each tool's input
    schema is strict and the call is a tool error that names what the tool takes."""
    from kernel_forge.app.mcp_server import Service, build_server

    started = []
    srv = build_server(Service(tmp_path / "runs", gate_factory=lambda task, options: started.append(task),
                               gate_label="test"))

    async def main():
        tools = {t.name: t for t in await srv.list_tools()}
        assert set(tools) == TOOLS
        assert all(t.input_schema.get("additionalProperties") is False for t in tools.values())
        out = []
        for name, args in (("optimize", {"manifest": str(MANIFEST), "model": ["openai:gpt-5"]}),
                           ("validate_manifest", {"manifest": str(MANIFEST), "deepp": True}),
                           ("doctor", {"verbose": True})):
            try:
                await srv.call_tool(name, args)
                out.append(None)
            except Exception as exc:  # noqa: BLE001 - the SDK's ToolError
                out.append(str(exc))
        return out

    optimize, validate, doctor = anyio.run(main)
    assert "optimize: unknown argument 'model' (did you mean 'models'?); nothing was done" in optimize
    assert "optimize takes: base_url, budget_usd, candidates, hints, manifest, max_iterations, models" in optimize
    assert "unknown argument 'deepp' (did you mean 'deep'?)" in validate and "takes: arch, deep, manifest" in validate
    assert "doctor takes: no arguments" in doctor
    assert not started and not (tmp_path / "runs").exists()      # nothing ran


def test_a_test_gate_module_that_does_not_import_is_exit_2(tmp_path):
    from click.testing import CliRunner

    from kernel_forge.app.cli import cli

    r = CliRunner().invoke(cli, ["mcp", "--runs-dir", str(tmp_path / "runs")],
                           env={"KFORGE_MCP_TEST_GATE": "python:nosuchmod:X"})
    assert r.exit_code == 2 and "KFORGE_MCP_TEST_GATE=python:nosuchmod:X: cannot import 'nosuchmod'" in r.stderr


def test_validate_manifest_refuses_a_bad_arch_and_a_membership_test_as_input_errors(tmp_path):
    """Issue 33: ``arch`` "sm_90 --include=/etc/passwd" was an internal AttributeError, and ``n in
    2`` in a grid an internal KeyError; both are bad input (exit code 2), named by their place."""
    data = json.loads(MANIFEST.read_text())
    data["launch"]["grid"] = ["cdiv(n, 256) if n in 2 else 1"]
    for key in ("reference", "baselines", "initial", "templates"):
        data.pop(key, None)
    data["reference"] = {"python": str(ROOT / "references" / "vector_add.py") + ":reference"}
    member = tmp_path / "member.json"
    member.write_text(json.dumps(data))

    async def script(s):
        arch = await s.call_tool("validate_manifest", {"manifest": "manifests/vector_add.json",
                                                       "arch": "sm_90 --include=/etc/passwd"})
        inside = await s.call_tool("validate_manifest", {"manifest": str(member)})
        return arch, inside

    arch, inside = talk(tmp_path / "runs", script)
    said = error_text(arch)
    assert "exit code 2 in the CLI" in said and "arch: must be like sm_90, got 'sm_90 --include=/etc/passwd'" in said
    said = error_text(inside)
    assert "exit code 2 in the CLI" in said and f"{member}: $.launch" in said and "operator 'in' is not allowed" in said
    assert "internal error" not in said


# ------------------------------------------------------------------------------ issue 35, S4: MCP stays in its folder

def _task_copy(folder: Path, **changes) -> Path:
    """vector_add's manifest, kernel and reference copied into ``folder``; returns the manifest."""
    folder.mkdir(parents=True)
    (folder / "vector_add.cu").write_text((ROOT / "manifests" / "vector_add.cu").read_text())
    (folder / "vector_add.py").write_text((ROOT / "references" / "vector_add.py").read_text())
    data = json.loads(MANIFEST.read_text())
    for key in ("$schema", "templates"):
        data.pop(key, None)
    data.update(reference={"python": "vector_add.py:reference"}, baselines={}, **changes)
    (folder / "vector_add.json").write_text(json.dumps(data))
    return folder / "vector_add.json"


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() and not p.is_symlink() else b"")
            for p in sorted(folder.rglob("*"))}


def _request(kernel: str, manifest: Path) -> dict:
    return {"manifest": str(manifest), "kernel": kernel, "attempt": "a0001", "case": "n16M", "role": "performance",
            "seeds": [1], "defines": {}, "launch": None, "median_us": 150.0, "command": "kforge replay x"}


def test_every_path_an_agent_gives_must_resolve_inside_the_allowed_folders(tmp_path):
    """Issue 35, S4: an agent read any file through eval_kernel(path=...) or a replay request's
    kernel, and made folders and SQLite files anywhere through settings={"loop": {"archive": ...}}.
    Each path now resolves (symlinks followed) inside the server's folder or is a tool error that
    names the argument, and nothing is read or written outside."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    manifest = _task_copy(work / "task")
    _task_copy(outside / "task")
    secret = outside / "secret.cu"
    secret.write_text(vector_add("pass 300", header="// kforge: TOPSECRET line\n"))
    (outside / "empty.db").write_text("")
    write_proposals(outside / "props", [vector_add("pass 400")])
    (outside / "run").mkdir()
    (outside / "run" / "run.json").write_text("{}")
    (work / "link.cu").symlink_to(secret)
    (work / "linkdir").symlink_to(outside, target_is_directory=True)
    (work / "req.json").write_text(json.dumps(_request("../outside/secret.cu", manifest)))
    (outside / "req.json").write_text(json.dumps(_request("secret.cu", manifest)))
    escaping = _task_copy(work / "escaping", initial="../../outside/secret.cu")
    os.mkfifo(work / "fifo.cu")
    (work / "big.cu").write_text("//" + "x" * (1 << 20) + "\n")
    before = _tree(outside)

    calls = [
        ("validate_manifest", {"manifest": str(outside / "task" / "vector_add.json")}, "manifest: "),
        ("validate_manifest", {"manifest": "linkdir/task/vector_add.json"}, "manifest: linkdir/task/vector_add.json"),
        ("validate_manifest", {"manifest": str(escaping)}, "its initial"),
        ("eval_kernel", {"manifest": str(manifest), "path": str(secret)}, "path: "),
        ("eval_kernel", {"manifest": str(manifest), "path": "link.cu"}, "path: link.cu resolves to"),
        ("eval_kernel", {"manifest": str(manifest), "path": "fifo.cu"}, "path: fifo.cu: the kernel file is a FIFO"),
        ("eval_kernel", {"manifest": str(manifest), "path": "big.cu"}, "path: big.cu: the kernel file has"),
        ("optimize", {"manifest": str(manifest), "settings": {"loop": {"archive": str(outside / "empty.db")}}},
         "settings: $.loop.archive: "),
        ("optimize", {"manifest": str(manifest), "settings": {"loop": {"archive": "linkdir/new/a.db"}}},
         "settings: $.loop.archive: linkdir/new/a.db resolves to"),
        ("optimize", {"manifest": str(manifest), "replay": str(outside / "props")}, "replay: "),
        ("optimize", {"manifest": str(manifest), "settings": {"proposer": {"replay": str(outside / "props")}}},
         "settings: $.proposer.replay: "),
        ("run_status", {"run": str(outside / "run")}, "run: "),
        ("replay", {"request": str(outside / "req.json")}, "request: "),
        ("replay", {"request": "req.json"}, "request (req.json: $.kernel): ../outside/secret.cu resolves to"),
    ]

    async def script(s):
        return [await s.call_tool(name, args) for name, args, _ in calls]

    results = talk(work / "runs", script, allow=[], cwd=work)
    for (name, args, words), result in zip(calls, results):
        msg = error_text(result)
        assert words in msg, (name, args, msg)
        assert "TOPSECRET" not in msg and "internal error" not in msg, msg
        if "resolves to" in msg:
            assert "outside the folders this server may use" in msg and "kforge mcp --allow" in msg, msg
    assert _tree(outside) == before                      # nothing written there: no folder, no database
    assert not (work / "runs").exists()                  # and no run started


def test_an_allowed_folder_is_usable_and_a_special_file_in_it_is_refused(tmp_path):
    """``--allow DIR`` opens DIR to agents; even there a device (``/dev/zero``, which exhausted
    memory through eval_kernel's path) is refused, not read."""
    outside = tmp_path / "outside"
    manifest = _task_copy(outside / "task")
    kernel = outside / "fast.cu"
    kernel.write_text(vector_add("pass 300"))

    async def script(s):
        return [await s.call_tool("eval_kernel", {"manifest": str(manifest), "path": str(kernel), "baselines": False}),
                await s.call_tool("eval_kernel", {"manifest": str(manifest), "path": "/dev/zero"})]

    good, zero = talk(tmp_path / "runs", script, allow=[outside, "/dev"])
    assert ok(good)["passed"] is True and ok(good)["kernel"] == str(kernel)
    assert "path: /dev/zero: the kernel file is a character device, not a regular file" in error_text(zero)
