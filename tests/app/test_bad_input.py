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

import errno
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from click.testing import CliRunner

from kernel_forge.gate import preflight
from kernel_forge.common import writes
from kernel_forge.app.cli import cli
from kernel_forge.config.loop_settings import LoopConfig

from tests.support.fs_double import FailingFS
from tests.support.task_folders import HAS_NVRTC, finished_run, make_task

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------ the task folder
# (a copy of vector_add: tests/support/task_folders.py)

def edit(manifest: Path, fn) -> Path:
    data = json.loads(manifest.read_text())
    fn(data)
    manifest.write_text(json.dumps(data, indent=2))
    return manifest


def snapshot(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder``, and every folder (an empty one left behind counts),
    Python's bytecode caches aside."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if "__pycache__" in p.parts:
            continue
        if p.is_file():
            out[str(p.relative_to(folder))] = hashlib.sha256(p.read_bytes()).hexdigest()
        elif p.is_dir():
            out[str(p.relative_to(folder)) + "/"] = "folder"
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
    env: dict = field(default_factory=dict)   #: environment variables set for the command
    fs: Callable | None = None      #: a filesystem double for kernel_forge.common.writes (a full or read-only disk)


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
    return ["eval", str(m), str(k)], [str(k), 'no `__global__ void vector_add(...)`']


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
    return ["gate", str(ap)], [str(ap), "$.approved[0].manifest", "cannot read the manifest"]


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
    return ["optimize", str(m), "--time-limit", "0", "--runs-dir", str(tmp / "runs")], ["--time-limit", "must be > 0, got 0.0"]


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


# -- issue 21: generated tasks (kforge init --describe) and tasks without an initial kernel --------
DESCRIBED = Path(__file__).resolve().parents[1] / "data" / "describe"
DESCRIPTION = ("Leaky ReLU over n float32 values: y[i] = x[i] where x[i] > 0, else 0.01 * x[i]. "
               "n can be any size, including 1.")


def _described(tmp, recorded: str) -> Path:
    """A task written from recorded answers; the off-by-one one with the disagreement of its two
    witnesses recorded in its block (as kforge before Step 14b did at init), the CUDA witness
    stood in for by NumPy (no GPU here)."""
    from kernel_forge.authoring.crosscheck import OutputsWitness, run_crosscheck
    from kernel_forge.config.describe import DescribeConfig
    from kernel_forge.authoring.from_description import describe_task
    from kernel_forge.model.task import load_task

    def witness(task, cand, case, inputs):
        x = inputs.buffers["x"]
        return {"y": np.where(x > 0, x, np.float32(0.01) * x).astype(np.float32)}

    m = describe_task("relu_like", DESCRIPTION, tmp / "task", DescribeConfig(replay=str(DESCRIBED / recorded))).manifest
    if recorded.endswith("off_by_one"):
        data = json.loads(m.read_text())
        check = run_crosscheck(load_task(m), m.parent / "relu_like_witness.cu", OutputsWitness(witness, name="numpy"),
                               extra=0, seed=1)
        data["generated"]["crosscheck"] = check.block()
        m.write_text(json.dumps(data, indent=2))
    return m


def _generated_not_accepted(tmp):
    m = _described(tmp, "relu_like")
    return (["optimize", str(m), "--runs-dir", str(tmp / "runs")],
            [str(m), "$.generated", "has not been accepted", "kforge validate --accept"])


def _generated_witnesses_disagree(tmp):
    m = _described(tmp, "relu_like_off_by_one")
    return (["optimize", str(m), "--runs-dir", str(tmp / "runs")],
            [str(m), "did not agree", "y[256]: reference 0.0, CUDA witness", "validate --accept"])


def _describe_empty(tmp):
    return (["init", "relu_like", "--describe", "  ", "--replay", str(DESCRIBED / "relu_like"), "--dir", str(tmp / "t")],
            ["--describe", "is empty"])


def _describe_too_long(tmp):
    return (["init", "relu_like", "--describe", "y = relu(x). " * 400, "--replay", str(DESCRIBED / "relu_like"),
             "--dir", str(tmp / "t")], ["--describe", "5199 characters long", "at most 4000"])


def _tuner_without_initial_or_templates(tmp):
    m = edit(_m(tmp), lambda d: d.pop("initial"))
    return (["optimize", str(m), "--runs-dir", str(tmp / "runs")],
            [str(m), "no initial kernel and no templates", "--model"])


def _accept_a_hand_written_task(tmp):
    m = _m(tmp)
    return ["validate", "--accept", str(m)], [str(m), "not a generated task"]


GENERATED_ROWS = [
    Bad("optimize: a generated task not accepted yet", _generated_not_accepted),
    Bad("optimize: a generated task whose two witnesses disagreed", _generated_witnesses_disagree),
    Bad("init --describe with an empty description", _describe_empty),
    Bad("init --describe with a description that is too long", _describe_too_long),
    Bad("optimize with the tuner: no initial kernel and no templates", _tuner_without_initial_or_templates),
    Bad("validate --accept of a hand-written task", _accept_a_hand_written_task),
]


# -- issue 20: writes, numbers, launches, references, init, approve, agents --------------------

def _full(code=errno.ENOSPC):
    return lambda: FailingFS(code, after_bytes=100)


def _init_on_full_disk(tmp):
    return (["init", "saxpy", "--dir", str(tmp / "new"), "--signature",
             'extern "C" __global__ void saxpy(const float* x, float* y, float a, int n)'],
            [str(tmp / "new" / "saxpy.json"), "cannot write", "No space left on device (ENOSPC)"])


def _init_on_read_only_disk(tmp):
    return (["init", "saxpy", "--dir", str(tmp / "new"), "--signature",
             'extern "C" __global__ void saxpy(const float* x, float* y, float a, int n)'],
            [str(tmp / "new"), "cannot write", "Read-only file system (EROFS)"])


def _compile_o_on_full_disk(tmp):
    return (["compile", str(ROOT / "manifests" / "vector_add.cu"), "--arch", "sm_90", "-o", str(tmp / "k.cubin")],
            [str(tmp / "k.cubin"), "No space left on device (ENOSPC)"])


def _report_on_full_disk(tmp):
    run = finished_run(tmp, _m(tmp))
    return ["report", str(run)], [str(run), "cannot write", "(ENOSPC)"]


def _approve_on_read_only_disk(tmp):
    run = finished_run(tmp, _m(tmp))
    return (["approve", str(run), "--into", str(tmp / "ci" / "approved.json"), "--copy-to", str(tmp / "ci" / "k")],
            [str(tmp / "ci"), "Read-only file system (EROFS)"])


def _approve_on_full_disk(tmp):
    run = finished_run(tmp, _m(tmp))
    return (["approve", str(run), "--into", str(tmp / "approved.json"), "--copy-to", str(tmp / "k")],
            [str(tmp / "k" / "vector_add.cu"), "(ENOSPC)"])


def _export_over_a_file(tmp):
    from kernel_forge.archive.store import open_archive
    db = tmp / "a.sqlite"
    with open_archive(db):
        pass
    notes = tmp / "notes.txt"
    notes.write_text("my notes\n")
    return ["archive", "export", str(notes), "--archive", str(db)], [str(notes), "already exists", "--force"]


def _archive_list_zero_length(tmp):
    empty = tmp / "empty.sqlite"
    empty.write_bytes(b"")
    return ["archive", "show", "1", "--archive", str(empty)], [str(empty), "empty file (0 bytes)", "left untouched"]


def _archive_import_bad_into_new(tmp):
    bad = tmp / "bad.jsonl"
    bad.write_text('{"not": "an entry"}\n')
    return (["archive", "import", str(bad), "--archive", str(tmp / "new.sqlite")],
            [f"{bad}:1:", "nothing was imported"])


def _archive_import_nan(tmp):
    bad = tmp / "bad.jsonl"
    bad.write_text('{"score_us": NaN}\n')
    return (["archive", "import", str(bad), "--archive", str(tmp / "new.sqlite")],
            [f"{bad}:1:", "$.score_us", "NaN is not a finite number"])


def _atol_nan(tmp):
    m = _m(tmp)
    m.write_text(m.read_text().replace('"atol": 1e-06', '"atol": NaN'))
    return ["validate", "--no-compile", str(m)], [str(m), "$.tolerance.atol", "NaN is not a finite number"]


def _rtol_1e999(tmp):
    m = _m(tmp)
    m.write_text(m.read_text().replace('"rtol": 1e-06', '"rtol": 1e999'))
    return ["validate", "--no-compile", str(m)], [str(m), "$.tolerance.rtol", "Infinity is not a finite number"]


def _case_var_infinity(tmp):
    m = _m(tmp)
    m.write_text(m.read_text().replace('"n": 37', '"n": -Infinity'))
    return ["validate", "--no-compile", str(m)], [str(m), "$.cases[1].vars.n", "-Infinity"]


def _config_nan(tmp):
    m = _m(tmp)
    cfg = tmp / "opt.json"
    cfg.write_text('{"manifest": "%s", "gate": {"max_noise": NaN}}' % m)
    return (["optimize", "--config", str(cfg), "--runs-dir", str(tmp / "runs")],
            [str(cfg), "$.gate.max_noise", "NaN is not a finite number"])


def _approvals_nan(tmp):
    ap = tmp / "approved.json"
    ap.write_text('{"approved": [{"task": "vector_add", "manifest": "m.json", "kernel": "k.cu", "sha256": "0", '
                  '"speedup_vs_initial": NaN, "tolerance": 0.05}]}')
    return ["gate", str(ap)], [str(ap), "$.approved[0].speedup_vs_initial", "NaN"]


def _reference_writes_nan(tmp):
    m = _m(tmp)
    (m.parent / "vector_add.py").write_text("import numpy as np\n\ndef reference(a, b, c, n):\n    c[...] = np.nan\n")
    return ["validate", "--no-compile", str(m)], [str(m), "$.reference", "NaN/Inf", "nonfinite_outputs"]


def _reference_writes_inf_once(tmp):
    m = _m(tmp)
    (m.parent / "vector_add.py").write_text("import numpy as np\n\ndef reference(a, b, c, n):\n"
                                            "    c[...] = a + b\n    c[5] = np.inf\n")
    return ["validate", "--no-compile", str(m)], [str(m), "output c holds 1 NaN/Inf", "first at [5]: inf"]


def _reference_sleeps(tmp):
    m = edit(_m(tmp), lambda d: d["reference"].update(time_limit_s=1))
    (m.parent / "vector_add.py").write_text("import time\n\ndef reference(a, b, c, n):\n    time.sleep(600)\n")
    return ["validate", "--no-compile", str(m)], [str(m), "$.reference", "did not finish within 1 s", "time_limit_s"]


def _reference_os_exit(tmp):
    m = _m(tmp)
    (m.parent / "vector_add.py").write_text("import os\n\ndef reference(a, b, c, n):\n    os._exit(0)\n")
    return ["validate", "--no-compile", str(m)], [str(m), "$.reference", "exited with code 0 instead of returning"]


def _reference_crashes(tmp):
    m = _m(tmp)
    (m.parent / "vector_add.py").write_text("import ctypes\n\ndef reference(a, b, c, n):\n    ctypes.string_at(0)\n")
    return ["validate", "--no-compile", str(m)], [str(m), "$.reference", "killed by signal SIGSEGV"]


def _reference_replaces_its_output(tmp):
    m = _m(tmp)
    (m.parent / "vector_add.py").write_text("def reference(a, b, c, n):\n    c = a + b\n")
    return ["validate", "--strict", "--no-compile", str(m)], ["output c is all zeros", "in place (c[...] = ...)"]


def _reference_time_limit_negative(tmp):
    m = edit(_m(tmp), lambda d: d["reference"].update(time_limit_s=-1))
    return ["validate", "--no-compile", str(m)], [str(m), "$.reference.time_limit_s"]


def _manifest_block_2048(tmp):
    m = edit(_m(tmp), lambda d: d["launch"].update(block=[2048], grid=["cdiv(n, 2048)"]))
    return ["validate", "--no-compile", str(m)], [str(m), "$.launch.block", "2048 threads", "at most 1024"]


def _kernel(tmp, header):
    m = _m(tmp)
    k = tmp / "k.cu"
    k.write_text(header + (m.parent / "vector_add.cu").read_text())
    return m, k


def _eval_header(header, words):
    def make(tmp):
        m, k = _kernel(tmp, header)
        return ["eval", str(m), str(k)], [f"{k}:1:", *words]
    return make


def _dry_run_initial_block_0(tmp):
    m = _m(tmp)
    cu = m.parent / "vector_add.cu"
    cu.write_text("// kforge: grid = [cdiv(n, 256)]\n// kforge: block = [0]\n" + cu.read_text())
    return ["optimize", str(m), "--dry-run"], [str(m), "$.initial", "block [0, 1, 1]"]


def _optimize_initial_block_2048(tmp):
    m = _m(tmp)
    cu = m.parent / "vector_add.cu"
    cu.write_text("// kforge: grid = [cdiv(n, 2048)]\n// kforge: block = [2048]\n" + cu.read_text())
    return ["optimize", str(m), "--runs-dir", str(tmp / "runs")], [str(m), "$.initial", "2048 threads"]


def _validate_smem_beyond_arch(tmp):
    m = _m(tmp)
    cu = m.parent / "vector_add.cu"
    cu.write_text("// kforge: grid = [cdiv(n, 256)]\n// kforge: block = [256]\n// kforge: shared_mem = 200000\n"
                  + cu.read_text())
    return (["validate", "--no-compile", "--arch", "sm_86", str(m)],
            [str(m), "$.initial", "200000 bytes", "101376", "sm_86"])


def _init_keyword_free_non_ascii(tmp):
    return (["init", "relü", "--dir", str(tmp / "t"), "--signature",
             'extern "C" __global__ void relü(const float* x, float* y, int n)'],
            ["relü", "not a plain ASCII identifier", "'relu'"])


def _init_dir_is_a_file(tmp):
    (tmp / "f").write_text("")
    return (["init", "k", "--dir", str(tmp / "f"), "--signature", 'extern "C" __global__ void k(float* y, int n)'],
            [str(tmp / "f"), "is a file"])


def _approve_hand_edited_best(tmp):
    run = finished_run(tmp, _m(tmp))
    (run / "best.cu").write_text((run / "best.cu").read_text() + "// hand-tuned afterwards\n")
    return (["approve", str(run), "--into", str(tmp / "a.json"), "--copy-to", str(tmp / "k")],
            [str(run / "best.cu"), "sha256", "history.json", "$.attempts[1].sha256"])


def _approve_nan_speedup(tmp):
    run = finished_run(tmp, _m(tmp))
    s = (run / "summary.json").read_text()
    data = json.loads(s)
    data["best"]["speedup_vs_initial"] = "__NAN__"
    (run / "summary.json").write_text(json.dumps(data).replace('"__NAN__"', "NaN"))
    return (["approve", str(run), "--into", str(tmp / "a.json"), "--copy-to", str(tmp / "k")],
            [str(run / "summary.json"), "$.best.speedup_vs_initial", "NaN"])


def _batch_ray_garbage(tmp):
    m = _m(tmp)
    return (["batch", str(m), "--ray", "garbage:::address", "--runs-dir", str(tmp / "runs")],
            ["--ray 'garbage:::address'", "not a Ray address"])


def _batch_resume_not_a_batch(tmp):
    (tmp / "somewhere").mkdir()
    return ["batch", "--resume", str(tmp / "somewhere")], [str(tmp / "somewhere"), "not a kforge batch folder"]


def _batch_resume_damaged(tmp):
    b = tmp / "batch-001"
    b.mkdir()
    (b / "batch.json").write_text('{"tasks": [{"name": 1}]}')
    return ["batch", "--resume", str(b)], [str(b / "batch.json"), "$.tasks[0]"]


def _batch_max_iterations_zero(tmp):
    m = _m(tmp)
    return (["batch", str(m), "--max-iterations", "0", "--runs-dir", str(tmp / "runs")],
            ["--max-iterations 0", "at least 1"])


def _mcp_test_gate_no_module(tmp):
    return ["mcp", "--runs-dir", str(tmp / "runs")], ["KFORGE_MCP_TEST_GATE=python:nosuchmod:X", "nosuchmod"]


def _report_plot_is_a_folder(tmp):
    run = finished_run(tmp, _m(tmp))
    (run / "progress.png").unlink()
    (run / "progress.png").mkdir()
    return ["report", str(run)], [str(run / "progress.png"), "it is a folder"]


def _gate_devices_words(tmp):
    ap = tmp / "approved.json"
    ap.write_text(json.dumps({"approved": []}))
    return ["gate", str(ap), "--devices", "zero,one"], ["--devices 'zero,one'", "GPU ordinals"]


def _config_price_negative(tmp):
    m = _m(tmp)
    cfg = tmp / "opt.json"
    cfg.write_text(json.dumps({"manifest": str(m), "proposer": {"models": ["openai:my-model"],
                                                                "prices": {"openai:my-model": {"input": -1, "output": 2}}}}))
    return (["optimize", "--config", str(cfg), "--runs-dir", str(tmp / "runs")],
            [str(cfg), "$.proposer.prices.openai:my-model.input", "non-negative"])


def _env(var, value, command, words):
    def make(tmp):
        m = _m(tmp)
        args = {"optimize": ["optimize", str(m), "--runs-dir", str(tmp / "runs")],
                "optimize-openai": ["optimize", str(m), "--model", "openai:gpt-5", "--runs-dir", str(tmp / "runs")],
                "eval": ["eval", str(m)]}[command]
        return args, [f"{var}", *words]
    return make


def _eval_json_over_the_kernel(tmp):
    m, k = _kernel(tmp, "")
    return ["eval", str(m), str(k), "--json", str(k)], ["--json", str(k), "also an input"]


def _compile_o_over_a_source(tmp):
    notes = tmp / "notes.cu"
    notes.write_text("// my other kernel\n")
    return (["compile", str(ROOT / "manifests" / "vector_add.cu"), "--arch", "sm_90", "-o", str(notes)],
            ["-o", str(notes), "is not a CUBIN"])


def _gate_junit_over_notes(tmp):
    ap = tmp / "approved.json"
    ap.write_text(json.dumps({"approved": []}))
    notes = tmp / "notes.xml"
    notes.write_text("my notes\n")
    return ["gate", str(ap), "--junit", str(notes)], ["--junit", str(notes), "not a JUnit XML file"]


def _args(*args_and_words):
    def make(tmp):
        m = _m(tmp)
        *args, words = args_and_words
        return [a.replace("{m}", str(m)) for a in args], words
    return make


# ------------------------------------------------------------------------------ issue 35: data loss and bounded reads

def _archive(tmp) -> Path:
    from kernel_forge.archive.store import open_archive
    db = tmp / "a.sqlite"
    with open_archive(db):
        pass
    return db


def _export_onto_the_archive(how):
    def make(tmp):
        db = _archive(tmp)
        target = db
        if how == "symlink":
            target = tmp / "link.jsonl"
            target.symlink_to(db)
        elif how == "hardlink":
            target = tmp / "hard.jsonl"
            os.link(db, target)
        return (["archive", "export", str(target), "--force", "--archive", str(db)],
                [str(target), "is also an input of this command", "nothing was written"])
    return make


def _damaged_history(command):
    def make(tmp):
        run = finished_run(tmp, _m(tmp))
        (run / "history.json").write_text('{"attempts": [')          # cut off, as a full disk or an editor leaves it
        args = {"resume": ["optimize", "--resume", str(run)],
                "resume-dry-run": ["optimize", "--resume", str(run), "--dry-run"],
                "report": ["report", str(run)],
                "replay": ["replay", str(run / "best-case-n16M.json")],
                "approve": ["approve", str(run), "--into", str(tmp / "approved.json")],
                "archive-add": ["archive", "add", str(run), "--archive", str(tmp / "a.sqlite")]}[command]
        return args, [str(run / "history.json"), "damaged JSON at line 1"]
    return make


def _history_of_the_wrong_shape(command):
    def make(tmp):
        run = finished_run(tmp, _m(tmp))
        (run / "history.json").write_text('{"task": 1}\n')
        args = {"resume-dry-run": ["optimize", "--resume", str(run), "--dry-run"],
                "archive-add": ["archive", "add", str(run), "--archive", str(tmp / "a.sqlite")]}[command]
        return args, [str(run / "history.json"), "is a required property"]
    return make


def _replay_changed_manifest(tmp):
    m = _m(tmp)
    run = finished_run(tmp, m)
    edit(m, lambda d: d["cases"][0]["vars"].update(n=12345))
    req = run / "best-case-n16M.json"
    return ["replay", str(req)], [str(req), "$.manifest_sha256", str(m.resolve()), "changed since this request"]


def _replay_changed_kernel(tmp):
    run = finished_run(tmp, _m(tmp))
    (run / "best.cu").write_text((run / "best.cu").read_text() + "// edited\n")
    req = run / "best-case-n16M.json"
    return ["replay", str(req)], [str(req), "$.kernel_sha256", "changed since this request"]


_SIG = 'extern "C" __global__ void k(const float* x, float* y, int n)'


def _init_force_through_a_symlink(tmp):
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "victim.json").write_text('{"mine": true}\n')
    (tmp / "t").mkdir()
    (tmp / "t" / "k.json").symlink_to(elsewhere / "victim.json")
    return (["init", "k", "--signature", _SIG, "--dir", str(tmp / "t"), "--force"],
            [str(tmp / "t" / "k.json"), "a symbolic link to", "outside", "nothing was written"])


