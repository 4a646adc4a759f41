#!/usr/bin/env bash
# Issue 19, second pass, on the H200: one device call of at most 4 minutes (BUDGET=230 s of stages;
# kind nvidia-h200; carry .whl, made by bench/fetch_device_wheels.sh, for cupti-python and
# jsonschema). Results in $OUT, 8 files:
#
#   device_gate2.log     every stage: what ran, return code, seconds, its last lines
#   clock_offset.json    the launch offset a fresh worker measures (R after the gate's flush, N, the
#                        samples), beside the 0.86 us measured against ncu and the older rules' values
#   placement.json       the histogram kernels timed with their bins at many offsets within a 2 MiB page
#                        and at offset 0 of many pages: does placement decide their time, and which bits?
#   attacks.log          the one-kernel flush (GPU test), the memory-scan attacks (expected verdicts;
#                        judged beside their twins after another kernel under the full gate and --quick;
#                        with masking off, KFORGE_TEST_NO_MASK=1, they must win), and the L2-priority
#                        attacks beside their twins under the flush (the new flush must still defeat them)
#   vs_kernel_tuner.json the gate's cost per candidate (kforge side of bench/vs_kernel_tuner.py)
#   gate_cost.md         where the gate's time goes, per part, compiling ahead: full and --quick with
#                        the one-kernel flush, and the full gate with KFORGE_FLUSH=split (two kernels)
#   quick_vs_full.md     --quick against the full gate, every bundled initial kernel and template
#   extras.tgz           quick_vs_full.json, gate-cost*.json
#
# Expected stage times (H200): offset 15 s, flush + placement 15 s, memory-scan attacks 35 s, L2
# twins 35 s, vs_kernel_tuner 20 s, gate_cost 25 s, quick_vs_full what is left (~80 s for ROUNDS=2;
# it writes its table after each task, so a timeout leaves the tasks done): about 3.8 minutes.
#
#   OUT=/tmp/out bash bench/evidence/h200-2026-12-03-s9/stage-b/device_gate2.sh
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
LOG="$OUT/device_gate2.log"
WORK=$(mktemp -d)
PY=${PY:-python3}
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export KFORGE_CACHE_DIR=${KFORGE_CACHE_DIR:-/tmp/kforge-cache}
BUDGET=${BUDGET:-230}
t0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - t0) )); }
note() { echo "[device_gate2] $(( $(date +%s) - t0 )) s: $*" | tee -a "$LOG"; }
stage_tail() { tail -n "${2:-3}" "$1" 2>/dev/null | sed 's/^/    /' >> "$LOG"; }
PYTEST=("$PY" -m pytest -m gpu -q -rs -p no:cacheprovider -o console_output_style=classic)

note "start: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader 2>/dev/null)"

# 1. the launch offset, measured by a fresh worker (its own empty cache), beside the table's figure
timeout 90 "$PY" bench/evidence/h200-2026-12-03-s9/stage-b/clock_offset_probe.py --out "$OUT/clock_offset.json" > "$WORK/offset.out" 2>&1
note "clock offset rc=$?: $(tr -d '\n ' < "$OUT/clock_offset.json" 2>/dev/null | grep -o '"offset_us":[0-9.]*,"source":"[a-z]*"' | head -1)"
stage_tail "$WORK/offset.out" 4

# 2. the one-kernel flush on this GPU, and whether the histogram's time depends on where its bins lie
timeout 60 "${PYTEST[@]}" -s tests/gpu/test_flush.py > "$OUT/attacks.log" 2>&1
note "flush GPU test rc=$?: $(tail -1 "$OUT/attacks.log")"
timeout 60 "$PY" bench/evidence/h200-2026-12-03-s9/stage-b/placement_probe.py --out "$OUT/placement.json" > "$WORK/placement.out" 2>&1
note "placement rc=$?"
stage_tail "$WORK/placement.out" 3

# 3. the memory-scan attacks (masked: no gain; masking off: they win) and the L2-priority twins under the flush
echo "=== memory-scan attacks ===" >> "$OUT/attacks.log"
timeout $(( $(left) * 40 / 100 )) "${PYTEST[@]}" -s tests/gate/test_adversarial.py \
  -k "memory_scan or memscan_task or (expected_reason and memscan)" >> "$OUT/attacks.log" 2>&1
note "memory-scan attacks rc=$?: $(tail -1 "$OUT/attacks.log")"
echo "=== L2-priority attacks beside their twins, flushed ===" >> "$OUT/attacks.log"
timeout $(( $(left) * 35 / 100 )) "${PYTEST[@]}" -s tests/gate/test_adversarial.py \
  -k "honest_twin and l2_ and not no_flush and not under_quick" >> "$OUT/attacks.log" 2>&1
note "L2 twins rc=$?: $(tail -1 "$OUT/attacks.log")"

# 4. the gate's cost per candidate (the kforge side of issue 10's benchmark)
timeout 60 "$PY" bench/vs_kernel_tuner.py --only kforge --out "$OUT/vs_kernel_tuner.json" > "$WORK/vskt.out" 2>&1
note "vs_kernel_tuner (kforge only) rc=$?"
stage_tail "$WORK/vskt.out" 8

# 5. where the time goes: the one-kernel flush, then the two-kernel one (full gate)
timeout 40 "$PY" bench/gate_cost.py --gating precompile --out "$WORK" > "$WORK/cost.out" 2>&1
note "gate_cost rc=$?"
timeout 30 env KFORGE_FLUSH=split "$PY" bench/gate_cost.py --modes full --gating precompile --tag split \
  --out "$WORK" > "$WORK/cost-split.out" 2>&1
note "gate_cost (KFORGE_FLUSH=split) rc=$?"
cat "$WORK"/gate-cost.md "$WORK"/gate-cost-split.md > "$OUT/gate_cost.md" 2>/dev/null

# 6. --quick vs the full gate on every bundled initial kernel and template (what time is left)
timeout $(( $(left) > 30 ? $(left) : 30 )) "$PY" bench/quick_vs_full.py --out "$WORK" --rounds "${ROUNDS:-2}" \
  > "$WORK/qvf.out" 2>&1
note "quick vs full rc=$?: $(tail -1 "$WORK/quick_vs_full.md" 2>/dev/null)"
cp "$WORK/quick_vs_full.md" "$OUT/" 2>/dev/null
stage_tail "$WORK/qvf.out" 2
tar -czf "$OUT/extras.tgz" -C "$WORK" $(cd "$WORK" && ls quick_vs_full.json gate-cost*.json *.out 2>/dev/null) 2>/dev/null
note "done"
ls -la "$OUT"
