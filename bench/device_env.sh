# Sourced by the bench/device_*.sh scripts: $OUT made, the wheels the device image lacks (.whl/,
# bench/fetch_device_wheels.sh) installed once into /tmp/site, and the checkout on PYTHONPATH.
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
if [ -d .whl ] && [ ! -d /tmp/site ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:/tmp/site