def _describe_force_through_a_symlinked_folder(tmp):
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("mine\n")
    (tmp / "t").mkdir()
    (tmp / "t" / "relu_like_describe").symlink_to(elsewhere, target_is_directory=True)
    return (["init", "relu_like", "--describe", DESCRIPTION, "--replay", str(DESCRIBED / "relu_like"),
             "--dir", str(tmp / "t"), "--force"],
            [str(tmp / "t" / "relu_like_describe"), "a symbolic link to", "nothing was written"])


def _special_file(command):
    def make(tmp):
        m = _m(tmp)
        fifo = tmp / "fifo"
        if "FIFO" in command:
            os.mkfifo(fifo)           # an open of it for reading waited for a writer forever
        args, words = {
            "validate /dev/zero": (["validate", "--no-compile", "/dev/zero"], ["/dev/zero", "character device"]),
            "eval /dev/zero": (["eval", str(m), "/dev/zero"], ["/dev/zero", "character device"]),
            "validate a FIFO": (["validate", "--no-compile", str(fifo)], [str(fifo), "FIFO"]),
            "optimize --config /dev/zero": (["optimize", str(m), "--config", "/dev/zero"],
                                            ["/dev/zero", "character device"]),
            "replay /dev/zero": (["replay", "/dev/zero"], ["/dev/zero", "character device"]),
            "archive import /dev/zero": (["archive", "import", "/dev/zero", "--archive", str(tmp / "a.sqlite")],
                                         ["/dev/zero", "character device"]),
        }[command]
        return args, words + ["not a regular file"]
    return make


