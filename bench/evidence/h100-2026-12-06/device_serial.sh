set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi -L > $OUT/gpu.txt
t0=$(date +%s)
run() { local lim=$1; shift; local name=$1; shift; timeout $lim python3 -m pytest -m gpu -v -rA --tb=short -p no:cacheprovider --durations=10 "$@" > $OUT/$name.log 2>&1; echo "[$(( $(date +%s)-t0 )) s] $name rc=$? $(tail -1 $OUT/$name.log)" | tee -a $OUT/summary.txt; }
run 240 adversarial tests/gate/test_adversarial.py
run 90 honest tests/gate/test_honest.py
run 60 timing tests/gpu/test_timing_gpu.py tests/gate/test_gate_dispatch_gpu.py
run 110 loop tests/search/test_loop_gpu.py tests/search/test_retrieval_gpu.py
