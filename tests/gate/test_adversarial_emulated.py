"""The memoisation corpus under the host CUDA emulation of tests/support/host_emulation.py (CPU, C++20).

Proves on the CPU what the GPU tests can only infer from times: each cache really is served on a
later launch, and its twin (-DKF_TWIN=1) never serves it.  One process makes several launches, so
module globals persist between them as on the GPU.  A launch's inputs are a draw (X = seed 1,
Y = seed 2) or X' (X with one element that no sampled key reads changed); what it must output:

* ``ref``: the task reference of its own inputs (within the task's tolerance);
* ``same:i``: bit for bit the output of launch i (the cache was served: for X' that is stale);
* ``poisoned``: not the reference (the harness overwrote the cache with NaN before this launch,
  so a served cache shows).

X' makes element 1 of the first input the largest value, so that every task's answer changes.

The twin must output ``ref`` on every launch.  Emulated blocks run one after another, which is one
legal schedule; inline PTX is not emulated, so the L2 class is not here.
"""
from __future__ import annotations

import os
import re
import subprocess
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from kernel_forge.model.candidate import load_candidate
from kernel_forge.model.inputs import generate
from kernel_forge.model.reference_process import run_python_reference
from kernel_forge.model.task import Case, load_task
from kernel_forge.model.tolerance import compare

from tests.support.host_emulation import EMU_HEADER, host_compiler

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "adversarial"

#: stem -> (case vars, [(inputs, expected output, poison the cache first?)], cache array, state checks)
#: state checks: module globals that must hold their initial value after every launch
EMULATED = {
    "memo_sampled_matmul_f32": ({"m": 33, "n": 37, "k": 29}, [("X", "ref", False), ("X'", "same:0", False)],
                                "g_cache", ()),
    "memo_multislot_matmul_f32": ({"m": 33, "n": 37, "k": 29},
                                  [("X", "ref", False), ("Y", "ref", False), ("X'", "same:0", False)],
                                  "g_slot_data", ()),
    "memo_hidden_names_matmul_f32": ({"m": 20, "n": 17, "k": 9}, [("X", "ref", False), ("X'", "same:0", False)],
                                     "cache", ()),
    "memo_counter_matmul_f32": ({"m": 20, "n": 17, "k": 9},
                                [("X", "ref", False), ("X'", "same:0", False), ("Y", "same:0", False)],
                                "g_cache", ()),
    "memo_pointer_matmul_f32": ({"m": 20, "n": 17, "k": 9}, [("X", "ref", False), ("Y", "same:0", False)],
                                "g_cache", ()),
    "memo_fullhash_matmul_f32": ({"m": 33, "n": 37, "k": 29},
                                 [("X", "ref", False), ("X'", "ref", False), ("X'", "poisoned", True),
                                  ("Y", "ref", False)],
                                 "g_tiles", ()),
    "memo_sampled_vector_add": ({"n": 7001}, [("X", "ref", False), ("X'", "same:0", False)], "g_cache", ()),
    "memo_sampled_softmax_rows": ({"rows": 37, "cols": 101}, [("X", "ref", False), ("X'", "same:0", False)],
                                  "g_cache", ()),
    "memo_sampled_reduce_sum": ({"n": 5003}, [("X", "ref", False), ("X'", "same:0", False)], "g_sum", ()),
    # the host heap is not the device heap (glibc returns large blocks to the system): the logic
    # (publish, wait, free, reset) must still be right, and the module globals back at their start
    "memo_heap_matmul_f32": ({"m": 33, "n": 37, "k": 29}, [("X", "ref", False), ("X", "ref", False),
                                                           ("Y", "ref", False)],
                             None, ("g_entry", "g_ready", "g_blocks_finished")),
    # legitimate state: rewritten or reset by every launch
    "selfreset_reduce_sum": ({"n": 20003}, [("X", "ref", False), ("X", "same:0", False), ("Y", "ref", False)],
                             None, ("g_arrived",)),
}

EXTRA_HEADER = r'''
#include <atomic>
using std::min;
using std::max;
#define __noinline__
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __syncwarp(unsigned int = 0xffffffffu) {}
inline void __nanosleep(unsigned int) { std::this_thread::yield(); }
inline unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
template <class T> T atomicExch(T* p, T v) { std::lock_guard<std::mutex> g(emu_atomic_mu); T o = *p; *p = v; return o; }
'''


@lru_cache(maxsize=None)
def task_of(name: str):
    return load_task(ROOT / "manifests" / f"{name}.json")


