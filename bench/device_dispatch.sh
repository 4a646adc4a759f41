#!/usr/bin/env bash
# Settings per shape (issue 17 item 5) on the lent H200, one device call of about 2 minutes:
#   1. the GPU tests of dispatch rules (tests/gate/test_gate_dispatch_gpu.py, ~25 s);
#   2. bench/dispatch_sidebyside.py: the regblock template's small-tile setting, its large-tile
#      setting and the rule over both, re-timed side by side with cuBLAS (~30 s);
#   3. `kforge optimize manifests/matmul_f32.json` with the built-in tuner (time-limited to 60 s):
#      the tuner gates the template's settings, fits a rule and gates it; then `kforge replay` of
#      best-case-large.json, `kforge approve` and `kforge gate` of the result (~40 s).
# Everything goes to $OUT/d/ and comes back as $OUT/dispatch.tgz plus $OUT/dispatch-summary.txt.
set -u
OUT=${OUT:-gpu-out}; D=$OUT/d; mkdir -p "$D"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 9
fi
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
t0=$(date +%s)
S=$OUT/dispatch-summary.txt
: > "$S"
step() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$S"; }

timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider -rs tests/gate/test_gate_dispatch_gpu.py > "$D/gpu-tests.log" 2>&1
step "gpu tests rc=$?: $(tail -1 "$D/gpu-tests.log")"

timeout 120 python3 bench/dispatch_sidebyside.py --out "$D" > "$D/sidebyside.log" 2>&1
step "side by side rc=$?"
cat "$D/dispatch.md" >> "$S" 2>/dev/null

timeout 100 python3 -m kernel_forge optimize manifests/matmul_f32.json --time-limit 60 --runs-dir "$D/opt" \
    --archive off --no-profile > "$D/optimize.log" 2>&1
step "optimize rc=$?"
RUN=$(ls -d "$D"/opt/run-* 2>/dev/null | tail -1)
if [ -n "$RUN" ]; then
  grep -E "dispatch|new best|stopped" "$D/optimize.log" | tail -8 >> "$S"
  python3 - "$RUN" >> "$S" 2>&1 <<'EOF'
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
b = s.get("best") or {}
print("best", b.get("id"), b.get("label"), "score", b.get("score_us"), "holdout", b.get("holdout"))
print("dispatch", b.get("dispatch"))
for r in b.get("per_case", []):
    print(" ", r["case"], r["median_us"], "x cublas", (r.get("speedup_vs_baselines") or {}).get("cublas"),
          "line", (r.get("variant") or {}).get("branch"))
EOF
  timeout 60 python3 -m kernel_forge replay "$RUN/best-case-large.json" --json "$D/replay-large.json" > "$D/replay.log" 2>&1
  step "replay large rc=$?: $(grep -E 'claim|variant' "$D/replay.log" | tr '\n' ' ')"
  timeout 20 python3 -m kernel_forge approve "$RUN" --into "$D/approved.json" --copy-to "$D/approved" > "$D/approve.log" 2>&1
  step "approve rc=$?: $(tr '\n' ' ' < "$D/approve.log")"
  timeout 90 python3 -m kernel_forge gate "$D/approved.json" --junit "$D/gate.xml" > "$D/gate.log" 2>&1
  step "gate rc=$?: $(grep -E 'PASS|FAIL' "$D/gate.log" | tr '\n' ' ')"
fi
step "done"
find "$D" -name "*.cubin" -delete
tar czf "$OUT/dispatch.tgz" -C "$OUT" d && rm -rf "$D"
ls -la "$OUT"
