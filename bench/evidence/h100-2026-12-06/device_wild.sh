set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi -L > $OUT/gpu.txt
timeout 370 python3 bench/wild_table.py --out $OUT/wild --time-limit 14 > $OUT/wild.log 2>&1
echo "rc=$?" >> $OUT/wild.log
rm -rf $OUT/wild/runs/*/attempts 2>/dev/null
du -sh $OUT/wild
