"""Bad input, as a new user types it: every case ends with exit 2, a message that names the file
and the place in it (JSON path, kernel line, option), no traceback, and nothing changed on disk.

Each row of :data:`BAD` builds its inputs in a fresh folder (a copy of the vector_add task), runs
one kforge command through click's runner, and the test checks the exit code, the words of the
message, and that every file under the folder has the same bytes afterwards (no file added or
removed either).  The first rows are the ones issue 11 lists; the rest were found by trying
more mistakes of the same kind (each says what it found).  All of them run without a GPU: a
check that only came after the GPU probe would exit 3 here, not 2.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from click.testing import CliRunner

from kernel_forge import preflight
from kernel_forge.cli import cli
from kernel_forge.gate import GateOptions
from kernel_forge.loop import LoopConfig
from kernel_forge.optimize import ProposerConfig, start_run
from kernel_forge.task import load_task

from fakes import ScriptedGate, vector_add, write_proposals

ROOT = Path(__file__).resolve().parents[1]

try:
    import cuda.bindings.nvrtc  # noqa: F401
    HAS_NVRTC = True
except ImportError:
    HAS_NVRTC = False


# ------------------------------------------------------------------------------ the task folder

def make_task(folder: Path, **changes) -> Path:
    """A self-contained copy of vector_add in ``folder`` (manifest, kernel, reference), with
    ``changes`` applied to the manifest's top level; returns the manifest."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "manifests" / "vector_add.cu", folder / "vector_add.cu")
    shutil.copy(ROOT / "references" / "vector_add.py", folder / "vector_add.py")
    data = json.loads((ROOT / "manifests" / "vector_add.json").read_text())
    data.pop("$schema")
    data.pop("templates")
    data["reference"] = {"python": "vector_add.py:reference"}
    data["baselines"] = {}
    data.update(changes)
    m = folder / "vector_add.json"
    m.write_text(json.dumps(data, indent=2))
    return m


def edit(manifest: Path, fn) -> Path:
    data = json.loads(manifest.read_text())
    fn(data)
    manifest.write_text(json.dumps(data, indent=2))
    return manifest


def finished_run(root: Path, manifest: Path, fake: str = "pass 400", holdout: str | None = None) -> Path:
    """A run of the scripted gate over ``manifest`` whose best is x1.5 (the initial is 600 µs)."""
    props = write_proposals(root / "props", [vector_add(fake, holdout=holdout)])
    task = load_task(manifest)
    opt = start_run(manifest, LoopConfig(max_iterations=3), GateOptions(), ProposerConfig(replay=str(props)),
                    runs_dir=root / "runs", gate=ScriptedGate(task))
    opt.run()
    return opt.run_dir.path


