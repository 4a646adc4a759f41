#!/usr/bin/env bash
# Issue 30 items 3 and 4: the tensor-core patterns on the H200 (one GPU, about 8 minutes: every stage
# is time-limited).
#   1. the GPU tests of the tensor-core patterns: the strict gate with holdout on each pattern's
#      default setting, cuBLAS's fp16 baseline against the reference   -> tests.log
#   2. kforge eval of each pattern's default setting beside the task's vendor baseline
#   3. brute force of each pattern's settings on its task's performance cases, with cuBLAS timed in
#      the same gate: the best setting per case and its ratio to cuBLAS -> sweep-matmul_f32.json,
#      sweep-matmul_f16.json (matmul_f32's cuBLAS is SGEMM: issue 30 wants >= 1.5x on large)
#   4. the built-in tuner on matmul_f16 (kforge optimize, 150 s): large vs cuBLAS >= 0.6x wanted
# Everything printed goes to tc.log.  Needs the wheels of bench/fetch_device_wheels.sh in .whl/
# (carry it) for jsonschema & co.
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 9
fi
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
LOG=$OUT/tc.log
t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$LOG"; }

say "== 1. GPU tests"
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -k "mma or tensor or f16" \
  tests/kernels/test_patterns.py tests/kernels/test_tensor_core.py > "$OUT/tests.log" 2>&1
say "tests rc=$?: $(tail -1 "$OUT/tests.log")"

say "== 2. default settings through kforge eval"
for pair in "matmul_f32 gemm_tf32x3_mma" "matmul_f16 gemm_f16_mma"; do
  set -- $pair
  timeout 120 python3 -m kernel_forge eval "manifests/$1.json" "kernel_forge/kernels/gemm/$2.cu" >> "$LOG" 2>&1
  say "eval $2 on $1: rc=$?"
done

say "== 3. settings sweeps vs cuBLAS"
timeout 150 python3 bench/pattern_sweep.py --out "$OUT" --task matmul_f32 --pattern gemm_tf32x3_mma \
  --case "large:BM * BN >= 16384" --weight large=2 --case "sq256:BM * BN <= 16384" --case "rect:BM * BN <= 16384" \
  --time-limit 110 2>&1 | grep -v "^\[kforge\]" >> "$LOG"
say "sweep matmul_f32 rc=$?"
timeout 150 python3 bench/pattern_sweep.py --out "$OUT" --task matmul_f16 --pattern gemm_f16_mma \
  --case "large:BM * BN >= 16384" --weight large=2 --case "skinny" --case "sq1024" \
  --time-limit 110 2>&1 | grep -v "^\[kforge\]" >> "$LOG"
say "sweep matmul_f16 rc=$?"

say "== 4. the tuner on matmul_f16"
timeout 200 python3 -m kernel_forge optimize manifests/matmul_f16.json --time-limit 150 --archive off \
  --runs-dir "$OUT/runs" >> "$LOG" 2>&1
say "optimize matmul_f16 rc=$?"
grep -h -E "cublas|large" "$OUT"/runs/run-*/report.md 2>/dev/null | head -20 | tee -a "$LOG"
