"""The adversarial corpus (tests/adversarial/*.cu) against the gate.

Each corpus file is a real CUDA kernel for a bundled task that cheats or breaks in one known
way, and names the reason code the gate must give it::

    // task: <bundled task name>
    // expect: <reason code from kernel_forge.verdict.REASONS>
    // note: <why; any number of these lines>
    // message: <text the evaluation's message must contain; optional, repeatable>

A line ending in ``// EXPECT-LINE`` is the line a compile_error or static_rule file must be
blamed for.  tests/adversarial/README.md has the table of files and why each gets its reason.

CPU tests (no marker) check the corpus itself, compile every file meant to reach the GPU with
NVRTC for sm_90, and run the gate on the files it must refuse before touching a GPU.  The GPU
tests run every file through one gate per task and check the reason, then check that the
initial kernels still pass and that the GPU is still usable.
"""
from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pytest

from kernel_forge import static_rules
from kernel_forge.candidate import load_candidate
from kernel_forge.errors import CompileError, SignatureError
from kernel_forge.gate import Gate, GateOptions
from kernel_forge.gpu.nvrtc import compile_source
from kernel_forge.signature import check_matches, find_entry
from kernel_forge.task import load_task
from kernel_forge.verdict import REASONS

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "manifests"
CORPUS = ROOT / "tests" / "adversarial"
FILES = sorted(CORPUS.glob("*.cu"))
IDS = [p.stem for p in FILES]

#: reasons the gate must give without a GPU (before any worker is started)
PRE_GPU = {"compile_error", "static_rule", "signature_mismatch"}
#: every kind the corpus must contain at least once
REQUIRED = {"unwritten", "mismatch", "crash", "timeout", "nondeterministic", "input_modified",
            "launch_config", "compile_error", "static_rule", "signature_mismatch", "passed"}
MARKER = "EXPECT-LINE"
#: how much slower than the task's initial kernel the slow-but-correct file must measure
SLOW_RATIO = 1.5
#: Hopper's opt-in dynamic shared memory per block (227 KiB)
HOPPER_SMEM_OPTIN = 232448

_HEAD = re.compile(r"^//\s*(task|expect|note|message):\s?(.*)$")


@dataclass(frozen=True)
class Entry:
    path: Path
    task: str
    expect: str
    notes: tuple[str, ...]
    messages: tuple[str, ...]

    @property
    def source(self) -> str:
        return self.path.read_text(encoding="utf-8")

    def marked_lines(self) -> list[int]:
        return [i for i, line in enumerate(self.source.splitlines(), start=1) if MARKER in line
                and not line.lstrip().startswith("//")]


@lru_cache(maxsize=None)
def entry(path: Path) -> Entry:
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) >= 3, f"{path.name}: too short"
    m1, m2 = _HEAD.match(lines[0]), _HEAD.match(lines[1])
    assert m1 and m1.group(1) == "task", f"{path.name}: line 1 must be `// task: NAME`, got {lines[0]!r}"
    assert m2 and m2.group(1) == "expect", f"{path.name}: line 2 must be `// expect: REASON`, got {lines[1]!r}"
    notes, messages = [], []
    for line in lines[2:]:
        m = _HEAD.match(line)
        if not m:
            break
        if m.group(1) == "note":
            notes.append(m.group(2).strip())
        elif m.group(1) == "message":
            messages.append(m.group(2).strip())
        else:
            raise AssertionError(f"{path.name}: a second `// {m.group(1)}:` line")
    return Entry(path, m1.group(2).strip(), m2.group(2).strip(), tuple(notes), tuple(messages))


@lru_cache(maxsize=None)
def task_of(name: str):
    return load_task(MANIFESTS / f"{name}.json")


def check_messages(e: Entry, message: str) -> None:
    for want in e.messages:
        assert want in message, f"{e.path.name}: {want!r} not in the gate's message: {message}"