def snapshot(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder`` (Python's bytecode caches aside)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            out[str(p.relative_to(folder))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


# ------------------------------------------------------------------------------ the table

@dataclass
class Bad:
    name: str
    #: builds the inputs under the folder; returns the command's arguments and the words the
    #: message must contain (each: the file, the place, what was wrong)
    make: Callable[[Path], tuple[list[str], list[str]]]
    found: str = ""                 #: what trying it found before the fix (for rows beyond the issue)
    nvrtc: bool = False             #: needs NVRTC to make sense
    host_memory: int | None = None  #: pretend the host has this much memory


def _m(tmp: Path, **kw) -> Path:
    return make_task(tmp / "task", **kw)


def _approve_damaged_approvals(tmp):
    m = _m(tmp)
    run = finished_run(tmp, m)
    ap = tmp / "ci" / "approved.json"
    ap.parent.mkdir()
    ap.write_text('{"approved": [')                      # damaged: cut off
    kernels = tmp / "ci" / "approved"
    kernels.mkdir()
    (kernels / "vector_add.cu").write_text("// the kernel approved last week\n")
    return ["approve", str(run), "--into", str(ap), "--copy-to", str(kernels)], [str(ap), "invalid JSON at line 1"]


def _approve_over_initial(tmp):
    m = _m(tmp)
    run = finished_run(tmp, m)
    return (["approve", str(run), "--into", str(tmp / "approved.json"), "--copy-to", str(m.parent)],
            [str(m.parent / "vector_add.cu"), "one of the task's own files"])


def _approve_over_a_stranger(tmp):
    m = _m(tmp)
    run = finished_run(tmp, m)
    dest = tmp / "kernels"
    dest.mkdir()
    (dest / "vector_add.cu").write_text("// someone's work in progress\n")
    return (["approve", str(run), "--into", str(tmp / "approved.json"), "--copy-to", str(dest)],
            [str(dest / "vector_add.cu"), "is not an earlier approved copy"])


def _approve_unfinished(tmp):
    m = _m(tmp)
    run = finished_run(tmp, m)
    (run / "summary.json").unlink()
    return (["approve", str(run), "--into", str(tmp / "approved.json"), "--copy-to", str(tmp / "k")],
            [str(run), "has no summary.json", "not finished"])


def _reference_exits(tmp):
    m = _m(tmp)
    (m.parent / "vector_add.py").write_text("import sys\n\ndef reference(a, b, c, n):\n    sys.exit(0)\n")
    other = make_task(tmp / "other")
    return ["validate", "--no-compile", str(m), str(other)], [str(m), "$.reference", "called sys.exit(0)"]


def _reference_exits_on_import(tmp):
    m = _m(tmp)
    (m.parent / "vector_add.py").write_text("exit(3)\n\ndef reference(a, b, c, n):\n    pass\n")
    return ["validate", "--no-compile", str(m)], [str(m), "$.reference", "importing", "sys.exit(3)"]


def _case_too_large_for_gpu(tmp):
    def change(d):
        d["args"]["a"]["shape"] = ["n", "16"]          # 2e9 x 16 floats: 119 GiB
        d["cases"].append({"name": "huge", "role": "performance", "vars": {"n": 2 * 10**9}})
    m = edit(_m(tmp), change)
    return ["validate", "--no-compile", str(m)], [str(m), "$.cases[5]", "case 'huge'", "GiB of GPU memory", "80.0 GiB"]


def _shape_times_a_million(tmp):
    m = edit(_m(tmp), lambda d: d["args"]["a"].update(shape=["n*1000000"]))
    return ["validate", "--no-compile", str(m)], [str(m), "case 'odd'", "GiB of GPU memory"]


def _case_too_large_for_host(tmp):
    m = edit(_m(tmp), lambda d: d["cases"].append({"name": "big", "role": "performance", "vars": {"n": 10**9}}))
    return ["validate", "--no-compile", str(m)], [str(m), "$.cases[5]", "case 'big'", "host memory", "16.0 GiB"]


def _optimize(flag):
    def make(tmp):
        m = _m(tmp)
        return ["optimize", str(m), *flag.split(), "--runs-dir", str(tmp / "runs")], [flag.split()[0]]
    return make


def _config_not_a_number(tmp):
    m = _m(tmp)
    cfg = tmp / "opt.json"
    cfg.write_text(json.dumps({"manifest": str(m), "loop": {"max_iterations": "many"}}))
    return (["optimize", "--config", str(cfg), "--runs-dir", str(tmp / "runs")],
            [str(cfg), "$.loop.max_iterations", "expected an integer", "'many'"])


def _config_gate_reps_text(tmp):
    m = _m(tmp)
    cfg = tmp / "opt.json"
    cfg.write_text(json.dumps({"manifest": str(m), "gate": {"reps": "100"}}))
    return ["optimize", "--config", str(cfg), "--runs-dir", str(tmp / "runs")], [str(cfg), "$.gate.reps"]


def _eval_no_entry_point(tmp):
    m = _m(tmp)
    k = tmp / "k.cu"
    k.write_text('extern "C" __global__ void vector_ad(const float* a, const float* b, float* c, int n) {}\n')
    return ["eval", str(m), str(k)], [str(k), 'no `extern "C" __global__ void vector_add(...)`']


def _eval_cublas(tmp):
    m = _m(tmp)
    k = tmp / "k.cu"
    k.write_text("#include <cublas_v2.h>\n" + (m.parent / "vector_add.cu").read_text())
    return ["eval", str(m), str(k)], [f"{k}:1:", "vendor library"]


def _validate_c_syntax_error(tmp):
    m = _m(tmp)
    cu = m.parent / "vector_add.cu"
    cu.write_text(cu.read_text().replace("c[i] = a[i] + b[i];", "c[i] = a[i] + ;"))
    return ["validate", str(m), "--arch", "sm_90"], [str(m), "$.initial", "vector_add.cu", "line 8", "8 |         c[i] = a[i] + ;"]


def _compile_etc_passwd(tmp):
    k = tmp / "k.cu"
    k.write_text('#include "/etc/passwd"\nextern "C" __global__ void k(float* a) { a[0] = 1; }\n')
    return ["compile", str(k), "--arch", "sm_90"], [f"{k}:1:", "absolute or parent-relative path"]


def _compile_computed_include(tmp):
    k = tmp / "k.cu"
    k.write_text('#define P "/etc/passwd"\n#include P\nextern "C" __global__ void k(float* a) { a[0] = 1; }\n')
    return ["compile", str(k), "--arch", "sm_90"], [f"{k}:2:", "computed"]


def _non_utf8_manifest(tmp):
    m = _m(tmp)
    m.write_bytes(m.read_bytes().replace(b"Elementwise", b"\xe9l\xe9mentwise"))
    return ["validate", str(m)], [str(m), "not UTF-8", "line 3"]


def _shape_complex(tmp):
    m = edit(_m(tmp), lambda d: d["args"]["a"].update(shape=["(-1)**0.5"]))
    return ["validate", str(m)], [str(m), "$.args.a.shape", "not a real number"]


def _shape_deep_nesting(tmp):
    m = edit(_m(tmp), lambda d: d["args"]["a"].update(shape=["-" * 990 + "n"]))
    return ["validate", str(m)], [str(m), "$.args.a.shape", "nested more than 64 levels"]


def _npy_not_npy(tmp):
    m = _m(tmp)
    (m.parent / "a.npy").write_text("1,2,3\n")
    edit(m, lambda d: d["args"]["a"].update(init={"kind": "npy", "path": "a.npy"}))
    return ["validate", str(m)], [str(m), "$.args.a.init.path", "is not an .npy file"]


def _replay_missing_keys(tmp):
    req = tmp / "best-case-x.json"
    req.write_text(json.dumps({"manifest": "m.json", "kernel": "best.cu"}))
    return ["replay", str(req)], [str(req), "$:", "'attempt' is a required property"]


def _report_wrong_type_history(tmp):
    m = _m(tmp)
    run = finished_run(tmp, m)
    hist = json.loads((run / "history.json").read_text())
    hist["attempts"] = 5
    (run / "history.json").write_text(json.dumps(hist))
    return ["report", str(run)], [str(run / "history.json"), "$.attempts", "5 is not of type 'array'"]


def _resume_wrong_type_history(tmp):
    m = _m(tmp)
    run = finished_run(tmp, m)
    (run / "history.json").write_text("[]\n")
    return ["optimize", "--resume", str(run)], [str(run / "history.json"), "$:", "is not of type 'object'"]


def _compile_into_missing_folder(tmp):
    return (["compile", str(ROOT / "manifests" / "vector_add.cu"), "--arch", "sm_90", "-o", str(tmp / "no" / "k.cubin")],
            ["-o", str(tmp / "no"), "does not exist"])


def _shape_is_a_condition(tmp):
    m = edit(_m(tmp), lambda d: d["args"]["a"].update(shape=["n > 0"]))
    return ["validate", str(m)], [str(m), "$.args.a.shape", "must be a number", "condition"]


def _grid_is_a_condition(tmp):
    m = edit(_m(tmp), lambda d: d["launch"].update(grid=["n > 0"]))
    return ["validate", str(m)], [str(m), "$.launch", "grid size must be a number"]


def _cost_is_a_condition(tmp):
    m = edit(_m(tmp), lambda d: d["cost"].update(bytes="n > 0"))
    return ["validate", str(m)], [str(m), "$.cost.bytes", "must be a number"]


# -- beyond the issue: more mistakes a new user makes ---------------------------------------

def _manifest_is_a_list(tmp):
    m = _m(tmp)
    m.write_text("[]")
    return ["validate", str(m)], [str(m), "$:", "is not of type 'object'"]


def _manifest_empty(tmp):
    m = _m(tmp)
    m.write_text("")
    return ["validate", str(m)], [str(m), "invalid JSON at line 1"]


def _case_var_as_text(tmp):
    m = edit(_m(tmp), lambda d: d["cases"][0]["vars"].update(n="1000"))
    return ["validate", str(m)], [str(m), "$.cases[0].vars.n"]


def _reference_function_missing(tmp):
    m = edit(_m(tmp), lambda d: d.update(reference={"python": "vector_add.py:referense"}))
    return ["validate", "--no-compile", str(m)], [str(m), "$.reference", "has no function 'referense'"]


def _reference_syntax_error(tmp):
    m = _m(tmp)
    (m.parent / "vector_add.py").write_text("def reference(a, b, c, n)\n    pass\n")
    return ["validate", "--no-compile", str(m)], [str(m), "$.reference", "SyntaxError"]


def _kernel_not_utf8(tmp):
    m = _m(tmp)
    k = tmp / "k.cu"
    k.write_bytes(b"// \xff\xfe\n" + (m.parent / "vector_add.cu").read_bytes())
    return ["eval", str(m), str(k)], [str(k), "not UTF-8"]


def _kernel_bad_header(tmp):
    m = _m(tmp)
    k = tmp / "k.cu"
    k.write_text("// kforge: grid = [cdiv(n, 256]\n// kforge: block = [256]\n" + (m.parent / "vector_add.cu").read_text())
    return ["eval", str(m), str(k)], [f"{k}:1:", "bad expression in kforge header"]


def _gate_missing_approvals(tmp):
    return ["gate", str(tmp / "approved.json")], [str(tmp / "approved.json"), "no such approvals file"]


def _approvals_speedup_text(tmp):
    ap = tmp / "approved.json"
    ap.write_text(json.dumps({"approved": [{"task": "vector_add", "manifest": "m.json", "kernel": "k.cu", "sha256": "0",
                                            "speedup_vs_initial": "fast", "tolerance": 0.05}]}))
    return ["gate", str(ap)], [str(ap), "$.approved[0].speedup_vs_initial", "expected a number"]


def _approvals_manifest_missing(tmp):
    ap = tmp / "approved.json"
    ap.write_text(json.dumps({"approved": [{"task": "vector_add", "manifest": "none.json", "kernel": "k.cu",
                                            "sha256": "0", "speedup_vs_initial": 2.0, "tolerance": 0.05}]}))
    return ["gate", str(ap)], [str(ap), "$.approved[0].manifest", "cannot read manifest"]


def _report_damaged_summary(tmp):
    m = _m(tmp)
    run = finished_run(tmp, m)
    (run / "summary.json").write_text('{"task": "vector_add",\n  "best": }\n')
    return ["report", str(run)], [str(run / "summary.json"), "damaged JSON at line 2"]


def _replay_not_json(tmp):
    req = tmp / "best-case-x.json"
    req.write_text("kforge replay me\n")
    return ["replay", str(req)], [str(req), "damaged JSON at line 1"]


def _replay_unknown_case(tmp):
    m = _m(tmp)
    run = finished_run(tmp, m)
    req = run / "best-case-n16M.json"
    data = json.loads(req.read_text())
    data["case"] = "n32M"
    req.write_text(json.dumps(data))
    return ["replay", str(req)], [str(req), "$.case", "no case 'n32M'"]


def _init_template_signature(tmp):
    return (["init", "k", "--dir", str(tmp), "--signature", 'extern "C" __global__ void k(std::vector<float> v)'],
            ["--signature", "templates are not supported"])


def _init_both_sources(tmp):
    k = tmp / "k.cu"
    k.write_text('extern "C" __global__ void k(float* a) {}\n')
    return (["init", "k", "--dir", str(tmp), "--from", str(k), "--signature", 'extern "C" __global__ void k(float* a)'],
            ["--from", "--signature", "one of them"])


def _init_wrong_kernel_name(tmp):
    k = tmp / "k.cu"
    k.write_text('extern "C" __global__ void scale(float* a, int n) {}\n')
    return ["init", "saxpy", "--dir", str(tmp), "--from", str(k)], [str(k), "no kernel named 'saxpy'", "scale"]


def _eval_json_into_missing_folder(tmp):
    m = _m(tmp)
    return ["eval", str(m), "--json", str(tmp / "out" / "r.json")], ["--json", str(tmp / "out"), "does not exist"]


def _eval_reps_zero(tmp):
    m = _m(tmp)
    return ["eval", str(m), "--reps", "0"], ["--reps 0", "at least 1"]


def _validate_gpu_memory_zero(tmp):
    m = _m(tmp)
    return ["validate", str(m), "--gpu-memory", "0"], ["--gpu-memory 0", "above 0"]


def _validate_bad_arch(tmp):
    m = _m(tmp)
    return ["validate", str(m), "--arch", "sm90"], ["--arch 'sm90'", "like sm_90"]


def _npy_wrong_size(tmp):
    m = _m(tmp)
    np.save(m.parent / "a.npy", np.zeros(10, dtype=np.float32))
    edit(m, lambda d: d["args"]["a"].update(init={"kind": "npy", "path": "a.npy"}))
    return ["validate", str(m)], [str(m), "$.args.a.init.path", "holds 10 elements", "case 'odd' needs 1000003"]


def _npy_objects(tmp):
    m = _m(tmp)
    np.save(m.parent / "a.npy", np.array([{"x": 1}] * 4, dtype=object), allow_pickle=True)
    edit(m, lambda d: d["args"]["a"].update(init={"kind": "npy", "path": "a.npy"}))
    return ["validate", str(m)], [str(m), "$.args.a.init.path", "Python objects"]


def _grid_zero(tmp):
    m = edit(_m(tmp), lambda d: d["launch"].update(grid=["n - n"]))
    return ["validate", str(m)], [str(m), "$.launch.grid", "below 1", "case 'odd'"]


def _template_no_valid_setting(tmp):
    m = _m(tmp)
    t = m.parent / "t.cu"
    t.write_text("// kforge: grid = [cdiv(n, B)]\n// kforge: block = [B]\n// kforge: tune B = [64, 128]\n"
                 "// kforge: constraint B > 1024\n" + (m.parent / "vector_add.cu").read_text())
    edit(m, lambda d: d.update(templates=["t.cu"]))
    return ["validate", "--no-compile", str(m)], [str(m), "$.templates[0]", "no setting of its tunables"]


def _template_static_rule(tmp):
    m = _m(tmp)
    t = m.parent / "t.cu"
    t.write_text((m.parent / "vector_add.cu").read_text().replace("c[i] = a[i] + b[i];",
                                                                  'asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));'))
    edit(m, lambda d: d.update(templates=["t.cu"]))
    return ["validate", "--no-compile", str(m)], [str(m), "$.templates[0]", f"{t}:8:", "timer"]


def _manifest_is_a_folder(tmp):
    (tmp / "m.json").mkdir()
    return ["validate", str(tmp / "m.json")], [str(tmp / "m.json"), "directory"]


def _time_limit_zero(tmp):
    m = _m(tmp)
    return ["optimize", str(m), "--time-limit", "0", "--runs-dir", str(tmp / "runs")], ["--time-limit 0", "above 0"]


def _approve_not_a_run(tmp):
    return (["approve", str(tmp), "--into", str(tmp / "a.json"), "--copy-to", str(tmp / "k")],
            [str(tmp), "not a kforge run folder"])


def _approve_tolerance(tmp):
    m = _m(tmp)
    run = finished_run(tmp, m)
    return (["approve", str(run), "--into", str(tmp / "a.json"), "--copy-to", str(tmp / "k"), "--tolerance", "1.5"],
            ["--tolerance 1.5", "[0, 1)"])


def _approve_initial_is_best(tmp):
    m = _m(tmp)
    run = finished_run(tmp, m, fake="pass 900")     # slower than the initial: the initial stays best
    return (["approve", str(run), "--into", str(tmp / "a.json"), "--copy-to", str(tmp / "k")],
            [str(run), "is the initial kernel", "nothing to approve"])


BAD = [
    # the issue's list
    Bad("approve with a damaged approvals file", _approve_damaged_approvals),
    Bad("approve --copy-to over the task's initial kernel", _approve_over_initial),
    Bad("approve over a file that is not an approved copy", _approve_over_a_stranger),
    Bad("approve an unfinished run", _approve_unfinished),
    Bad("a reference that calls sys.exit", _reference_exits),
    Bad("a reference that exits when imported", _reference_exits_on_import),
    Bad("a case too large for the GPU", _case_too_large_for_gpu),
    Bad("shape n*1000000", _shape_times_a_million),
    Bad("a case too large for the host", _case_too_large_for_host, host_memory=16 * 2**30),
    Bad("--max-iterations -1", _optimize("--max-iterations -1")),
    Bad("--candidates 0", _optimize("--candidates 0")),
    Bad("--reps 0", _optimize("--reps 0")),
    Bad("--timeout 0", _optimize("--timeout 0")),
    Bad("--base-url not http(s)", _optimize("--base-url ftp://models.local --model openai:m")),
    Bad("--base-url without --model", _optimize("--base-url http://localhost:8000/v1")),
    Bad("a non-numeric value in a config file", _config_not_a_number),
    Bad("eval: a kernel with no entry point", _eval_no_entry_point),
    Bad("eval: a kernel that includes cuBLAS", _eval_cublas),
    Bad("validate: an initial kernel with a C syntax error", _validate_c_syntax_error, nvrtc=True),
    Bad('compile: #include "/etc/passwd"', _compile_etc_passwd),
    Bad("a non-UTF-8 manifest", _non_utf8_manifest),
    Bad("(-1)**0.5 in a shape", _shape_complex),
    Bad('"-"*990 + "n" in a shape', _shape_deep_nesting),
    Bad("an npy path that is not an .npy file", _npy_not_npy),
    Bad("replay of a JSON with missing keys", _replay_missing_keys),
    Bad("a wrong-type history.json on report", _report_wrong_type_history),
    Bad("a wrong-type history.json on resume", _resume_wrong_type_history),
    Bad("compile -o into a missing folder", _compile_into_missing_folder),
    Bad('shape "n > 0"', _shape_is_a_condition),
    Bad('grid "n > 0"', _grid_is_a_condition),
    Bad('cost "n > 0"', _cost_is_a_condition),
    # beyond the issue
    Bad("a computed #include", _compile_computed_include,
        found="#define P \"/etc/passwd\" then #include P passed the static rules"),
    Bad("a gate setting as text in a config file", _config_gate_reps_text, found="reps '100' reached the gate"),
    Bad("a manifest that is a JSON list", _manifest_is_a_list),
    Bad("an empty manifest", _manifest_empty),
    Bad("a case variable as text", _case_var_as_text),
    Bad("a reference function that does not exist", _reference_function_missing,
        found="the message did not name the manifest"),
    Bad("a reference with a syntax error", _reference_syntax_error, found="the message did not name the manifest"),
    Bad("eval: a kernel file that is not UTF-8", _kernel_not_utf8),
    Bad("eval: a broken kforge header", _kernel_bad_header),
    Bad("gate: no approvals file", _gate_missing_approvals, found="'no approved kernels', as if the file were empty"),
    Bad("gate: a speedup given as text", _approvals_speedup_text, found="TypeError later, exit 4"),
    Bad("gate: an approved manifest that is missing", _approvals_manifest_missing,
        found="the message did not name the approvals file"),
    Bad("report: a damaged summary.json", _report_damaged_summary),
    Bad("replay: a file that is not JSON", _replay_not_json),
    Bad("replay: a case the task does not have", _replay_unknown_case, found="KeyError after the GPU probe"),
    Bad("init: a template parameter", _init_template_signature),
    Bad("init: both --from and --signature", _init_both_sources),
    Bad("init: --from a file without that kernel", _init_wrong_kernel_name),
    Bad("eval --json into a missing folder", _eval_json_into_missing_folder,
        found="the error came after the whole evaluation, losing it"),
    Bad("eval --reps 0", _eval_reps_zero, found="accepted; a ZeroDivisionError came from the timing"),
    Bad("validate --gpu-memory 0", _validate_gpu_memory_zero),
    Bad("validate --arch sm90", _validate_bad_arch),
    Bad("an .npy file of the wrong size", _npy_wrong_size, found="found only when a case was generated"),
    Bad("an .npy file of Python objects", _npy_objects, found="ValueError from numpy, exit 4"),
    Bad("a grid dimension of 0", _grid_zero, found="accepted; the launch failed on the GPU"),
    Bad("a template no setting of which satisfies its constraints", _template_no_valid_setting),
    Bad("a template that reads a GPU timer", _template_static_rule, found="validate called it ok"),
    Bad("a manifest path that is a folder", _manifest_is_a_folder),
    Bad("--time-limit 0", _time_limit_zero, found="a run folder was made, then it stopped at once"),
    Bad("approve a folder that is not a run", _approve_not_a_run),
    Bad("approve --tolerance 1.5", _approve_tolerance, found="checked only after the copy was made"),
    Bad("approve a run whose best is the initial kernel", _approve_initial_is_best,
        found="approved the initial kernel as x1.00"),
]


@pytest.fixture
def kforge(monkeypatch):
    runner = CliRunner()

    def run(*args):
        return runner.invoke(cli, [str(a) for a in args], catch_exceptions=False)

    return run


@pytest.mark.parametrize("bad", BAD, ids=[b.name for b in BAD])
def test_bad_input_exits_2_naming_the_place_and_changes_nothing(bad: Bad, kforge, tmp_path, monkeypatch):
    if bad.nvrtc and not HAS_NVRTC:
        pytest.skip("needs NVRTC")
    if bad.host_memory is not None:
        monkeypatch.setattr(preflight, "host_memory", lambda: bad.host_memory)
    monkeypatch.chdir(tmp_path)
    args, words = bad.make(tmp_path)
    before = snapshot(tmp_path)
    t0 = time.perf_counter()
    r = kforge(*args)
    seconds = time.perf_counter() - t0
    out = r.output + (r.stderr or "")
    assert r.exit_code == 2, f"exit {r.exit_code}:\n{out}"
    assert "Traceback" not in out and "internal error" not in out, out
    for w in words:
        assert w in out, f"{w!r} not in:\n{out}"
    assert snapshot(tmp_path) == before, "files changed on disk"
    assert seconds < 20, f"took {seconds:.1f} s (nothing should be allocated or run)"


def test_the_table_holds_every_bullet_of_the_issue_and_twenty_more():
    found = [b for b in BAD if b.found]
    assert len(BAD) >= 31 + 20 and len(found) >= 15
    assert len({b.name for b in BAD}) == len(BAD)


# ------------------------------------------------------------------------------ beside the table

def test_validate_goes_on_after_a_reference_that_exits(kforge, tmp_path):
    bad = make_task(tmp_path / "bad")
    (bad.parent / "vector_add.py").write_text("import sys\n\ndef reference(a, b, c, n):\n    raise SystemExit\n")
    good = make_task(tmp_path / "good")
    r = kforge("validate", "--no-compile", bad, good)
    assert r.exit_code == 2
    assert f"FAIL {bad}: $.reference: reference vector_add.py:reference on case 'odd' called sys.exit(None)" in r.stderr
    assert f"ok   {good}: vector_add" in r.stdout


def test_validate_prints_where_files_resolve_and_marks_those_outside(kforge, tmp_path):
    m = make_task(tmp_path / "task")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.move(m.parent / "vector_add.py", outside / "ref.py")
    np.save(m.parent / "a.npy", np.random.default_rng(0).standard_normal(37).astype(np.float32))

    def change(d):
        d["reference"] = {"python": "../elsewhere/ref.py:reference"}
        d["cases"] = [c for c in d["cases"] if c["name"] == "tiny"] + [
            {"name": "perf", "role": "performance", "vars": {"n": 37}}]
        d["args"]["a"]["init"] = {"kind": "npy", "path": "a.npy"}
    edit(m, change)
    r = kforge("validate", "--no-compile", m)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert f"  reference  {outside / 'ref.py'}:reference  (outside the manifest's folder)" in lines
    assert f"  npy a      {m.parent / 'a.npy'}" in lines
    assert f"  initial    {m.parent / 'vector_add.cu'}" in lines


def test_validate_never_allocates_a_large_case(kforge, tmp_path):
    """Half a billion elements took 15 s and 6.4 GB; now sizes are estimated and the reference is
    not run on it (it is over the quick limit and --deep is not given)."""
    import resource

    m = edit(make_task(tmp_path / "task"), lambda d: d["cases"].append(
        {"name": "n500M", "role": "performance", "vars": {"n": 5 * 10**8}}))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    r = kforge("validate", "--no-compile", m)
    assert r.exit_code == 0, r.output
    assert time.perf_counter() - t0 < 10
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 1_000_000, f"peak memory grew by {grown_kib} KiB"
    assert "reference not run on n16M, n64M, holdout, n500M: over 4194304 elements" in r.stdout


def test_deep_validation_runs_references_only_on_cases_that_fit(kforge, tmp_path, monkeypatch):
    m = make_task(tmp_path / "task")
    # 3 GiB: every case fits (n64M needs 2.3 GiB), but only those under half of it are run deep
    monkeypatch.setattr(preflight, "host_memory", lambda: 3 * 2**30)
    r = kforge("validate", "--no-compile", "--deep", m)
    assert r.exit_code == 0, r.output
    assert "reference not run on n64M: too large for this host's memory" in r.stdout
    assert "n16M" not in r.stdout


def test_approve_keeps_a_backup_of_the_approved_copy_it_replaces(kforge, tmp_path):
    m = make_task(tmp_path / "task")
    first = finished_run(tmp_path / "one", m, fake="pass 400")
    ap, dest = tmp_path / "approved.json", tmp_path / "approved"
    assert kforge("approve", first, "--into", ap, "--copy-to", dest).exit_code == 0
    old = (dest / "vector_add.cu").read_bytes()
    second = finished_run(tmp_path / "two", m, fake="pass 300")
    assert (second / "best.cu").read_bytes() != old
    r = kforge("approve", second, "--into", ap, "--copy-to", dest)
    assert r.exit_code == 0, r.output + r.stderr
    assert (dest / "vector_add.cu.bak").read_bytes() == old
    assert (dest / "vector_add.cu").read_bytes() == (second / "best.cu").read_bytes()
    assert (tmp_path / "approved.json.bak").is_file()
    (entry,) = json.loads(ap.read_text())["approved"]
    assert entry["from_run"] == second.name
    assert entry["sha256"] == hashlib.sha256((dest / "vector_add.cu").read_bytes()).hexdigest()


def test_approve_refuses_an_approved_copy_edited_since(kforge, tmp_path):
    m = make_task(tmp_path / "task")
    run = finished_run(tmp_path / "one", m)
    ap, dest = tmp_path / "approved.json", tmp_path / "approved"
    assert kforge("approve", run, "--into", ap, "--copy-to", dest).exit_code == 0
    (dest / "vector_add.cu").write_text("// hand-edited after approval\n")
    run2 = finished_run(tmp_path / "two", m, fake="pass 300")
    before = snapshot(tmp_path)
    r = kforge("approve", run2, "--into", ap, "--copy-to", dest)
    assert r.exit_code == 2 and "changed since it was approved" in r.stderr
    assert snapshot(tmp_path) == before


def test_run_evidence_is_readable_by_its_owner_only(tmp_path):
    m = make_task(tmp_path / "task")
    run = finished_run(tmp_path, m)
    modes = {p.relative_to(run): p.stat().st_mode & 0o777 for p in [run, *run.rglob("*")]}
    dirs = {p: mode for p, mode in modes.items() if (run / p).is_dir()}
    files = {p: mode for p, mode in modes.items() if (run / p).is_file()}
    assert dirs and files and {"summary.json", "history.json", "best.cu", "report.md"} <= {str(p) for p in files}
    assert set(dirs.values()) == {0o700}, dirs
    assert set(files.values()) == {0o600}, {p: oct(v) for p, v in files.items() if v != 0o600}


def test_files_a_user_shares_keep_the_usual_mode(kforge, tmp_path):
    m = make_task(tmp_path / "task")
    run = finished_run(tmp_path, m)
    old = os.umask(0o022)
    try:
        assert kforge("approve", run, "--into", tmp_path / "a.json", "--copy-to", tmp_path / "k").exit_code == 0
    finally:
        os.umask(old)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "k" / "vector_add.cu").stat().st_mode & 0o777 == 0o644


def test_a_manifest_with_a_byte_order_mark_loads(kforge, tmp_path):
    m = make_task(tmp_path / "task")
    m.write_bytes(b"\xef\xbb\xbf" + m.read_bytes())
    r = kforge("validate", "--no-compile", m)
    assert r.exit_code == 0, r.output + r.stderr


def test_optimize_checks_come_before_the_gpu_and_leave_no_run_folder(kforge, tmp_path):
    m = make_task(tmp_path / "task")
    r = kforge("optimize", m, "--max-iterations", "0", "--runs-dir", tmp_path / "runs")
    assert r.exit_code == 2 and "--max-iterations 0: must be at least 1" in r.stderr
    assert not (tmp_path / "runs").exists()


def test_a_long_history_is_checked_to_its_records_fields(kforge, tmp_path):
    """Over 1 MB a history.json is checked down to each attempt's own fields (the nested parts by
    type only), so a long run's resume or report does not wait on the schema."""
    from kernel_forge import evidence

    m = make_task(tmp_path / "task")
    run = finished_run(tmp_path, m)
    hist = json.loads((run / "history.json").read_text())
    while len(json.dumps(hist)) <= evidence.FULL_CHECK_BYTES:
        hist["attempts"] += [dict(a) for a in hist["attempts"]]
    n = len(hist["attempts"]) - 1
    hist["attempts"][n]["status"] = 5
    (run / "history.json").write_text(json.dumps(hist))
    r = kforge("report", run)
    assert r.exit_code == 2
    assert f"{run / 'history.json'}: $.attempts[{n}].status" in r.stderr


@pytest.mark.parametrize("value", [-0.01, 1.5])
def test_a_noise_bound_outside_zero_to_one_is_refused_before_anything_runs(value):
    from kernel_forge.errors import InputError
    from kernel_forge.gate import GateOptions
    from kernel_forge.preflight import check_settings

    with pytest.raises(InputError) as err:
        check_settings(GateOptions(max_noise=value))
    assert f"--max-noise {value!r}: must be in [0, 1]" in str(err.value)
    check_settings(GateOptions(max_noise=0.0))          # 0: every timed launch is made


@pytest.mark.parametrize("reader, what", [
    ("archive", "archive export"), ("approvals", "approvals file"), ("config", "config")])
def test_a_file_that_is_not_utf8_is_named_with_the_byte_where_it_stops(tmp_path, reader, what):
    from kernel_forge.archive import read_jsonl
    from kernel_forge.errors import InputError
    from kernel_forge.evidence import read_json_file
    from kernel_forge.regression import load_approvals

    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"approved": ["\xff"]}\n')
    read = {"archive": read_jsonl, "approvals": load_approvals,
            "config": lambda p: read_json_file(p, "config")}[reader]
    with pytest.raises(InputError) as err:
        read(bad)
    assert str(err.value) == f"{bad}: the {what} is not UTF-8 text (byte offset 15)"
