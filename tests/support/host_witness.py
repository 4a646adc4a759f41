"""A naive CUDA witness built for the host with a C++ compiler and run one thread at a time, so the
cross-check of a generated task (kernel_forge.authoring.crosscheck) is tested on machines without a GPU.

Only what a naive one-thread-per-element kernel uses is emulated: ``__global__``, ``blockIdx``,
``threadIdx``, ``blockDim``, ``gridDim``, the <cmath> functions and a few intrinsics.  A kernel
with shared memory, barriers, warp functions or atomics is refused (it could not be emulated
faithfully one thread after another), as are half and bfloat16 parameters.  The product never
builds anything for the host; on a GPU the witness runs through the gate
(:class:`kernel_forge.authoring.crosscheck.GateWitness`).
"""
from __future__ import annotations

import ctypes
import hashlib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from kernel_forge.authoring.crosscheck import OutputsWitness
from kernel_forge.common.errors import KForgeError

CXX = shutil.which("g++") or shutil.which("c++")

SHIM = r'''
#include <cmath>
#include <math.h>
#include <cstdint>
#include <algorithm>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__
#define __ldg(p) (*(p))
#define __expf expf
#define __logf logf
#define __fdividef(a, b) ((a) / (b))
using std::min; using std::max;
struct kf_uint3 { unsigned x, y, z; };
static kf_uint3 threadIdx, blockIdx, blockDim, gridDim;
'''

NOT_ON_HOST = re.compile(r"__shared__|__syncthreads|__shfl|atomic[A-Z]\w*\(|cooperative_groups|__half|__nv_bfloat16|"
                         r"#\s*include\s*[<\"]cuda")


class HostWitness(OutputsWitness):
    """:class:`OutputsWitness` running the witness built with ``g++`` on the host."""

    def __init__(self):
        super().__init__(self.run, name="host (g++, one thread at a time)")
        self._built: dict[str, ctypes.CDLL] = {}
        self._dir = Path(tempfile.mkdtemp(prefix="kf-host-witness-"))

    def _library(self, task, witness) -> object:
        if CXX is None:
            raise KForgeError("no C++ compiler here to build the witness for the host")
        if NOT_ON_HOST.search(witness.source):
            raise KForgeError("the witness uses shared memory, barriers, warp functions, atomics or half types, "
                              "which the host build does not emulate")
        key = hashlib.sha256((witness.source + repr(sorted(witness.compile_defines().items()))).encode()).hexdigest()[:16]
        if key in self._built:
            return self._built[key]
        sig = task.signature
        params = ", ".join(p.text for p in sig.params)
        names = ", ".join(p.name for p in sig.params)
        launcher = (f'\nextern "C" void kf_launch(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, '
                    f'unsigned bz, {params}) {{\n'
                    "  gridDim = {gx, gy, gz}; blockDim = {bx, by, bz};\n"
                    "  for (unsigned kf_z = 0; kf_z < gz; kf_z++) for (unsigned kf_y = 0; kf_y < gy; kf_y++)\n"
                    "  for (unsigned kf_x = 0; kf_x < gx; kf_x++) {\n"
                    "    blockIdx = {kf_x, kf_y, kf_z};\n"
                    "    for (unsigned kf_k = 0; kf_k < bz; kf_k++) for (unsigned kf_j = 0; kf_j < by; kf_j++)\n"
                    "    for (unsigned kf_i = 0; kf_i < bx; kf_i++) {\n"
                    f"      threadIdx = {{kf_i, kf_j, kf_k}}; {sig.name}({names});\n"
                    "    }\n  }\n}\n")
        cpp, lib = self._dir / f"w{key}.cpp", self._dir / f"w{key}.so"
        cpp.write_text(SHIM + witness.source + launcher)
        defines = [f"-D{k}={v}" for k, v in witness.compile_defines().items()]
        done = subprocess.run([CXX, "-O1", "-ffp-contract=off", "-shared", "-fPIC", *defines, "-o", str(lib), str(cpp)],
                              capture_output=True, text=True)
        if done.returncode:
            raise KForgeError(f"the host build of the witness failed: {done.stderr.strip()[:800]}")
        self._built[key] = ctypes.CDLL(str(lib))
        return self._built[key]

    def run(self, task, witness, case, inputs) -> dict[str, np.ndarray]:
        lib = self._library(task, witness)
        launch = witness.launch or task.launch
        grid, block, _smem = launch.resolve({**case.vars, **witness.defines})
        args, keep = [], []
        for p in task.signature.params:
            if p.pointer:
                buf = np.ascontiguousarray(inputs.buffers[p.name].copy())
                keep.append((p.name, buf))
                args.append(ctypes.c_void_p(buf.ctypes.data))
            else:
                args.append(p.dtype.ctype(inputs.scalars[p.name]))
        fn = lib.kf_launch
        fn.restype = None
        fn(*(ctypes.c_uint(int(v)) for v in (*grid, *block)), *args)
        bufs = dict(keep)
        return {a.name: bufs[a.name] for a in task.outputs}
