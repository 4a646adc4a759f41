"""A host emulation of the CUDA subset the kernel library's templates use (a fiber per CUDA thread
on one OS thread, AddressSanitizer on exact-size buffers), for running a kernel on the CPU against the task's
reference with the task's tolerance: the tests of the templates (tests/kernels/test_tuner_templates.py),
the tensor-core patterns, the honest corpus and the bound patterns of tests/kinds/ use it.

:func:`host_compiler` says whether a C++20 compiler here builds and runs the emulation; :func:`emu_build`
builds a kernel at one setting, :func:`emu_run` runs it on a case and lists what differs from the
reference, :func:`emu_cases` the awkward sizes per task (:data:`EMU_CASES`). ``emu_build`` reads
:data:`EMU_TEMPLATE_EXTRA` when it runs, so a test may add to it (monkeypatch the module's name).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

import numpy as np

from kernel_forge.kernels import library
from kernel_forge.model.inputs import generate
from kernel_forge.model.reference_process import run_python_reference
from kernel_forge.model.task import Case
from kernel_forge.model.tolerance import compare

EMU_HEADER = r'''
// Host emulation of the CUDA subset the templates use.  Each CUDA thread of a block is a fiber
// (ucontext) on one OS thread, switched only where it waits at a barrier; blocks run one after
// another, so function-static "__shared__" arrays act as per-block shared memory.  __syncthreads
// and warp shuffles are barrier waits; a block whose every thread waits at a barrier that can no
// longer complete (a __syncthreads some threads never reach) is reported, not left to hang.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>
#include <sys/mman.h>
#include <ucontext.h>
#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

struct emu_dim3 { unsigned int x = 1, y = 1, z = 1; };
inline emu_dim3 blockIdx, blockDim, gridDim;
inline int emu_cur = 0;                      // the running fiber: its CUDA thread's index in the block
inline unsigned long long emu_progress = 0;  // barriers completed and fibers finished (deadlock check)

// the fibers and the scheduler that resumes them in turn.  A switch saves the callee-saved registers
// and the stack pointer (x86-64: a few instructions, no system call); ucontext elsewhere.
void emu_fiber_entry();
#if defined(__x86_64__)
extern "C" void emu_switch_stack(void** save_sp, void* load_sp);
asm(R"(
    .text
    .globl emu_switch_stack
    .type emu_switch_stack, @function
emu_switch_stack:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch_stack, .-emu_switch_stack
)");
using emu_context = void*;
inline void emu_swap(emu_context* from, emu_context* to) { emu_switch_stack(from, *to); }
inline void emu_make(emu_context* c, void* stack, size_t bytes)
{
    // six zero registers, then the entry as the return address (16-byte aligned as after a call)
    auto* top = reinterpret_cast<uintptr_t*>((reinterpret_cast<uintptr_t>(stack) + bytes) & ~uintptr_t(15));
    uintptr_t* sp = top - 8;
    for (int i = 0; i < 6; ++i) sp[i] = 0;
    sp[6] = reinterpret_cast<uintptr_t>(&emu_fiber_entry);
    sp[7] = 0;
    *c = sp;
}
#else
using emu_context = ucontext_t;
inline void emu_swap(emu_context* from, emu_context* to) { swapcontext(from, to); }
inline void emu_make(emu_context* c, void* stack, size_t bytes)
{
    getcontext(c);
    c->uc_stack.ss_sp = stack;
    c->uc_stack.ss_size = bytes;
    c->uc_link = nullptr;
    makecontext(c, emu_fiber_entry, 0);
}
#endif
inline emu_context emu_main_ctx;
inline std::vector<emu_context> emu_ctx;
inline std::vector<void*> emu_stack;
inline std::vector<char> emu_done;
inline const void* emu_main_bottom = nullptr;
inline size_t emu_main_size = 0;
inline std::function<void()> emu_body;
constexpr size_t EMU_STACK_BYTES = 1 << 20;

inline void emu_to_scheduler(bool finished)
{
#ifdef EMU_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(finished ? nullptr : &fake, emu_main_bottom, emu_main_size);
#endif
    emu_swap(&emu_ctx[emu_cur], &emu_main_ctx);
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, &emu_main_bottom, &emu_main_size);
#endif
}
inline void emu_yield() { emu_to_scheduler(false); }
void emu_fiber_entry()
{
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &emu_main_bottom, &emu_main_size);
#endif
    emu_body();
    emu_done[emu_cur] = 1;
    ++emu_progress;
    emu_to_scheduler(true);
}

// a barrier of n fibers: the last to arrive goes on; the others yield until it has
struct emu_barrier {
    int expected, arrived = 0;
    unsigned long long phase = 0;
    explicit emu_barrier(int n) : expected(n) {}
    void arrive_and_wait()
    {
        const unsigned long long mine = phase;
        if (++arrived == expected) {
            arrived = 0;
            ++phase;
            ++emu_progress;
            return;
        }
        while (phase == mine) emu_yield();
    }
};
inline emu_barrier* emu_block_bar = nullptr;
inline std::vector<emu_barrier*> emu_warp_bar;
inline uint64_t emu_warp_slot[32][32];
inline std::mutex emu_atomic_mu;
inline unsigned char* emu_dyn_smem = nullptr;
inline size_t emu_dyn_bytes = 0;            // its size: what a wgmma descriptor may reach

// what CUDA keeps per thread, kept per fiber (references stay valid: a deque grows at its end)
template <class T, class Tag> T& emu_local()
{
    static std::deque<T> per_thread;
    if (per_thread.size() <= (size_t)emu_cur) per_thread.resize(emu_cur + 1);
    return per_thread[emu_cur];
}
inline emu_dim3 emu_thread_idx()
{
    const unsigned t = (unsigned)emu_cur;
    return {t % blockDim.x, (t / blockDim.x) % blockDim.y, t / (blockDim.x * blockDim.y)};
}
#define threadIdx (emu_thread_idx())

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

inline int emu_tid() { return emu_cur; }
inline void __syncthreads() { emu_block_bar->arrive_and_wait(); }

template <class T> T __shfl_xor_sync(unsigned int, T v, int mask, int = 32)
{
    static_assert(sizeof(T) <= 8, "shuffle of a wide type");
    const int t = emu_tid(), w = t / 32, l = t % 32;
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    emu_warp_slot[w][l] = bits;
    emu_warp_bar[w]->arrive_and_wait();
    bits = emu_warp_slot[w][l ^ mask];
    emu_warp_bar[w]->arrive_and_wait();
    T r;
    std::memcpy(&r, &bits, sizeof(T));
    return r;
}

template <class T> T atomicAdd(T* p, T v)
{
    std::lock_guard<std::mutex> g(emu_atomic_mu);
    T old = *p;
    *p = old + v;
    return old;
}

struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(16) uint4 { unsigned int x, y, z, w; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
struct alignas(4) char4 { signed char x, y, z, w; };
inline char4 make_char4(signed char x, signed char y, signed char z, signed char w) { return {x, y, z, w}; }
struct alignas(4) uchar4 { unsigned char x, y, z, w; };

template <class T> T __ldg(const T* p) { return *p; }
template <class T> T __ldcs(const T* p) { return *p; }
template <class T> T __ldcg(const T* p) { return *p; }
template <class T> void __stcs(T* p, T v) { *p = v; }

inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __int_as_float(unsigned int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }

struct __nv_bfloat16 { uint16_t bits; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
inline float __bfloat162float(__nv_bfloat16 h) { return __int_as_float((unsigned int)h.bits << 16); }
inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    unsigned int u;
    std::memcpy(&u, &f, 4);
    if (std::isnan(f)) return {0x7FC0};
    u += 0x7FFFu + ((u >> 16) & 1u);
    return {(uint16_t)(u >> 16)};
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return {__bfloat162float(h.x), __bfloat162float(h.y)}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)}; }

template <class F> void emu_launch(emu_dim3 g, emu_dim3 b, size_t smem, F kern)
{
    const int T = b.x * b.y * b.z;
    blockDim = b;
    gridDim = g;
    std::vector<unsigned char> dyn(smem + 16, 0xCD);   // garbage: a kernel must initialise it
    emu_dyn_smem = dyn.data();
    emu_dyn_bytes = smem;
    emu_barrier block_bar(T), end_bar(T);
    emu_block_bar = &block_bar;
    for (int w = 0; w * 32 < T; ++w) emu_warp_bar.push_back(new emu_barrier(std::min(32, T - w * 32)));
    emu_body = [&] {
        for (unsigned z = 0; z < g.z; ++z)
            for (unsigned y = 0; y < g.y; ++y)
                for (unsigned x = 0; x < g.x; ++x) {
                    blockIdx.x = x; blockIdx.y = y; blockIdx.z = z;
                    kern();
                    end_bar.arrive_and_wait();
                }
    };
    emu_ctx.assign(T, emu_context{});
    emu_stack.assign(T, nullptr);
    emu_done.assign(T, 0);
    for (int t = 0; t < T; ++t) {
        emu_stack[t] = mmap(nullptr, EMU_STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (emu_stack[t] == MAP_FAILED) { std::perror("emulation: fiber stack"); std::abort(); }
        emu_make(&emu_ctx[t], emu_stack[t], EMU_STACK_BYTES);
    }
    for (int left = T; left > 0;) {
        const unsigned long long before = emu_progress;
        for (int t = 0; t < T; ++t) {
            if (emu_done[t]) continue;
            emu_cur = t;
#ifdef EMU_ASAN
            void* fake = nullptr;
            __sanitizer_start_switch_fiber(&fake, emu_stack[t], EMU_STACK_BYTES);
#endif
            emu_swap(&emu_main_ctx, &emu_ctx[t]);
#ifdef EMU_ASAN
            __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
            left -= emu_done[t];
        }
        if (left > 0 && emu_progress == before) {
            std::fprintf(stderr, "emulation: deadlock: all %d unfinished threads of block (%u, %u, %u) wait at a "
                         "barrier that cannot complete (a __syncthreads or warp operation some threads never reach)\n",
                         left, blockIdx.x, blockIdx.y, blockIdx.z);
            std::abort();
        }
    }
    for (void* st : emu_stack) munmap(st, EMU_STACK_BYTES);
    for (auto* w : emu_warp_bar) delete w;
    emu_warp_bar.clear();
    emu_cur = 0;
}
'''


# The tensor-core patterns' PTX wrappers (kernel_forge/kernels/gemm/gemm_*_mma.cu, kernel_forge/kernels/include/tf32_mma.cuh), emulated from the
# PTX ISA's fragment tables (section "Matrix Fragments for mma.m16n8k8 / m16n8k16", and ldmatrix),
# written apart from the kernels: a kernel that reads a fragment from the wrong row or column of its
# shared tile gives wrong products here.  cp.async is emulated at its latest completion: a thread's
# copies land only when a cp.async.wait_group retires their group, so a kernel that reads a stage
# before waiting for it reads the 0xCD garbage the emulated shared memory starts with.
EMU_TENSOR_CORE = r'''
#define KF_EMULATED_PTX 1
struct __half { uint16_t bits; };
struct __half2 { __half x, y; };
typedef __half2 half2;
inline float emu_h2f(uint16_t h)
{
    const unsigned s = (h >> 15) & 1u, e = (h >> 10) & 31u, m = h & 1023u;
    float v = e == 0 ? std::ldexp((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : std::ldexp((float)(m | 1024u), (int)e - 25);
    return s ? -v : v;
}
inline uint16_t emu_f2h(float f)             // round to nearest even, like __float2half_rn
{
    if (std::isnan(f)) return 0x7E00;
    const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    float a = std::fabs(f);
    if (a >= 65520.0f) return sign | 0x7C00;
    if (a < std::ldexp(1.0f, -14)) return sign | (uint16_t)std::nearbyint(a * std::ldexp(1.0f, 24));
    int e;
    std::frexp(a, &e);                       // a = f * 2^e, f in [0.5, 1)
    const float q = std::ldexp(1.0f, e - 11);  // the spacing of halves in [2^(e-1), 2^e)
    float r = std::nearbyint(a / q) * q;
    int e2;
    std::frexp(r, &e2);
    unsigned m = (unsigned)std::nearbyint(std::ldexp(r, 11 - e2)) - 1024u;   // r = (1024 + m) 2^(e2 - 11)
    if (e2 - 1 + 15 >= 31) return sign | 0x7C00;
    return sign | (uint16_t)(((e2 - 1 + 15) << 10) | m);
}
inline float __half2float(__half h) { return emu_h2f(h.bits); }
inline __half __float2half_rn(float f) { return {emu_f2h(f)}; }
inline __half __float2half(float f) { return __float2half_rn(f); }
inline __half2 __floats2half2_rn(float a, float b) { return {__float2half_rn(a), __float2half_rn(b)}; }
inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }

inline unsigned kf_tf32(float x)             // cvt.rna.tf32.f32: 13 low bits rounded off, ties away
{
    unsigned u = __float_as_uint(x);
    if ((u & 0x7F800000u) != 0x7F800000u) u = (u + 0x1000u) & ~0x1FFFu;
    return u;
}

// per warp and lane: what the lane hands to a warp-collective operation
inline float emu_frag[32][32][12];
inline const unsigned char* emu_rowptr[32][32];

// The tensor core's sum D = C + A*B: the products exact, their sum with C cut toward zero to fp32
// (Fasi et al., "Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021: round-toward-zero on
// V100/T4/A100; on an H100 one mma of C = 1 and a product of 0.75 ulp gave 1.0, and the 3xTF32
// GEMM's error on the H100/H200 agrees).  Modelled as the sum in double
// (exact for these 8-16 products of 11-bit operands unless their exponents lie far apart), then
// truncated: accumulating slice after slice into one C lets the cut pile up in one direction.
inline float emu_toward_zero(double s)
{
    float f = (float)s;
    if (std::fabs((double)f) > std::fabs(s)) f = std::nextafter(f, 0.0f);
    return f;
}

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (the hardware reads the top 19 bits of each operand)
inline void kf_mma_tf32(float* d, const unsigned* a, const unsigned* b)
{
    const int t = emu_tid(), w = t / 32, l = t % 32;
    for (int i = 0; i < 4; ++i) emu_frag[w][l][i] = __uint_as_float(a[i] & ~0x1FFFu);
    for (int i = 0; i < 2; ++i) emu_frag[w][l][4 + i] = __uint_as_float(b[i] & ~0x1FFFu);
    emu_warp_bar[w]->arrive_and_wait();
    float A[16][8], B[8][8];
    for (int L = 0; L < 32; ++L) {
        const int g = L >> 2, q = L & 3;
        const float* f = emu_frag[w][L];
        A[g][q] = f[0]; A[g + 8][q] = f[1]; A[g][q + 4] = f[2]; A[g + 8][q + 4] = f[3];
        B[q][g] = f[4]; B[q + 4][g] = f[5];
    }
    emu_warp_bar[w]->arrive_and_wait();
    const int g = l >> 2, q = l & 3;
    for (int r = 0; r < 4; ++r) {
        const int row = g + 8 * (r / 2), col = 2 * q + (r % 2);
        double s = d[r];
        for (int kk = 0; kk < 8; ++kk) s += (double)A[row][kk] * B[kk][col];
        d[r] = emu_toward_zero(s);
    }
}

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32: `value` reads one 16-bit operand
inline float emu_bf2f(uint16_t h) { return __uint_as_float((unsigned)h << 16); }
inline void emu_mma_m16n8k16(float* d, const unsigned* a, const unsigned* b, float (*value)(uint16_t))
{
    const int t = emu_tid(), w = t / 32, l = t % 32;
    for (int i = 0; i < 4; ++i) {
        emu_frag[w][l][2 * i] = value(a[i] & 0xFFFF);
        emu_frag[w][l][2 * i + 1] = value(a[i] >> 16);
    }
    for (int i = 0; i < 2; ++i) {
        emu_frag[w][l][8 + 2 * i] = value(b[i] & 0xFFFF);
        emu_frag[w][l][8 + 2 * i + 1] = value(b[i] >> 16);
    }
    emu_warp_bar[w]->arrive_and_wait();
    float A[16][16], B[16][8];
    for (int L = 0; L < 32; ++L) {
        const int g = L >> 2, q = L & 3;
        const float* f = emu_frag[w][L];
        for (int i = 0; i < 8; ++i) {           // a_i: rows g (i in 0,1,4,5) or g+8; cols 2q + (i&1) (+8 for i >= 4)
            const int row = g + ((i & 2) ? 8 : 0), col = 2 * q + (i & 1) + (i >= 4 ? 8 : 0);
            A[row][col] = f[i];
        }
        for (int i = 0; i < 4; ++i)              // b_i: rows 2q + (i&1) (+8 for i >= 2), col g
            B[2 * q + (i & 1) + (i >= 2 ? 8 : 0)][g] = f[8 + i];
    }
    emu_warp_bar[w]->arrive_and_wait();
    const int g = l >> 2, q = l & 3;
    for (int r = 0; r < 4; ++r) {
        const int row = g + 8 * (r / 2), col = 2 * q + (r % 2);
        double s = d[r];
        for (int kk = 0; kk < 16; ++kk) s += (double)A[row][kk] * B[kk][col];
        d[r] = emu_toward_zero(s);
    }
}
inline void kf_mma_f16(float* d, const unsigned* a, const unsigned* b) { emu_mma_m16n8k16(d, a, b, emu_h2f); }
inline void kf_mma_bf16(float* d, const unsigned* a, const unsigned* b) { emu_mma_m16n8k16(d, a, b, emu_bf2f); }

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lanes 8j..8j+7 give the 8 row addresses (16 bytes
// each) of matrix j; lane l receives in r[j] row l/4, elements 2(l%4) and 2(l%4)+1 of matrix j
// (.trans: column l/4, rows 2(l%4) and 2(l%4)+1)
inline void emu_ldmatrix(unsigned* r, const void* row, bool trans)
{
    const int t = emu_tid(), w = t / 32, l = t % 32;
    if (reinterpret_cast<uintptr_t>(row) % 16) { std::fprintf(stderr, "ldmatrix: row address not 16-byte aligned\n"); std::abort(); }
    emu_rowptr[w][l] = static_cast<const unsigned char*>(row);
    emu_warp_bar[w]->arrive_and_wait();
    for (int j = 0; j < 4; ++j) {
        uint16_t h[2];
        for (int e = 0; e < 2; ++e) {
            const int rr = trans ? 2 * (l % 4) + e : l / 4, cc = trans ? l / 4 : 2 * (l % 4) + e;
            std::memcpy(&h[e], emu_rowptr[w][8 * j + rr] + 2 * cc, 2);
        }
        r[j] = (unsigned)h[0] | ((unsigned)h[1] << 16);
    }
    emu_warp_bar[w]->arrive_and_wait();
}
inline void kf_ldmatrix_x4(unsigned* r, const void* row) { emu_ldmatrix(r, row, false); }
inline void kf_ldmatrix_x4_trans(unsigned* r, const void* row) { emu_ldmatrix(r, row, true); }

// wgmma.mma_async.m64nNk16.f32.{f16,bf16} (sm_90a), A and B from shared memory through descriptors,
// from the PTX ISA's "Matrix Descriptor Format" (start, LBO, SBO >> 4 in bits 0-13, 16-29, 32-45;
// base offset 49-51; swizzle 62-63, 1 = 128 bytes) and its canonical layouts for 16-bit elements
// (T = 8 of them in 16 bytes), in bytes, for element (i along M or N, kk along K):
//   K-major ((8,m),(T,2)):((128,SBO),(2,16)):   (i%8)*128 + (i/8)*SBO + (kk%8)*2 + (kk/8)*16
//   MN-major ((T,8,m),(8,2)):((2,16,LBO),(128,SBO)): (i%8)*2 + (i/8%8)*16 + (i/64)*LBO + (kk%8)*128 + (kk/8)*SBO
// A is K-major unless imm-trans-a (TA) is 1, B unless imm-trans-b (TB) is 1; the 128-byte swizzle
// then XORs address bits 4-6 with bits 7-9.  Written apart from the kernels: a stage laid out other
// than these tables say gives wrong products.  Each thread computes its own accumulators (the m64nN
// fragment: warp w, lane l, register i hold D[16w + l/4 + 8((i%4)/2)][8(i/4) + 2(l%4) + i%2]) when it
// issues, so the fences, commits and waits are no-ops here; shared memory reads are checked against
// the window.
inline unsigned kf_smem_u32(const void* p) { return (unsigned)(static_cast<const unsigned char*>(p) - emu_dyn_smem); }
inline void kf_fence_proxy_async() {}
inline void kf_wgmma_fence() {}
inline void kf_wgmma_commit() {}
template <int N> void kf_wgmma_wait() {}
template <int R> void kf_wgmma_hold(float*) {}
struct emu_wgmma_desc { unsigned start, lbo, sbo; };
inline emu_wgmma_desc emu_wgmma_decode(unsigned long long d)
{
    if (((d >> 62) & 3) != 1 || ((d >> 49) & 7) != 0) {
        std::fprintf(stderr, "wgmma descriptor: swizzle mode %llu, base offset %llu (emulated: 128-byte swizzle, base offset 0)\n",
                     (d >> 62) & 3, (d >> 49) & 7);
        std::abort();
    }
    return {(unsigned)(d & 0x3FFF) << 4, (unsigned)((d >> 16) & 0x3FFF) << 4, (unsigned)((d >> 32) & 0x3FFF) << 4};
}
// the byte offset of element (i, kk) of an operand from its descriptor's start
inline unsigned emu_wgmma_offset(const emu_wgmma_desc& e, int i, int kk, bool mn_major)
{
    if (mn_major) return (i % 8) * 2 + ((i / 8) % 8) * 16 + (i / 64) * e.lbo + (kk % 8) * 128 + (kk / 8) * e.sbo;
    return (i % 8) * 128 + (i / 8) * e.sbo + (kk % 8) * 2 + (kk / 8) * 16;
}
// the `bytes` bytes of an operand element at (unswizzled) shared address addr, under the 128-byte swizzle
inline void emu_wgmma_read(unsigned addr, void* out, int bytes)
{
    addr ^= ((addr >> 7) & 7u) << 4;
    if ((size_t)addr + bytes > emu_dyn_bytes) {
        std::fprintf(stderr, "wgmma: operand byte %u outside the %zu bytes of dynamic shared memory\n", addr, emu_dyn_bytes);
        std::abort();
    }
    std::memcpy(out, emu_dyn_smem + addr, bytes);
}
inline float emu_wgmma_at(unsigned addr, bool bf16)
{
    uint16_t h;
    emu_wgmma_read(addr, &h, 2);
    return bf16 ? emu_bf2f(h) : emu_h2f(h);
}
template <int N, int TA, int TB, bool BF16> void emu_wgmma(float* d, unsigned long long da, unsigned long long db)
{
    const emu_wgmma_desc A = emu_wgmma_decode(da), B = emu_wgmma_decode(db);
    const int t = emu_tid() % 128, w = t / 32, l = t % 32;
    for (int i = 0; i < N / 2; ++i) {
        const int row = 16 * w + l / 4 + 8 * ((i % 4) / 2), col = 8 * (i / 4) + 2 * (l % 4) + i % 2;
        double s = d[i];
        for (int kk = 0; kk < 16; ++kk) {
            s += (double)emu_wgmma_at(A.start + emu_wgmma_offset(A, row, kk, TA == 1), BF16)
               * emu_wgmma_at(B.start + emu_wgmma_offset(B, col, kk, TB == 1), BF16);
        }
        d[i] = emu_toward_zero(s);
    }
}
template <int TA, int TB, bool BF16> void kf_wgmma_n64(float* d, unsigned long long da, unsigned long long db) { emu_wgmma<64, TA, TB, BF16>(d, da, db); }
template <int TA, int TB, bool BF16> void kf_wgmma_n128(float* d, unsigned long long da, unsigned long long db) { emu_wgmma<128, TA, TB, BF16>(d, da, db); }
template <int TA, int TB, bool BF16> void kf_wgmma_n256(float* d, unsigned long long da, unsigned long long db) { emu_wgmma<256, TA, TB, BF16>(d, da, db); }

// wgmma.mma_async.m64nNk8.f32.tf32.tf32 with A from registers (sm_90a): the warpgroup's m64k8
// fragment (CUTLASS's ALayout_64x8 for 32-bit values: thread 32w + l, value v hold A[16w + l/4 +
// 8(v%2)][l%4 + 4(v/2)]); B K-major through its descriptor, 4-byte elements (T = 4 in 16 bytes):
//   ((8,m),(T,2)):((128,SBO),(4,16)):   (i%8)*128 + (i/8)*SBO + (kk%4)*4 + (kk/4)*16
// each operand's top 19 bits (the hardware ignores the low 13), the sum cut toward zero; scale_d 0:
// D = A*B.  Every warpgroup of the block issues the same wgmmas in the same order (the kernels'
// loops are uniform), so a block barrier publishes the fragments.
inline unsigned emu_wg_a[1024][4];
template <int R> void kf_wgmma_hold_u(unsigned*) {}
template <int N> void kf_wgmma_tf32(float* d, const unsigned* a, unsigned long long db, int scale_d)
{
    const int tid = emu_tid(), t = tid % 128, base = tid - t, w = t / 32, l = t % 32;
    for (int v = 0; v < 4; ++v) emu_wg_a[tid][v] = a[v];
    __syncthreads();
    const emu_wgmma_desc B = emu_wgmma_decode(db);
    float out[N / 2];
    for (int i = 0; i < N / 2; ++i) {
        const int row = 16 * w + l / 4 + 8 * ((i % 4) / 2), col = 8 * (i / 4) + 2 * (l % 4) + i % 2;
        double s = scale_d ? d[i] : 0.0;
        for (int kk = 0; kk < 8; ++kk) {
            const unsigned av = emu_wg_a[base + 32 * (row / 16) + 4 * (row % 8) + kk % 4][(row % 16) / 8 + 2 * (kk / 4)];
            unsigned bv;
            emu_wgmma_read(B.start + (col % 8) * 128 + (col / 8) * B.sbo + (kk % 4) * 4 + (kk / 4) * 16, &bv, 4);
            s += (double)__uint_as_float(av & ~0x1FFFu) * __uint_as_float(bv & ~0x1FFFu);
        }
        out[i] = emu_toward_zero(s);
    }
    __syncthreads();
    for (int i = 0; i < N / 2; ++i) d[i] = out[i];
}

// cp.async: each thread's copies are queued in groups and land when a wait retires their group
struct emu_copy { void* dst; const void* src; int bytes, size; };
struct emu_open_group_tag;
struct emu_groups_tag;
#define emu_open_group (emu_local<std::vector<emu_copy>, emu_open_group_tag>())
#define emu_groups (emu_local<std::vector<std::vector<emu_copy>>, emu_groups_tag>())
inline void emu_cp_async(void* dst, const void* src, int size, int src_bytes)
{
    if (reinterpret_cast<uintptr_t>(dst) % size || (src_bytes && reinterpret_cast<uintptr_t>(src) % size)) {
        std::fprintf(stderr, "cp.async of %d bytes: misaligned address\n", size);
        std::abort();
    }
    emu_copy c{dst, src, src_bytes, size};
    emu_open_group.push_back(c);
}
inline void kf_cp_async16(void* dst, const void* src, int src_bytes) { emu_cp_async(dst, src, 16, src_bytes); }
inline void kf_cp_async4(void* dst, const void* src, int src_bytes) { emu_cp_async(dst, src, 4, src_bytes); }
inline void kf_cp_async_commit() { emu_groups.push_back(emu_open_group); emu_open_group.clear(); }
template <int N> void kf_cp_async_wait()
{
    while ((int)emu_groups.size() > N) {
        for (const emu_copy& c : emu_groups.front()) {
            std::memcpy(c.dst, c.src, c.bytes);
            std::memset(static_cast<unsigned char*>(c.dst) + c.bytes, 0, c.size - c.bytes);
        }
        emu_groups.erase(emu_groups.begin());
    }
}
'''


# what the emulation of the templates adds to EMU_HEADER (kept apart: the corpus emulation,
# tests/gate/test_adversarial_emulated.py, brings its own)
EMU_TEMPLATE_EXTRA = r'''
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
using std::min;
using std::max;
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
''' + EMU_TENSOR_CORE


# Small awkward sizes per task; they reach the paths the manifests' correctness cases miss
# (float4 paths need cols/k/n % 4 == 0, wide-row fallbacks need cols above a group's capacity).
EMU_CASES = {
    "vector_add": [{"n": 1}, {"n": 37}, {"n": 4096 + 7}, {"n": 70001}],
    "gelu_bf16": [{"n": 1}, {"n": 37}, {"n": 8 * 1024 + 5}, {"n": 70001}],
    "reduce_sum": [{"n": 1}, {"n": 37}, {"n": 200003}],
    "histogram": [{"n": 1, "nbins": 5}, {"n": 4099, "nbins": 3}, {"n": 70001, "nbins": 256},
                  {"n": 5003, "nbins": 2000}],
    "transpose": [{"rows": 1, "cols": 1}, {"rows": 37, "cols": 101}, {"rows": 101, "cols": 3},
                  {"rows": 64, "cols": 128}],
    "matmul_f32": [{"m": 31, "n": 37, "k": 29}, {"m": 70, "n": 33, "k": 1}, {"m": 1, "n": 515, "k": 101},
                   {"m": 67, "n": 36, "k": 44}, {"m": 130, "n": 132, "k": 20}, {"m": 33, "n": 7, "k": 12}],
    # k % 8 == 0 and n % 8 == 0 reach the cp.async path, the others the half-by-half gather
    "matmul_f16": [{"m": 67, "n": 72, "k": 48}, {"m": 31, "n": 37, "k": 29}, {"m": 130, "n": 136, "k": 104},
                   {"m": 70, "n": 33, "k": 1}, {"m": 1, "n": 515, "k": 101}, {"m": 33, "n": 64, "k": 12}],
    "softmax_rows": [{"rows": 37, "cols": 1001}, {"rows": 67, "cols": 3}, {"rows": 2, "cols": 50021},
                     {"rows": 5, "cols": 4096}, {"rows": 9, "cols": 1024}, {"rows": 3, "cols": 8196},
                     {"rows": 2, "cols": 36}],
    "layernorm": [{"rows": 37, "cols": 1001}, {"rows": 67, "cols": 7}, {"rows": 2, "cols": 33000},
                  {"rows": 5, "cols": 8192}, {"rows": 9, "cols": 1024}, {"rows": 3, "cols": 36}],
}


def _emu_main(task) -> str:
    lines = ['#include "emu.h"', '#include "kernel.cu"',
             'static void* emu_load(const char* p, size_t n) { void* b = std::malloc(n ? n : 1); '
             'FILE* f = std::fopen(p, "rb"); if (!f || std::fread(b, 1, n, f) != n) std::abort(); '
             'std::fclose(f); return b; }',
             'static void emu_save(const char* p, const void* b, size_t n) { FILE* f = std::fopen(p, "wb"); '
             'std::fwrite(b, 1, n, f); std::fclose(f); }',
             'int main(int, char** argv) {',
             '  emu_dim3 g{(unsigned)std::atoi(argv[1]), (unsigned)std::atoi(argv[2]), (unsigned)std::atoi(argv[3])};',
             '  emu_dim3 bl{(unsigned)std::atoi(argv[4]), (unsigned)std::atoi(argv[5]), (unsigned)std::atoi(argv[6])};',
             '  size_t smem = std::atol(argv[7]);']
    call, saves, ai = [], [], 8
    for i, p in enumerate(task.signature.params):
        ctype = p.text.rsplit(p.name, 1)[0].replace("__restrict__", "").strip()
        if p.pointer:
            lines.append(f"  void* p{i} = emu_load(argv[{ai}], std::atol(argv[{ai + 1}]));")
            call.append(f"({ctype})p{i}")
            saves.append(f"  emu_save(argv[{ai}], p{i}, std::atol(argv[{ai + 1}]));")
            ai += 2
        else:
            conv = "std::atof" if p.dtype.is_float else "std::atoll"
            lines.append(f"  {ctype} p{i} = ({ctype}){conv}(argv[{ai}]);")
            call.append(f"p{i}")
            ai += 1
    lines.append(f"  emu_launch(g, bl, smem, [&] {{ {task.name}({', '.join(call)}); }});")
    lines += saves + ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


@lru_cache(maxsize=1)
def host_compiler() -> tuple[str, tuple[str, ...]] | None:
    """(compiler, sanitizer flags) if a C++20 compiler builds and runs the emulation here (fibers,
    barriers, a warp shuffle; under AddressSanitizer where it can), else None."""
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")
    if not cxx:
        return None
    import tempfile

    with tempfile.TemporaryDirectory() as td:
        (Path(td) / "emu.h").write_text(EMU_HEADER)
        src = Path(td) / "probe.cpp"
        src.write_text(EMU_PROBE)
        for flags in (("-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"), ()):
            r = subprocess.run([cxx, "-std=c++20", "-pthread", *flags, f"-I{td}", str(src), "-o", str(Path(td) / "p")],
                               capture_output=True)
            if r.returncode == 0 and subprocess.run([str(Path(td) / "p")], capture_output=True,
                                                    env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0")).returncode == 0:
                return cxx, flags
    return None


#: the emulation's own check: 64 threads, two warps, a block barrier and a shuffle per warp
EMU_PROBE = r"""
#include "emu.h"
static int out[64];
void probe()
{
    __shared__ int s[64];
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = s[63 - threadIdx.x] + __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}
int main()
{
    emu_launch(emu_dim3{2, 1, 1}, emu_dim3{64, 1, 1}, 0, [] { probe(); });
    for (int t = 0; t < 64; ++t)
        if (out[t] != 63 - t + (t ^ 1)) return 1;
    return 0;
}
"""


#: what every emulation build is compiled with (and its precompiled header, which must match)
BUILD_FLAGS = ("-std=c++20", "-O1", "-pthread", "-w")


@lru_cache(maxsize=4)
def _header_dir(header: str) -> Path:
    """A folder (removed at exit) holding ``header`` as emu.h and, where the compiler is GCC, emu.h
    precompiled with the build's flags: every build then skips parsing the standard headers again
    (0.6 of 1.4 s on a 2-core machine).  GCC takes the precompiled header whatever the build's
    -D tunables, which emu.h never reads; a compiler that cannot use it parses emu.h instead."""
    import atexit
    import tempfile

    cxx, flags = host_compiler()
    d = Path(tempfile.mkdtemp(prefix="kforge-emu-"))
    atexit.register(shutil.rmtree, d, True)
    (d / "emu.h").write_text(header)
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    if "Free Software Foundation" in version:
        subprocess.run([cxx, *BUILD_FLAGS, *flags, "-x", "c++-header", str(d / "emu.h"), "-o", str(d / "emu.h.gch")],
                       capture_output=True)
    return d


def emu_build(task, cand, defines, workdir: Path) -> Path:
    cxx, flags = host_compiler()
    from kernel_forge.model.template_instance import instantiated

    src = re.sub(r"extern\s+__shared__\s+([\w ]+?)\s+(\w+)\s*\[\s*\]\s*;",   # a template as its instance, as NVRTC compiles it
                 r"\1* \2 = reinterpret_cast<\1*>(emu_dyn_smem);", instantiated(cand.source))
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "cuda_bf16.h").write_text("// provided by emu.h\n")
    (workdir / "cuda_fp16.h").write_text("// provided by emu.h\n")
    for name, text in library.headers().items():        # kforge/*.cuh: what of them is not PTX
        (workdir / name).parent.mkdir(exist_ok=True)
        (workdir / name).write_text(text)
    (workdir / "kernel.cu").write_text(src)
    (workdir / "main.cpp").write_text(_emu_main(task))
    exe = workdir / "emu"
    # emu.h is found in the header folder (not beside main.cpp), where its precompiled form lies
    cmd = [cxx, *BUILD_FLAGS, *flags, f"-I{workdir}", f"-I{_header_dir(EMU_HEADER + EMU_TEMPLATE_EXTRA)}",
           *[f"-D{k}={v}" for k, v in sorted(defines.items())], "-x", "c++", str(workdir / "main.cpp"),
           "-o", str(exe)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    return exe


def emu_run(task, cand, defines, exe: Path, case: Case, workdir: Path) -> list[str]:
    """Problems found running ``case`` (empty: the outputs match the reference)."""
    grid, block, smem = cand.launch.resolve({**case.vars, **defines})
    inputs = generate(task, case, seed=1)
    argv = [str(exe), *map(str, grid), *map(str, block), str(smem)]
    files = {}
    for a in task.args:
        if a.is_buffer:
            arr = np.ascontiguousarray(inputs.buffers[a.name])   # outputs arrive poisoned
            p = workdir / f"{case.name}.{a.name}.bin"
            arr.tofile(p)
            files[a.name] = (p, arr.dtype, arr.shape)
            argv += [str(p), str(arr.nbytes)]
        else:
            argv.append(repr(inputs.scalars[a.name]))
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    if r.returncode:
        return [f"{case.name} {case.vars}: exit {r.returncode}\n{r.stderr[-3000:]}"]
    ref = run_python_reference(task, inputs)
    problems = []
    for a in task.outputs:
        p, dtype, shape = files[a.name]
        got = np.fromfile(p, dtype=dtype).reshape(shape)
        check = compare(a.name, got, ref[a.name], a.param.dtype, task.tolerance_for(a))
        if not check.ok:
            problems.append(f"{case.name} {case.vars} {defines}: {check.summary()}")
    return problems


def emu_cases(task, full: bool) -> list[Case]:
    defaults = task.raw.get("defaults", {})
    cases = [Case(f"emu{i}", "correctness", {**defaults, **v}, 1000 + i)
             for i, v in enumerate(EMU_CASES[task.name])]
    if full:
        cases = list(task.cases_with("correctness", "holdout")) + cases
    return cases
