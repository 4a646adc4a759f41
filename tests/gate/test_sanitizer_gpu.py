"""--sanitize on the GPU: compute-sanitizer finds what the output checks cannot see."""
import shutil
from pathlib import Path

import pytest

from kernel_forge.model.candidate import load_candidate, parse_candidate
from kernel_forge.config.gate_settings import GateOptions
from kernel_forge.gate.gate import Gate
from kernel_forge.model.task import load_task

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]

# Writes one element past the end of c: no fault (the allocation is padded), outputs correct,
# so only memcheck (with CuPy's pool off) can see it.
ONE_PAST_END = r'''
// kforge: grid = [cdiv(n + 1, 256), 1, 1]
// kforge: block = [256, 1, 1]
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
  if (i == n) c[i] = 0.0f;
}
'''


@pytest.fixture(scope="module")
def sanitizer():
    from kernel_forge.common.errors import EnvironmentProblem
    from kernel_forge.gate.sanitizer import find_sanitizer
    try:
        return find_sanitizer()
    except EnvironmentProblem as exc:
        pytest.skip(str(exc))


def test_sanitizer_rejects_a_silent_out_of_bounds_write(sanitizer):
    task = load_task(ROOT / "manifests" / "vector_add.json")
    cand = parse_candidate(ONE_PAST_END, name="one_past_end.cu")
    with Gate(task, GateOptions.quick(warmup=1, reps=3)) as gate:
        plain = gate.evaluate(cand, roles=("correctness",))
    assert plain.passed, plain.message           # the output checks alone cannot see it
    with Gate(task, GateOptions.quick(warmup=1, reps=3, sanitize=True)) as gate:
        ev = gate.evaluate(cand, roles=("correctness",))
    assert not ev.passed and ev.reason == "sanitizer", ev.message
    assert "memcheck" in ev.message and "Invalid" in ev.message


def test_sanitizer_passes_a_clean_kernel(sanitizer):
    task = load_task(ROOT / "manifests" / "transpose.json")
    with Gate(task, GateOptions.quick(warmup=1, reps=3, sanitize=True)) as gate:
        ev = gate.evaluate(load_candidate(task.initial), roles=("correctness",))
    assert ev.passed, ev.message
    tools = [r["tool"] for r in ev.compile["sanitizer"]]
    assert tools[0] == "memcheck" and all(r["ok"] for r in ev.compile["sanitizer"])
