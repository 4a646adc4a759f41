#!/usr/bin/env bash
# The GPU test suite (`make test-gpu`): `pytest -m gpu` with logs in $OUT (gpu-tests.log,
# gpu-junit.xml, gpu-junit-serial.xml).
#
# Two phases. The tests whose verdicts compare times (honest twins, the clock, replayed claims:
# $SERIAL) run alone, one at a time, so no other test's kernels share the GPU while they time.
# Every other GPU test runs in pytest-xdist workers when pytest-xdist is present: $WORKERS_PER_GPU
# per GPU (default 3: these tests spend most of their time compiling and in host code), each worker
# pinned to its GPU by tests/conftest.py (KFORGE_TEST_GPUS). WORKERS_PER_GPU=1 gives one per GPU;
# no pytest-xdist gives one process on the first GPU.  SKIP="tests/x.py ..." leaves files out of
# both phases (a device call too short for the whole suite runs them in the next).
set -u
OUT=${OUT:-gpu-out}
PY=${PY:-python3}
mkdir -p "$OUT"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
GPUS=${GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)}
[ "${GPUS:-0}" -ge 1 ] 2>/dev/null || GPUS=1
WORKERS_PER_GPU=${WORKERS_PER_GPU:-3}
SERIAL=${SERIAL:-tests/gate/test_adversarial.py tests/gpu/test_timing_gpu.py tests/search/test_loop_gpu.py tests/gate/test_gate_dispatch_gpu.py}
COMMON=(-m gpu -v -rs --durations=15 -p no:cacheprovider -o console_output_style=times)
PAR=()
IGNORE=()
for f in $SERIAL ${SKIP:-}; do [ -e "$f" ] && IGNORE+=(--ignore="$f"); done   # SKIP: files left out (run in another call)
WORKERS=$(( GPUS * WORKERS_PER_GPU ))
if [ "$WORKERS" -gt 1 ]; then
  if "$PY" -c "import xdist" 2>/dev/null; then
    export KFORGE_TEST_GPUS=$(seq -s, 0 $(( GPUS - 1 )))
    PAR+=(-n "$WORKERS" --dist loadfile)
    echo "[test-gpu] $GPUS GPU(s): $WORKERS pytest-xdist workers (KFORGE_TEST_GPUS=$KFORGE_TEST_GPUS); then $SERIAL one at a time"
  else
    echo "[test-gpu] no pytest-xdist: one process on one GPU (pip install pytest-xdist to use more)"
  fi
fi
set -o pipefail
status=0
if [ -n "${ONLY:-}" ]; then      # ONLY="tests/x.py ..." runs just those, one at a time
  "$PY" -m pytest "${COMMON[@]}" --junitxml="$OUT/gpu-junit.xml" $ONLY "$@" 2>&1 | tee "$OUT/gpu-tests.log"
  exit $?
fi
"$PY" -m pytest "${COMMON[@]}" "${PAR[@]}" "${IGNORE[@]}" --junitxml="$OUT/gpu-junit.xml" "$@" 2>&1 \
  | tee "$OUT/gpu-tests.log" || status=$?
SERIAL_PRESENT=()
for f in $SERIAL; do [ -e "$f" ] && SERIAL_PRESENT+=("$f"); done
if [ "${#SERIAL_PRESENT[@]}" -gt 0 ]; then
  echo "[test-gpu] timing tests, one at a time: ${SERIAL_PRESENT[*]}" | tee -a "$OUT/gpu-tests.log"
  "$PY" -m pytest "${COMMON[@]}" --junitxml="$OUT/gpu-junit-serial.xml" "${SERIAL_PRESENT[@]}" "$@" 2>&1 \
    | tee -a "$OUT/gpu-tests.log" || status=$?
fi
exit $status
