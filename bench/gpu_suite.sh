#!/usr/bin/env bash
# The GPU test suite (`make test-gpu`): `pytest -m gpu` with logs in $OUT (gpu-tests.log,
# gpu-junit.xml). With several GPUs and pytest-xdist present, one xdist worker per GPU takes
# tests as it frees up (each worker pinned to its GPU by tests/conftest.py); otherwise one
# process on the first GPU.
set -u
OUT=${OUT:-gpu-out}
PY=${PY:-python3}
mkdir -p "$OUT"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
GPUS=${GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)}
[ "${GPUS:-0}" -ge 1 ] 2>/dev/null || GPUS=1
ARGS=(-m gpu -v -rs --durations=20 -p no:cacheprovider -o console_output_style=times --junitxml="$OUT/gpu-junit.xml")
if [ "$GPUS" -gt 1 ]; then
  if "$PY" -c "import xdist" 2>/dev/null; then
    export KFORGE_TEST_GPUS=$(seq -s, 0 $(( GPUS - 1 )))
    ARGS+=(-n "$GPUS" --dist load)
    echo "[test-gpu] $GPUS GPUs: one pytest-xdist worker each (KFORGE_TEST_GPUS=$KFORGE_TEST_GPUS)"
  else
    echo "[test-gpu] $GPUS GPUs but no pytest-xdist: running on one GPU (pip install pytest-xdist to use all)"
  fi
fi
set -o pipefail
"$PY" -m pytest "${ARGS[@]}" "$@" 2>&1 | tee "$OUT/gpu-tests.log"