# -- the corpus itself (CPU) -----------------------------------------------------------------

def test_corpus_is_complete():
    assert len(FILES) >= 18, f"only {len(FILES)} corpus files"
    expects = {entry(p).expect for p in FILES}
    missing = REQUIRED - expects
    assert not missing, f"no corpus file expects {sorted(missing)}"
    assert [entry(p).expect for p in FILES].count("passed") >= 1
    readme = (CORPUS / "README.md").read_text(encoding="utf-8")
    for p in FILES:
        assert p.name in readme, f"{p.name} is missing from tests/adversarial/README.md"


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_header_names_a_task_and_a_reason(path):
    e = entry(path)
    assert (MANIFESTS / f"{e.task}.json").is_file(), f"{path.name}: no bundled task {e.task!r}"
    assert e.expect in REASONS, f"{path.name}: {e.expect!r} is not a reason code"
    assert e.notes, f"{path.name}: say why in a `// note:` line"
    cand = load_candidate(path)  # the kforge header parses
    assert cand.launch is not None or task_of(e.task).launch is not None
    if e.expect in ("compile_error", "static_rule"):
        assert e.marked_lines(), f"{path.name}: mark the offending line with `// {MARKER}`"


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_static_rules_and_signature_only_where_expected(path):
    e = entry(path)
    task = task_of(e.task)
    findings = static_rules.check(e.source)
    if e.expect == "static_rule":
        assert findings, f"{path.name}: no static rule fired"
        assert set(e.marked_lines()) <= {f.line for f in findings}, findings
    else:
        assert not findings, f"{path.name}: unexpected static-rule findings {findings}"
    found = find_entry(e.source, task.signature.name)
    assert found is not None, f"{path.name}: no entry point {task.signature.name}"
    sig, _line = found
    if e.expect == "signature_mismatch":
        with pytest.raises(SignatureError):
            check_matches(task.signature, sig)
    else:
        check_matches(task.signature, sig)


@pytest.mark.parametrize("path", [p for p in FILES if entry(p).expect not in PRE_GPU],
                         ids=[p.stem for p in FILES if entry(p).expect not in PRE_GPU])
def test_compiles_for_sm90(path):
    cand = load_candidate(path)
    result = compile_source(cand.source, arch="sm_90", defines=cand.compile_defines(),
                            file_label=path.name)
    assert result.cubin


def test_compile_error_file_names_the_bad_line():
    files = [p for p in FILES if entry(p).expect == "compile_error"]
    assert files
    for path in files:
        e = entry(path)
        cand = load_candidate(path)
        with pytest.raises(CompileError) as info:
            compile_source(cand.source, arch="sm_90", defines=cand.compile_defines(), file_label=path.name)
        assert set(e.marked_lines()) <= set(info.value.lines), (info.value.lines, info.value.log)


@pytest.mark.parametrize("path", [p for p in FILES if entry(p).expect == "launch_config"],
                         ids=[p.stem for p in FILES if entry(p).expect == "launch_config"])
def test_launch_config_files_ask_for_more_than_any_gpu_gives(path):
    cand = load_candidate(path)
    task = task_of(entry(path).task)
    case = task.cases_with("correctness")[0]
    variables = dict(case.vars)
    variables.update(cand.compile_defines())
    _grid, block, smem = (cand.launch or task.launch).resolve(variables)
    assert block[0] * block[1] * block[2] > 1024 or smem > HOPPER_SMEM_OPTIN, (block, smem)


@pytest.mark.parametrize("path", [p for p in FILES if entry(p).expect in PRE_GPU],
                         ids=[p.stem for p in FILES if entry(p).expect in PRE_GPU])
