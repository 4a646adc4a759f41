#!/usr/bin/env bash
# Issue 21 on the lent H200, one device call (about 2 minutes of GPU time, 5 minutes at most):
# tests/app/test_describe_gpu.py -- the generated relu_like task's CUDA witness through the real gate
# (the two witnesses agree; the planted off-by-one reference is caught with both values shown), and
# the task without an initial kernel optimised through the replay proposer (the first passing
# translation becomes the baseline, the report says so, `kforge replay` of the best holds).
# Comes back in $OUT (5 files): the test log, the run's report.md, summary.json and heatmap.png,
# and describe.tgz with every test folder (run evidence, generated task, exchange).
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
if ls .whl/*.whl > /dev/null 2>&1; then          # the pinned wheels the image lacks (bench/fetch_device_wheels.sh)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 9
fi
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout -s INT -k 20 300 python3 -m pytest -m gpu -q -p no:cacheprovider -rs -s tests/app/test_describe_gpu.py \
  --basetemp "$OUT/tmp" > "$OUT/describe-tests.log" 2>&1
echo "describe gpu tests rc=$? in $(( $(date +%s) - t0 )) s"
tail -5 "$OUT/describe-tests.log"
run=$(ls -d "$OUT"/tmp/test_a_task_without_an_initi*/runs/run-001 2> /dev/null | head -1)
if [ -n "$run" ]; then
  cp "$run/report.md" "$run/summary.json" "$OUT/" 2> /dev/null
  cp "$run/heatmap.png" "$OUT/" 2> /dev/null
fi
find "$OUT/tmp" -name "*.cubin" -delete 2> /dev/null
tar czf "$OUT/describe.tgz" -C "$OUT" tmp 2> /dev/null && rm -rf "$OUT/tmp"
ls -la "$OUT"
