"""Measurements that decide the design of the second-generation gate (issue: Step 5) and the
diagnosis (Step 4), in one device call.  Writes JSON and logs under --out.

  timing   CUDA-event medians vs CUPTI kernel durations vs a blocking-kernel queue, and ncu's
           gpu__time_duration, on the same kernels and sizes
  l2       plain vs evict_last tiled matmul under several L2 flush methods
  state    cost of restoring module globals vs reloading the module
  ncu      what a short ncu profile costs and which metrics it gives
  device   every device attribute (the shipped device description is built from it)
  compare  cost of a GPU-side tolerance check and of device-to-device input restores
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[4]     # the repository (this script sits beside its evidence)
sys.path.insert(0, str(ROOT))

SRC = r"""
extern "C" __global__ void k_empty() {}

extern "C" __global__ void k_vadd(const float* a, const float* b, float* c, int n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

#define T 16
extern "C" __global__ void k_mm_plain(const float* a, const float* b, float* c, int m, int n, int k) {
    __shared__ float as[T][T], bs[T][T];
    int row = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
    float acc = 0.f;
    for (int t = 0; t < k; t += T) {
        as[threadIdx.y][threadIdx.x] = (row < m && t + threadIdx.x < k) ? a[row * k + t + threadIdx.x] : 0.f;
        bs[threadIdx.y][threadIdx.x] = (col < n && t + threadIdx.y < k) ? b[(t + threadIdx.y) * n + col] : 0.f;
        __syncthreads();
        for (int q = 0; q < T; ++q) acc += as[threadIdx.y][q] * bs[q][threadIdx.x];
        __syncthreads();
    }
    if (row < m && col < n) c[row * n + col] = acc;
}

__device__ __forceinline__ float ld_last(const float* p, unsigned long long pol) {
    float v;
    asm volatile("ld.global.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(v) : "l"(p), "l"(pol));
    return v;
}

extern "C" __global__ void k_mm_last(const float* a, const float* b, float* c, int m, int n, int k) {
    __shared__ float as[T][T], bs[T][T];
    unsigned long long pol;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    int row = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
    float acc = 0.f;
    for (int t = 0; t < k; t += T) {
        as[threadIdx.y][threadIdx.x] = (row < m && t + threadIdx.x < k) ? ld_last(a + row * k + t + threadIdx.x, pol) : 0.f;
        bs[threadIdx.y][threadIdx.x] = (col < n && t + threadIdx.y < k) ? ld_last(b + (t + threadIdx.y) * n + col, pol) : 0.f;
        __syncthreads();
        for (int q = 0; q < T; ++q) acc += as[threadIdx.y][q] * bs[q][threadIdx.x];
        __syncthreads();
    }
    if (row < m && col < n) c[row * n + col] = acc;
}

extern "C" __global__ void k_mm_prefetch_last(const float* a, const float* b, float* c, int m, int n, int k) {
    // prefetch the operands into L2 with evict_last priority, then a plain tiled product
    long long tid = (long long)blockIdx.y * gridDim.x * blockDim.x * blockDim.y + blockIdx.x * blockDim.x * blockDim.y
                  + threadIdx.y * blockDim.x + threadIdx.x;
    long long nthreads = (long long)gridDim.x * gridDim.y * blockDim.x * blockDim.y;
    for (long long i = tid * 32; i < (long long)m * k; i += nthreads * 32)
        asm volatile("prefetch.global.L2::evict_last [%0];" :: "l"(a + i));
    for (long long i = tid * 32; i < (long long)k * n; i += nthreads * 32)
        asm volatile("prefetch.global.L2::evict_last [%0];" :: "l"(b + i));
    __shared__ float as[T][T], bs[T][T];
    int row = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
    float acc = 0.f;
    for (int t = 0; t < k; t += T) {
        as[threadIdx.y][threadIdx.x] = (row < m && t + threadIdx.x < k) ? a[row * k + t + threadIdx.x] : 0.f;
        bs[threadIdx.y][threadIdx.x] = (col < n && t + threadIdx.y < k) ? b[(t + threadIdx.y) * n + col] : 0.f;
        __syncthreads();
        for (int q = 0; q < T; ++q) acc += as[threadIdx.y][q] * bs[q][threadIdx.x];
        __syncthreads();
    }
    if (row < m && col < n) c[row * n + col] = acc;
}

// flush helpers: read a buffer with an evict_last policy (so it displaces evict_last lines too),
// optionally with evict_first, then discard its lines
extern "C" __global__ void k_flush_last(const float4* buf, long long n4, float* sink) {
    unsigned long long pol;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    float acc = 0.f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
        float4 v;
        asm volatile("ld.global.L2::cache_hint.v4.f32 {%0,%1,%2,%3}, [%4], %5;"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(buf + i), "l"(pol));
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc == 1234.5f) sink[0] = acc;
}
extern "C" __global__ void k_discard(const char* buf, long long nbytes) {
    for (long long off = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 128; off < nbytes;
         off += (long long)gridDim.x * blockDim.x * 128)
        asm volatile("discard.global.L2 [%0], 128;" :: "l"(buf + off) : "memory");
}
extern "C" __global__ void k_demote(const char* buf, long long nbytes) {
    for (long long off = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 128; off < nbytes;
         off += (long long)gridDim.x * blockDim.x * 128)
        asm volatile("applypriority.global.L2::evict_normal [%0], 128;" :: "l"(buf + off) : "memory");
}

extern "C" __global__ void k_spin(volatile int* flag, unsigned long long timeout_ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    while (*flag == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 > timeout_ns) break;
    }
}

