"""The honest corpus (tests/honest/*.cu): kernels a CUDA engineer writes that the gate must pass.

Each file is an honest kernel for a bundled task, written the way people write fast kernels:
CUB block and warp primitives, cooperative_groups tiles and grid-wide sync, templates,
``__launch_bounds__``, ``__constant__`` tables, double / struct / large module globals,
last-block reductions, double atomics, dynamic shared memory above 48 KB, inline PTX (cp.async,
ldmatrix, mma.sync, named barriers), ``__grid_constant__`` parameters::

    // task: <bundled task name>
    // covers: <what it exercises, comma separated: see REQUIRED>
    // note: <how; any number of these lines>

A refusal of any of them is a bug in the gate (invariant 12 of ARCHITECTURE.md).  tests/honest/README.md has
the table.

CPU: the corpus covers every required kind; every file passes the static rules and the task's
signature, compiles with NVRTC for sm_90 without spills; the plain-CUDA ones also run under the
host emulation of tests/support/host_emulation.py on awkward sizes and match the reference.  GPU: every
file passes the strict gate (two draws, repeat launch, post-timing checks, holdout included)
after the task's initial kernel on the same gate, and its time is recorded (printed, and written
as JSON lines to ``$KFORGE_HONEST_OUT`` when set: bench/evidence/h200-2026-12-02-s6/a/device_gate.sh collects them).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import pytest

from kernel_forge.common import static_rules
from kernel_forge.model.candidate import load_candidate
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.gate.gate import Gate
from kernel_forge.gpu.nvrtc import compile_source
from kernel_forge.model.signature import check_matches, find_entry
from kernel_forge.model.task import load_task

from tests.support.host_emulation import emu_build, emu_cases, emu_run, host_compiler

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "honest"
FILES = sorted(CORPUS.glob("*.cu"))
IDS = [p.stem for p in FILES]

#: what the corpus must exercise (issue 19), each by at least one file
REQUIRED = {"cub", "cooperative_groups", "template", "launch_bounds", "constant", "double_global", "struct_global",
            "large_global", "last_block_float", "last_block_double", "atomic_double", "dynamic_smem_above_48k",
            "cp_async", "ldmatrix", "mma_sync", "named_barrier", "grid_constant", "cooperative_launch", "cpp_linkage", "template_kernel"}
#: files that need no CUB, cooperative groups, libcu++ or inline PTX run under the host emulation
NOT_EMULATED = ("cub", "cooperative_groups", "libcu++", "inline_ptx", "cooperative_launch", "wmma")

_HEAD = re.compile(r"^//\s*(task|covers|note):\s?(.*)$")


@dataclass(frozen=True)
class Entry:
    path: Path
    task: str
    covers: frozenset
    notes: tuple[str, ...]

    @property
    def source(self) -> str:
        return self.path.read_text(encoding="utf-8")


@lru_cache(maxsize=None)
def entry(path: Path) -> Entry:
    lines = path.read_text(encoding="utf-8").splitlines()
    m1, m2 = _HEAD.match(lines[0]), _HEAD.match(lines[1])
    assert m1 and m1.group(1) == "task", f"{path.name}: line 1 must be `// task: NAME`"
    assert m2 and m2.group(1) == "covers", f"{path.name}: line 2 must be `// covers: KIND, KIND`"
    notes = []
    for line in lines[2:]:
        m = _HEAD.match(line)
        if not m:
            break
        assert m.group(1) == "note", f"{path.name}: a second `// {m.group(1)}:` line"
        notes.append(m.group(2).strip())
    covers = frozenset(c.strip() for c in m2.group(2).split(",") if c.strip())
    return Entry(path, m1.group(2).strip(), covers, tuple(notes))


@lru_cache(maxsize=None)
def task_of(name: str):
    return load_task(ROOT / "manifests" / f"{name}.json")


# -- the corpus itself (CPU) ---------------------------------------------------------------------

def test_the_corpus_has_25_kernels_covering_every_required_kind():
    assert len(FILES) >= 25, f"only {len(FILES)} honest kernels"
    covered = set().union(*(entry(p).covers for p in FILES))
    assert REQUIRED <= covered, f"nothing covers {sorted(REQUIRED - covered)}"
    readme = (CORPUS / "README.md").read_text(encoding="utf-8")
    for p in FILES:
        assert p.name in readme, f"{p.name} is missing from tests/honest/README.md"
    assert {entry(p).task for p in FILES} == {m.stem for m in (ROOT / "manifests").glob("*.json")}


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_passes_the_static_rules_and_the_tasks_signature(path):
    e = entry(path)
    assert e.notes, f"{path.name}: say how in a `// note:` line"
    assert not static_rules.check(e.source), static_rules.check(e.source)
    found = find_entry(e.source, task_of(e.task).signature.name)
    assert found is not None, f"{path.name}: no entry point"
    check_matches(task_of(e.task).signature, found[0])
    cand = load_candidate(path)
    assert cand.launch is not None or task_of(e.task).launch is not None


@pytest.mark.slow
@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_compiles_for_sm90_without_spills(path):
    cand = load_candidate(path)
    result = compile_source(cand.source, arch="sm_90", defines=cand.compile_defines(), file_label=path.name)
    res = result.resources
    assert result.cubin and res.get("spill_stores", 0) + res.get("spill_loads", 0) == 0, res


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_every_launch_of_every_case_fits_an_h200(path):
    """Launch expressions evaluate for every case, within the H200's limits (1024 threads, 227 KB
    of shared memory with the opt-in; a cooperative grid within 132 SMs x 1 block at least)."""
    e = entry(path)
    cand = load_candidate(path)
    launch = cand.launch or task_of(e.task).launch
    for case in task_of(e.task).cases:
        grid, block, smem = launch.resolve({**case.vars, **cand.compile_defines()})
        assert block[0] * block[1] * block[2] <= 1024 and 0 <= smem <= 232448, (case.name, block, smem)
        assert min(grid) >= 1, (case.name, grid)
        if launch.cooperative:
            assert grid[0] * grid[1] * grid[2] <= 132, (case.name, grid)
    if "dynamic_smem_above_48k" in e.covers:
        biggest = max(launch.resolve({**c.vars, **cand.compile_defines()})[2] for c in task_of(e.task).cases)
        assert biggest > 48 * 1024, biggest


EMULATED = [p for p in FILES if not (entry(p).covers & set(NOT_EMULATED))]

EMU_PRELUDE = r"""
#include <atomic>
#define __grid_constant__
#define __constant__
inline void __syncwarp(unsigned int = 0xffffffffu) { emu_warp_bar[emu_tid() / 32]->arrive_and_wait(); }
template <class T> T emu_shfl(T v, int from)
{
    const int t = emu_tid(), w = t / 32, l = t % 32;
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    emu_warp_slot[w][l] = bits;
    emu_warp_bar[w]->arrive_and_wait();
    bits = emu_warp_slot[w][from >= 0 && from < 32 ? from : l];
    emu_warp_bar[w]->arrive_and_wait();
    T r;
    std::memcpy(&r, &bits, sizeof(T));
    return r;
}
template <class T> T __shfl_down_sync(unsigned int, T v, int d, int = 32) { return emu_shfl(v, emu_tid() % 32 + d); }
template <class T> T __shfl_sync(unsigned int, T v, int src, int = 32) { return emu_shfl(v, src); }
inline unsigned int atomicInc(unsigned int* p, unsigned int val)
{
    std::lock_guard<std::mutex> g(emu_atomic_mu);
    const unsigned int old = *p;
    *p = old >= val ? 0u : old + 1u;
    return old;
}
"""


#: awkward sizes small enough for the emulation's one-OS-thread-per-CUDA-thread (several blocks
#: each, so the last-block and grid-stride paths run); KFORGE_EMULATE=all adds test_templates' sizes
EMU_SIZES = {
    "reduce_sum": [{"n": 1}, {"n": 37}, {"n": 9001}],
    "histogram": [{"n": 1, "nbins": 5}, {"n": 4099, "nbins": 3}, {"n": 9001, "nbins": 256}, {"n": 503, "nbins": 2000}],
}


def _honest_emu_cases(task):
    from kernel_forge.model.task import Case

    if os.environ.get("KFORGE_EMULATE", "") == "all" or task.name not in EMU_SIZES:
        return emu_cases(task, False)
    defaults = task.raw.get("defaults", {})
    return [Case(f"emu{i}", "correctness", {**defaults, **v}, 1000 + i) for i, v in enumerate(EMU_SIZES[task.name])]


@pytest.mark.slow
@pytest.mark.parametrize("path", EMULATED, ids=[p.stem for p in EMULATED])
def test_emulated_on_awkward_sizes_it_matches_the_reference(path, tmp_path):
    if host_compiler() is None:
        pytest.skip("no C++20 host compiler that builds the emulation")
    e = entry(path)
    task = task_of(e.task)
    cand = load_candidate(path)
    cand = replace(cand, source=EMU_PRELUDE + cand.source, launch=cand.launch or task.launch)
    exe = emu_build(task, cand, dict(cand.defines), tmp_path)
    problems = []
    for case in _honest_emu_cases(task):
        problems += emu_run(task, cand, dict(cand.defines), exe, case, tmp_path)
    assert not problems, "\n".join(problems[:5])


def test_the_corpus_includes_issue_19s_refused_kernel():
    """A __device__ double partials array and an unsigned retirement counter (threadFenceReduction
    style): refused on every case before with a module-state copy error."""
    src = (CORPUS / "double_partials_lastblock_reduce_sum.cu").read_text()
    assert re.search(r"__device__\s+double\s+g_\w+\[", src) and "atomicInc(&g_retirement_count" in src


# -- on the GPU ---------------------------------------------------------------------------------

def _compile_one(job: tuple[str, str]) -> str:
    path, cache = job
    os.environ["KFORGE_CACHE_DIR"] = cache
    cand = load_candidate(path)
    compile_source(cand.source, arch="sm_90", defines=cand.compile_defines(), file_label=Path(path).name)
    return path


@pytest.fixture(scope="module")
def precompiled(tmp_path_factory):
    """The corpus compiled once, in parallel, into this session's compile cache (the gate's
    compiles of the CUB and cooperative-groups kernels take 5-15 s each): the GPU tests then time
    the gate, not NVRTC.  Compiled for sm_90, the H200's arch; on another GPU the gate compiles
    for its own arch again."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    cache = str(tmp_path_factory.getbasetemp() / "cubin-cache")
    jobs = [(str(p), cache) for p in FILES]
    with ProcessPoolExecutor(max_workers=max(1, min(8, (os.cpu_count() or 2) - 1)),
                             mp_context=mp.get_context("spawn")) as pool:
        return list(pool.map(_compile_one, jobs))


