#!/usr/bin/env bash
# One device call (10 minutes at most): the GPU suite (`make test-gpu`, every GPU present), then the
# harness benchmarks in whatever time is left. Logs and results go to $OUT.
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
start=$(date +%s)
timeout -s INT -k 20 "${GPU_TESTS_TIMEOUT:-540}" make test-gpu PY=python3 OUT="$OUT"
echo "gpu tests rc=$? in $(( $(date +%s) - start )) s"
left=$(( ${CALL_SECONDS:-590} - ($(date +%s) - start) ))
if [ "${BENCH:-1}" = 1 ] && [ "$left" -gt 60 ]; then
  PYTHONPATH=$PWD:/tmp/site timeout "$left" python3 bench/run_bench.py --out "$OUT" > "$OUT/bench.log" 2>&1
  echo "bench rc=$? ($left s allowed)"
  tail -30 "$OUT/bench.log"
fi
grep -E "passed|failed" "$OUT/gpu-tests.log" | tail -2
