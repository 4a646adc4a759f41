#!/usr/bin/env bash
# Round 8 (issue 22's restructuring, issue 19's second pass) in two device calls of under 10
# minutes each, back to back on one warm machine:
#   STAGE=a  the GPU suite without tests/gate/test_adversarial.py: every other GPU test in
#            pytest-xdist workers, then tests/gpu/test_timing_gpu.py and tests/search/test_loop_gpu.py
#            one at a time, then bench/ncu_compare.py on ${NCU_TASKS:-vector_add,matmul_f32,softmax_rows}
#            (kforge's kernel time beside ncu's) (logs packed into $OUT/round8-a.tgz, the tally in
#            $OUT/summary.txt)
#   STAGE=b  tests/gate/test_adversarial.py alone (the honest twins compare times), then
#            bench/evidence/h200-2026-12-03-s9/stage-b/device_gate2.sh (clock offset, flush, placement, memory-scan attacks, the gate's
#            cost beside Kernel Tuner's, --quick vs full)
set -u
. bench/device_env.sh
t0=$(date +%s)
case "${STAGE:-a}" in
a)
  W=/tmp/r8a; rm -rf "$W"; mkdir -p "$W"
  OUT="$W" WORKERS_PER_GPU=${WORKERS_PER_GPU:-4} SKIP=tests/gate/test_adversarial.py \
    SERIAL="tests/gpu/test_timing_gpu.py tests/search/test_loop_gpu.py" \
    timeout "${SUITE_TIMEOUT:-420}" bash bench/gpu_suite.sh > "$W/suite.stdout" 2>&1
  echo "[r8a] suite rc=$? in $(( $(date +%s) - t0 )) s" | tee "$OUT/summary.txt"
  grep -E "^=+ .*(passed|failed|error)|^FAILED|^ERROR" "$W/gpu-tests.log" | tail -40 | tee -a "$OUT/summary.txt"
  timeout "${NCU_TIMEOUT:-120}" python3 bench/ncu_compare.py --tasks "${NCU_TASKS:-vector_add,matmul_f32,softmax_rows}" \
    --out "$W/ncu" > "$W/ncu.stdout" 2>&1
  echo "[r8a] ncu_compare rc=$? at $(( $(date +%s) - t0 )) s" | tee -a "$OUT/summary.txt"
  cat "$W"/ncu/*.md 2>/dev/null | tee -a "$OUT/summary.txt"
  tar czf "$OUT/round8-a.tgz" -C "$W" .
  ;;
b)
  W=/tmp/r8b; rm -rf "$W"; mkdir -p "$W"
  OUT="$W" ONLY=tests/gate/test_adversarial.py timeout "${ADV_TIMEOUT:-280}" bash bench/gpu_suite.sh \
    > "$W/adversarial.stdout" 2>&1
  echo "[r8b] adversarial rc=$? in $(( $(date +%s) - t0 )) s" | tee "$OUT/summary.txt"
  grep -E "^=+ .*(passed|failed|error)|^FAILED|^ERROR" "$W/gpu-tests.log" | tail -20 | tee -a "$OUT/summary.txt"
  mkdir -p "$W/gate2"
  OUT="$W/gate2" BUDGET=${BUDGET:-170} bash bench/evidence/h200-2026-12-03-s9/stage-b/device_gate2.sh > "$W/gate2.stdout" 2>&1
  echo "[r8b] gate2 rc=$? at $(( $(date +%s) - t0 )) s" | tee -a "$OUT/summary.txt"
  grep "device_gate2\]" "$W/gate2/device_gate2.log" | tee -a "$OUT/summary.txt"
  cp "$W/gate2/vs_kernel_tuner.json" "$W/gate2/gate_cost.md" "$W/gate2/quick_vs_full.md" "$OUT/" 2>/dev/null
  tar czf "$OUT/round8-b.tgz" -C "$W" .
  ;;
esac
echo "[r8] stage ${STAGE:-a} done in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/summary.txt"
