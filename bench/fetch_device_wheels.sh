#!/usr/bin/env bash
# Download into .whl/ (or the folder given as $1) every wheel the H200 image lacks for the GPU suite
# (`make test-gpu`, bench/gpu_suite.sh installs .whl/*.whl into /tmp/site) and the benchmarks
# (bench/vs_kernel_tuner.py): Python 3.12, manylinux x86_64, exact versions, no dependencies
# resolved on the device. Run it here, where PyPI is reachable; then name .whl in the run's carry.
#
#   bash bench/fetch_device_wheels.sh            # into .whl/ (ignored by git)
#   bash bench/fetch_device_wheels.sh /tmp/w     # anywhere else
#
# The image already holds attrs, anyio, certifi, click, h11, httpx, httpcore, idna, numpy,
# packaging, pandas, scipy, scikit-learn, typing-extensions, nvidia-cuda-cupti 13.0.85 ...
# (/work/.library/device/KINDS.md, "Python packages already there"). Versions are pinned to what
# the development environment runs; one version of each project is kept (older ones are removed).
set -euo pipefail

DEST=${1:-.whl}
PIP=${PIP:-python3 -m pip}
LIMIT_MB=${LIMIT_MB:-60}

WHEELS=(
  # jsonschema: manifest validation (kernel_forge's own dependency); attrs is on the image
  jsonschema==4.26.0 referencing==0.37.0 rpds-py==2026.9.1 jsonschema-specifications==2025.9.1
  # the LLM proposers and what they need beyond the image (the 2026 SDKs use httpx2/httpcore2, with
  # truststore for certificates, instead of the image's httpx/httpcore; distro is no longer needed)
  anthropic==2.17.0 openai==3.60.0 jiter==0.19.0 docstring-parser==0.18.0 opentelemetry-api==1.45.2
  httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5 sniffio==1.3.1
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
  # on the image, but maybe older than needed: pydantic 2.14 needs typing-extensions >= 4.16,
  # httpx2 anyio >= 4.10 and idna >= 3.18 (they shadow the image's only under PYTHONPATH=/tmp/site)
  typing-extensions==4.16.0 anyio==4.16.0 idna==3.20
  # CUPTI activity records: the cupti-python that matches the image's nvidia-cuda-cupti 13.0.85
  cupti-python==13.0.1
  # reading CUBIN symbols (module globals)
  pyelftools==0.33
  # SASS for the instruction mix of the diagnosis (a 5 MB CPU binary; PTX is counted without it)
  nvidia-cuda-nvdisasm==13.5.37
  # the MCP server and its needs (pyjwt[crypto] is a hard requirement of mcp 2.x)
  mcp==2.3.0 mcp-types==2.3.0 python-multipart==0.0.34 sse-starlette==3.7.0 starlette==1.10.0
  uvicorn==0.54.0 pyjwt==2.15.1 cryptography==50.0.2 cffi==2.1.1 pycparser==3.12
  # Kernel Tuner for bench/vs_kernel_tuner.py; numpy, scipy, pandas, scikit-learn, packaging are on
  # the image. pymoo is left out: only its nsga2/nsga3 strategies and Pareto fronts import it.
  kernel_tuner==1.5.0 python-constraint2==2.9.0 xmltodict==1.0.4
)

BASE=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
MORE=()
for n in 5 12 24 31 34 35 36 37 38 39; do MORE+=(--platform "manylinux_2_${n}_x86_64"); done

norm() {  # a project name as wheel files spell it: lower case, runs of -_. as one _
  echo "$1" | tr 'A-Z' 'a-z' | sed -E 's/[-_.]+/_/g'
}

mkdir -p "$DEST"
for spec in "${WHEELS[@]}"; do
  name=${spec%%==*}
  version=${spec##*==}
  stem=$(norm "$name")
  # one version of each: drop wheels of this project with another version
  for old in "$DEST"/*.whl; do
    [ -e "$old" ] || continue
    file=$(basename "$old")
    if [ "$(norm "${file%%-*}")" = "$stem" ]; then
      have=${file#*-}; have=${have%%-*}
      [ "$have" = "$version" ] || { echo "[wheels] removing $file (want $version)"; rm -f "$old"; }
    fi
  done
  args=(download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp -d "$DEST" -q)
  if ! $PIP "${args[@]}" "${BASE[@]}" "$spec" 2>/dev/null; then
    echo "[wheels] $spec: nothing for the usual manylinux tags, trying manylinux_2_5 .. 2_39"
    $PIP "${args[@]}" "${BASE[@]}" "${MORE[@]}" "$spec"
  fi
done

# every listed project exactly once
status=0
for spec in "${WHEELS[@]}"; do
  stem=$(norm "${spec%%==*}")
  count=0
  for f in "$DEST"/*.whl; do
    [ -e "$f" ] || continue
    b=$(basename "$f")
    [ "$(norm "${b%%-*}")" = "$stem" ] && count=$((count + 1))
  done
  if [ "$count" -ne 1 ]; then echo "[wheels] ERROR: $count wheels of ${spec%%==*} in $DEST"; status=1; fi
done
dupes=$(for f in "$DEST"/*.whl; do b=$(basename "$f"); norm "${b%%-*}"; done | sort | uniq -d)
if [ -n "$dupes" ]; then echo "[wheels] ERROR: more than one version of: $dupes"; status=1; fi

bytes=$(du -cb "$DEST"/*.whl | tail -1 | cut -f1)
mb=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
echo "[wheels] $(ls "$DEST"/*.whl | wc -l) wheels in $DEST, $mb MiB in all (limit $LIMIT_MB MiB)"
if awk -v b="$bytes" -v l="$LIMIT_MB" 'BEGIN { exit !(b >= l * 1048576) }'; then
  echo "[wheels] ERROR: over $LIMIT_MB MiB"; status=1
fi
exit $status
