#!/usr/bin/env bash
# Round 6, first device call (about 7 minutes): issue 19's gate measurements (bench/evidence/h200-2026-12-02-s6/a/device_gate.sh),
# then the GPU tests of dispatch rules and the harness basics. Everything is packed into
# $OUT/round6a.tgz; the logs' last lines go to $OUT/summary.txt.
set -u
OUT=${OUT:-gpu-out}
W=/tmp/r6a; rm -rf "$W"; mkdir -p "$W/gate"
t0=$(date +%s)
OUT="$W/gate" BUDGET=${BUDGET:-290} bash bench/evidence/h200-2026-12-02-s6/a/device_gate.sh > "$W/device_gate.stdout" 2>&1
echo "[r6a] gate stage $(( $(date +%s) - t0 )) s" >> "$W/summary.txt"
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
timeout ${TESTS_TIMEOUT:-150} python3 -m pytest -m gpu -q -rs -p no:cacheprovider -n 3 \
  tests/gate/test_gate_dispatch_gpu.py tests/gpu/test_runner_gpu.py tests/gpu/test_module_state.py > "$W/tests.log" 2>&1
echo "[r6a] tests rc=$? $(tail -1 "$W/tests.log") at $(( $(date +%s) - t0 )) s" >> "$W/summary.txt"
{ cat "$W/gate/device_gate.log"; echo; cat "$W/gate/clock_offset.json"; echo; cat "$W/gate/quick_vs_full.md" 2>/dev/null; } >> "$W/summary.txt"
tar czf "$OUT/round6a.tgz" -C "$W" .
cp "$W/summary.txt" "$OUT/summary.txt"