@pytest.fixture(scope="module")
def honest_gates(precompiled):
    made: dict[str, Gate] = {}
    yield made
    for gate in made.values():
        gate.close()


def _record(row: dict) -> None:
    out = os.environ.get("KFORGE_HONEST_OUT")
    if out:
        with open(out, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


@pytest.mark.gpu
@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_passes_the_strict_gate_with_holdout_and_records_its_time(path, honest_gates):
    e = entry(path)
    gate = honest_gates.get(e.task)
    if gate is None:        # one gate per task, as the loop runs them: the initial kernel first
        gate = honest_gates[e.task] = Gate(task_of(e.task), GateOptions(launch_timeout_s=20))
        initial = gate.evaluate(load_candidate(task_of(e.task).initial), roles=("correctness", "performance"))
        assert initial.passed, f"initial kernel of {e.task}: {initial.reason}: {initial.message}"
        _record({"task": e.task, "kernel": "initial", "passed": True, "score_us": initial.score_us,
                 "cases": {c.name: c.timing.median for c in initial.cases if c.timing}})
    ev = gate.evaluate(load_candidate(path), roles=("correctness", "performance", "holdout"))
    row = {"task": e.task, "kernel": path.stem, "passed": ev.passed, "reason": ev.reason, "message": ev.message[:400],
           "score_us": ev.score_us, "covers": sorted(e.covers),
           "cases": {c.name: c.timing.median for c in ev.cases if c.timing},
           "gate_s": round(ev.seconds, 3)}
    _record(row)
    print(json.dumps(row))
    assert ev.passed and ev.score_us, f"{path.name}: {ev.reason}: {ev.message}"
