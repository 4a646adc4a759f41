#!/usr/bin/env bash
# One device call (about 4 minutes of GPU): the gate's verdict on EVERY valid setting of every
# template of every bundled task, brute force through the real gate (one worker), for the offline
# search benchmark.  Estimate before running: `python bench/search_record.py --list` prints the
# settings per template; the recorded gate cost is 0.12-0.30 s per candidate on the H200
# (bench/RESULTS.md, gate_per_task), plus a few seconds per task to start its worker, so the
# 440 settings of this release take about 2-3 minutes; --time-limit (default 220 s) stops gating
# new settings and keeps what was recorded (the JSON says "complete": false).  QUICK=1 uses --quick.
# Back on the CPU machine:  python bench/search_sim.py --recording OUT/search-recording.json.gz
set -u
. bench/device_env.sh
t0=$(date +%s)
python3 bench/search_record.py --list > "$OUT/search-record.log" 2>&1
timeout $(( ${LIMIT:-220} + 60 )) python3 bench/search_record.py --out "$OUT" --time-limit "${LIMIT:-220}" \
    ${QUICK:+--quick} ${TASKS:+--tasks "$TASKS"} >> "$OUT/search-record.log" 2>&1
echo "search_record rc=$? in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/search-record.log"
tail -12 "$OUT/search-record.log"
ls -la "$OUT"
