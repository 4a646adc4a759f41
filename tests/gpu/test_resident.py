"""Where a (case, seed)'s buffers lie on the GPU (gpu/resident.py): one block of whole 2 MiB
pages per (case, seed), the same layout in every mode and worker; and what that buys.

- --quick and the full gate time the same thing: the timed launches of both see the same input
  bytes, the same initial state of their outputs and buffers at the same offsets modulo 2 MiB
  (the histogram's initial kernel timed 6,391 µs full against 4,410 µs --quick on the H200 when
  those offsets were wherever CuPy's pool put them: its bins take millions of global atomics);
- the expected values sit right after the kernel's outputs, where the memory-scan attacks of
  tests/adversarial/ look for them: found when masking is off, only masked bytes when it is on
  (the same window arithmetic as the CUDA attacks, run on the fake GPU).
On the NumPy stand-in for CuPy and the driver (tests/support/fake_gpu.py): no GPU.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

import kernel_forge.gate.gate as gate_mod
import kernel_forge.gpu.timed_launches as timed_mod
from kernel_forge.model.candidate import parse_candidate
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.gate.gate import Gate
from kernel_forge.gpu import mask as mask_mod
from kernel_forge.gpu.resident import ALIGN, PAGE, Block, block_layout, case_layout
from kernel_forge.model.inputs import generate
from kernel_forge.model.task import load_task

from tests.support import fake_gpu
from tests.support.in_process_gate import CAND, InProcessWorker, gate, honest, kernel_fn, task  # gate, task: fixtures
from tests.support.paths import ROOT



def test_a_block_lays_its_buffers_out_in_order_aligned_in_whole_pages():
    slots, size = block_layout([("kernel", "a", 1000), ("kernel", "b", 0), ("kernel", "c", 513),
                                ("expected", "c", 513)])
    assert [(s.kind, s.name, s.offset) for s in slots] == [("kernel", "a", 0), ("kernel", "b", 1024),
                                                           ("kernel", "c", 1024), ("expected", "c", 2048)]
    assert size == PAGE
    _slots, big = block_layout([("kernel", "x", PAGE + 1)])
    assert big == 2 * PAGE


def test_the_matmul_block_is_a_b_c_then_the_expected_c():
    task = load_task(ROOT / "manifests" / "matmul_f32.json")
    case = task.case("rect")
    host = generate(task, case, 0)
    slots, size = case_layout(task, host.buffers, {"c": (384, 256)})
    got = [(s.kind, s.name, s.offset, s.nbytes) for s in slots]
    a, b, c = 4 * 384 * 320, 4 * 320 * 256, 4 * 384 * 256
    assert got == [("kernel", "a", 0, a), ("kernel", "b", a, b), ("kernel", "c", a + b, c),
                   ("expected", "c", a + b + c, c)]          # all multiples of 512 already
    assert size == PAGE and all(s.offset % ALIGN == 0 for s in slots)


def test_the_histogram_block_keeps_a_pristine_bins_and_room_for_int64_counts():
    task = load_task(ROOT / "manifests" / "histogram.json")
    host = generate(task, task.case("few_bins"), 0)
    slots, _ = case_layout(task, host.buffers, {"bins": (3,)})
    assert [(s.kind, s.name, s.nbytes) for s in slots] == [
        ("kernel", "x", 4 * 40999), ("kernel", "bins", 12), ("initial", "bins", 12), ("expected", "bins", 24)]


def test_a_block_not_on_a_page_boundary_is_taken_a_page_larger_and_rounded_up(monkeypatch):
    fake_gpu.install(monkeypatch)
    import sys

    cp = sys.modules["cupy"]
    real = cp.cuda.Memory
    made = []

    class Unaligned:                    # what a driver might hand out: 256-byte aligned only
        def __init__(self, size):
            self.inner = real(size + 4096)
            self.ptr, self.size = self.inner.ptr + 4096 + 256, size
            made.append(size)
    monkeypatch.setattr(cp.cuda, "Memory", Unaligned)
    block = Block(3 * 1000)
    assert made == [PAGE, 2 * PAGE] and block.base % PAGE == 0 and block.size == PAGE
    assert block.mem.ptr <= block.base and block.base + block.size <= block.mem.ptr + block.mem.size
    arr = block.array(1024, (10,), np.float32)
    assert arr.data.ptr == block.base + 1024


def test_out_of_memory_for_a_new_block_frees_the_other_cases_blocks_first(gate, monkeypatch):
    import sys

    kernel_fn(honest)
    assert gate.evaluate(CAND).passed
    runner = InProcessWorker.instances[0].runner
    assert runner.resident.entries
    cp = sys.modules["cupy"]
    real, calls = cp.cuda.Memory, []

    def full_then_fine(size):
        calls.append(size)
        if len(calls) <= 2:                 # full even after CuPy's pool gave its cache back
            raise RuntimeError("cudaErrorMemoryAllocation: out of memory")
        return real(size)
    monkeypatch.setattr(cp.cuda, "Memory", full_then_fine)
    seed = gate.options.seed
    runner.resident.drop("odd", seed)
    assert ("perf", seed) in runner.resident.entries
    ev = gate.evaluate(CAND, roles=("correctness",))
    assert ev.passed, ev.message
    assert len(calls) >= 3
    assert ("odd", seed) in runner.resident.entries and ("perf", seed) not in runner.resident.entries


# -- --quick and the full gate time the same thing ------------------------------------------------

HIST = r'''
// kforge: grid = [cdiv(n, 256)]
// kforge: block = [256]
extern "C" __global__ void histogram(const int* x, unsigned int* bins, int n, int nbins) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { int v = x[i]; if (v >= 0 && v < nbins) atomicAdd(&bins[v], 1u); }
}
'''


@pytest.fixture
def hist_task(tmp_path):
    src = json.loads((ROOT / "manifests" / "histogram.json").read_text())
    src["reference"]["python"] = str(ROOT / "references" / "histogram.py") + ":reference"
    src["baselines"] = {}
    src.pop("templates", None)
    src["initial"] = str(ROOT / "manifests" / "histogram.cu")
    src["cases"] = [{"name": "odd", "role": "correctness", "vars": {"n": 1003}},
                    {"name": "few_bins", "role": "correctness", "vars": {"n": 409, "nbins": 3}},
                    {"name": "perf", "role": "performance", "vars": {"n": 5000}},
                    {"name": "perf2", "role": "performance", "vars": {"n": 7001}}]
    (tmp_path / "hist.json").write_text(json.dumps(src))
    return load_task(tmp_path / "hist.json")


def _timed_launches(task, options, monkeypatch, before=()) -> dict[str, list[tuple]]:
    """Per performance case, what each timed launch saw: (x's bytes, bins before the launch,
    x's and bins' offsets modulo 2 MiB, bins - x), with ``before`` candidates gated first on the
    same worker (another history)."""
    seen: dict[str, list[tuple]] = {}
    state = {"timing": False, "case": None}
    real_bench = timed_mod.bench

    def bench(*args, **kw):
        state["timing"] = True
        try:
            return real_bench(*args, **kw)
        finally:
            state["timing"] = False
    monkeypatch.setattr(timed_mod, "bench", bench)

    def kernel(values, module):
        x_ptr, bins_ptr, n, nbins = values
        x = fake_gpu.MEM.resolve(x_ptr, 4 * n).view(np.int32)
        bins = fake_gpu.MEM.resolve(bins_ptr, 4 * nbins).view(np.uint32)
        if state["timing"]:
            seen.setdefault(n, []).append((hashlib.sha256(x.tobytes()).hexdigest(), bins.tobytes(),
                                           x_ptr % PAGE, bins_ptr % PAGE, bins_ptr - x_ptr))
        valid = x[(x >= 0) & (x < nbins)]
        bins[:] = np.bincount(valid, minlength=nbins)[:nbins].astype(np.uint32)
    fake_gpu.KERNEL["run"] = kernel
    g = Gate(task, options)
    try:
        for src in before:
            assert g.evaluate(parse_candidate(src, name="before.cu")).passed
        seen.clear()
        ev = g.evaluate(parse_candidate(HIST, name="hist.cu"))
        assert ev.passed, ev.message
    finally:
        g.close()
    return seen


def test_quick_and_the_full_gate_time_the_same_inputs_state_and_placement(hist_task, monkeypatch):
    fake_gpu.install(monkeypatch)
    monkeypatch.setattr(gate_mod, "Worker", InProcessWorker)
    monkeypatch.setattr(fake_gpu.FakeModule, "param_sizes", lambda self: [8, 8, 4, 4])
    full = _timed_launches(hist_task, GateOptions(arch="sm_90", warmup=2, reps=10), monkeypatch)
    # --quick on a worker that has gated another kernel first (more allocations made and freed)
    other = HIST.replace("atomicAdd(&bins[v], 1u)", "atomicAdd(bins + v, 1u)")
    quick = _timed_launches(hist_task, GateOptions.quick(arch="sm_90", warmup=2, reps=10), monkeypatch,
                            before=[other])
    assert sorted(full) == sorted(quick) == [5000, 7001]
    for n in full:
        assert len(set(full[n])) == 1 and len(set(quick[n])) == 1, "every timed launch alike within a mode"
        f, q = full[n][0], quick[n][0]
        assert f[0] == q[0]                               # the same input bytes (the same draw)
        assert f[1] == q[1] == bytes(4 * 256)             # bins all zero before every timed launch
        assert f[2:] == q[2:]                             # the same offsets modulo 2 MiB, the same distance


# -- the memory-scan attacks' window ------------------------------------------------------------

def _scan_like_the_attack(a_ptr: int, c_ptr: int, n: int, probes: dict[int, float]) -> int | None:
    """tests/adversarial/memscan_*.cu's search, for vector_add's (a, b, c): from the first ALIGN
    boundary past c, within 1 MiB, an array of n floats that fits in the block and holds the
    probed values; the block's end computed from the layout (a is its start)."""
    size = lambda nbytes: (nbytes + ALIGN - 1) // ALIGN * ALIGN       # noqa: E731
    end = a_ptr + (3 * size(4 * n) + size(4 * n) + PAGE - 1) // PAGE * PAGE
    lo = c_ptr + size(4 * n)
    block = fake_gpu.MEM.resolve(a_ptr, end - a_ptr)          # the whole block: every read lies in it
    starts = np.arange(lo, min(lo + (1 << 20), end - 4 * n + 1), ALIGN) - a_ptr
    for i, v in probes.items():
        got = block[(starts + 4 * i)[:, None] + np.arange(4)].view(np.float32).reshape(-1)
        starts = starts[np.abs(got - v) <= 1e-3 + 1e-3 * abs(v)]
    return int(starts[0]) + a_ptr if starts.size else None


