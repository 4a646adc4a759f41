set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi -L > $OUT/gpu.txt
t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 )) s] $*" >> $OUT/summary.txt; }
timeout 60 python3 -m pytest -m gpu -v -rA --tb=short -p no:cacheprovider "tests/search/test_own_space_gpu.py::test_the_blurs_own_tune_lines_are_all_gated_without_a_templates_entry" > $OUT/own.log 2>&1; r=$?
say "own rc=$r $(tail -1 $OUT/own.log)"
timeout 200 python3 -m pytest -m gpu -v -rA --tb=short -s -p no:cacheprovider tests/kinds/test_kinds_bound_gpu.py -k "linear_f16 or hgemm_tn_bf16 or matmul_f16" > $OUT/bound16.log 2>&1; r=$?
say "bound16 rc=$r $(tail -1 $OUT/bound16.log)"
mkdir -p /tmp/b
python3 bench/evidence/h100-2026-12-06c/write_bound.py /tmp/b manifests/matmul_f16.json tests/data/kinds/linear_f16.json tests/data/kinds/hgemm_tn_bf16.json > $OUT/eval16.log 2>&1
for t in manifests/matmul_f16.json tests/data/kinds/linear_f16.json tests/data/kinds/hgemm_tn_bf16.json; do
  n=$(basename $t .json)
  timeout 60 python3 -m kernel_forge eval $t /tmp/b/$n.bound_gemm_f16.cu >> $OUT/eval16.log 2>&1; r=$?
  say "eval bound_gemm_f16 on $n rc=$r"
done
left=$(( 575 - ($(date +%s)-t0) - 40 ))
timeout $left python3 -m kernel_forge optimize manifests/matmul_f16.json --time-limit $(( left - 40 )) --archive off --runs-dir /tmp/runs > $OUT/opt16.log 2>&1; r=$?
say "optimize matmul_f16 rc=$r"
cp /tmp/runs/run-*/summary.json $OUT/f16_summary.json 2>/dev/null; cp /tmp/runs/run-*/report.md $OUT/f16_report.md 2>/dev/null
