#!/usr/bin/env bash
# The last device call of a session: the loop/sanitizer GPU tests (most important first), then the
# recovery benchmark. Logs stream to $OUT so a call cut short still returns what ran.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site
python3 -m pytest -m gpu -v -s -rs -p no:cacheprovider \
  "tests/test_gpu_harness.py::test_implausible_speed_is_flagged" \
  "tests/test_gpu_loop.py::test_replay_run_picks_the_faster_kernel_and_rejects_the_wrong_one" \
  "tests/test_gpu_loop.py::test_ci_regression_gate_passes_approved_and_fails_wrong_or_slower" \
  tests/test_gpu_sanitizer.py \
  "tests/test_gpu_loop.py::test_a_killed_run_resumes_and_finishes_with_the_same_layout" \
  "tests/test_gpu_loop.py::test_tuner_improves_over_the_initial_kernel" 2>&1 | tee "$OUT/gpu-tests-2.log" \
  | grep -E "PASSED|FAILED|ERROR|TUNER|REPLAY|^E |passed|failed"
python3 -c "
import sys, json; sys.path.insert(0, 'bench'); import run_bench
print(json.dumps(run_bench.recovery(), indent=1))" 2>&1 | tee "$OUT/recovery.json"
