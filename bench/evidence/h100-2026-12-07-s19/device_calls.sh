set -u
source bench/device_env.sh   # each call began with these two lines
# ---- call 1: bash bench/_dev1.sh
nvidia-smi -L > $OUT/gpu.txt; nvidia-smi -q -d CLOCK >> $OUT/gpu.txt 2>&1
git log --oneline -1 > $OUT/head.txt 2>/dev/null
t0=$(date +%s); el() { echo $(( $(date +%s)-t0 )); }
left() { echo $(( ${DEADLINE:-575} - ($(date +%s)-t0) )); }
log() { echo "[$(el) s] $*" >> $OUT/summary.txt; }
opt32() {  # make optimize on matmul_f32, every default
  local tag=$1 L=$(left); [ $L -gt 60 ] || { log "opt32 $tag skipped"; return; }
  timeout $L python3 -m kernel_forge optimize manifests/matmul_f32.json > $OUT/opt32-$tag.log 2>&1; log "opt32 $tag rc=$? $(grep -i 'best\|cublas' $OUT/opt32-$tag.log | tail -3 | tr '\n' ' ')"
  d=$(ls -dt runs/run-* 2>/dev/null | head -1); [ -n "$d" ] && tar czf $OUT/opt32-$tag-run.tgz --exclude=attempts "$d" 2>/dev/null
}
if [ "${MODE:-auto}" = h200 ] || { [ "${MODE:-auto}" = auto ] && grep -q H200 $OUT/gpu.txt; }; then
  timeout 300 python3 bench/wild_table.py --out $OUT/wild --time-limit 14 > $OUT/wild.log 2>&1; log "wild rc=$?"
  rm -rf $OUT/wild/runs/*/attempts 2>/dev/null
  opt32 a
else
  SER="tests/gate/test_adversarial.py tests/gpu/test_timing_gpu.py tests/search/test_loop_gpu.py tests/gate/test_gate_dispatch_gpu.py"
  IGN=(); for f in $SER tests/kinds/test_kinds_bound_gpu.py; do IGN+=(--ignore=$f); done
  timeout 270 python3 -m pytest -m gpu -rs -q --durations=10 -p no:cacheprovider -n 6 --dist loadfile "${IGN[@]}" --junitxml=$OUT/par.xml > $OUT/par.log 2>&1; log "par rc=$? $(tail -1 $OUT/par.log)"
  timeout $(left) python3 -m pytest -m gpu -rs -q --durations=10 -p no:cacheprovider $SER --junitxml=$OUT/ser.xml > $OUT/ser.log 2>&1; log "serial rc=$? $(tail -1 $OUT/ser.log)"
fi
log done

# ---- call 2: bash bench/_dev2.sh
nvidia-smi -L > $OUT/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s)-t0 )); }
left() { echo $(( ${DEADLINE:-575} - ($(date +%s)-t0) )); }
log() { echo "[$(el) s] $*" >> $OUT/summary.txt; }
opt32() {
  local tag=$1 L=$(left); [ $L -gt 60 ] || { log "opt32 $tag skipped"; return; }
  timeout $L python3 -m kernel_forge optimize manifests/matmul_f32.json > $OUT/opt32-$tag.log 2>&1; log "opt32 $tag rc=$? $(grep -i 'best\|cublas' $OUT/opt32-$tag.log | tail -3 | tr '\n' ' ')"
  d=$(ls -dt runs/run-* 2>/dev/null | head -1); [ -n "$d" ] && tar czf $OUT/opt32-$tag-run.tgz --exclude=attempts "$d" 2>/dev/null
}
if grep -q H200 $OUT/gpu.txt; then
  timeout 60 python3 -m kernel_forge eval manifests/matmul_f32.json kernel_forge/kernels/gemm/gemm_tf32x3_wgmma.cu > $OUT/eval32.log 2>&1; log "eval32 rc=$?"
  opt32 b
  opt32 c
else
  # the strict-gate test of every bound pattern: elementwise forms first (bind.py changed after round 18)
  timeout $(left) python3 -m pytest -m gpu -q -rs -p no:cacheprovider -n 8 --dist load tests/kinds/test_kinds_bound_gpu.py \
    -k "bias_gelu or relu or gelu or silu or swiglu or saxpby or clamp or masked_fill or where or scale_shift or divide or linear_vec or daxpy or int8 or adamw or sgd or add_channel or batchnorm or vector_add or gelu_bf16" \
    --junitxml=$OUT/kinds.xml > $OUT/kinds.log 2>&1; log "kinds rc=$? $(tail -1 $OUT/kinds.log)"
fi
log done

# ---- call 3: DEADLINE=475 bash bench/_dev3.sh
nvidia-smi -L > $OUT/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s)-t0 )); }
left() { echo $(( ${DEADLINE:-575} - ($(date +%s)-t0) )); }
log() { echo "[$(el) s] $*" >> $OUT/summary.txt; }
if grep -q H200 $OUT/gpu.txt; then
  SER="tests/gate/test_adversarial.py tests/gpu/test_timing_gpu.py tests/search/test_loop_gpu.py tests/gate/test_gate_dispatch_gpu.py"
  IGN=(); for f in $SER tests/kinds/test_kinds_bound_gpu.py; do IGN+=(--ignore=$f); done
  timeout 270 python3 -m pytest -m gpu -rs -q --durations=10 -p no:cacheprovider -n 6 --dist loadfile "${IGN[@]}" --junitxml=$OUT/par.xml > $OUT/par.log 2>&1; log "par rc=$? $(tail -1 $OUT/par.log)"
  timeout $(left) python3 -m pytest -m gpu -rs -q --durations=10 -p no:cacheprovider $SER --junitxml=$OUT/ser.xml > $OUT/ser.log 2>&1; log "serial rc=$? $(tail -1 $OUT/ser.log)"
else
  timeout 60 python3 -m kernel_forge eval manifests/matmul_f32.json kernel_forge/kernels/gemm/gemm_tf32x3_wgmma.cu > $OUT/eval32.log 2>&1; log "eval32 rc=$?"
  L=$(left); timeout $L python3 -m kernel_forge optimize manifests/matmul_f32.json > $OUT/opt32-a.log 2>&1; log "opt32 rc=$? $(grep -i 'best\|cublas' $OUT/opt32-a.log | tail -3 | tr '\n' ' ')"
  d=$(ls -dt runs/run-* 2>/dev/null | head -1); [ -n "$d" ] && tar czf $OUT/opt32-a-run.tgz --exclude=attempts "$d" 2>/dev/null
fi
log done