def _nonfinite_flag_not_boolean(tmp):
    m = _m(tmp, nonfinite_outputs="yes")
    return ["validate", "--no-compile", str(m)], [str(m), "$.nonfinite_outputs", "'yes' is not of type 'boolean'"]


# -- issue 33: twelve more ways in --------------------------------------------------------------

def _validate_edit(change, *words, flags=("--no-compile",)):
    def make(tmp):
        m = edit(_m(tmp), change)
        return ["validate", *flags, str(m)], [str(m), *words]
    return make


def _header(header, command="eval"):
    """A kernel file carrying ``header`` above vector_add, run through ``command``."""
    def make(tmp):
        m, k = _kernel(tmp, header)
        args = {"eval": ["eval", str(m), str(k)], "compile": ["compile", str(k), "--arch", "sm_90"]}[command]
        return args, [f"{k}:"]
    return make


def _header_says(header, line, words, command="eval"):
    def make(tmp):
        args, place = _header(header, command)(tmp)
        return args, [f"{place[0]}{line}:", *words]
    return make


DEEP = "[" * 100_000 + "]" * 100_000


def _deep_manifest(command):
    def make(tmp):
        m = _m(tmp)
        m.write_text(DEEP)
        args = {"validate": ["validate", str(m)], "dry-run": ["optimize", str(m), "--dry-run"]}[command]
        return args, [str(m), "nested more than 100 levels deep", "line 1"]
    return make


