set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
LOG=$OUT/tc.log; t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$LOG"; }
nvidia-smi -L > $OUT/gpu.txt
for pair in "matmul_f32 gemm_tf32x3_mma" "matmul_f16 gemm_f16_mma"; do
  set -- $pair
  timeout 60 python3 -m kernel_forge eval "manifests/$1.json" "kernel_forge/kernels/gemm/$2.cu" >> "$LOG" 2>&1; r=$?
  say "eval $2 on $1: rc=$r"
done
timeout 110 python3 bench/pattern_sweep.py --out "$OUT" --task matmul_f32 --pattern gemm_tf32x3_mma \
  --case "large:BM * BN >= 16384" --weight large=2 --case "sq256:BM * BN <= 16384" --case "rect:BM * BN <= 16384" \
  --time-limit 80 2>&1 | grep -v "^\[kforge\]" >> "$LOG"; r=$?
say "sweep matmul_f32 rc=$r"
timeout 140 python3 -m kernel_forge optimize manifests/matmul_f16.json --time-limit 100 --archive off \
  --runs-dir "$OUT/runs" >> "$LOG" 2>&1; r=$?
say "optimize matmul_f16 rc=$r"
cp $OUT/runs/run-*/summary.json $OUT/f16_summary.json 2>/dev/null; cp $OUT/runs/run-*/report.md $OUT/f16_report.md 2>/dev/null
rm -rf $OUT/runs