@pytest.mark.parametrize("masked", [True, False], ids=["masked", "unmasked"])
def test_the_attacks_window_holds_the_expected_values_only_when_unmasked(gate, monkeypatch, masked):
    if not masked:
        monkeypatch.setenv(mask_mod.NO_MASK_ENV, "1")
    found = []

    def attack(a, b, c, n):
        probes = {i: float(a[i] + b[i]) for i in (0, n // 2, n - 1)}
        a_ptr = a.ctypes.data
        found.append(_scan_like_the_attack(a_ptr, c.ctypes.data, n, probes))
        c[:] = a + b
    kernel_fn(honest)
    assert gate.evaluate(CAND).passed           # another kernel first: the expected values are resident
    kernel_fn(attack)
    assert gate.evaluate(CAND).passed
    if masked:
        assert found and not any(found)
    else:
        assert found and all(found)             # every launch, every case: right after c


def test_the_free_room_of_a_block_is_every_byte_no_slot_covers():
    from kernel_forge.gpu.resident import free_room

    slots, size = block_layout([("kernel", "a", 1000), ("kernel", "c", 512), ("expected", "c", 4)])
    assert free_room(slots, size) == [(1000, 24), (1536 + 4, size - 1540)]
    slots, size = block_layout([("kernel", "x", PAGE)])
    assert free_room(slots, size) == []