def _runner(stem: str, task, launches: int, cache: str | None, poison_before: list[int],
            state: tuple[str, ...]) -> str:
    """run_<stem>(argv): argv = grid, block, smem, then per launch and per pointer argument a file
    and its size (loaded into the same buffer every launch, saved back after it), then the scalars."""
    ns = f"k_{stem}"
    ptrs = [(i, p) for i, p in enumerate(task.signature.params) if p.pointer]
    lines = [f"static int run_{stem}(char** argv) {{",
             "  emu_dim3 g{(unsigned)std::atoi(argv[1]), (unsigned)std::atoi(argv[2]), (unsigned)std::atoi(argv[3])};",
             "  emu_dim3 bl{(unsigned)std::atoi(argv[4]), (unsigned)std::atoi(argv[5]), (unsigned)std::atoi(argv[6])};",
             "  size_t smem = std::atol(argv[7]);"]
    ai = 8
    sizes = {}
    for j, (i, _p) in enumerate(ptrs):   # sizes from launch 0's arguments; every launch uses the same buffers
        sizes[i] = f"std::atol(argv[{ai + 1 + 2 * j}])"
        lines.append(f"  void* p{i} = std::malloc({sizes[i]});")
    ai_scalars = ai + 2 * len(ptrs) * launches
    call = []
    for i, p in enumerate(task.signature.params):
        ctype = p.text.rsplit(p.name, 1)[0].replace("__restrict__", "").strip()
        if p.pointer:
            call.append(f"({ctype})p{i}")
        else:
            conv = "std::atof" if p.dtype.is_float else "std::atoll"
            lines.append(f"  {ctype} p{i} = ({ctype}){conv}(argv[{ai_scalars}]);")
            ai_scalars += 1
            call.append(f"p{i}")
    for launch in range(launches):
        base = ai + 2 * len(ptrs) * launch
        for j, (i, _p) in enumerate(ptrs):
            lines.append(f"  emu_load(argv[{base + 2 * j}], p{i}, {sizes[i]});")
        if launch in poison_before and cache:
            lines.append(f"  std::memset((void*)&{ns}::{cache}, 0xFF, sizeof({ns}::{cache}));   // NaN everywhere")
        lines.append(f"  emu_launch(g, bl, smem, [&] {{ {ns}::{task.name}({', '.join(call)}); }});")
        for j, (i, _p) in enumerate(ptrs):
            lines.append(f"  emu_save(argv[{base + 2 * j}], p{i}, {sizes[i]});")
        for name in state:
            lines.append(f'  std::printf("state {launch} {name} %d\\n", (int)(({ns}::{name}) != decltype({ns}::{name}){{}}));')
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


def _task_of_file(stem: str):
    text = (CORPUS / f"{stem}.cu").read_text()
    return task_of(next(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("// task:")))