def _deep_config(tmp):
    m = _m(tmp)
    cfg = tmp / "opt.json"
    cfg.write_text('{"manifest": "%s", "loop": %s}' % (m, DEEP))
    return (["optimize", "--config", str(cfg), "--runs-dir", str(tmp / "runs")],
            [str(cfg), "nested more than 100 levels deep"])


def _deep_replay_request(tmp):
    req = tmp / "best-case-x.json"
    req.write_text('{"manifest": "m.json",\n "kernel": %s}' % DEEP)
    return ["replay", str(req)], [str(req), "nested more than 100 levels deep at line 2"]


def _deep_history(tmp):
    run = finished_run(tmp, _m(tmp))
    (run / "history.json").write_text(DEEP)
    return ["report", str(run)], [str(run / "history.json"), "nested more than 100 levels deep"]


def _deep_history_dry_run(tmp):
    run = finished_run(tmp, _m(tmp))
    (run / "history.json").write_text(DEEP)
    return ["optimize", "--resume", str(run), "--dry-run"], [str(run / "history.json"), "nested more than 100 levels deep"]


def _deep_archive_line(tmp):
    bad = tmp / "deep.jsonl"
    bad.write_text("\n" + DEEP + "\n")
    return (["archive", "import", str(bad), "--archive", str(tmp / "new.sqlite")],
            [f"{bad}:2:", "nested more than 100 levels deep", "nothing was imported"])


def _an_archive(tmp) -> Path:
    from tests.support.archive_fakes import entry
    from kernel_forge.archive.store import add_entries, open_archive

    db = tmp / "a.sqlite"
    with open_archive(db, create=True) as arch:
        add_entries(arch, [entry("vector_add", 400.0)])
    return db


def _archive_cmd(*args, words):
    def make(tmp):
        db = _an_archive(tmp)
        return ["archive", *args, "--archive", str(db)], list(words)
    return make


def _archive_import_huge_score(tmp):
    from tests.support.archive_fakes import entry
    from kernel_forge.archive.format import entry_lines

    line = json.loads(entry_lines([entry("vector_add", 400.0)], where="test")[0])
    line["score_us"] = 10**30                    # an integer: SQLite cannot hold it
    bad = tmp / "huge.jsonl"
    bad.write_text(json.dumps(line) + "\n")
    return (["archive", "import", str(bad), "--archive", str(tmp / "new.sqlite")],
            [f"{bad}:1:", "$.score_us", "maximum", "nothing was imported"])


def _dry_run_config(text_or_path):
    def make(tmp):
        m = _m(tmp)
        if text_or_path.startswith("/"):
            cfg = Path(text_or_path)
        else:
            cfg = tmp / "opt.json"
            cfg.write_text(text_or_path)
        return ["optimize", str(m), "--dry-run", "--config", str(cfg)], [str(cfg)]
    return make


def _init_scalar(name):
    def make(tmp):
        return (["init", "k", "--dir", str(tmp / "t"), "--signature",
                 f'extern "C" __global__ void k(float* y, int {name})'],
                ["--signature", f"the parameter {name!r}", "case variable", "nothing was written"])
    return make


