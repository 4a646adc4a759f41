set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi -L > $OUT/gpu.txt
t0=$(date +%s)
timeout 170 python3 bench/wild_table.py --out $OUT/wild --time-limit 14 --only cs_boxfilter_y llmc_residual llmc_gelu > $OUT/wild.log 2>&1; r=$?
echo "[$(( $(date +%s)-t0 )) s] wild rc=$r" >> $OUT/summary.txt
rm -rf $OUT/wild/runs/*/attempts 2>/dev/null
SERIAL="" SKIP="tests/gate/test_adversarial.py tests/gpu/test_timing_gpu.py tests/search/test_loop_gpu.py tests/gate/test_gate_dispatch_gpu.py" OUT=$OUT/suite timeout 380 bash bench/gpu_suite.sh > /dev/null 2>&1; r=$?
echo "[$(( $(date +%s)-t0 )) s] suite-parallel rc=$r $(tail -1 $OUT/suite/gpu-tests.log)" >> $OUT/summary.txt
