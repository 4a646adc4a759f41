"""matmul_f16: row-major C[m, n] = A[m, k] @ B[k, n] with float16 A, B and C, accumulated in float32.

The inputs are float16 numbers, so the reference computes with them exactly: float64 products and
sums, rounded once to float16.  For very large products (m*n*k > 2**30, e.g. 4096^3) float64 on a
CPU is too slow, so it uses float32 BLAS on the same values instead; its error (about
sqrt(k) * 2**-24 * |C|) is far below one float16 ulp of C (2**-10 * |C|).
``cublas`` is the vendor baseline: CuPy's matmul on float16 arrays, which calls cuBLAS GemmEx with
float16 A, B and C (the tensor-core HGEMM).
"""
import numpy as np

FLOAT32_ABOVE = 2 ** 30


def reference(a, b, c, m, n, k):
    a2 = a.reshape(m, k)
    b2 = b.reshape(k, n)
    if m * n * k > FLOAT32_ABOVE:
        prod = a2.astype(np.float32) @ b2.astype(np.float32)
    else:
        prod = a2.astype(np.float64) @ b2.astype(np.float64)
    c[...] = prod.astype(c.dtype).reshape(c.shape)


def cublas(a, b, c, m, n, k):
    import cupy

    cupy.matmul(a.reshape(m, k), b.reshape(k, n), out=c.reshape(m, n))
