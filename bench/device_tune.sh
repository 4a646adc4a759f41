#!/usr/bin/env bash
# One device call: the built-in tuner on every bundled task (time-limited). Everything is tarred
# into $OUT/tune-runs.tgz (the device returns few files) and a summary printed to $OUT/tune-summary.txt.
set -u
OUT=${OUT:-gpu-out}
W=$(mktemp -d)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:/tmp/site
if [ -d .whl ] && [ ! -d /tmp/site ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
LIMIT=${TUNE_LIMIT:-20}
for t in ${TASKS:-vector_add matmul_f32 softmax_rows reduce_sum layernorm transpose histogram gelu_bf16}; do
  s=$(date +%s)
  timeout $(( LIMIT + 60 )) python3 -m kernel_forge optimize manifests/$t.json --time-limit $LIMIT \
      --tune-budget ${TUNE_BUDGET:-8} --warmup 3 --reps 30 --runs-dir "$W/runs-$t" \
      > "$W/tune-$t.log" 2>&1
  rc=$?
  echo "$t rc=$rc in $(( $(date +%s) - s )) s" | tee -a "$OUT/tune-summary.txt"
  grep -E "new best|stopped|error" "$W/tune-$t.log" | tail -6 | tee -a "$OUT/tune-summary.txt"
done
tar czf "$OUT/tune-runs.tgz" -C "$W" .
