#!/usr/bin/env bash
# Issue 17, h-expert: the expert patterns and the new templates on the H200 (one GPU, about 4-5 minutes: every stage is time-limited).
#   1. every pattern through the strict gate with holdout (kforge eval), beside its task's initial
#      kernel and vendor baseline                                        -> evals.json
#   2. brute force of the warp-tiled SGEMM's settings on 4096^3 and on the small cases, with
#      cuBLAS and the regblock template's settings timed in the same gate -> sweep-matmul_f32.json
#   3. brute force of the row patterns on layernorm / softmax_rows       -> sweep-layernorm.json,
#      sweep-softmax_rows.json (% of the measured copy bandwidth per case)
#   4. the built-in tuner on layernorm and softmax_rows (kforge optimize, 25 s each): % of copy
#      bandwidth of the largest case                                     -> tune.json, runs.tgz
#   5. ncu on matmul kernels: which pipe metrics this ncu has, the diagnosis they give
#                                                                        -> ncu-metrics.json
# Everything printed goes to expert.log.  At most 8 files come back.  Needs the wheels of
# bench/fetch_device_wheels.sh in .whl/ (carry it) for jsonschema & co; nvdisasm is optional.
set -u
OUT=${OUT:-gpu-out}
W=$(mktemp -d)
mkdir -p "$OUT"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 9
fi
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
LOG=$OUT/expert.log
t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$LOG"; }

say "== 1. patterns through the strict gate with holdout"
mkdir -p "$W/eval"
python3 - > "$W/patterns.txt" <<'PY'
import json
for k in json.load(open("kernel_forge/kernels/index.json"))["kernels"]:
    if k["role"] == "pattern":
        print(k["name"].split("/")[1], k["task"], k["name"] + ".cu")
PY
while read -r name task file; do
  timeout 90 python3 -m kernel_forge eval "manifests/$task.json" "kernel_forge/kernels/$file" \
    --json "$W/eval/$name.json" >> "$LOG" 2>&1
  say "eval $name on $task: rc=$?"
done < "$W/patterns.txt"
python3 - "$W/eval" "$OUT/evals.json" <<'PY' | tee -a "$LOG"
import json, sys, pathlib
out = {}
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    r = json.loads(f.read_text())                      # kforge eval --json (report.eval_json)
    out[f.stem] = {k: r.get(k) for k in ("task", "candidate", "passed", "reason", "message", "score", "cases")}
    parts = []
    for c in r.get("cases", []):
        t = (c.get("timing") or {}).get("median")
        if t:
            bw = f", {c['pct_peak_bw']:.0f}% bw" if c.get("pct_peak_bw") is not None else ""
            vs = "".join(f", x{v:.2f} {k}" for k, v in (c.get("speedup_vs_baselines") or {}).items() if v)
            parts.append(f"{c['name']} {t:.2f} us{bw}{vs}")
        elif not c.get("passed", True):
            parts.append(f"{c['name']} FAILED {c.get('reason')}")
    print(f"{f.stem}: passed={r.get('passed')} {r.get('reason')}; " + "; ".join(parts))
pathlib.Path(sys.argv[2]).write_text(json.dumps(out, indent=1))
PY

say "== 2. SGEMM settings on matmul_f32"
timeout 130 python3 bench/pattern_sweep.py --out "$OUT" --task matmul_f32 --pattern gemm_simt_warptile \
  --case "large:BM * BN >= 8192 and TM * TN >= 32" --weight large=2 \
  --case "sq256:BM * BN <= 8192 and (BM // WM) * (BN // WN) <= 8" \
  --case "rect:BM * BN <= 8192 and (BM // WM) * (BN // WN) <= 8" \
  --compare "kernel_forge/kernels/gemm/matmul_f32_regblock.cu:BM=128,BN=128,BK=16,TM=8,TN=8,MINB=1" \
  --compare "kernel_forge/kernels/gemm/matmul_f32_regblock.cu:BM=32,BN=64,BK=32,TM=4,TN=4,MINB=1" \
  --time-limit 70 2>&1 | grep -v "^\[kforge\]" >> "$LOG"
say "sweep matmul rc=$?"

say "== 3. row patterns"
timeout 60 python3 bench/pattern_sweep.py --out "$OUT" --task layernorm --pattern rownorm_layernorm \
  --case "r4k_c8k:128 * WPR * ITEMS >= cols" --case "r16k_c1k:128 * WPR * ITEMS >= cols" \
  --time-limit 20 2>&1 | grep -v "^\[kforge\]" >> "$LOG"
say "sweep layernorm rc=$?"
timeout 60 python3 bench/pattern_sweep.py --out "$OUT" --task softmax_rows --pattern rowsoftmax_online \
  --case "sq4096:128 * WPR * ITEMS >= cols" --case "r16k_c1k:128 * WPR * ITEMS >= cols" \
  --time-limit 20 2>&1 | grep -v "^\[kforge\]" >> "$LOG"
say "sweep softmax rc=$?"

say "== 4. the tuner on layernorm and softmax_rows"
for t in layernorm softmax_rows; do
  timeout 60 python3 -m kernel_forge optimize "manifests/$t.json" --time-limit 25 --archive off \
    --runs-dir "$W/runs/$t" >> "$LOG" 2>&1
  say "optimize $t rc=$?"
done
python3 - "$W/runs" "$OUT/tune.json" <<'PY' | tee -a "$LOG"
import json, sys, pathlib
out = {}
for s in sorted(pathlib.Path(sys.argv[1]).glob("*/run-*/summary.json")):
    sm = json.loads(s.read_text())
    d = sm.get("diagnosis") or {}
    cases = {c["name"]: {"median_us": c["median_us"], "pct_bandwidth": c.get("pct_bandwidth"),
                         "vs_baselines": c.get("vs_baselines"), "vs_initial": c.get("vs_initial")} for c in d.get("cases", [])}
    best = sm.get("best") or {}
    task = s.parent.parent.name
    out[task] = {"stop_reason": sm.get("stop_reason"), "best": {k: best.get(k) for k in ("id", "label", "defines", "score_us")},
                 "cases": cases}
    for n, c in cases.items():
        print(f"tuner {task} {n}: {c['median_us']:.2f} us, {c['pct_bandwidth'] or 0:.1f}% of copy bandwidth, "
              f"x{(list((c['vs_baselines'] or {}).values()) or [0])[0]:.2f} vendor, best {best.get('label')} {best.get('defines')}")
pathlib.Path(sys.argv[2]).write_text(json.dumps(out, indent=1))
PY
tar czf "$OUT/runs.tgz" -C "$W" runs 2>/dev/null

say "== 5. ncu: pipe metrics on this GPU and the diagnosis they give"
timeout 150 python3 bench/evidence/h200-2026-12-02-s6/b/expert_ncu.py --out "$OUT" 2>&1 | grep -v "^\[kforge\]" >> "$LOG"
say "ncu rc=$?"
say "done in $(( $(date +%s) - t0 )) s"
rm -rf "$W"
ls -la "$OUT"