__device__ float g_cache[1 << 20];
__device__ int g_counter = 5;
extern "C" __global__ void k_state(float* out) {
    if (threadIdx.x == 0 && blockIdx.x == 0) { out[0] = g_cache[0] + g_counter; g_counter += 1; g_cache[0] += 1.f; }
}
"""


def log(msg):
    print(msg, flush=True)


class Kernels:
    def __init__(self):
        import cupy as cp
        from kernel_forge.gpu import driver
        from kernel_forge.gpu.nvrtc import compile_source
        self.cp = cp
        self.drv = driver
        cp.zeros(1)
        info = driver.device_info(0)
        self.info = info
        res = compile_source(SRC, arch=info.arch, file_label="probe.cu", use_cache=False)
        self.cubin = res.cubin
        self.compile_log = res.log
        self.mods = {}

    def mod(self, name):
        if name not in self.mods:
            self.mods[name] = self.drv.Module(self.cubin, name)
        return self.mods[name]

    def launcher(self, name, grid, block, values, stream, smem=0):
        from kernel_forge.gpu import driver
        mod = self.mod(name)
        packed = driver.PackedArgs(values)
        sp = stream.ptr

        def launch():
            driver.launch(mod, grid, block, smem, sp, packed)
        launch.packed = packed
        return launch


# ------------------------------------------------------------------------------------- CUPTI
class Cupti:
    def __init__(self):
        from cupti import cupti
        self.c = cupti
        self.kernels = []
        self.ext = {}

        def req():
            return 8 << 20, 0

        def done(acts):
            for a in acts:
                if a.kind == cupti.ActivityKind.CONCURRENT_KERNEL:
                    self.kernels.append((a.name, a.start, a.end, a.correlation_id))
                elif a.kind == cupti.ActivityKind.EXTERNAL_CORRELATION:
                    self.ext[a.correlation_id] = a.external_id
        cupti.activity_register_callbacks(req, done)
        cupti.activity_enable(cupti.ActivityKind.CONCURRENT_KERNEL)
        cupti.activity_enable(cupti.ActivityKind.EXTERNAL_CORRELATION)

    def push(self, i):
        self.c.activity_push_external_correlation_id(self.c.ExternalCorrelationKind.CUSTOM0, i)

    def pop(self):
        self.c.activity_pop_external_correlation_id(self.c.ExternalCorrelationKind.CUSTOM0)

    def flush(self):
        self.c.activity_flush_all(1)

    def take(self):
        self.flush()
        k, e = self.kernels, self.ext
        self.kernels, self.ext = [], {}
        return k, e


def med(xs):
    return float(np.median(xs)) if len(xs) else None


def timing_run(K, launch, stream, *, reps, warmup, flush, cupti, prepare=None, blocking=False):
    """events per launch, CUPTI durations of the same launches (external correlation = rep)."""
    cp = K.cp
    for _ in range(warmup):
        if prepare:
            prepare()
        launch()
    stream.synchronize()
    if cupti:
        cupti.take()
    starts = [cp.cuda.Event() for _ in range(reps)]
    ends = [cp.cuda.Event() for _ in range(reps)]
    flag = None
    if blocking:
        flag = cp.cuda.alloc_pinned_memory(4)
        fl = np.frombuffer(flag, dtype=np.int32, count=1)
        fl[0] = 0
        from kernel_forge.gpu import driver
        spin = K.launcher("k_spin", (1, 1, 1), (1, 1, 1), [(flag.ptr, driver.ctypes.c_void_p),
                                                             (2_000_000_000, driver.ctypes.c_uint64)], stream)
        spin()
    t0 = time.perf_counter()
    with stream:
        for i in range(reps):
            if prepare:
                prepare()
            if flush:
                flush(stream)
            starts[i].record(stream)
            if cupti:
                cupti.push(i + 1)
            launch()
            if cupti:
                cupti.pop()
            ends[i].record(stream)
    enq = time.perf_counter() - t0
    if blocking:
        fl[0] = 1
    stream.synchronize()
    ev = [cp.cuda.get_elapsed_time(s, e) * 1000 for s, e in zip(starts, ends)]
    out = {"events_us": med(ev), "events_p10": float(np.percentile(ev, 10)), "events_p90": float(np.percentile(ev, 90)),
           "enqueue_s": enq}
    if cupti:
        k, ext = cupti.take()
        per = {}
        for name, s, e, corr in k:
            rid = ext.get(corr)
            if rid:
                lo, hi = per.get(rid, (s, e))
                per[rid] = (min(lo, s), max(hi, e))
        d = [(hi - lo) / 1000 for lo, hi in per.values()]
        out["cupti_us"] = med(d)
        out["cupti_n"] = len(d)
        out["cupti_cv"] = float(np.std(d) / np.mean(d)) if d else None
    return out


def exp_timing(K, out, cupti):
    cp = K.cp
    from kernel_forge.gpu import driver
    from kernel_forge.gpu.timing import L2Flusher
    stream = cp.cuda.Stream(non_blocking=True)
    fl = L2Flusher(K.info.l2_bytes)
    res = {}
    cases = []
    for n in (1 << 20, 1 << 24, 1 << 26):
        a = cp.random.standard_normal(n, dtype=cp.float32)
        b = cp.random.standard_normal(n, dtype=cp.float32)
        c = cp.empty(n, dtype=cp.float32)
        grid = ((n + 255) // 256, 1, 1)
        cases.append((f"vadd_{n}", K.launcher("k_vadd", grid, (256, 1, 1), [(a.data.ptr, driver.ctypes.c_void_p),
                      (b.data.ptr, driver.ctypes.c_void_p), (c.data.ptr, driver.ctypes.c_void_p),
                      (n, driver.ctypes.c_int)], stream), (a, b, c)))
    for (m, n, k) in ((256, 256, 256), (384, 256, 320), (1024, 1024, 1024)):
        a = cp.random.standard_normal(m * k, dtype=cp.float32)
        b = cp.random.standard_normal(k * n, dtype=cp.float32)
        c = cp.empty(m * n, dtype=cp.float32)
        for kern in ("k_mm_plain",):
            cases.append((f"{kern}_{m}x{n}x{k}", K.launcher(kern, ((n + 15) // 16, (m + 15) // 16, 1), (16, 16, 1),
                          [(a.data.ptr, driver.ctypes.c_void_p), (b.data.ptr, driver.ctypes.c_void_p),
                           (c.data.ptr, driver.ctypes.c_void_p), (m, driver.ctypes.c_int), (n, driver.ctypes.c_int),
                           (k, driver.ctypes.c_int)], stream), (a, b, c)))
    cases.append(("empty", K.launcher("k_empty", (1, 1, 1), (32, 1, 1), [], stream), ()))
    for name, launch, keep in cases:
        row = {}
        for mode, kw in (("flush", dict(flush=fl)), ("flush_blocking", dict(flush=fl, blocking=True)),
                         ("noflush", dict(flush=None))):
            try:
                row[mode] = timing_run(K, launch, stream, reps=100, warmup=10, cupti=cupti, **kw)
            except Exception as exc:  # noqa: BLE001
                row[mode] = {"error": f"{type(exc).__name__}: {exc}"}
        # the current gate: poison fill of the output before each launch as well
        if keep:
            c = keep[-1]
            try:
                row["flush_poison"] = timing_run(K, launch, stream, reps=100, warmup=10, cupti=cupti, flush=fl,
                                                 prepare=lambda: c.fill(np.float32(-7.0)))
            except Exception as exc:  # noqa: BLE001
                row["flush_poison"] = {"error": str(exc)}
        res[name] = row
        log(f"timing {name}: " + json.dumps({k: {kk: (round(vv, 3) if isinstance(vv, float) else vv)
                                                  for kk, vv in v.items()} for k, v in row.items()}))
    out["timing"] = res


def exp_l2(K, out, cupti):
    cp = K.cp
    from kernel_forge.gpu import driver
    drv = driver._driver()
    stream = cp.cuda.Stream(non_blocking=True)
    l2 = K.info.l2_bytes
    fbuf = cp.ones(2 * l2 // 4, dtype=cp.float32)
    sink = cp.zeros(1, dtype=cp.float32)
    n4 = fbuf.size // 4
    grid = (4 * K.info.sms, 1, 1)
    flush_last = K.launcher("k_flush_last", grid, (256, 1, 1), [(fbuf.data.ptr, driver.ctypes.c_void_p),
                            (n4, driver.ctypes.c_longlong), (sink.data.ptr, driver.ctypes.c_void_p)], stream)
    discard = K.launcher("k_discard", grid, (256, 1, 1), [(fbuf.data.ptr, driver.ctypes.c_void_p),
                         (fbuf.nbytes, driver.ctypes.c_longlong)], stream)
    try:
        st, lim = drv.cuCtxGetLimit(drv.CUlimit.CU_LIMIT_PERSISTING_L2_CACHE_SIZE)
        out["persisting_l2_limit"] = int(lim)
    except Exception as exc:  # noqa: BLE001
        out["persisting_l2_limit"] = str(exc)

    def memset(s):
        with s:
            fbuf.fill(0)

    def reset_then_memset(s):
        s.synchronize()
        drv.cuCtxResetPersistingL2Cache()
        memset(s)

    def last(s):
        flush_last()

    def last_discard(s):
        flush_last()
        discard()

    def memset_discard(s):
        memset(s)
        discard()

    res = {}
    for (m, n, k) in ((256, 256, 256), (384, 256, 320), (1024, 1024, 1024)):
        a = cp.random.standard_normal(m * k, dtype=cp.float32)
        b = cp.random.standard_normal(k * n, dtype=cp.float32)
        c = cp.empty(m * n, dtype=cp.float32)
        demote_a = K.launcher("k_demote", grid, (256, 1, 1), [(a.data.ptr, driver.ctypes.c_void_p),
                              (a.nbytes, driver.ctypes.c_longlong)], stream)
        demote_b = K.launcher("k_demote", grid, (256, 1, 1), [(b.data.ptr, driver.ctypes.c_void_p),
                              (b.nbytes, driver.ctypes.c_longlong)], stream)

        def demote_memset(s):
            demote_a()
            demote_b()
            memset(s)
        flushes = {"none": None, "memset": memset, "reset+memset": reset_then_memset, "evict_last_read": last,
                   "evict_last_read+discard": last_discard, "memset+discard": memset_discard,
                   "demote+memset": demote_memset}
        for kern in ("k_mm_plain", "k_mm_last", "k_mm_prefetch_last"):
            launch = K.launcher(kern, ((n + 15) // 16, (m + 15) // 16, 1), (16, 16, 1),
                                [(a.data.ptr, driver.ctypes.c_void_p), (b.data.ptr, driver.ctypes.c_void_p),
                                 (c.data.ptr, driver.ctypes.c_void_p), (m, driver.ctypes.c_int),
                                 (n, driver.ctypes.c_int), (k, driver.ctypes.c_int)], stream)
            row = {}
            for fname, f in flushes.items():
                try:
                    r = timing_run(K, launch, stream, reps=60, warmup=5, flush=f, cupti=cupti)
                    row[fname] = {"events": round(r["events_us"], 3), "cupti": round(r.get("cupti_us") or 0, 3)}
                except Exception as exc:  # noqa: BLE001
                    row[fname] = {"error": f"{type(exc).__name__}: {exc}"}
            res[f"{kern}_{m}x{n}x{k}"] = row
            log(f"l2 {kern} {m}x{n}x{k}: {json.dumps(row)}")
    # cost of each flush itself
    fl_cost = {}
    for fname, f in (("memset", memset), ("evict_last_read", last), ("evict_last_read+discard", last_discard)):
        ts = []
        for _ in range(20):
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record(stream)
            f(stream)
            e1.record(stream)
            e1.synchronize()
            ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1000)
        fl_cost[fname] = med(ts)
    out["l2"] = res
    out["flush_cost_us"] = fl_cost
    log(f"flush cost {fl_cost}")


def exp_state(K, out):
    cp = K.cp
    from kernel_forge.gpu import driver
    drv = driver._driver()
    stream = cp.cuda.Stream(non_blocking=True)
    mod = K.mod("k_state")
    res = {}
    for name in (b"g_cache", b"g_counter"):
        st, ptr, size = drv.cuModuleGetGlobal(mod.handle, name)
        res[name.decode()] = {"status": int(st), "size": int(size)}
    st, ptr, size = drv.cuModuleGetGlobal(mod.handle, b"g_cache")
    pristine = cp.empty(int(size), dtype=cp.uint8)
    ts = []
    for _ in range(50):
        t0 = time.perf_counter()
        drv.cuMemcpyDtoDAsync(ptr, pristine.data.ptr, int(size), drv.CUstream(stream.ptr))
        stream.synchronize()
        ts.append((time.perf_counter() - t0) * 1e6)
    res["restore_4MB_host_us"] = med(ts)
    ts = []
    for _ in range(20):
        t0 = time.perf_counter()
        m = driver.Module(K.cubin, "k_state")
        m.unload()
        ts.append((time.perf_counter() - t0) * 1e6)
    res["module_reload_us"] = med(ts)
    out["state"] = res
    log(f"state {res}")


def exp_device(K, out):
    from kernel_forge.gpu import driver
    drv = driver._driver()
    dev = drv.cuDeviceGet(0)[1]
    attrs = {}
    for name in dir(drv.CUdevice_attribute):
        if not name.startswith("CU_DEVICE_ATTRIBUTE_"):
            continue
        st, v = drv.cuDeviceGetAttribute(getattr(drv.CUdevice_attribute, name), dev)
        if st == drv.CUresult.CUDA_SUCCESS:
            attrs[name[len("CU_DEVICE_ATTRIBUTE_"):]] = int(v)
    out["device_attributes"] = attrs
    out["device_info"] = K.info.to_json()
    mod = K.mod("k_mm_plain")
    occ = {}
    for bs in (64, 128, 256, 512, 1024):
        st, nb = drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(mod.function, bs, 0)
        occ[bs] = int(nb) if st == drv.CUresult.CUDA_SUCCESS else str(st)
    out["occupancy_mm_plain"] = occ
    out["func_attrs_mm_plain"] = {n: mod.attribute(n) for n in (
        "CU_FUNC_ATTRIBUTE_NUM_REGS", "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES", "CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES",
        "CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK")}
    log(f"occupancy {occ}, attrs {out['func_attrs_mm_plain']}")


def exp_compare(K, out):
    cp = K.cp
    n = 1 << 24
    a = cp.random.standard_normal(n, dtype=cp.float32)
    e = a + cp.float32(1e-6)
    stream = cp.cuda.Stream(non_blocking=True)
    res = {}
    with stream:
        for _ in range(3):
            bad = cp.count_nonzero(cp.abs(a - e) > 1e-4 + 1e-4 * cp.abs(e))
            mx = cp.max(cp.abs(a - e))
            int(bad), float(mx)
        ts = []
        for _ in range(10):
            t0 = time.perf_counter()
            bad = cp.count_nonzero(cp.abs(a - e) > 1e-4 + 1e-4 * cp.abs(e))
            mx = cp.max(cp.abs(a - e))
            int(bad), float(mx)
            ts.append((time.perf_counter() - t0) * 1e3)
        res["cupy_compare_16M_ms"] = med(ts)
        src = cp.empty_like(a)
        ts = []
        for _ in range(10):
            t0 = time.perf_counter()
            cp.copyto(src, a)
            stream.synchronize()
            ts.append((time.perf_counter() - t0) * 1e3)
        res["d2d_64MB_ms"] = med(ts)
        ts = []
        h = cp.asnumpy(a)
        for _ in range(5):
            t0 = time.perf_counter()
            cp.asarray(h)
            stream.synchronize()
            ts.append((time.perf_counter() - t0) * 1e3)
        res["h2d_64MB_ms"] = med(ts)
    out["compare"] = res
    log(f"compare {res}")


def exp_launch_overhead(K, out, cupti_on):
    cp = K.cp
    stream = cp.cuda.Stream(non_blocking=True)
    launch = K.launcher("k_empty", (1, 1, 1), (32, 1, 1), [], stream)
    for _ in range(100):
        launch()
    stream.synchronize()
    t0 = time.perf_counter()
    for _ in range(2000):
        launch()
    stream.synchronize()
    out[f"host_us_per_launch_cupti_{cupti_on}"] = (time.perf_counter() - t0) / 2000 * 1e6


def ncu_target():
    """Run by ncu: the same kernels and sizes as exp_timing, a few launches each."""
    K = Kernels()
    cp = K.cp
    from kernel_forge.gpu import driver
    stream = cp.cuda.Stream(non_blocking=True)
    for n in (1 << 20, 1 << 24, 1 << 26):
        a = cp.random.standard_normal(n, dtype=cp.float32)
        b = cp.random.standard_normal(n, dtype=cp.float32)
        c = cp.empty(n, dtype=cp.float32)
        L = K.launcher("k_vadd", ((n + 255) // 256, 1, 1), (256, 1, 1), [(a.data.ptr, driver.ctypes.c_void_p),
                       (b.data.ptr, driver.ctypes.c_void_p), (c.data.ptr, driver.ctypes.c_void_p),
                       (n, driver.ctypes.c_int)], stream)
        for _ in range(5):
            L()
        stream.synchronize()
    for (m, n, k) in ((256, 256, 256), (384, 256, 320), (1024, 1024, 1024)):
        a = cp.random.standard_normal(m * k, dtype=cp.float32)
        b = cp.random.standard_normal(k * n, dtype=cp.float32)
        c = cp.empty(m * n, dtype=cp.float32)
        L = K.launcher("k_mm_plain", ((n + 15) // 16, (m + 15) // 16, 1), (16, 16, 1),
                       [(a.data.ptr, driver.ctypes.c_void_p), (b.data.ptr, driver.ctypes.c_void_p),
                        (c.data.ptr, driver.ctypes.c_void_p), (m, driver.ctypes.c_int), (n, driver.ctypes.c_int),
                        (k, driver.ctypes.c_int)], stream)
        for _ in range(5):
            L()
        stream.synchronize()
    L = K.launcher("k_empty", (1, 1, 1), (32, 1, 1), [], stream)
    for _ in range(5):
        L()
    stream.synchronize()


def exp_ncu(out_dir: Path, out: dict):
    import shutil
    ncu = shutil.which("ncu")
    out["ncu_path"] = ncu
    if not ncu:
        return
    env = dict(os.environ)
    t0 = time.perf_counter()
    cmd = [ncu, "--metrics", "gpu__time_duration.sum", "--clock-control", "none", "--cache-control", "all",
           "--csv", "--page", "raw", "-k", "regex:^k_(vadd|mm_plain|empty)$", "--target-processes", "all",
           sys.executable, __file__, "ncu-target"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    out["ncu_time_s"] = time.perf_counter() - t0
    (out_dir / "ncu-time.csv").write_text(p.stdout + "\n----\n" + p.stderr[-4000:])
    log(f"ncu timing rc={p.returncode} in {out['ncu_time_s']:.1f}s")
    # a profile with the sections the diagnosis wants, on one kernel of each kind
    t0 = time.perf_counter()
    cmd = [ncu, "--section", "SpeedOfLight", "--section", "Occupancy", "--section", "WarpStateStats",
           "--section", "LaunchStats", "--section", "MemoryWorkloadAnalysis", "--clock-control", "none",
           "--csv", "--page", "raw", "-k", "regex:^k_(vadd|mm_plain)$", "-c", "6", "--target-processes", "all",
           sys.executable, __file__, "ncu-target"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    out["ncu_profile_s"] = time.perf_counter() - t0
    (out_dir / "ncu-profile.csv").write_text(p.stdout + "\n----\n" + p.stderr[-4000:])
    log(f"ncu profile rc={p.returncode} in {out['ncu_profile_s']:.1f}s ({len(p.stdout)} chars)")
    # one kernel, the few metrics we intend to use, to time the minimal profile
    t0 = time.perf_counter()
    metrics = ",".join([
        "gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "lts__throughput.avg.pct_of_peak_sustained_elapsed", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "sm__warps_active.avg.pct_of_peak_sustained_active", "launch__occupancy_limit_registers",
        "smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio",
        "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_selected_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_drain_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_imc_miss_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_membar_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_tex_throttle_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_misc_per_issue_active.ratio",
    ])
    cmd = [ncu, "--metrics", metrics, "--clock-control", "none", "--csv", "--page", "raw",
           "-k", "regex:^k_mm_plain$", "-c", "1", "--target-processes", "all", sys.executable, __file__, "ncu-target"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    out["ncu_min_s"] = time.perf_counter() - t0
    (out_dir / "ncu-min.csv").write_text(p.stdout + "\n----\n" + p.stderr[-4000:])
    log(f"ncu minimal rc={p.returncode} in {out['ncu_min_s']:.1f}s")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "ncu-target":
        ncu_target()
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="probe-out")
    ap.add_argument("--only", default="")
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    out: dict = {"argv": sys.argv}
    only = set(filter(None, args.only.split(",")))
    K = Kernels()
    cupti = None
    try:
        cupti = Cupti()
        out["cupti"] = "ok"
    except Exception as exc:  # noqa: BLE001
        out["cupti"] = f"{type(exc).__name__}: {exc}"
    log(f"cupti: {out['cupti']}")
    steps = [("timing", lambda: exp_timing(K, out, cupti)), ("l2", lambda: exp_l2(K, out, cupti)),
             ("state", lambda: exp_state(K, out)), ("device", lambda: exp_device(K, out)),
             ("compare", lambda: exp_compare(K, out)),
             ("overhead", lambda: exp_launch_overhead(K, out, cupti is not None)),
             ("ncu", lambda: exp_ncu(out_dir, out))]
    for name, fn in steps:
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        try:
            fn()
        except Exception:  # noqa: BLE001
            out[f"{name}_error"] = traceback.format_exc()
            log(out[f"{name}_error"])
        log(f"[{name}] {time.perf_counter() - t0:.1f} s")
        (out_dir / f"probe{args.tag}.json").write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
