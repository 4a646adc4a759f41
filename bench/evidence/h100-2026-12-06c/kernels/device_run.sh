set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi -L > $OUT/gpu.txt
t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 )) s] $*" >> $OUT/summary.txt; }
timeout 110 python3 bench/wild_table.py --out $OUT/wild --time-limit 14 --only cs_boxfilter_y cs_transpose llmc_bias_backward > $OUT/wild.log 2>&1; r=$?
say "wild rc=$r"
rm -rf $OUT/wild/runs 2>/dev/null
timeout 120 python3 -m pytest -m gpu -v -rA --tb=short -s -p no:cacheprovider tests/kinds/test_kinds_bound_gpu.py -k "boxfilter or box_rows or transpose or bias_backward" > $OUT/bound.log 2>&1; r=$?
say "bound rc=$r $(tail -1 $OUT/bound.log)"
left=$(( 570 - ($(date +%s)-t0) ))
timeout $left python3 -m pytest -m gpu -v -rA --tb=short -p no:cacheprovider tests/gate/test_adversarial.py > $OUT/adversarial.log 2>&1; r=$?
say "adversarial rc=$r $(tail -1 $OUT/adversarial.log)"