def test_gate_refuses_before_touching_the_gpu(path, monkeypatch):
    import kernel_forge.gate as gate_mod
    import kernel_forge.gpu.driver as driver_mod

    def no_gpu(*_a, **_k):
        raise AssertionError("the gate touched the GPU for a candidate it must refuse up front")

    monkeypatch.setattr(gate_mod, "Worker", no_gpu)
    monkeypatch.setattr(gate_mod, "probe_gpu", no_gpu)
    monkeypatch.setattr(driver_mod, "probe", no_gpu)
    monkeypatch.setattr(driver_mod, "_driver", no_gpu)
    e = entry(path)
    gate = Gate(task_of(e.task), GateOptions(arch="sm_90"))
    try:
        ev = gate.evaluate(load_candidate(path), roles=("correctness", "performance"))
    finally:
        gate.close()
    assert ev.reason == e.expect, f"{path.name}: expected {e.expect}, got {ev.reason}: {ev.message}"
    assert not ev.passed and ev.cases == []
    assert gate._worker is None and gate.device is None
    check_messages(e, ev.message)
    if e.expect == "compile_error":
        assert set(e.marked_lines()) <= set(ev.compile["lines"]), ev.compile


# -- on the GPU ------------------------------------------------------------------------------

def gpu_options() -> GateOptions:
    # fail_fast: the verdict is the first failing case either way; it spares the remaining cases
    # of a kernel that hangs (35 s each) or crashes (a new worker each)
    return GateOptions(warmup=2, reps=10, launch_timeout_s=5, fail_fast=True)


class _Gates(dict):
    """task name -> the one Gate every corpus file of that task goes through."""

    def __missing__(self, name: str) -> Gate:
        gate = Gate(task_of(name), gpu_options())
        self[name] = gate
        return gate


@pytest.fixture(scope="module")
def gates():
    made = _Gates()
    yield made
    for gate in made.values():
        gate.close()


@pytest.mark.gpu
@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_gate_gives_the_expected_reason(path, gates):
    e = entry(path)
    gate = gates[e.task]
    ev = gate.evaluate(load_candidate(path), roles=("correctness", "performance"))
    detail = (f"{path.name}: expected {e.expect}, got {ev.reason}: {ev.message}\n  cases: "
              + "; ".join(f"{c.name}={c.reason}" for c in ev.cases))
    print(detail)
    assert ev.reason == e.expect, detail
    check_messages(e, ev.message)
    if e.expect != "passed":
        assert not ev.passed, detail
        return
    assert ev.passed and ev.score_us, detail
    initial = gate.evaluate(load_candidate(gate.task.initial), roles=("correctness", "performance"))
    assert initial.passed and initial.score_us, initial.message
    print(f"{path.name}: score {ev.score_us:.1f} us, initial kernel {initial.score_us:.1f} us "
          f"({ev.score_us / initial.score_us:.1f}x)")
    assert ev.score_us > SLOW_RATIO * initial.score_us, (ev.score_us, initial.score_us)


CUPY_PROBE = r"""
import cupy as cp
n = 1 << 22
x = cp.arange(n, dtype=cp.int64)
assert int((x * 2).sum()) == n * (n - 1)
y = cp.full(n, 3.0, dtype=cp.float32)
assert float(cp.sqrt(y * y).max()) == 3.0
cp.cuda.Device().synchronize()
print("cupy ok")
"""


@pytest.mark.gpu
def test_initial_kernels_still_pass_and_gpu_is_usable_after_the_corpus(gates):
    # defined last so that it runs after every corpus file, on the same gates
    tasks = sorted({entry(p).task for p in FILES})
    failed = []
    for name in tasks:
        gate = gates[name]
        ev = gate.evaluate(load_candidate(gate.task.initial), roles=("correctness", "performance"))
        print(f"{name}: initial kernel {ev.reason} ({ev.score_us} us), worker restarts {gate.restarts}")
        if not ev.passed:
            failed.append(f"{name}: {ev.reason}: {ev.message}")
    assert not failed, failed
    proc = subprocess.run([sys.executable, "-c", CUPY_PROBE], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "cupy ok" in proc.stdout, (proc.stdout, proc.stderr)