BIG = "100000000000000000000000"      # 10^23
ISSUE33_ROWS = [
    # 1. in, is, not in, is not: passed the whitelist, then KeyError: <class 'ast.In'> (exit 4)
    Bad('grid "... if n in 2 else ..."', _validate_edit(lambda d: d["launch"].update(grid=["cdiv(n, 256) if n in 2 else 1"]),
                                                       "$.launch", "operator 'in' is not allowed"), found="exit 4, KeyError"),
    Bad('shape "n if n is not 0 else 1"', _validate_edit(lambda d: d["args"]["a"].update(shape=["n if n is not 0 else 1"]),
                                                         "$.args.a.shape", "operator 'is not' is not allowed"),
        found="exit 4, KeyError"),
    Bad('cost "n * (n not in 3)"', _validate_edit(lambda d: d["cost"].update(flops="n * (n not in 3)"), "$.cost.flops",
                                                  "operator 'not in' is not allowed"), found="exit 4, KeyError"),
    Bad("a kernel header constraint B is 64", _header_says(
        "// kforge: grid = [cdiv(n, B)]\n// kforge: block = [B]\n// kforge: tune B = [64, 128]\n"
        "// kforge: constraint B is 64\n", 4, ["operator 'is' is not allowed"]), found="exit 4, KeyError"),
    Bad("a kernel header dispatch n in 5 -> B=128", _header_says(
        "// kforge: grid = [cdiv(n, B)]\n// kforge: block = [B]\n// kforge: tune B = [128, 256]\n"
        "// kforge: dispatch n in 5 -> B=128\n// kforge: dispatch default -> B=256\n", 4,
        ["operator 'in' is not allowed"]), found="exit 4, KeyError"),
    # 3. 100,000 nested brackets: RecursionError (exit 4)
    Bad("validate: a manifest nested 100,000 deep", _deep_manifest("validate"), found="exit 4, RecursionError"),
    Bad("optimize --dry-run: a manifest nested 100,000 deep", _deep_manifest("dry-run"), found="exit 4, RecursionError"),
    Bad("a config file nested 100,000 deep", _deep_config, found="exit 4, RecursionError"),
    Bad("replay: a request nested 100,000 deep", _deep_replay_request, found="exit 4, RecursionError"),
    Bad("report: a history.json nested 100,000 deep", _deep_history, found="exit 4, RecursionError"),
    Bad("archive import: a line nested 100,000 deep", _deep_archive_line, found="exit 4, RecursionError"),
    Bad("optimize --resume --dry-run: a history.json nested 100,000 deep", _deep_history_dry_run,
        found="exit 4, RecursionError (the recorded gate read it with json.loads)"),
    # 4. integers too large for SQLite
    Bad("archive prune --keep 10^23", _archive_cmd("prune", "--keep", BIG, words=["--keep", BIG]),
        found="exit 4, OverflowError"),
    Bad("archive show 10^23", _archive_cmd("show", BIG, words=[f"ID {BIG}", "no archive id is that large"]),
        found="exit 4, OverflowError"),
    Bad("archive list --limit 10^23", _archive_cmd("list", "--limit", BIG, words=["--limit", BIG]),
        found="exit 2 blaming the archive: 'datatype mismatch'"),
    Bad("archive list --limit -1", _archive_cmd("list", "--limit", "-1", words=["--limit", "-1"]),
        found="exit 0: no limit"),
    Bad("archive import of a score_us of 10^30", _archive_import_huge_score, found="exit 4, OverflowError"),
    # 5. optimize --dry-run read no --config
    Bad("optimize --dry-run --config /etc/passwd", _dry_run_config("/etc/passwd"), found="exit 0"),
    Bad("optimize --dry-run --config with a bad setting", _dry_run_config('{"loop": {"max_iterations": "many"}}'),
        found="exit 0"),
    # 6. non-finite and duplicate tunables
    Bad("a kernel header tune X = [1e999, nan]", _header_says(
        "// kforge: grid = [cdiv(n, 256)]\n// kforge: block = [256]\n// kforge: tune X = [1e999, nan]\n", 3,
        ["'1e999'", "finite"]), found="validated; -DX=inf reached NVRTC"),
    Bad("a kernel header tune B = [128, 256, 128]", _header_says(
        "// kforge: grid = [cdiv(n, B)]\n// kforge: block = [B]\n// kforge: tune B = [128, 256, 128]\n", 3,
        ["tune B lists 128 more than once"]), found="accepted"),
    # 7. init wrote a task its own validator refused
    Bad("init with a scalar parameter named None", _init_scalar("None"), found="wrote a task validate refused"),
    Bad("init with a scalar parameter named True", _init_scalar("True"), found="wrote a task validate refused"),
    Bad("init with a scalar parameter named False", _init_scalar("False"), found="wrote a task validate refused"),
    # 10. numbers past any sense, before the GPU probe
    *[Bad(f"--{o} 10^23", _args("optimize", "{m}", f"--{o}", BIG, "--runs-dir", "runs",
                                [f"--{o} {BIG}: must be at most"]), found="exit 3 at the GPU probe")
      for o in ("reps", "seed", "candidates", "tune-budget")],
]


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
    # generated tasks and tasks without an initial kernel (issue 21)
    *GENERATED_ROWS,
    # issue 20's list
    Bad("init on a full disk", _init_on_full_disk, fs=_full(), found="exit 4 and an empty folder"),
    Bad("init on a read-only disk", _init_on_read_only_disk, fs=_full(errno.EROFS), found="exit 4"),
    Bad("compile -o on a full disk", _compile_o_on_full_disk, fs=_full(), nvrtc=True, found="exit 4, a partial CUBIN"),
    Bad("report on a full disk", _report_on_full_disk, fs=_full(), found="exit 4"),
    Bad("approve on a read-only disk", _approve_on_read_only_disk, fs=_full(errno.EROFS), found="exit 4"),
    Bad("approve on a full disk", _approve_on_full_disk, fs=_full(), found="exit 4 and an empty folder"),
    Bad("archive export over an existing file", _export_over_a_file, found="overwrote it silently"),
    Bad('"atol": NaN', _atol_nan, found="validated; every element then failed"),
    Bad("a reference that writes NaN", _reference_writes_nan, found="validated; a NaN kernel passed"),
    Bad("a manifest launch of block [2048]", _manifest_block_2048, found="validated; exit 3 at the GPU probe"),
    Bad("a kernel header tune B = [0]", _eval_header("// kforge: grid = [cdiv(n, B)]\n// kforge: block = [B]\n"
                                                     "// kforge: tune B = [0]\n", ["B=0", "division by zero"]),
        found="exit 3 at the GPU probe"),
    Bad("a kernel header tune B = [1.5]", _eval_header("// kforge: grid = [cdiv(n, 256)]\n// kforge: block = [B]\n"
                                                       "// kforge: tune B = [1.5]\n", ["B=1.5", "whole number"]),
        found="exit 3 at the GPU probe"),
    Bad("a kernel header block = [2048]", _eval_header("// kforge: grid = [cdiv(n, 2048)]\n// kforge: block = [2048]\n",
                                                       ["2048 threads", "at most 1024"]), found="exit 3 at the GPU probe"),
    Bad("a kernel header shared_mem = -1", _eval_header("// kforge: grid = [cdiv(n, 256)]\n// kforge: block = [256]\n"
                                                        "// kforge: shared_mem = -1\n", ["shared_mem = -1", "negative"]),
        found="exit 3 at the GPU probe"),
    Bad("--dry-run with an initial kernel of block 0", _dry_run_initial_block_0, found="printed a prompt for it"),
    Bad("init of a non-ASCII name", _init_keyword_free_non_ascii, found="wrote files that then failed validation"),
    Bad("approve a hand-edited best.cu", _approve_hand_edited_best, found="approved with the original's x1.50"),
    Bad("approve a NaN speedup in summary.json", _approve_nan_speedup, found="wrote xnan into approved.json"),
    Bad("a reference that sleeps", _reference_sleeps, found="no bound: hung past 90 s"),
    Bad("a reference that calls os._exit(0)", _reference_os_exit, found="exit 0 with no output"),
    Bad("batch --ray garbage:::address", _batch_ray_garbage, found="exit 4 and a batch folder left behind"),
    Bad("KFORGE_MCP_TEST_GATE=python:nosuchmod:X", _mcp_test_gate_no_module,
        env={"KFORGE_MCP_TEST_GATE": "python:nosuchmod:X"}, found="exit 4"),
    Bad("report when progress.png is a folder", _report_plot_is_a_folder, found="exit 4"),
    Bad("optimize --devices zero,one", _optimize("--devices zero,one"), found="exit 3 at the GPU probe"),
    Bad("gate --devices zero,one", _gate_devices_words, found="exit 3 at the GPU probe"),
    Bad("optimize --compare tpu", _optimize("--compare tpu"), found="exit 3 at the GPU probe"),
    Bad("batch --resume of a folder that is not a batch", _batch_resume_not_a_batch, found="exit 3 at the GPU probe"),
    Bad("--budget-usd -1", _optimize("--budget-usd -1"), found="'must be >= 0', then 0 said 'must be above 0'"),
    Bad("--budget-usd -0.5", _optimize("--budget-usd -0.5")),     # 0 is no limit (issue 32): not bad input
    Bad("a negative price in a config file", _config_price_negative, found="the message did not name the config file"),
    Bad("archive show on a zero-length file", _archive_list_zero_length, found="a schema was written into it"),
    Bad("archive import of a bad file into a new archive", _archive_import_bad_into_new,
        found="an empty archive was left behind"),
    Bad("KFORGE_CLOCK_OFFSET_US=fast", _env("KFORGE_CLOCK_OFFSET_US", "fast", "optimize", ["finite number"]),
        env={"KFORGE_CLOCK_OFFSET_US": "fast"}, found="accepted silently"),
    Bad("KFORGE_CLOCK=sundial", _env("KFORGE_CLOCK", "sundial", "eval", ["cupti or events"]),
        env={"KFORGE_CLOCK": "sundial"}, found="accepted silently"),
    Bad("OPENAI_BASE_URL=ftp://", _env("OPENAI_BASE_URL", "ftp://models.local", "optimize-openai", ["http"]),
        env={"OPENAI_BASE_URL": "ftp://models.local/v1"}, found="accepted silently"),
    # beyond issue 20's list
    Bad("rtol 1e999 (infinity to Python's json)", _rtol_1e999, found="validated"),
    Bad("a case variable of -Infinity", _case_var_infinity, found="validated"),
    Bad("NaN in a config file", _config_nan),
    Bad("NaN in an approvals file", _approvals_nan),
    Bad("NaN in an archive export", _archive_import_nan),
    Bad("a reference that writes one Inf", _reference_writes_inf_once, found="validated"),
    Bad("a reference that crashes (SIGSEGV)", _reference_crashes, found="killed kforge with no message"),
    Bad("a reference that rebinds its output instead of writing it (--strict)", _reference_replaces_its_output,
        found="the warning said only 'within tolerance of all zeros'"),
    Bad("reference.time_limit_s -1", _reference_time_limit_negative),
    Bad('"nonfinite_outputs": "yes"', _nonfinite_flag_not_boolean),
    Bad("optimize with an initial kernel of block 2048", _optimize_initial_block_2048,
        found="exit 3 at the GPU probe"),
    Bad("validate --arch sm_86: shared_mem beyond its 99 KB", _validate_smem_beyond_arch, found="validated"),
    Bad("init --dir that is a file", _init_dir_is_a_file),
    Bad("batch --resume with a damaged batch.json", _batch_resume_damaged, found="TypeError, exit 4"),
    Bad("batch --max-iterations 0", _batch_max_iterations_zero, found="a batch folder of runs that stopped at once"),
    Bad("eval --json onto the kernel being evaluated", _eval_json_over_the_kernel,
        found="would have overwritten the kernel"),
    Bad("compile -o onto a file that is not a CUBIN", _compile_o_over_a_source, nvrtc=True,
        found="overwrote the source"),
    Bad("gate --junit onto a file that is not JUnit", _gate_junit_over_notes, found="overwrote it"),
    Bad("validate --gpu-memory inf", _args("validate", "--no-compile", "--gpu-memory", "inf", "{m}",
                                          ["--gpu-memory inf", "finite"]), found="OverflowError, exit 4"),
    Bad("eval --timeout inf", _args("eval", "{m}", "--timeout", "inf", ["--timeout inf", "finite"]),
        found="accepted: no bound on a checked launch"),
    Bad("eval --max-noise nan", _args("eval", "{m}", "--max-noise", "nan", ["--max-noise nan", "finite"]),
        found="'must be in [0, 1]' for a NaN"),
    *ISSUE33_ROWS,
    # issue 35: nothing a user has is destroyed, and every input read is bounded (and issue 33's item 9)
    Bad("archive export A --force --archive A", _export_onto_the_archive("same"), found="destroyed the archive"),
    Bad("archive export through a symlink onto the archive", _export_onto_the_archive("symlink"),
        found="destroyed the archive"),
    Bad("archive export through a hard link onto the archive", _export_onto_the_archive("hardlink"),
        found="destroyed the archive"),
    *[Bad(f"a damaged history.json under {c}", _damaged_history(c),
          found={"resume-dry-run": "JSONDecodeError, exit 4", "replay": "ignored, then exit 3 at the GPU probe"}.get(c, ""))
      for c in ("resume", "resume-dry-run", "report", "replay", "approve", "archive-add")],
    Bad("a history.json of the wrong shape under --resume --dry-run", _history_of_the_wrong_shape("resume-dry-run"),
        found="KeyError, exit 4"),
    Bad("a history.json of the wrong shape under archive add", _history_of_the_wrong_shape("archive-add"),
        found="exit 0: '0 added'"),
    Bad("replay after its manifest changed", _replay_changed_manifest, found="replayed against the changed task"),
    Bad("replay after best.cu changed", _replay_changed_kernel, found="replayed the edited kernel"),
    Bad("init --force through a symlink out of the folder", _init_force_through_a_symlink),
    Bad("init --describe --force onto a symlinked exchange folder", _describe_force_through_a_symlinked_folder,
        found="OSError from rmtree, exit 4"),
    *[Bad(command, _special_file(command), found="read without end (memory)" if "zero" in command else "hung")
      for command in ("validate /dev/zero", "eval /dev/zero", "validate a FIFO", "optimize --config /dev/zero",
                      "replay /dev/zero", "archive import /dev/zero")],
    Bad("a kernel header define __CUDA_ARCH__ = 1", _eval_header("// kforge: define __CUDA_ARCH__ = 1\n",
                                                                 ["__CUDA_ARCH__", "reserved for the compiler"]),
        found="accepted: -D__CUDA_ARCH__=1 reached NVRTC"),
    Bad("a kernel header tune _Tile = [1, 2]", _eval_header("// kforge: tune _Tile = [1, 2]\n",
                                                            ["_Tile", "reserved for the compiler"]), found="accepted"),
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
    for k, v in bad.env.items():
        monkeypatch.setenv(k, v)
    if bad.fs is not None:
        monkeypatch.setattr(writes, "FS", bad.fs())
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
    assert r.exit_code == 2 and "--max-iterations 0: must be at least 1, got 0" in r.stderr
    assert not (tmp_path / "runs").exists()


