set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi -L > $OUT/gpu.txt
t0=$(date +%s)
mkdir -p $OUT/stencil
timeout 130 python3 bench/vs_kernel_tuner.py --case stencil --out $OUT/stencil/vs_kt_stencil.json > $OUT/stencil/vs_kt_stencil.log 2>&1; r=$?
echo "[$(( $(date +%s)-t0 )) s] vs_kt stencil rc=$r" >> $OUT/summary.txt
if grep -q H200 $OUT/gpu.txt; then
  timeout 330 python3 bench/wild_table.py --out $OUT/wild --time-limit 14 > $OUT/wild.log 2>&1; r=$?
  echo "[$(( $(date +%s)-t0 )) s] wild rc=$r" >> $OUT/summary.txt
  rm -rf $OUT/wild/runs/*/attempts 2>/dev/null
  left=$(( 575 - ($(date +%s)-t0) ))
  [ $left -gt 30 ] && { timeout $left python3 -m pytest -m gpu -v -rA --tb=short -p no:cacheprovider "tests/search/test_own_space_gpu.py::test_the_blurs_own_tune_lines_are_all_gated_without_a_templates_entry" tests/gpu/test_nvrtc.py > $OUT/own.log 2>&1; echo "[$(( $(date +%s)-t0 )) s] own rc=$? $(tail -1 $OUT/own.log)" >> $OUT/summary.txt; }
else
  timeout 250 python3 -m pytest -m gpu -v -rA --tb=short -p no:cacheprovider -n 3 --dist loadfile "tests/search/test_own_space_gpu.py::test_the_blurs_own_tune_lines_are_all_gated_without_a_templates_entry" tests/kinds/test_kinds_bound_gpu.py tests/app/test_mcp_server.py tests/gpu/test_clock_offset.py tests/gpu/test_flush.py tests/gpu/test_nvrtc.py tests/gpu/test_profile_child.py tests/gpu/test_scrubbed_pool.py tests/search/test_retrieval_gpu.py > $OUT/par.log 2>&1; r=$?
  echo "[$(( $(date +%s)-t0 )) s] par rc=$r $(tail -1 $OUT/par.log)" >> $OUT/summary.txt
  left=$(( 575 - ($(date +%s)-t0) ))
  timeout $left python3 -m pytest -m gpu -v -rA --tb=short -p no:cacheprovider tests/gate/test_gate_dispatch_gpu.py tests/gpu/test_timing_gpu.py tests/search/test_loop_gpu.py > $OUT/serial.log 2>&1; r=$?
  echo "[$(( $(date +%s)-t0 )) s] serial rc=$r $(tail -1 $OUT/serial.log)" >> $OUT/summary.txt
fi
