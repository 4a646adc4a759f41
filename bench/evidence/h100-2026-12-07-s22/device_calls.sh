set -u
source bench/device_env.sh   # each call began so; logs in $OUT
# ---- call 1: DEADLINE=560 bash bench/_dev1.sh
export KFORGE_TEST_GPUS=0
nvidia-smi -L > $OUT/gpu.txt; nvidia-smi -q -d CLOCK >> $OUT/gpu.txt 2>&1
t0=$(date +%s); el() { echo $(( $(date +%s)-t0 )); }
left() { echo $(( ${DEADLINE:-570} - ($(date +%s)-t0) )); }
log() { echo "[$(el) s] $*" >> $OUT/summary.txt; }
timeout 150 python3 -m pytest -m gpu -q -rf -p no:cacheprovider -n 6 tests/kinds/test_kinds_bound_gpu.py -k "conv_bias_grad or adamw_master or fused_residual_bf16 or row_sums_grid or modulate" --junitxml=$OUT/kinds-new.xml > $OUT/kinds-new.log 2>&1; log "kinds-new rc=$? $(tail -1 $OUT/kinds-new.log)"
if grep -q H200 $OUT/gpu.txt; then
  L=$(left); timeout $((L-10)) python3 bench/wild_table.py --out $OUT/wild1 --time-limit 14 --only blur3x3 cs_boxfilter_y cs_convolution_cols cs_convolution_rows cs_reduction cs_transpose llmc_adamw > $OUT/wild1.log 2>&1; log "wild1 rc=$?"
  rm -rf $OUT/wild1/runs/*/attempts 2>/dev/null
else
  timeout 200 python3 -m pytest -m gpu -q -rf -p no:cacheprovider tests/search/test_loop_gpu.py --junitxml=$OUT/loop.xml > $OUT/loop.log 2>&1; log "loop rc=$? $(tail -1 $OUT/loop.log)"
  L=$(left); [ $L -gt 60 ] && { timeout $L python3 -m pytest -m gpu -q -rf -p no:cacheprovider -n 4 tests/gate/test_honest.py --junitxml=$OUT/honest.xml > $OUT/honest.log 2>&1; log "honest rc=$? $(tail -1 $OUT/honest.log)"; }
fi
log done
# ---- call 2: DEADLINE=560 bash bench/_dev2.sh
export KFORGE_TEST_GPUS=0
nvidia-smi -L > $OUT/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s)-t0 )); }
left() { echo $(( ${DEADLINE:-570} - ($(date +%s)-t0) )); }
log() { echo "[$(el) s] $*" >> $OUT/summary.txt; }
if grep -q H200 $OUT/gpu.txt; then
  L=$(left); timeout $((L-10)) python3 bench/wild_table.py --out $OUT/wild2 --time-limit 14 --only llmc_bias_backward llmc_crossentropy llmc_encoder llmc_gelu llmc_layernorm llmc_permute llmc_residual llmc_softmax > $OUT/wild2.log 2>&1; log "wild2 rc=$?"
  rm -rf $OUT/wild2/runs/*/attempts 2>/dev/null
else
  SER="tests/gate/test_adversarial.py tests/gpu/test_timing_gpu.py tests/search/test_loop_gpu.py tests/gate/test_gate_dispatch_gpu.py tests/gate/test_honest.py"
  IGN=(); for f in $SER tests/kinds/test_kinds_bound_gpu.py; do IGN+=(--ignore=$f); done
  timeout 300 python3 -m pytest -m gpu -rf -q -p no:cacheprovider -n 8 --dist loadfile "${IGN[@]}" --junitxml=$OUT/par.xml > $OUT/par.log 2>&1; log "par rc=$? $(tail -1 $OUT/par.log)"
  L=$(left); [ $L -gt 60 ] && { timeout $L python3 -m pytest -m gpu -rf -q -p no:cacheprovider tests/gpu/test_timing_gpu.py tests/gate/test_gate_dispatch_gpu.py --junitxml=$OUT/timing.xml > $OUT/timing.log 2>&1; log "timing rc=$? $(tail -1 $OUT/timing.log)"; }
fi
log done
# ---- call 3: DEADLINE=560 bash bench/_dev3.sh
export KFORGE_TEST_GPUS=0
nvidia-smi -L > $OUT/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s)-t0 )); }
left() { echo $(( ${DEADLINE:-570} - ($(date +%s)-t0) )); }
log() { echo "[$(el) s] $*" >> $OUT/summary.txt; }
if grep -q H200 $OUT/gpu.txt; then
  timeout 120 python3 -m pytest -m gpu -q -rf -p no:cacheprovider -n 5 tests/kinds/test_kinds_bound_gpu.py -k "rope" --junitxml=$OUT/kinds-rope.xml > $OUT/kinds-rope.log 2>&1; log "kinds-rope rc=$? $(tail -1 $OUT/kinds-rope.log)"
  for i in 1 2; do L=$(left); [ $L -gt 200 ] && { timeout $((L-5)) python3 -m kernel_forge optimize manifests/matmul_f32.json > $OUT/opt32-$i.log 2>&1; log "opt32-$i rc=$? $(grep -i 'best\|cublas' $OUT/opt32-$i.log | tail -3 | tr '\n' ' ')"; d=$(ls -dt runs/run-* 2>/dev/null | head -1); [ -n "$d" ] && tar czf $OUT/opt32-$i-run.tgz --exclude=attempts "$d" 2>/dev/null; }; done
  L=$(left); [ $L -gt 60 ] && { timeout $L python3 -m pytest -m gpu -q -rf -p no:cacheprovider -n 4 tests/gate/test_honest.py --junitxml=$OUT/honest.xml > $OUT/honest.log 2>&1; log "honest rc=$? $(tail -1 $OUT/honest.log)"; }
else
  timeout 120 python3 -m pytest -m gpu -q -rf -p no:cacheprovider -n 5 tests/kinds/test_kinds_bound_gpu.py -k "rope" --junitxml=$OUT/kinds-rope.xml > $OUT/kinds-rope.log 2>&1; log "kinds-rope rc=$? $(tail -1 $OUT/kinds-rope.log)"
  timeout 200 python3 -m pytest -m gpu -q -rf -p no:cacheprovider tests/search/test_loop_gpu.py -k "killed_run or ci_regression" --junitxml=$OUT/loop2.xml > $OUT/loop2.log 2>&1; log "loop2 rc=$? $(tail -1 $OUT/loop2.log)"
  L=$(left); [ $L -gt 60 ] && { timeout $L python3 -m pytest -m gpu -rf -q --durations=5 -p no:cacheprovider tests/gate/test_adversarial.py --junitxml=$OUT/adv.xml > $OUT/adv.log 2>&1; log "adv rc=$? $(tail -1 $OUT/adv.log)"; }
fi
log done
