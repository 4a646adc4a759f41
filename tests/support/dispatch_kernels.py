"""Scripted vector_add kernels with a tuned block size (tests/support/fakes.py's ``// fake:`` lines):
the tune header, and a template whose best setting depends on the shape (BLOCK=128, and 1024 on the
64M case) from which the loop fits a dispatch rule."""
from __future__ import annotations

from tests.support.fakes import vector_add

HEADER = """// kforge: grid = [cdiv(n, BLOCK)]
// kforge: block = [BLOCK]
// kforge: tune BLOCK = [128, 256, 512, 1024]
"""
#: the best setting is BLOCK=128, and BLOCK=1024 on n64M: the loop fits a dispatch rule to it
TEMPLATE = vector_add("pass 400", header=HEADER) + "// fake-opt: BLOCK=128\n// fake-opt@n64M: BLOCK=1024\n"

#: a vector_add with two tunables (BLOCK, ITEMS), in two parts: a dispatch rule goes between them
HEAD = """// kforge: grid = [cdiv(n, BLOCK * ITEMS)]
// kforge: block = [BLOCK]
// kforge: tune BLOCK = [128, 256, 512]
// kforge: tune ITEMS = [1, 2]
// kforge: constraint BLOCK * ITEMS <= 512
"""
KERNEL = """#ifndef ITEMS
#define ITEMS 1
#endif
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n)
{
    long long i = (long long)blockIdx.x * blockDim.x * ITEMS + threadIdx.x;
    for (int j = 0; j < ITEMS; ++j, i += blockDim.x) {
        if (i < n) c[i] = a[i] + b[i];
    }
}
"""