def test_a_long_history_is_checked_to_its_records_fields(kforge, tmp_path):
    """Over 1 MB a history.json is checked down to each attempt's own fields (the nested parts by
    type only), so a long run's resume or report does not wait on the schema."""
    from kernel_forge.evidence import run_dir as evidence

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


@pytest.mark.parametrize("value, bound", [(-0.01, "at least 0"), (1.5, "at most 1")])
def test_a_noise_bound_outside_zero_to_one_is_refused_before_anything_runs(value, bound):
    from kernel_forge.common.errors import InputError
    from kernel_forge.config.gate_settings import GateOptions
    from kernel_forge.app.option_checks import check_settings

    with pytest.raises(InputError) as err:
        check_settings(GateOptions(max_noise=value))
    assert f"--max-noise {value!r}: must be {bound}" in str(err.value)
    check_settings(GateOptions(max_noise=0.0))          # 0: every timed launch is made


@pytest.mark.parametrize("reader, what", [
    ("archive", "archive export"), ("approvals", "approvals file"), ("config", "config")])
def test_a_file_that_is_not_utf8_is_named_with_the_byte_where_it_stops(tmp_path, reader, what):
    from kernel_forge.archive.format import read_export
    from kernel_forge.common.errors import InputError
    from kernel_forge.common.reads import read_json_file
    from kernel_forge.ci.regression import load_approvals

    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"approved": ["\xff"]}\n')
    read = {"archive": read_export, "approvals": load_approvals,
            "config": lambda p: read_json_file(p, "config")}[reader]
    with pytest.raises(InputError) as err:
        read(bad)
    assert str(err.value) == f"{bad}: the {what} is not UTF-8 text (byte offset 15)"


# ------------------------------------------------------------------------------ issue 20, beside the table

def test_the_table_holds_every_finding_of_issue_20():
    names = {b.name for b in BAD}
    for row in ("init on a full disk", "compile -o on a full disk", "report on a full disk", "approve on a full disk",
                "archive export over an existing file", '"atol": NaN', "a reference that writes NaN",
                "a manifest launch of block [2048]", "a kernel header tune B = [0]", "a kernel header tune B = [1.5]",
                "a kernel header block = [2048]", "a kernel header shared_mem = -1",
                "--dry-run with an initial kernel of block 0", "init of a non-ASCII name",
                "approve a hand-edited best.cu", "approve a NaN speedup in summary.json", "a reference that sleeps",
                "a reference that calls os._exit(0)", "batch --ray garbage:::address",
                "KFORGE_MCP_TEST_GATE=python:nosuchmod:X", "report when progress.png is a folder",
                "optimize --devices zero,one", "optimize --compare tpu", "batch --resume of a folder that is not a batch",
                "--budget-usd -1", "--budget-usd -0.5", "a negative price in a config file",
                "archive show on a zero-length file", "archive import of a bad file into a new archive",
                "KFORGE_CLOCK_OFFSET_US=fast", "KFORGE_CLOCK=sundial", "OPENAI_BASE_URL=ftp://"):
        assert row in names, row
    assert len(BAD) >= 110


# ------------------------------------------------------------------------------ one validator, every entry point

@dataclass
class Same:
    """A bad value, and the words every entry point says about it after naming its place."""

    section: str
    name: str
    option: str          #: the command-line option
    typed: str           #: as typed on the command line
    shown: str           #: as the command line's message shows it (click has converted it)
    value: object        #: as written in a JSON file or given to MCP
    body: str


SAME = [
    Same("loop", "max_iterations", "--max-iterations", "-1", "-1", -1, "must be at least 1, got -1"),
    Same("loop", "max_iterations", "--max-iterations", "0", "0", 0, "must be at least 1, got 0"),
    Same("gate", "reps", "--reps", "0", "0", 0, "must be at least 1, got 0"),
    Same("gate", "max_noise", "--max-noise", "2", "2.0", 2, "must be at most 1, got 2.0"),
    Same("proposer", "temperature", "--temperature", "3", "3.0", 3, "must be at most 2, got 3.0"),
    Same("loop", "roof_stop", "--roof-stop", "3", "3.0", 3, "must be at most 2, got 3.0"),
]


def _refused(r) -> str:
    assert r.exit_code == 2, f"exit {r.exit_code}:\n{r.output}{r.stderr}"
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    return r.stderr


