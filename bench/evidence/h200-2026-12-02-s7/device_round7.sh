#!/usr/bin/env bash
# Round 7, the last device calls of the search/models/gate/input/describe round, one stage a call:
#   STAGE=suite  the GPU suite (bench/gpu_suite.sh) under a timeout, logs packed into $OUT
#   STAGE=tune   `kforge optimize` as a user runs it: matmul_f32 with every default (the built-in
#                tuner's 180 s limit, population search, dispatch rules), then every other bundled
#                task with --time-limit ${LIMIT:-30}; runs packed into $OUT/round7-tune.tgz and the
#                table (bench/tune_report.py) in $OUT/tune.md
set -u
. bench/device_env.sh
t0=$(date +%s)
case "${STAGE:-suite}" in
suite)
  W=/tmp/r7s; rm -rf "$W"; mkdir -p "$W"
  OUT="$W" timeout "${SUITE_TIMEOUT:-540}" bash bench/gpu_suite.sh > "$W/suite.stdout" 2>&1
  echo "[r7] suite rc=$? in $(( $(date +%s) - t0 )) s" | tee "$OUT/summary.txt"
  grep -E "^=+ .*(passed|failed|error)|^FAILED|^ERROR" "$W/gpu-tests.log" | tail -40 | tee -a "$OUT/summary.txt"
  tar czf "$OUT/round7-suite.tgz" -C "$W" .
  ;;
tune)
  W=/tmp/r7t; rm -rf "$W"; mkdir -p "$W"
  TASKS=(${TASKS:-layernorm softmax_rows transpose vector_add reduce_sum histogram gelu_bf16})
  if [ "${MATMUL:-1}" = 1 ]; then   # MATMUL=0 leaves out the matmul_f32 run (measured on its own)
    s=$(date +%s)
    timeout "${MATMUL_TIMEOUT:-240}" python3 -m kernel_forge optimize manifests/matmul_f32.json \
        --runs-dir "$W/runs-matmul_f32" > "$W/tune-matmul_f32.log" 2>&1
    echo "matmul_f32 (defaults) rc=$? in $(( $(date +%s) - s )) s" | tee -a "$OUT/summary.txt"
  fi
  for t in "${TASKS[@]}"; do
    s=$(date +%s)
    timeout $(( ${LIMIT:-30} + 60 )) python3 -m kernel_forge optimize manifests/$t.json --time-limit "${LIMIT:-30}" \
        --runs-dir "$W/runs-$t" > "$W/tune-$t.log" 2>&1
    echo "$t (--time-limit ${LIMIT:-30}) rc=$? in $(( $(date +%s) - s )) s" | tee -a "$OUT/summary.txt"
  done
  grep -hE "stopped|new best|budget|search " "$W"/tune-*.log | tail -60 >> "$OUT/summary.txt"
  python3 bench/tune_report.py "$W" --out "$W/tune" >> "$OUT/summary.txt" 2>&1
  cp "$W"/tune.md "$OUT/tune.md" 2>/dev/null
  tar czf "$OUT/round7-tune.tgz" -C "$W" .
  ;;
esac
echo "[r7] stage ${STAGE:-suite} done in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/summary.txt"