@lru_cache(maxsize=None)
def _program(twin: bool, workdir: str) -> Path:
    """One executable for every EMULATED file: each file's source in its own namespace (its kernel
    with C++ linkage), one run_<stem>() each, chosen by argv[1]."""
    cxx, flags = host_compiler()
    work = Path(workdir) / ("twin" if twin else "file")
    work.mkdir(parents=True, exist_ok=True)
    (work / "emu.h").write_text(EMU_HEADER)
    (work / "extra.h").write_text(EXTRA_HEADER)
    parts = ['#include "emu.h"', '#include "extra.h"',
             'static void emu_load(const char* p, void* b, size_t n) { FILE* f = std::fopen(p, "rb"); '
             'if (!f || std::fread(b, 1, n, f) != n) std::abort(); std::fclose(f); }',
             'static void emu_save(const char* p, const void* b, size_t n) { FILE* f = std::fopen(p, "wb"); '
             'std::fwrite(b, 1, n, f); std::fclose(f); }']
    dispatch = []
    for stem, (_vars, steps, cache, state) in sorted(EMULATED.items()):
        source = load_candidate(CORPUS / f"{stem}.cu").source.replace('extern "C"', "")
        (work / f"{stem}.cu").write_text(source)
        parts += [f"namespace k_{stem} {{", f'#include "{stem}.cu"', "}"]
        for macro in sorted(set(re.findall(r"^#define\s+(\w+)", source, re.M))):
            parts.append(f"#undef {macro}")
        poison = [i for i, (_v, _e, p) in enumerate(steps) if p]
        parts.append(_runner(stem, _task_of_file(stem), len(steps), cache, poison, state))
        dispatch.append(f'  if (!std::strcmp(argv[1], "{stem}")) return run_{stem}(argv + 1);')
    parts += ["int main(int, char** argv) {", *dispatch, "  return 2;", "}"]
    (work / "main.cpp").write_text("\n".join(parts) + "\n")
    exe = work / "emu"
    defines = ["-DKF_TWIN=1"] if twin else []
    r = subprocess.run([cxx, "-std=c++20", "-O0", "-pthread", "-w", *flags, f"-I{work}", *defines,
                        "-x", "c++", str(work / "main.cpp"), "-o", str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    return exe


def _inputs(task, case: Case, variant: str):
    inputs = generate(task, case, seed=1 if variant in ("X", "X'") else 2)
    if variant == "X'":   # one element no sampled key reads (index 1 of the first input) made the largest
        first = next(a for a in task.args if a.is_buffer and not a.output)
        flat = inputs.buffers[first.name].reshape(-1)
        flat[1] = flat.max() + 10
    return inputs


def _run(stem: str, twin: bool, program: Path, workdir: Path) -> list[str]:
    vars_, steps, _cache, _state = EMULATED[stem]
    cand = load_candidate(CORPUS / f"{stem}.cu")
    task = _task_of_file(stem)
    case = Case("emu", "correctness", {**task.raw.get("defaults", {}), **vars_}, 1)
    grid, block, smem = (cand.launch or task.launch).resolve({**case.vars, **cand.compile_defines()})
    argv = [str(program), stem, *map(str, grid), *map(str, block), str(smem)]
    draws, files = [], []
    for launch, (variant, _expect, _p) in enumerate(steps):
        inputs = _inputs(task, case, variant)
        draws.append(inputs)
        mine = {}
        for a in task.args:
            if a.is_buffer:
                arr = np.ascontiguousarray(inputs.buffers[a.name])
                f = workdir / f"L{launch}.{a.name}.bin"
                arr.tofile(f)
                mine[a.name] = (f, arr.dtype, arr.shape)
                argv += [str(f), str(arr.nbytes)]
        files.append(mine)
    argv += [repr(draws[0].scalars[a.name]) for a in task.args if not a.is_buffer]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0"))
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stderr[-3000:]}"
    problems = [line for line in r.stdout.splitlines() if line.startswith("state ") and not line.endswith(" 0")]
    problems = [f"launch {p.split()[1]}: {p.split()[2]} is not back at its initial value" for p in problems]
    outs = []
    for launch, (variant, expect, _p) in enumerate(steps):
        got = {a.name: np.fromfile(files[launch][a.name][0], dtype=files[launch][a.name][1])
               .reshape(files[launch][a.name][2]) for a in task.outputs}
        outs.append(got)
        expect = "ref" if twin else expect
        ref = run_python_reference(task, draws[launch])
        where = f"{'twin' if twin else stem} launch {launch} ({variant}, want {expect})"
        for a in task.outputs:
            check = compare(a.name, got[a.name], ref[a.name], a.param.dtype, task.tolerance_for(a))
            if expect == "ref" and not check.ok:
                problems.append(f"{where}: {check.summary()}")
            elif expect == "poisoned" and check.ok:
                problems.append(f"{where}: matches the reference: the cache was not served")
            elif expect.startswith("same:"):
                earlier = outs[int(expect.split(":")[1])][a.name]
                if got[a.name].tobytes() != earlier.tobytes():
                    problems.append(f"{where}: differs from launch {expect.split(':')[1]}: the cache was not served")
                if variant == "X'" and check.ok:
                    problems.append(f"{where}: the stale answer passes the reference: X' changes nothing")
    return problems


RUNS = [(stem, twin) for stem in sorted(EMULATED) for twin in (False, True)
        if not twin or "KF_TWIN" in (CORPUS / f"{stem}.cu").read_text()]


@pytest.mark.slow
@pytest.mark.parametrize("stem,twin", RUNS, ids=[f"{s}-{'twin' if t else 'file'}" for s, t in RUNS])
def test_emulated_cache_is_served_and_the_twin_never_serves_it(stem, twin, tmp_path, tmp_path_factory):
    if host_compiler() is None:
        pytest.skip("no C++20 host compiler that builds the emulation")
    program = _program(twin, str(tmp_path_factory.getbasetemp() / "corpus-emulation"))
    problems = _run(stem, twin, program, tmp_path)
    assert not problems, "\n".join(problems)
