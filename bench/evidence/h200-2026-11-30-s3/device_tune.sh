#!/usr/bin/env bash
# One device call: the built-in tuner on every bundled task (each time-limited), the tasks split
# across the GPUs present. Everything is tarred into $OUT/tune-runs.tgz (the device returns few
# files) and one line per task goes to $OUT/tune-summary.txt.
set -u
OUT=${OUT:-gpu-out}
W=$(mktemp -d)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:/tmp/site
if [ -d .whl ] && [ ! -d /tmp/site ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
LIMIT=${TUNE_LIMIT:-60}   # --time-limit per task; the script kills a run at LIMIT + TUNE_SLACK
# GPU_IDS: which GPUs to use (default: every GPU present).
N=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${N:-0}" -ge 1 ] 2>/dev/null || N=1
GPU_IDS=(${GPU_IDS:-$(seq 0 $(( N - 1 )))})
GPUS=${#GPU_IDS[@]}
TASKS=(${TASKS:-matmul_f32 layernorm softmax_rows transpose vector_add reduce_sum histogram gelu_bf16})

tune() {  # tune GPU TASK...
  local g=$1; shift
  for t in "$@"; do
    local s=$(date +%s)
    CUDA_VISIBLE_DEVICES=$g timeout $(( LIMIT + ${TUNE_SLACK:-90} )) python3 -m kernel_forge optimize manifests/$t.json \
        --time-limit "$LIMIT" --tune-budget "${TUNE_BUDGET:-8}" --warmup 3 --reps 30 \
        --runs-dir "$W/runs-$t" > "$W/tune-$t.log" 2>&1
    echo "$t rc=$? in $(( $(date +%s) - s )) s on GPU $g" >> "$W/summary-$t.txt"
    grep -E "new best|stopped|error" "$W/tune-$t.log" | tail -6 >> "$W/summary-$t.txt"
  done
}
pids=()
for ((g = 0; g < GPUS; g++)); do
  mine=()
  for ((i = g; i < ${#TASKS[@]}; i += GPUS)); do mine+=("${TASKS[i]}"); done
  tune "${GPU_IDS[g]}" "${mine[@]}" &
  pids+=($!)
done
wait "${pids[@]}"
for t in "${TASKS[@]}"; do cat "$W/summary-$t.txt" 2>/dev/null; done | tee "$OUT/tune-summary.txt"
tar czf "$OUT/tune-runs.tgz" -C "$W" .
