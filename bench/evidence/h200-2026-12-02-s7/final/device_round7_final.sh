#!/usr/bin/env bash
# Round 7, last device call (about 3 minutes): the GPU tests the first call failed, after their
# fixes (tests/test_gpu_sanitizer, test_gpu_gate, test_gpu_prompt, the memo_sampled twin under
# --quick), then `kforge optimize manifests/matmul_f32.json` with every default but a 100 s tuner
# time limit; its run folder packed into $OUT/matmul-run.tgz.
set -u
. bench/device_env.sh
t0=$(date +%s)
timeout "${TESTS_TIMEOUT:-75}" python3 -m pytest -m gpu -v -rs -p no:cacheprovider -n 4 \
  tests/gate/test_sanitizer_gpu.py::test_sanitizer_rejects_a_silent_out_of_bounds_write \
  tests/gate/test_gate_gpu.py::test_a_changed_expected_copy_is_seen_and_sent_again \
  tests/search/test_prompts_gpu.py > "$OUT/fix-tests.log" 2>&1
echo "[r7f] fixed tests rc=$? in $(( $(date +%s) - t0 )) s: $(tail -1 "$OUT/fix-tests.log")" | tee "$OUT/summary.txt"
timeout 30 python3 -m pytest -m gpu -v -rs -p no:cacheprovider \
  "tests/gate/test_adversarial.py::test_not_faster_than_its_honest_twin_under_quick[memo_sampled_vector_add]" \
  > "$OUT/memo-quick.log" 2>&1
echo "[r7f] memo_sampled under --quick rc=$? at $(( $(date +%s) - t0 )) s: $(tail -1 "$OUT/memo-quick.log")" | tee -a "$OUT/summary.txt"
s=$(date +%s)
timeout "${OPT_TIMEOUT:-150}" python3 -m kernel_forge optimize manifests/matmul_f32.json --tune-time-limit "${LIMIT:-100}" \
  --runs-dir /tmp/r7m > "$OUT/matmul.log" 2>&1
echo "[r7f] make optimize matmul_f32 (--tune-time-limit ${LIMIT:-100}) rc=$? in $(( $(date +%s) - s )) s" | tee -a "$OUT/summary.txt"
grep -E "budget|iteration [0-9]+|search |new best|stopped|holdout" "$OUT/matmul.log" | tail -25 >> "$OUT/summary.txt"
tar czf "$OUT/matmul-run.tgz" -C /tmp r7m 2>/dev/null
echo "[r7f] done in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/summary.txt"
