"""Record the describe exchanges the tests replay: ``relu_like/`` (three answers that make a task
whose witnesses agree) and ``relu_like_off_by_one/`` (the same, with a reference that leaves the
last element out).  They are recorded through the real Anthropic SDK talking to the loopback
server (tests/support/loopback.py), so each ``model-NNN.json`` is what ``kforge init --describe`` writes.

    PYTHONPATH=. python tests/data/describe/make_recorded.py          # from the repository root
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from kernel_forge.config.describe import DescribeConfig
from kernel_forge.authoring.from_description import describe_task

from tests.support.loopback import Loopback, text

HERE = Path(__file__).resolve().parent

#: a current model from the capability table (kernel_forge/data/models.json): its request is built
#: from its entry (adaptive thinking, effort, output limit) and its cost from its prices
MODEL = "anthropic:claude-sonnet-5-5"

DESCRIPTION = ("Leaky ReLU over n float32 values: y[i] = x[i] where x[i] > 0, else 0.01 * x[i]. "
               "n can be any size, including 1.")

SPEC = '''Here is the specification.

```json
{
  "description": "Leaky ReLU over n float32 values: y[i] = x[i] if x[i] > 0, else 0.01 * x[i]. Memory bound: 8 bytes move per element.",
  "signature": "extern \\"C\\" __global__ void relu_like(const float* x, float* y, int n)",
  "args": {
    "x": {"shape": ["n"], "init": {"kind": "normal", "mean": 0, "std": 2}},
    "y": {"shape": ["n"], "output": true},
    "n": "n"
  },
  "launch": {"grid": ["cdiv(n, 256)"], "block": [256]},
  "tolerance": {"atol": 1e-6, "rtol": 1e-6},
  "cost": {"flops": "2*n", "bytes": "8*n"},
  "cases": [
    {"name": "one", "role": "correctness", "vars": {"n": 1}},
    {"name": "prime", "role": "correctness", "vars": {"n": 257}},
    {"name": "ragged", "role": "correctness", "vars": {"n": 1000003}},
    {"name": "n16M", "role": "performance", "vars": {"n": 16777216}},
    {"name": "hidden", "role": "holdout", "vars": {"n": 65537}}
  ],
  "hints": "Memory bound; n need not be a multiple of the block size or of any vector width."
}
```
'''

REFERENCE = '''The reference:

```python
"""relu_like: leaky ReLU, y = x where x > 0, else 0.01 * x."""
import numpy as np


def reference(x, y, n):
    v = x.astype(np.float64)
    y[...] = np.where(v > 0, v, 0.01 * v)
```
'''

REFERENCE_OFF_BY_ONE = '''The reference:

```python
"""relu_like: leaky ReLU, y = x where x > 0, else 0.01 * x."""
import numpy as np


def reference(x, y, n):
    v = x.astype(np.float64)
    y[:n - 1] = np.where(v[:n - 1] > 0, v[:n - 1], 0.01 * v[:n - 1])
```
'''

WITNESS = '''A naive kernel, one thread per element:

```cuda
extern "C" __global__ void relu_like(const float* x, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    y[i] = v > 0.0f ? v : 0.01f * v;
}
```
'''


def record(folder: str, reference: str) -> None:
    server = Loopback().start()
    os.environ["ANTHROPIC_API_KEY"] = "sk-ant-recording-0000000000000000"
    try:
        # the model thinks first (adaptive thinking, as its entry asks): a short signed thinking block
        server.script("anthropic",
                      text(SPEC, output_tokens=1260).thinking("The cases must reach n = 1, a prime and a "
                                                              "ragged size; the holdout stays unseen.", "sig-spec"),
                      text(reference, output_tokens=540).thinking("float64 inside, written into y in place.",
                                                                  "sig-reference"),
                      text(WITNESS, output_tokens=480).thinking("One thread per element with a bounds check.",
                                                                "sig-witness"))
        with tempfile.TemporaryDirectory() as tmp:
            cfg = DescribeConfig(model=MODEL, base_url=server.anthropic_base_url)
            res = describe_task("relu_like", DESCRIPTION, tmp, cfg, progress=print)
            out = HERE / folder
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            for f in sorted((Path(tmp) / "relu_like_describe").glob("model-*.json")):
                shutil.copy(f, out / f.name)
            print(folder, "written:", ", ".join(p.name for p in res.written))
    finally:
        server.stop()


if __name__ == "__main__":
    record("relu_like", REFERENCE)
    record("relu_like_off_by_one", REFERENCE_OFF_BY_ONE)
