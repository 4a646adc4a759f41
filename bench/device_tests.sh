#!/usr/bin/env bash
# One device call: the GPU suite, then the harness benchmarks. Logs and results go to $OUT.
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
start=$(date +%s)
timeout ${GPU_TESTS_TIMEOUT:-380} make test-gpu PY=python3 OUT="$OUT"
echo "gpu tests rc=$? in $(( $(date +%s) - start )) s"
export PYTHONPATH=$PWD:/tmp/site
t=$(date +%s)
timeout ${BENCH_TIMEOUT:-150} python3 bench/run_bench.py --out "$OUT" > "$OUT/bench.log" 2>&1
echo "bench rc=$? in $(( $(date +%s) - t )) s"
tail -30 "$OUT/bench.log"
grep -E "passed|failed|error" "$OUT/gpu-tests.log" | tail -3
