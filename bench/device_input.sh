#!/usr/bin/env bash
# Issue 20 (h-input) on the lent GPU machine, about 3 minutes: the gate with Python references in
# their child process (the GPU tests of the gate, the bundled tasks and the harness), what the
# child costs on an idle 16-core host (bench/run_bench.py --only reference, side by side with the
# in-process reference), and the gate's per-candidate cost (bench/gate_cost.py: its "first"
# evaluation holds the reference child's start; compare with bench/evidence/h200-2026-12-01-s5).
# Everything goes to $OUT/r/ and comes back as one tarball ($OUT/r.tgz).
set -u
OUT=${OUT:-gpu-out}; R=$OUT/r; mkdir -p "$R"
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 9
fi
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider -rs tests/gate/test_gate_gpu.py tests/model/test_task_bundled.py \
  tests/gpu/test_runner_gpu.py tests/app/test_bad_input.py tests/app/test_mcp_server.py > "$R/gpu-tests.log" 2>&1; echo "gpu tests rc=$?"
tail -3 "$R/gpu-tests.log"
timeout 60 python3 bench/run_bench.py --only reference --only verify --out "$R/bench" > "$R/bench.log" 2>&1; echo "bench rc=$?"
tail -12 "$R/bench.log"
timeout 90 python3 bench/gate_cost.py --out "$R/cost" > "$R/gate_cost.log" 2>&1; echo "cost rc=$?"
tail -20 "$R/gate_cost.log"
echo "done in $(( $(date +%s) - t0 )) s"
find "$R" -name "*.cubin" -delete
tar czf "$OUT/r.tgz" -C "$OUT" r && rm -rf "$R"
ls -la "$OUT"
