#!/usr/bin/env bash
# Round 5 (issue 10's remaining targets) on the lent H200, in stages that each fit one device call
# (STAGE=probe|kinds|suite|final).  Everything goes to $OUT/r/ and comes back as one tarball ($OUT/r.tgz).
set -u
OUT=${OUT:-gpu-out}; R=$OUT/r; mkdir -p "$R"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 9
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
t0=$(date +%s)
stage_probe() {
  timeout 150 python3 bench/evidence/h200-2026-12-01-s5/probe/probe_round5.py --out "$R/probe" --sections cost,clock > "$R/probe.log" 2>&1; echo "probe rc=$?"
  PROBE_NO_CUPTI=1 timeout 60 python3 bench/evidence/h200-2026-12-01-s5/probe/probe_round5.py --out "$R/probe-nocupti" --sections cost > "$R/probe-nocupti.log" 2>&1; echo "probe no cupti rc=$?"
  timeout 150 python3 bench/evidence/h200-2026-12-01-s5/probe/probe_round5.py --out "$R/probe-ncu" --sections ncu > "$R/probe-ncu.log" 2>&1; echo "probe ncu rc=$?"
  timeout 60 python3 bench/gate_cost.py --out "$R/cost" > "$R/gate_cost.log" 2>&1; echo "cost rc=$?"
  timeout 120 python3 bench/vs_kernel_tuner.py --out "$R/vs_kernel_tuner.json" > "$R/vs_kt.log" 2>&1; echo "vs_kt rc=$?"
  timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider -rs tests/gpu/test_timing_gpu.py tests/gate/test_adversarial.py -k "test_gpu_timing or l2 or evict or prefetch or cp_async" > "$R/flush-tests.log" 2>&1; echo "flush tests rc=$?"
}
stage_suite() {
  OUT=$R bash bench/gpu_suite.sh -q > /dev/null 2>&1; echo "suite rc=$?"
  tail -5 "$R/gpu-tests.log"
}
stage_final() {     # what the final call of the session ran (the probe call had gate_cost.py)
  timeout 90 python3 bench/vs_kernel_tuner.py --out "$R/vs_kernel_tuner.json" > "$R/vs_kt.log" 2>&1; echo "vs_kt rc=$?"
  timeout 170 python3 bench/ncu_compare.py --out "$R" > "$R/ncu_compare.log" 2>&1; echo "ncu rc=$?"
  timeout 70 python3 -m kernel_forge optimize manifests/matmul_f32.json --time-limit 60 --runs-dir "$R/opt" --archive off > "$R/optimize.log" 2>&1; echo "optimize rc=$?"
  timeout 70 python3 bench/score_cv.py --out "$R" > "$R/score_cv.log" 2>&1; echo "cv rc=$?"
  timeout 60 python3 bench/evidence/h200-2026-12-01-s5/gate_per_task.py --out "$R" --label after --per-template 1 > "$R/per_task_after.log" 2>&1; echo "per task rc=$?"
}
stage_kinds() {     # the record-kind and launch-offset probes (probe/FINDINGS.md sections 1-2)
  for k in KERNEL CONCURRENT_KERNEL; do
    PROBE_KIND=$k timeout 100 python3 bench/evidence/h200-2026-12-01-s5/probe/probe_round5.py --out "$R/kind-$k" --sections kind,offset > "$R/kind-$k.log" 2>&1; echo "$k rc=$?"
  done
  PROBE_NCU_SPIN=1 timeout 150 python3 bench/evidence/h200-2026-12-01-s5/probe/probe_round5.py --out "$R/ncu-spin" --sections ncu > "$R/ncu-spin.log" 2>&1; echo "ncu spin rc=$?"
}
"stage_${STAGE:-probe}"
echo "stage ${STAGE:-probe} done in $(( $(date +%s) - t0 )) s"
find "$R" -name "*.cubin" -delete
tar czf "$OUT/r.tgz" -C "$OUT" r && rm -rf "$R"
ls -la "$OUT"
