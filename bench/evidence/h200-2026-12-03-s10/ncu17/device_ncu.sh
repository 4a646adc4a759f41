#!/usr/bin/env bash
# kforge's kernel clock against Nsight Compute on every bundled performance case, then the
# diagnosis of the cases that miss (one device call, about 5 minutes):
#   ncu/          bench/ncu_compare.py on every task (the table)
#   ncu-clock/    ${DIAG_TASKS} again with ncu's SM and DRAM clock recorded per launch
#   ncu-nocache/  ${DIAG_TASKS} again with ncu's --cache-control none
# Logs and tables under $OUT, the tally in $OUT/summary.txt.
set -u
. bench/device_env.sh
t0=$(date +%s)
DIAG_TASKS=${DIAG_TASKS:-layernorm,softmax_rows,reduce_sum}
run() {  # name, timeout, args...
  local name=$1 limit=$2; shift 2
  timeout "$limit" python3 bench/ncu_compare.py --out "$OUT/$name" "$@" > "$OUT/$name.log" 2>&1
  echo "[ncu] $name rc=$? at $(( $(date +%s) - t0 )) s" | tee -a "$OUT/summary.txt"
  cat "$OUT/$name"/ncu_compare.md 2>/dev/null | tee -a "$OUT/summary.txt"
}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,driver_version --format=csv | tee "$OUT/summary.txt"
run ncu "${NCU_TIMEOUT:-300}"
run ncu-clock "${DIAG_TIMEOUT:-120}" --tasks "$DIAG_TASKS" --clock
run ncu-nocache "${DIAG_TIMEOUT:-120}" --tasks "$DIAG_TASKS" --ncu-cache-control none --clock
echo "[ncu] done in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/summary.txt"
