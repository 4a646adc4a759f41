"""Run in a fresh process by tests/gpu/test_timing_gpu.py: the kernel clock must be enabled before
the CUDA context exists, which a pytest process that already touched CUDA cannot do.

    python -m tests.support.gpu_timing_child SCENARIO   -> one JSON object on stdout

from the repository root (or with it on PYTHONPATH).
"""
from __future__ import annotations

import json
import sys

from kernel_forge.gpu import kernel_clock

CLOCK_OFF = kernel_clock.enable()

import numpy as np  # noqa: E402

SRC = r"""
#define T 16
__device__ __forceinline__ float ld_last(const float* p, unsigned long long pol) {
    float v;
    asm volatile("ld.global.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(v) : "l"(p), "l"(pol));
    return v;
}
template <bool LAST>
__device__ void mm(const float* a, const float* b, float* c, int m, int n, int k) {
    __shared__ float as[T][T], bs[T][T];
    unsigned long long pol = 0;
    if (LAST) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    int row = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
    float acc = 0.f;
    for (int t = 0; t < k; t += T) {
        const float* pa = a + row * k + t + threadIdx.x;
        const float* pb = b + (t + threadIdx.y) * n + col;
        as[threadIdx.y][threadIdx.x] = (row < m && t + threadIdx.x < k) ? (LAST ? ld_last(pa, pol) : *pa) : 0.f;
        bs[threadIdx.y][threadIdx.x] = (col < n && t + threadIdx.y < k) ? (LAST ? ld_last(pb, pol) : *pb) : 0.f;
        __syncthreads();
        for (int q = 0; q < T; ++q) acc += as[threadIdx.y][q] * bs[q][threadIdx.x];
        __syncthreads();
    }
    if (row < m && col < n) c[row * n + col] = acc;
}
extern "C" __global__ void mm_plain(const float* a, const float* b, float* c, int m, int n, int k) { mm<false>(a, b, c, m, n, k); }
extern "C" __global__ void mm_last(const float* a, const float* b, float* c, int m, int n, int k) { mm<true>(a, b, c, m, n, k); }
extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

__device__ float g_cache[1 << 18];
__device__ int g_counter = 5;
static __device__ int s_static;
namespace { __device__ int anon_var[3]; }
namespace ns { __device__ double ns_var = 1.5; }
extern "C" __global__ void stateful(float* out) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        out[0] = g_cache[7] + g_counter + s_static + anon_var[1] + (float)ns::ns_var;
        g_cache[7] += 1.f; g_counter += 1; s_static += 2; anon_var[1] += 3; ns::ns_var += 0.5;
    }
}
"""


def setup():
    import cupy as cp

    from kernel_forge.gpu import driver
    from kernel_forge.gpu.nvrtc import compile_source

    cp.zeros(1)
    info = driver.device_info(0)
    cubin = compile_source(SRC, arch=info.arch, use_cache=False).cubin
    return cp, driver, info, cubin


