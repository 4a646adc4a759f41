set -u
source bench/device_env.sh   # each call began so; logs in $OUT
# ---- call 1: bash bench/_dev1.sh
export KFORGE_TEST_GPUS=0
nvidia-smi -L > $OUT/gpu.txt; nvidia-smi -q -d CLOCK >> $OUT/gpu.txt 2>&1
git log --oneline -1 > $OUT/head.txt 2>/dev/null
t0=$(date +%s); el() { echo $(( $(date +%s)-t0 )); }
left() { echo $(( ${DEADLINE:-575} - ($(date +%s)-t0) )); }
log() { echo "[$(el) s] $*" >> $OUT/summary.txt; }
NEW="scale_bias_float4 or silu_half2 or int_sum or row_sums_i32 or histo_kernel or dtranspose or column_sums_f64 or column_max_i32 or encoder_wpe_max_t or smooth9_f64 or heat1d_f64 or linear_bias_relu_f16 or fc_gelu or exp_scale or layernorm_ld or rms_norm_strided or softmax_ld or row_max_ld or attn_softmax_mask or attn_softmax_posbias or matmul_f32 or reduce_sum"
timeout 260 python3 -m pytest -m gpu -q -rs -p no:cacheprovider -n 8 --dist load tests/kinds/test_kinds_bound_gpu.py -k "$NEW" --junitxml=$OUT/kinds.xml > $OUT/kinds.log 2>&1; log "kinds rc=$? $(tail -1 $OUT/kinds.log)"
timeout 90 python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests/gate/test_honest.py -k cpp_linkage > $OUT/honest.log 2>&1; log "honest rc=$? $(tail -1 $OUT/honest.log)"
SER="tests/gate/test_adversarial.py tests/gpu/test_timing_gpu.py tests/search/test_loop_gpu.py tests/gate/test_gate_dispatch_gpu.py"
IGN=(); for f in $SER tests/kinds/test_kinds_bound_gpu.py; do IGN+=(--ignore=$f); done
L=$(left); [ $L -gt 60 ] && { timeout $L python3 -m pytest -m gpu -rs -q --durations=10 -p no:cacheprovider -n 6 --dist loadfile "${IGN[@]}" --junitxml=$OUT/par.xml > $OUT/par.log 2>&1; log "par rc=$? $(tail -1 $OUT/par.log)"; }
log done
# ---- call 2: bash bench/_dev2.sh
export KFORGE_TEST_GPUS=0
nvidia-smi -L > $OUT/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s)-t0 )); }
left() { echo $(( ${DEADLINE:-575} - ($(date +%s)-t0) )); }
log() { echo "[$(el) s] $*" >> $OUT/summary.txt; }
# the timing files one at a time, adversarial (the gate changed) first
for f in tests/gate/test_adversarial.py tests/gate/test_gate_dispatch_gpu.py tests/gpu/test_timing_gpu.py tests/search/test_loop_gpu.py; do
  L=$(left); [ $L -gt 30 ] || { log "$f skipped"; continue; }
  b=$(basename $f .py)
  timeout $L python3 -m pytest -m gpu -rs -q --durations=5 -p no:cacheprovider $f --junitxml=$OUT/$b.xml > $OUT/$b.log 2>&1; log "$b rc=$? $(tail -1 $OUT/$b.log)"
done
log done
# ---- call 3: bash bench/_dev3.sh
export KFORGE_TEST_GPUS=0
nvidia-smi -L > $OUT/gpu.txt
t0=$(date +%s); el() { echo $(( $(date +%s)-t0 )); }
left() { echo $(( ${DEADLINE:-575} - ($(date +%s)-t0) )); }
log() { echo "[$(el) s] $*" >> $OUT/summary.txt; }
timeout 120 python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests/gate/test_honest.py -k "template_kernel or cpp_linkage" > $OUT/honest-template.log 2>&1; log "honest-template rc=$? $(tail -1 $OUT/honest-template.log)"
if grep -q H200 $OUT/gpu.txt; then
  timeout 300 python3 bench/wild_table.py --out $OUT/wild --time-limit 14 > $OUT/wild.log 2>&1; log "wild rc=$?"
  rm -rf $OUT/wild/runs/*/attempts 2>/dev/null
  L=$(left); [ $L -gt 60 ] && { timeout $L python3 -m kernel_forge optimize manifests/matmul_f32.json > $OUT/opt32.log 2>&1; log "opt32 rc=$? $(grep -i 'best\|cublas' $OUT/opt32.log | tail -3 | tr '\n' ' ')"; }
else
  # the rest of the strict-gate kinds test (the tasks call 1 did not run)
  timeout $(left) python3 -m pytest -m gpu -q -rs -p no:cacheprovider -n 8 --dist load tests/kinds/test_kinds_bound_gpu.py --junitxml=$OUT/kinds-all.xml > $OUT/kinds-all.log 2>&1; log "kinds-all rc=$? $(tail -1 $OUT/kinds-all.log)"
fi
log done