@pytest.mark.parametrize("bad", SAME, ids=[f"{b.option} {b.typed}" for b in SAME])
def test_a_bad_value_gets_the_same_words_from_every_entry_point(bad: Same, kforge, tmp_path, monkeypatch):
    """optimize, its --config file, batch (its options and its batch.json), MCP (a named argument
    and the settings argument), resume (a hand-edited run.json) and, for the gate's settings, eval:
    each names the place as it spells it, then says the same words, and nothing is left on disk."""
    from kernel_forge.app.mcp_server import Service
    from kernel_forge.common.errors import InputError

    monkeypatch.chdir(tmp_path)
    m = make_task(tmp_path / "task")
    runs = tmp_path / "runs"
    typed = f"{bad.option} {bad.shown}: {bad.body}"
    said = {}

    said["optimize"] = _refused(kforge("optimize", m, bad.option, bad.typed, "--runs-dir", runs))
    assert typed in said["optimize"]

    cfg = tmp_path / "opt.json"
    cfg.write_text(json.dumps({"manifest": str(m), bad.section: {bad.name: bad.value}}))
    said["config"] = _refused(kforge("optimize", "--config", cfg, "--runs-dir", runs))
    assert f"{cfg}: $.{bad.section}.{bad.name}: {bad.body}" in said["config"]

    said["batch"] = _refused(kforge("batch", m, bad.option, bad.typed, "--runs-dir", runs))
    assert typed in said["batch"]

    record = tmp_path / "batch-001" / "batch.json"
    record.parent.mkdir()
    record.write_text(json.dumps({"batch": "batch-001", "tasks": [], "results": {}, "loop": {}, "gate": {},
                                  "proposer": {}, bad.section: {bad.name: bad.value}}))
    said["batch --resume"] = _refused(kforge("batch", "--resume", record.parent))
    assert f"{record}: $.{bad.section}.{bad.name}: {bad.body}" in said["batch --resume"]

    service = Service(runs, gate_factory=lambda task, options: pytest.fail("no gate may be made"))
    with pytest.raises(InputError) as err:
        service.optimize(str(m), settings={bad.section: {bad.name: bad.value}})
    assert str(err.value) == f"settings: $.{bad.section}.{bad.name}: {bad.body}" and err.value.exit_code == 2
    named = {"max_iterations": service.optimize, "reps": lambda m, **kw: service.eval_kernel(m, path=str(m), **kw)}
    if bad.name in named:
        with pytest.raises(InputError) as err:
            named[bad.name](str(m), **{bad.name: bad.value})
        assert str(err.value) == f"{bad.name}: {bad.body}"

    run = finished_run(tmp_path / "done", m)
    meta = json.loads((run / "run.json").read_text())
    meta[bad.section][bad.name] = bad.value
    (run / "run.json").write_text(json.dumps(meta))
    before = snapshot(run)
    said["resume"] = _refused(kforge("optimize", "--resume", run))
    assert f"{run / 'run.json'}: $.{bad.section}.{bad.name}: {bad.body}" in said["resume"]
    assert snapshot(run) == before
    if bad.section == "loop":          # a stop rule given again on resume
        meta[bad.section][bad.name] = LoopConfig().to_json()[bad.name]
        (run / "run.json").write_text(json.dumps(meta))
        assert typed in _refused(kforge("optimize", "--resume", run, bad.option, bad.typed))
    if bad.section == "gate":
        assert typed in _refused(kforge("eval", m, bad.option, bad.typed))

    assert not runs.exists()
    bodies = {where: text.rstrip("\n").rsplit(": must be", 1)[1] for where, text in said.items()}
    assert set(bodies.values()) == {bad.body.removeprefix("must be")}, bodies


def test_a_negative_budget_usd_is_refused_and_zero_means_no_limit(kforge, tmp_path):
    m = make_task(tmp_path / "task")
    said = [kforge("optimize", m, "--budget-usd", v, "--runs-dir", tmp_path / "runs").stderr for v in ("-1", "-0.5")]
    assert said == [f"kforge: error: --budget-usd {v}: must be at least 0, got {v}\n" for v in ("-1.0", "-0.5")]
    from kernel_forge.config.loop_settings import LoopConfig
    assert LoopConfig().budget_usd == 20.0 and LoopConfig(budget_usd=0).budget_limit is None


def test_a_failed_batch_leaves_no_batch_folder(kforge, tmp_path):
    m = make_task(tmp_path / "task")
    r = kforge("batch", m, "--ray", "garbage:::address", "--runs-dir", tmp_path / "runs")
    assert r.exit_code == 2 and not (tmp_path / "runs").exists()


def test_archive_list_of_a_zero_length_file_lists_nothing_and_writes_nothing(kforge, tmp_path):
    empty = tmp_path / "a.sqlite"
    empty.write_bytes(b"")
    r = kforge("archive", "list", "--archive", empty)
    assert r.exit_code == 0 and "0 kernel(s)" in r.stderr
    assert empty.read_bytes() == b"" and sorted(p.name for p in tmp_path.iterdir()) == ["a.sqlite"]


def test_archive_export_replaces_a_file_with_force_and_shares_it(kforge, tmp_path):
    from kernel_forge.archive.store import open_archive
    db = tmp_path / "a.sqlite"
    with open_archive(db):
        pass
    out = tmp_path / "x.jsonl"
    out.write_text("old\n")
    old = os.umask(0o022)
    try:
        r = kforge("archive", "export", out, "--archive", db, "--force")
    finally:
        os.umask(old)
    assert r.exit_code == 0 and out.read_text() == "" and out.stat().st_mode & 0o777 == 0o644


def test_gate_junit_is_written_when_the_gate_cannot_run(kforge, tmp_path, monkeypatch):
    """No GPU (exit 3): CI still gets a JUnit file, with an error test case saying why."""
    import xml.etree.ElementTree as ET

    from kernel_forge.ci import evaluate
    from kernel_forge.common.errors import NoGPUError

    m = make_task(tmp_path / "task")
    run = finished_run(tmp_path, m)
    ap = tmp_path / "approved.json"
    assert kforge("approve", run, "--into", ap, "--copy-to", tmp_path / "k").exit_code == 0

    def no_gpu(task, options):
        raise NoGPUError("the CUDA driver library could not be loaded (test)")
    monkeypatch.setattr(evaluate, "default_gate", no_gpu)
    junit = tmp_path / "kforge.xml"
    r = kforge("gate", ap, "--junit", junit)
    assert r.exit_code == 3 and "no usable NVIDIA GPU" in r.stderr
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites" and root.get("errors") == "1" and root.get("tests") == "1"
    err = root.find("testsuite/testcase/error")
    assert err.get("type") == "environment" and "no usable NVIDIA GPU" in err.get("message")
    assert "exited with code 3" in err.text
    # and a bad approvals file (exit 2) says so in the same file
    ap.write_text("{")
    r = kforge("gate", ap, "--junit", junit)
    assert r.exit_code == 2
    assert ET.parse(junit).getroot().find("testsuite/testcase/error").get("type") == "bad_input"


def test_eval_junit_is_written_when_eval_cannot_run(kforge, tmp_path, monkeypatch):
    import xml.etree.ElementTree as ET

    from kernel_forge.ci import evaluate
    from kernel_forge.common.errors import NoGPUError

    m = make_task(tmp_path / "task")

    def no_gpu(task, options):
        raise NoGPUError("test")
    monkeypatch.setattr(evaluate, "default_gate", no_gpu)
    junit = tmp_path / "eval.xml"
    r = kforge("eval", m, "--junit", junit)
    assert r.exit_code == 3
    assert ET.parse(junit).getroot().find("testsuite/testcase/error").get("type") == "environment"


def test_init_with_a_keyword_parameter_writes_a_reference_that_works(kforge, tmp_path):
    r = kforge("init", "k", "--dir", tmp_path, "--signature",
               'extern "C" __global__ void k(const float* in, float* out, int n)')
    assert r.exit_code == 0, r.output
    ref = tmp_path / "k_reference.py"
    text = ref.read_text()
    assert "def reference(in_, out, n):" in text
    compile(text, str(ref), "exec")                       # a SyntaxError before: def reference(in, ...)
    ref.write_text(text.replace('    raise NotImplementedError', '    out[...] = 2 * in_\n    return\n    raise NotImplementedError'))
    r = kforge("validate", "--no-compile", tmp_path / "k.json")
    assert r.exit_code == 0, r.output + r.stderr


@pytest.mark.skipif(not HAS_NVRTC, reason="needs NVRTC")
def test_init_of_half_and_bfloat16_signatures_writes_a_stub_nvrtc_compiles(kforge, tmp_path):
    r = kforge("init", "h", "--dir", tmp_path, "--signature",
               'extern "C" __global__ void h(const __half* x, __nv_bfloat16* y, int n)')
    assert r.exit_code == 0
    stub = (tmp_path / "h.cu").read_text()
    assert "#include <cuda_fp16.h>" in stub and "#include <cuda_bf16.h>" in stub
    assert kforge("compile", tmp_path / "h.cu", "--arch", "sm_90").exit_code == 0
    assert "the reference is still a stub" in r.stdout