def matmul_launch(cp, driver, cubin, entry, stream, m=256, n=256, k=256):
    mod = driver.Module(cubin, entry)
    a = cp.random.standard_normal(m * k, dtype=cp.float32)
    b = cp.random.standard_normal(k * n, dtype=cp.float32)
    c = cp.empty(m * n, dtype=cp.float32)
    args = driver.PackedArgs([(a.data.ptr, driver.ctypes.c_void_p), (b.data.ptr, driver.ctypes.c_void_p),
                              (c.data.ptr, driver.ctypes.c_void_p), (m, driver.ctypes.c_int),
                              (n, driver.ctypes.c_int), (k, driver.ctypes.c_int)])

    def launch():
        driver.launch(mod, ((n + 15) // 16, (m + 15) // 16, 1), (16, 16, 1), 0, stream.ptr, args)
    launch.keep = (mod, a, b, c, args)
    cp.cuda.Device().synchronize()   # the inputs were drawn on the default stream, which `stream` does not wait for
    return launch, (a, b, c)


def scenario_clock():
    """CUPTI samples vs events on a vector add and a small matmul, flushed."""
    cp, driver, info, cubin = setup()
    from kernel_forge.gpu.flush import L2Flusher
    from kernel_forge.gpu.timing import bench

    stream = cp.cuda.Stream(non_blocking=True)
    flusher = L2Flusher(info.l2_bytes, info.sms)
    clock = kernel_clock.clock()
    out = {"clock_off": CLOCK_OFF}
    n = 1 << 24
    mod = driver.Module(cubin, "vadd")
    a = cp.random.standard_normal(n, dtype=cp.float32)
    b = cp.random.standard_normal(n, dtype=cp.float32)
    c = cp.empty(n, dtype=cp.float32)
    cp.cuda.Device().synchronize()
    args = driver.PackedArgs([(a.data.ptr, driver.ctypes.c_void_p), (b.data.ptr, driver.ctypes.c_void_p),
                              (c.data.ptr, driver.ctypes.c_void_p), (n, driver.ctypes.c_int)])
    t = bench(lambda: driver.launch(mod, ((n + 255) // 256, 1, 1), (256, 1, 1), 0, stream.ptr, args), stream,
              warmup=5, reps=50, flush=flusher, clock=clock)
    out["vadd"] = {"method": t.method, "median": t.median, "cv": t.cv, "events": (t.events or {}).get("median")}
    mm, _ = matmul_launch(cp, driver, cubin, "mm_plain", stream)
    t = bench(mm, stream, warmup=5, reps=50, flush=flusher, clock=clock)
    out["mm"] = {"method": t.method, "median": t.median, "cv": t.cv, "events": (t.events or {}).get("median")}
    # no flush: the marker separates the launches
    t = bench(mm, stream, warmup=5, reps=50, clock=clock, marker=lambda: flusher.mark(stream))
    out["mm_noflush"] = {"method": t.method, "median": t.median, "events": (t.events or {}).get("median")}
    return out


def scenario_l2():
    """evict_last loads vs plain loads, flushed with the harness flusher and with a memset."""
    cp, driver, info, cubin = setup()
    from kernel_forge.gpu.flush import L2Flusher
    from kernel_forge.gpu.timing import bench

    stream = cp.cuda.Stream(non_blocking=True)
    flusher = L2Flusher(info.l2_bytes, info.sms)
    buf = cp.empty(2 * info.l2_bytes, dtype=cp.uint8)

    def memset(s):
        with s:
            buf.fill(0)
    clock = kernel_clock.clock()
    out = {}
    for shape in ((256, 256, 256), (384, 256, 320)):
        row = {}
        for entry in ("mm_plain", "mm_last"):
            launch, _ = matmul_launch(cp, driver, cubin, entry, stream, *shape)
            row[entry] = {
                "harness": bench(launch, stream, warmup=5, reps=60, flush=flusher, clock=clock).median,
                "memset": bench(launch, stream, warmup=5, reps=60, flush=memset).median,
                "warm": bench(launch, stream, warmup=5, reps=60, clock=clock,
                              warm=lambda: flusher.warm(list(launch.keep[1:3]), stream),
                              marker=lambda: flusher.mark(stream)).median,
            }
        out["x".join(map(str, shape))] = row
    return out


def scenario_state():
    """Module globals restored to their load-time image; changes named."""
    cp, driver, info, cubin = setup()
    from kernel_forge.gpu.fingerprint import new_key
    from kernel_forge.gpu.module_state import ModuleState

    stream = cp.cuda.Stream(non_blocking=True)
    mod = driver.Module(cubin, "stateful")
    state = ModuleState(mod, cubin)
    with stream:
        res = cp.zeros(1, dtype=cp.float32)
    args = driver.PackedArgs([(res.data.ptr, driver.ctypes.c_void_p)])

    def run():
        driver.launch(mod, (1, 1, 1), (32, 1, 1), 0, stream.ptr, args)
        stream.synchronize()
        return float(res.get()[0])
    first = run()
    second = run()                          # state kept: the value grew
    changed = state.changed(stream)
    state.restore(stream)
    stream.synchronize()
    after_restore = run()                   # back to the first launch's view
    state.restore(stream)
    stream.synchronize()
    clean = state.changed(stream)
    return {"first": first, "second": second, "after_restore": after_restore, "changed": changed,
            "clean": clean, "missing": state.missing, "complete": state.complete, "names": state.names,
            "ranges": [(r.label, r.size) for r in state.ranges], "nbytes": state.nbytes,
            "intact": state.image_intact(stream)}


if __name__ == "__main__":
    result = {"clock": scenario_clock, "l2": scenario_l2, "state": scenario_state}[sys.argv[1]]()
    print(json.dumps(result, default=lambda o: float(o) if isinstance(o, np.floating) else str(o)))
