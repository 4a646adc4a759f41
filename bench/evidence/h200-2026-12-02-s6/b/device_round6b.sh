#!/usr/bin/env bash
# Round 6, second device call (about 6-7 minutes): the expert patterns and templates
# (bench/evidence/h200-2026-12-02-s6/b/device_expert.sh), then the GPU tests of patterns and profiles. Packed into
# $OUT/round6b.tgz; the logs' key lines in $OUT/summary.txt.
set -u
OUT=${OUT:-gpu-out}
W=/tmp/r6b; rm -rf "$W"; mkdir -p "$W/expert"
t0=$(date +%s)
OUT="$W/expert" bash bench/evidence/h200-2026-12-02-s6/b/device_expert.sh > "$W/device_expert.stdout" 2>&1
echo "[r6b] expert stage rc=$? $(( $(date +%s) - t0 )) s" >> "$W/summary.txt"
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
timeout ${TESTS_TIMEOUT:-100} python3 -m pytest -m gpu -q -rs -p no:cacheprovider -n 3 \
  tests/patterns/test_patterns.py tests/gate/test_profiler.py > "$W/tests.log" 2>&1
echo "[r6b] tests rc=$? $(tail -1 "$W/tests.log") at $(( $(date +%s) - t0 )) s" >> "$W/summary.txt"
grep -E "^\[|passed=|best|cublas|% bw|FAIL" "$W/expert/expert.log" | head -120 >> "$W/summary.txt"
tar czf "$OUT/round6b.tgz" -C "$W" .
cp "$W/summary.txt" "$OUT/summary.txt"