def test_a_nonfinite_reference_is_accepted_when_the_manifest_says_so_and_nan_must_match_nan(kforge, tmp_path):
    from kernel_forge.common.dtypes import C_TYPES
    from kernel_forge.model.task import Tolerance
    from kernel_forge.model.tolerance import compare

    m = make_task(tmp_path / "task", nonfinite_outputs=True)
    (m.parent / "vector_add.py").write_text("import numpy as np\n\ndef reference(a, b, c, n):\n"
                                            "    c[...] = a + b\n    c[::7] = np.nan\n    c[3] = -np.inf\n")
    r = kforge("validate", "--no-compile", m)
    assert r.exit_code == 0 and "NaN or Inf everywhere" not in r.stdout, r.output + r.stderr
    f32, tol = C_TYPES["float"], Tolerance(1e-6, 1e-6)
    expected = np.array([np.nan, 1.0, -np.inf], dtype=np.float32)
    assert compare("c", expected.copy(), expected, f32, tol).ok
    for wrong in ([0.0, 1.0, -np.inf], [np.nan, np.nan, -np.inf], [np.nan, 1.0, np.inf]):
        got = compare("c", np.array(wrong, dtype=np.float32), expected, f32, tol)
        assert not got.ok and got.nonfinite_mismatches == 1, wrong


def test_a_reference_runs_in_one_child_reused_across_cases_and_manifests(kforge, tmp_path):
    from kernel_forge.model import reference_process

    reference_process.shutdown()
    a, b = make_task(tmp_path / "a"), make_task(tmp_path / "b")
    for m in (a, b):
        (m.parent / "vector_add.py").write_text("import os\n\ndef reference(a, b, c, n):\n    c[...] = a + b\n"
                                                "    open(os.path.join(os.path.dirname(__file__), 'pids'), 'a')"
                                                ".write(str(os.getpid()) + '\\n')\n")
    assert kforge("validate", "--no-compile", a, b).exit_code == 0
    pids = set((a.parent / "pids").read_text().split()) | set((b.parent / "pids").read_text().split())
    assert len(pids) == 1 and str(os.getpid()) not in pids
    # both small cases and the two probes that read the kind (kernel_forge.kinds: found on one case,
    # confirmed on another), one process
    assert len((a.parent / "pids").read_text().split()) == 4


def test_after_a_hung_reference_the_next_one_gets_a_fresh_process(kforge, tmp_path):
    hung = edit(make_task(tmp_path / "hung"), lambda d: d["reference"].update(time_limit_s=0.5))
    (hung.parent / "vector_add.py").write_text("import time\n\ndef reference(a, b, c, n):\n    time.sleep(60)\n")
    good = make_task(tmp_path / "good")
    t0 = time.perf_counter()
    r = kforge("validate", "--no-compile", hung, good)
    assert r.exit_code == 2 and "did not finish within 0.5 s" in r.stderr
    assert f"ok   {good}" in r.stdout and time.perf_counter() - t0 < 30


# ------------------------------------------------------------------------------ issue 33, beside the table

def test_the_table_holds_every_class_of_issue_33_but_the_npy_one():
    names = {b.name for b in BAD}
    for row in ('grid "... if n in 2 else ..."', 'shape "n if n is not 0 else 1"', 'cost "n * (n not in 3)"',
                "a kernel header constraint B is 64", "a kernel header dispatch n in 5 -> B=128",
                "validate: a manifest nested 100,000 deep", "optimize --dry-run: a manifest nested 100,000 deep",
                "a config file nested 100,000 deep", "replay: a request nested 100,000 deep",
                "report: a history.json nested 100,000 deep", "archive import: a line nested 100,000 deep",
                "archive prune --keep 10^23", "archive show 10^23", "archive list --limit 10^23",
                "archive list --limit -1", "archive import of a score_us of 10^30",
                "optimize --dry-run --config /etc/passwd", "a kernel header tune X = [1e999, nan]",
                "a kernel header tune B = [128, 256, 128]", "init with a scalar parameter named None",
                "init with a scalar parameter named True", "init with a scalar parameter named False",
                "--reps 10^23", "--seed 10^23", "--candidates 10^23", "--tune-budget 10^23"):
        assert row in names, row
    assert len(ISSUE33_ROWS) >= 26 and all(b.found for b in ISSUE33_ROWS)


def test_every_entry_point_that_takes_an_arch_refuses_a_bad_one_in_the_same_words(kforge, tmp_path):
    from kernel_forge.app.mcp_server import Service
    from kernel_forge.common.errors import InputError

    m = make_task(tmp_path / "task")
    bad = "sm_90 --include=/etc/passwd"
    body = f"must be like sm_90, got {bad!r}"
    said = {cmd: _refused(kforge(*args)) for cmd, args in {
        "validate": ("validate", m, "--arch", bad), "compile": ("compile", m.parent / "vector_add.cu", "--arch", bad),
        "eval": ("eval", m, "--arch", bad), "optimize": ("optimize", m, "--arch", bad, "--runs-dir", tmp_path / "runs"),
        "batch": ("batch", m, "--arch", bad, "--runs-dir", tmp_path / "runs")}.items()}
    for cmd, text in said.items():
        assert f"--arch {bad!r}: {body}" in text, (cmd, text)
    service = Service(tmp_path / "runs", gate_factory=lambda task, options: pytest.fail("no gate may be made"),
                      allow=(tmp_path,))
    for tool in (lambda: service.validate_manifest(str(m), arch=bad),
                 lambda: service.eval_kernel(str(m), path=str(m.parent / "vector_add.cu"), arch=bad)):
        with pytest.raises(InputError) as err:
            tool()
        assert str(err.value) == f"arch: {body}" and err.value.exit_code == 2
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------------------ issue 35, beside the table

def test_an_npy_path_error_never_shows_the_files_bytes(kforge, tmp_path):
    """Issue 33 item 9: numpy's message quoted the first 6 bytes of whatever file the path named."""
    m = _m(tmp_path)
    for i, content in enumerate((b"TOPSEcret api key\n", b"\x93NUMPY\x01\x00{'descr': TOPSE")):
        (tmp_path / f"secret{i}").write_bytes(content)
        edit(m, lambda d: d["args"]["a"].update(init={"kind": "npy", "path": f"../secret{i}"}))
        r = kforge("validate", "--no-compile", m)
        out = r.output + (r.stderr or "")
        assert r.exit_code == 2 and "is not an .npy file" in out, out
        assert "TOPSE" not in out, out


def _reference_bytes_sent(kforge, monkeypatch, folder: Path, n_cases: int) -> int:
    """Bytes the parent sends to the reference process while ``validate`` checks ``n_cases`` cases."""
    from multiprocessing import connection
    from multiprocessing.reduction import ForkingPickler

    from kernel_forge.model import reference_process

    reference_process.shutdown()          # a fresh child: it holds no task yet
    m = _m(folder)
    edit(m, lambda d: d.update(cases=[{"name": f"c{i}", "role": ("correctness", "performance")[i % 2],
                                       "vars": {"n": 16 + i % 7}} for i in range(n_cases)]
                               + [{"name": "unseen", "role": "holdout", "vars": {"n": 33}}]))
    sent = [0]
    send = connection.Connection.send

    def counting(self, obj):
        sent[0] += len(ForkingPickler.dumps(obj))
        return send(self, obj)

    monkeypatch.setattr(connection.Connection, "send", counting)
    r = kforge("validate", "--no-compile", m)
    monkeypatch.setattr(connection.Connection, "send", send)
    assert r.exit_code == 0, r.output
    return sent[0]


@pytest.mark.slow
def test_validate_is_linear_in_the_number_of_cases(kforge, monkeypatch, tmp_path):
    """Issue 35: 4,000 cases took 101 s, since the whole task (every case) was pickled to the
    reference process for each case. Counted, not timed: the bytes sent for 4,000 cases are
    about 8 times those for 500 (the task once, then a short request per case), not 64 times."""
    small = _reference_bytes_sent(kforge, monkeypatch, tmp_path / "small", 500)
    large = _reference_bytes_sent(kforge, monkeypatch, tmp_path / "large", 4000)
    assert small > 0 and large / small < 12, (small, large)
