// kforge/f16_mma.cuh -- the 16-bit tensor-core pieces of the half-precision GEMMs (sm_80+):
// mma.sync.m16n8k16 for fp16 and bf16 operands (fp32 accumulators), ldmatrix.x4 and its transposed
// form, the XOR swizzle of 16-byte chunks in shared rows, the copy of a chunk of 8 values into
// shared memory (cp.async, or the 8-value gather of a ragged or unaligned chunk), and the rounded
// store of two fp16 outputs.  One copy for the library's kernels that use them (gemm/gemm_f16_mma,
// gemm/gemm_f16, gemm/gemm_f16_wgmma); NVRTC gets it in memory by this name
// (kernel_forge/kernels/library.py).  The tests' host emulation defines KF_EMULATED_PTX and supplies
// the PTX wrappers; the rest is shared with it.
#ifndef KF_EMULATED_PTX
// d += a (16 x 16, row) * b (16 x 8, col), fp16 inputs, fp32 accumulate.  With g = lane / 4, t = lane % 4
// (each register holds two halves, the lower column / row first):
//   a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..2t+1], a[2] = A[g][2t+8..2t+9], a[3] = A[g+8][2t+8..2t+9]
//   b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g]
//   d[0] = D[g][2t], d[1] = D[g][2t+1], d[2] = D[g+8][2t], d[3] = D[g+8][2t+1]
__device__ __forceinline__ void kf_mma_f16(float* d, const unsigned* a, const unsigned* b)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// the same fragments, bf16 inputs
__device__ __forceinline__ void kf_mma_bf16(float* d, const unsigned* a, const unsigned* b)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// four 8 x 8 matrices of 16-bit values: lanes 8j..8j+7 give the row addresses of matrix j; lane l
// gets in r[j] row l/4, columns 2(l%4) and 2(l%4)+1 of matrix j
__device__ __forceinline__ void kf_ldmatrix_x4(unsigned* r, const void* row)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

// the same, each matrix transposed: lane l gets in r[j] column l/4, rows 2(l%4) and 2(l%4)+1
__device__ __forceinline__ void kf_ldmatrix_x4_trans(unsigned* r, const void* row)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
#endif

// Shared rows are stored unpadded in 16-byte chunks: logical chunk c of row r lies at c ^ (r % 8) in
// rows of 8 or more chunks, at c ^ ((r / 2) % 4) in rows of 4 (two rows share a 128-byte line), so
// the 8 rows of one ldmatrix phase, read at one logical chunk, land in 8 different bank groups.
template <int CPR>
__device__ __forceinline__ int kf_swz(int r, int c)
{
    return CPR >= 8 ? (c ^ (r & 7)) : (c ^ ((r >> 1) & 3));
}

// 8 16-bit values of one row, from p[0..count) and zeros after (an unaligned or ragged chunk)
template <typename T>
__device__ __forceinline__ uint4 kf_gather8(const T* p, int count)
{
    unsigned short h[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        h[e] = e < count ? reinterpret_cast<const unsigned short*>(p)[e] : (unsigned short)0;
    }
    return make_uint4(h[0] | ((unsigned)h[1] << 16), h[2] | ((unsigned)h[3] << 16),
                      h[4] | ((unsigned)h[5] << 16), h[6] | ((unsigned)h[7] << 16));
}

// one chunk of 8 16-bit values of a row-major nrows x ncols matrix, from (gr, gc), into the 16 bytes
// at dst: by cp.async where `vec` (rows a multiple of 8 values, the matrix 16-byte aligned: a chunk
// then lies wholly inside or outside, and outside is zero-filled), else gathered value by value with
// zeros outside and stored directly.  (kf_cp_async16: kforge/cp_async.cuh, included before this.)
template <typename T>
__device__ __forceinline__ void kf_copy8(void* dst, const T* __restrict__ mat, int nrows, int ncols, int gr, int gc,
                                         bool vec)
{
    const T* src = mat + (size_t)gr * ncols + gc;
    if (vec) {
        const bool in = gr < nrows && gc < ncols;
        kf_cp_async16(dst, in ? src : mat, in ? 16 : 0);
    } else {
        *reinterpret_cast<uint4*>(dst) = kf_gather8(src, gr < nrows ? min(8, ncols - gc) : 0);
    }
}

// C[row][col] and C[row][col + 1] of the fp16 row crow (n values) from two fp32 accumulators,
// rounded once: one 4-byte store where `pair` (n even: every row starts 4-byte aligned) and both lie
// inside, else each one that lies inside
__device__ __forceinline__ void kf_store2_f16(__half* crow, int col, int n, float v0, float v1, bool pair)
{
    if (pair && col + 1 < n) {
        *reinterpret_cast<__half2*>(crow + col) = __floats2half2_rn(v0, v1);
    } else {
        if (col < n) crow[col] = __float2half_rn(v0);
        if (col + 1 < n) crow[col + 1] = __float2half_rn(v1);
    }
}
