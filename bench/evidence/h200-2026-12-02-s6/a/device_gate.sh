#!/usr/bin/env bash
# Issue 19 on the H200: one device call of about 5 minutes (BUDGET=290 s; kind nvidia-h200; carry .whl, made by
# bench/fetch_device_wheels.sh, for cupti-python and jsonschema). Results in $OUT, 8 files at most:
#
#   clock_offset.json   the launch offset the worker measured (spin kernels, a fresh cache), beside the
#                       0.86 us H200 figure it is cross-checked against
#   honest.jsonl        the honest corpus: every kernel through the strict gate with holdout, after the
#                       task's initial kernel on the same gate; pass/fail, score and per-case medians
#   honest.log          its pytest output
#   attacks.log         the memory-scan attacks: expected verdicts, judged beside their twins after
#                       another kernel on one worker, under the full gate and --quick, and the proof
#                       run with masking off (KFORGE_TEST_NO_MASK=1)
#   quick_vs_full.md    --quick against the full gate, every bundled initial kernel and template
#   quick_vs_full.json
#   vs_kernel_tuner.json  the gate's cost per candidate (kforge side of bench/vs_kernel_tuner.py)
#   device_gate.log     what ran, return codes, seconds
#
# quick_vs_full gets what is left of BUDGET (ROUNDS=1 halves it); a stage that runs out of time
# leaves its partial output and the next stage still runs.
#
#   OUT=/tmp/out bash bench/evidence/h200-2026-12-02-s6/a/device_gate.sh
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
LOG="$OUT/device_gate.log"
PY=${PY:-python3}
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export KFORGE_CACHE_DIR=${KFORGE_CACHE_DIR:-/tmp/kforge-cache}
BUDGET=${BUDGET:-290}
t0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - t0) )); }
note() { echo "[device_gate] $(( $(date +%s) - t0 )) s: $*" | tee -a "$LOG"; }
PYTEST=("$PY" -m pytest -m gpu -q -rs -p no:cacheprovider -o console_output_style=classic)

note "start: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"

# 1. the measured launch offset: a fresh cache, so the worker measures it (a script file; its first
#    version ran from a heredoc and its worker died looking for <stdin>, bench/evidence/h200-2026-12-02-s6)
timeout 60 "$PY" bench/evidence/h200-2026-12-03-s9/stage-b/clock_offset_probe.py --out "$OUT/clock_offset.json" > /dev/null 2>>"$LOG"
note "clock offset rc=$?: $(tr -d '\n ' < "$OUT/clock_offset.json" | cut -c1-200)"

# 2. the honest corpus (compiled in parallel first by the test module)
KFORGE_HONEST_OUT="$OUT/honest.jsonl" timeout $(( $(left) * 50 / 100 )) "${PYTEST[@]}" tests/gate/test_honest.py \
  > "$OUT/honest.log" 2>&1
note "honest corpus rc=$?: $(tail -1 "$OUT/honest.log")"

# 3. the memory-scan attacks: verdicts, twins after another kernel (full, --quick), masking off
timeout $(( $(left) * 50 / 100 )) "${PYTEST[@]}" tests/gate/test_adversarial.py \
  -k "memory_scan or (expected_reason and memscan)" -s > "$OUT/attacks.log" 2>&1
note "attacks rc=$?: $(tail -1 "$OUT/attacks.log")"

# 4. the gate's cost per candidate (the kforge side of issue 10's benchmark)
timeout 60 "$PY" bench/vs_kernel_tuner.py --only kforge --out "$OUT/vs_kernel_tuner.json" >> "$LOG" 2>&1
note "vs_kernel_tuner (kforge only) rc=$?"

# 5. --quick vs the full gate on every bundled initial kernel and template (what time is left)
timeout $(( $(left) > 30 ? $(left) : 30 )) "$PY" bench/quick_vs_full.py --out "$OUT" --rounds "${ROUNDS:-2}" \
  > /dev/null 2>>"$LOG"
note "quick vs full rc=$?: $(tail -1 "$OUT/quick_vs_full.md" 2>/dev/null)"
note "done"
ls -la "$OUT"
