#!/usr/bin/env bash
# This round's measurements on the lent H200, in stages that each fit one device call (STAGE=a|b).
# Everything goes to $OUT/r/ and comes back as one tarball ($OUT/r.tgz) plus the log.
set -u
OUT=${OUT:-gpu-out}; R=$OUT/r; mkdir -p "$R"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 9
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
t0=$(date +%s)
stage_a() {
  timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider -rs tests/gate/test_adversarial.py -k "twin and (memo_flag or multislot or sampled_vector_add or cp_async)" > "$R/twins.log" 2>&1; echo "twins rc=$?"
  timeout 150 python3 bench/vs_kernel_tuner.py --out "$R/vs_kernel_tuner.json" > "$R/vs_kt.log" 2>&1; echo "vs_kt rc=$?"
  KFORGE_PACKAGE_ROOT=$PWD/.prev timeout 90 python3 bench/vs_kernel_tuner.py --only kforge --out "$R/vs_kernel_tuner-before.json" > "$R/vs_kt_before.log" 2>&1; echo "vs_kt before rc=$?"
  timeout 240 python3 bench/ncu_compare.py --out "$R" > "$R/ncu_compare.log" 2>&1; echo "ncu rc=$?"
}
stage_b() {
  timeout 45 python3 bench/gate_cost.py --out "$R/cost" > "$R/gate_cost.log" 2>&1; echo "cost rc=$?"
  timeout 140 python3 bench/evidence/h200-2026-12-01-s5/gate_per_task.py --out "$R" --label before --package-root .prev --per-template 1 > "$R/per_task_before.log" 2>&1; echo "before rc=$?"
  timeout 90 python3 bench/evidence/h200-2026-12-01-s5/gate_per_task.py --out "$R" --label after --per-template 1 > "$R/per_task_after.log" 2>&1; echo "after rc=$?"
  timeout 90 python3 -m kernel_forge optimize manifests/matmul_f32.json --time-limit 60 --devices all --runs-dir "$R/opt" --archive off > "$R/optimize.log" 2>&1; echo "optimize rc=$?"
  for i in 1 2; do timeout 45 python3 -m kernel_forge optimize manifests/softmax_rows.json --time-limit 20 --runs-dir "$R/arch$i" --archive "$R/archive.sqlite" > "$R/archive$i.log" 2>&1; echo "archive run $i rc=$?"; done
  KFORGE_EVIDENCE_OUT=$R/prompt timeout 75 python3 -m pytest -q -s -p no:cacheprovider tests/search/test_prompts_gpu.py > "$R/prompt.log" 2>&1; echo "prompt rc=$?"
}
"stage_${STAGE:-a}"
echo "stage ${STAGE:-a} done in $(( $(date +%s) - t0 )) s"
find "$R" -name "*.cubin" -delete
tar czf "$OUT/r.tgz" -C "$OUT" r && rm -rf "$R"
ls -la "$OUT"
