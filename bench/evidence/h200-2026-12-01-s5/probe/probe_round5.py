"""Probe for issue 10's remaining targets (GPU), one device call; JSON and a log under --out.

  cost   where the time of 100 timed launches goes (vector_add 2^24 floats, as the gate times it):
         host time to enqueue, wall time, the CUPTI collect, and each part's GPU time alone
         (poison memset, the flush as shipped before this round, the new flush, the kernel)
  clock  the SM clock while kernels are timed back to back vs after an idle gap, measured by a
         kernel that counts clock64 against %globaltimer, and the CUPTI medians in both states
         (gelu_bf16 n16M and n64M, vector_add n64M, matmul_f32 sq256)
  ncu    the same kernels under ncu: gpu__time_duration and the SM clock it saw, cache control
         all and none

    python bench/evidence/h200-2026-12-01-s5/probe/probe_round5.py --out DIR [--sections cost,clock,ncu]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]     # the repository (this script sits beside its evidence)
sys.path.insert(0, str(ROOT))

EXTRA = r"""
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
extern "C" __global__ void kf_rate(unsigned long long* out, long long spin_ns) {
    unsigned long long t0, t1;
    long long c0 = clock64();
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1)); } while ((long long)(t1 - t0) < spin_ns);
    long long c1 = clock64();
    if (threadIdx.x == 0) { out[2 * blockIdx.x] = (unsigned long long)(c1 - c0); out[2 * blockIdx.x + 1] = t1 - t0; }
}
extern "C" __global__ void spin(unsigned long long* out, long long spin_ns) {
    unsigned long long t0, t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1)); } while ((long long)(t1 - t0) < spin_ns);
    if (threadIdx.x == 0) { out[2 * blockIdx.x] = t0; out[2 * blockIdx.x + 1] = t1; }
}
extern "C" __global__ void kf_flush_old(const float4* buf, long long n4, float* sink) {
    float acc = 0.f;
    unsigned long long pol;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
        float4 v;
        asm volatile("ld.global.L2::cache_hint.v4.f32 {%0,%1,%2,%3}, [%4], %5;"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(buf + i), "l"(pol));
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc == 1234.5f) sink[0] = acc;
}
"""


def log(msg: str) -> None:
    print(f"[probe5] {msg}", flush=True)


def enable_kind(kind_name: str):
    """A KernelClock on the given activity kind (KERNEL: serialized, CONCURRENT_KERNEL: instrumented)."""
    from cupti import cupti
    from kernel_forge.gpu import kernel_clock

    clock = kernel_clock.KernelClock(cupti)
    kind = getattr(cupti.ActivityKind, kind_name)
    parse = {"records": 0, "s": 0.0}

    def completed(activities):
        t0 = time.perf_counter()
        got = [kernel_clock.KernelRecord(str(a.name), int(a.start), int(a.end)) for a in activities if a.kind == kind]
        parse["records"] += len(got)
        parse["s"] += time.perf_counter() - t0
        with clock._lock:
            clock._records.extend(got)
    cupti.activity_register_callbacks(clock._requested, completed)
    cupti.activity_enable(kind)
    kernel_clock._clock, kernel_clock._reason = clock, None
    clock.parse = parse
    clock.kind = kind
    return clock


class Rig:
    def __init__(self):
        from kernel_forge.gpu import kernel_clock
        kind = os.environ.get("PROBE_KIND")
        if kind:
            enable_kind(kind)
            self.clock_reason = None
        else:
            self.clock_reason = kernel_clock.enable() if os.environ.get("PROBE_NO_CUPTI") != "1" else "off"
        import cupy as cp
        from kernel_forge.gpu import driver
        from kernel_forge.gpu.flush import L2Flusher
        from kernel_forge.gpu.nvrtc import compile_source
        self.cp, self.drv = cp, driver
        cp.zeros(1)
        self.info = driver.device_info(0)
        self.clock = kernel_clock.clock()
        self.flusher = L2Flusher(self.info.l2_bytes, self.info.sms)
        self.cubin = compile_source(EXTRA, arch=self.info.arch, file_label="probe5.cu", use_cache=False).cubin
        self.mods = {}
        self.stream = cp.cuda.Stream(non_blocking=True)
        gelu = (ROOT / "manifests" / "gelu_bf16.cu").read_text()
        self.gelu_cubin = compile_source(gelu, arch=self.info.arch, file_label="gelu.cu", use_cache=False).cubin
        mm = (ROOT / "manifests" / "matmul_f32.cu").read_text()
        self.mm_cubin = compile_source(mm, arch=self.info.arch, file_label="mm.cu", use_cache=False).cubin

    def launcher(self, cubin, name, grid, block, values):
        key = (id(cubin), name)
        if key not in self.mods:
            self.mods[key] = self.drv.Module(cubin, name)
        mod = self.mods[key]
        packed = self.drv.PackedArgs(values)
        sp = self.stream.ptr
        drv = self.drv

        def launch():
            drv.launch(mod, grid, block, 0, sp, packed)
        launch.packed = packed
        return launch

    def ptr(self, a):
        return (a.data.ptr, self.drv.ctypes.c_void_p)

    def i32(self, v):
        return (int(v), self.drv.ctypes.c_int)

    def i64(self, v):
        return (int(v), self.drv.ctypes.c_longlong)

    def gpu_us(self, fn, reps=50) -> float:
        cp = self.cp
        with self.stream:
            for _ in range(3):
                fn()
            s, e = cp.cuda.Event(), cp.cuda.Event()
            s.record(self.stream)
            for _ in range(reps):
                fn()
            e.record(self.stream)
            e.synchronize()
        return cp.cuda.get_elapsed_time(s, e) * 1000.0 / reps


def kernels(r: Rig):
    """name -> (launch, outputs to poison, per-launch extra setup)"""
    cp = r.cp
    out = {}
    for n, label in ((1 << 24, "vector_add n16M"), (1 << 26, "vector_add n64M")):
        a, b = cp.random.rand(n, dtype=cp.float32), cp.random.rand(n, dtype=cp.float32)
        c = cp.empty(n, dtype=cp.float32)
        out[label] = (r.launcher(r.cubin, "vector_add", ((n + 255) // 256, 1, 1), (256, 1, 1),
                                 [r.ptr(a), r.ptr(b), r.ptr(c), r.i32(n)]), c, (a, b))
    for n, label in ((1 << 24, "gelu_bf16 n16M"), (1 << 26, "gelu_bf16 n64M")):
        x = (cp.random.standard_normal(n, dtype=cp.float32) * 3).astype(cp.float32)
        xb = (x.view(cp.uint32) >> 16).astype(cp.uint16)
        y = cp.empty(n, dtype=cp.uint16)
        out[label] = (r.launcher(r.gelu_cubin, "gelu_bf16", ((n + 255) // 256, 1, 1), (256, 1, 1),
                                 [r.ptr(xb), r.ptr(y), r.i32(n)]), y, (xb,))
    for (m, n, k), label in (((256, 256, 256), "matmul_f32 sq256"), ((384, 320, 256), "matmul_f32 rect")):
        a, b = cp.random.rand(m * k, dtype=cp.float32), cp.random.rand(k * n, dtype=cp.float32)
        c = cp.empty(m * n, dtype=cp.float32)
        out[label] = (r.launcher(r.mm_cubin, "matmul_f32", ((n + 15) // 16, (m + 15) // 16, 1), (16, 16, 1),
                                 [r.ptr(a), r.ptr(b), r.ptr(c), r.i32(m), r.i32(n), r.i32(k)]), c, (a, b))
    return out


def old_flush(r: Rig):
    f = r.flusher
    grid = (4 * r.info.sms, 1, 1)
    flush = r.launcher(r.cubin, "kf_flush_old", grid, (256, 1, 1),
                       [r.ptr(f.buf), r.i64(f.buf.size // 4), r.ptr(f.sink)])

    def go(stream):
        flush()
        f._discard(f._grid, (256,), (f.buf, __import__("numpy").int64(f.buf.nbytes)))
    return go


def timed_loop(r: Rig, launch, out, *, reps=100, warmup=10, flush=None, poison=True, events=True,
               idle_s=0.0, rate=None):
    """The gate's timed loop, variant by variant; returns host/wall seconds and the samples."""
    cp = r.cp
    st = r.stream
    clock = r.clock
    with st:
        for _ in range(warmup):
            if poison:
                out.fill(0)
            launch()
        st.synchronize()
        if clock is not None:
            clock.mark()
        starts = [cp.cuda.Event() for _ in range(reps)]
        ends = [cp.cuda.Event() for _ in range(reps)]
        t0 = time.perf_counter()
        for i in range(reps):
            if poison:
                out.fill(0)
            if flush is not None:
                flush(st)
            else:
                r.flusher.mark(st)
            if idle_s:
                st.synchronize()
                time.sleep(idle_s)
            if events:
                starts[i].record(st)
            launch()
            if events:
                ends[i].record(st)
            if rate is not None:
                rate(i)
        t_enq = time.perf_counter() - t0
        st.synchronize()
        t_wall = time.perf_counter() - t0
    t1 = time.perf_counter()
    samples = None
    if clock is not None:
        from kernel_forge.gpu.kernel_clock import launch_times
        samples = launch_times(clock.collect(), reps, delimited=True)
    t_collect = time.perf_counter() - t1
    ev = [cp.cuda.get_elapsed_time(s, e) * 1000.0 for s, e in zip(starts, ends)] if events else None
    return {"enqueue_ms": round(t_enq * 1e3, 2), "wall_ms": round(t_wall * 1e3, 2),
            "collect_ms": round(t_collect * 1e3, 2),
            "cupti_median_us": round(statistics.median(samples), 3) if samples else None,
            "events_median_us": round(statistics.median(ev), 3) if ev else None,
            "samples_us": [round(x, 3) for x in samples] if samples else None}


def section_cost(r: Rig, ks) -> dict:
    launch, out, _ = ks["vector_add n16M"]
    oldf = old_flush(r)
    res = {"clock": r.clock_reason or "cupti"}
    res["gpu_us"] = {
        "poison memset 64 MiB": round(r.gpu_us(lambda: out.fill(0)), 2),
        "flush as shipped before (528 blocks, 1 load in flight)": round(r.gpu_us(lambda: oldf(r.stream)), 2),
        "flush now": round(r.gpu_us(lambda: r.flusher(r.stream)), 2),
        "kernel": round(r.gpu_us(launch), 2),
        "mark kernel": round(r.gpu_us(lambda: r.flusher.mark(r.stream)), 2),
    }
    variants = {
        "gate (old flush)": dict(flush=oldf),
        "gate (new flush)": dict(flush=r.flusher),
        "new flush, no events": dict(flush=r.flusher, events=False),
        "new flush, no poison": dict(flush=r.flusher, poison=False),
        "no flush (marker)": dict(flush=None),
    }
    res["loops"] = {}
    for name, kw in variants.items():
        for reps in (100, 20):
            timed_loop(r, launch, out, reps=reps, **kw)     # warm
            got = timed_loop(r, launch, out, reps=reps, **kw)
            got.pop("samples_us")
            res["loops"][f"{name}, {reps} reps"] = got
            log(f"cost {name} reps={reps}: {got}")
    # host cost of single calls
    n = 2000
    t0 = time.perf_counter()
    with r.stream:
        for _ in range(n):
            r.flusher.mark(r.stream)
    mark_host = (time.perf_counter() - t0) / n * 1e6
    t0 = time.perf_counter()
    for _ in range(n):
        launch()
    launch_host = (time.perf_counter() - t0) / n * 1e6
    t0 = time.perf_counter()
    with r.stream:
        for _ in range(200):
            out.fill(0)
    fill_host = (time.perf_counter() - t0) / 200 * 1e6
    r.stream.synchronize()
    if r.clock is not None:
        t0 = time.perf_counter()
        r.clock.collect()
        collect_ms = (time.perf_counter() - t0) * 1e3
    else:
        collect_ms = None
    res["host_us"] = {"cupy kernel call (mark)": round(mark_host, 2), "driver.launch": round(launch_host, 2),
                      "cupy fill": round(fill_host, 2), "collect of ~4000 records (ms)": collect_ms}
    log(f"cost gpu: {res['gpu_us']} host: {res['host_us']}")
    return res


def section_clock(r: Rig, ks) -> dict:
    cp = r.cp
    sms = r.info.sms
    rates = cp.zeros((100, 2 * sms), dtype=cp.uint64)
    res = {}
    for label, (launch, out, _) in ks.items():
        rate_launchers = [r.launcher(r.cubin, "kf_rate", (sms, 1, 1), (32, 1, 1),
                                     [(int(rates[i].data.ptr), r.drv.ctypes.c_void_p), r.i64(100_000)])
                          for i in range(100)]
        row = {}
        for mode, kw in (("back to back", {}), ("idle 2 ms before each", {"idle_s": 0.002})):
            got = timed_loop(r, launch, out, reps=40, flush=r.flusher, **kw)
            mhz = None
            got2 = timed_loop(r, launch, out, reps=40, flush=r.flusher, rate=lambda i: rate_launchers[i](), **kw)
            v = cp.asnumpy(rates[:40]).reshape(40, sms, 2).astype(float)
            mhz = statistics.median((v[:, :, 0] / v[:, :, 1] * 1e3).ravel().tolist())
            row[mode] = {"cupti_median_us": got["cupti_median_us"], "events_median_us": got["events_median_us"],
                         "sm_mhz_after_each_launch": round(mhz, 1),
                         "cupti_median_us_with_rate_kernel": got2["cupti_median_us"]}
        got = timed_loop(r, launch, out, reps=40, flush=old_flush(r))
        row["back to back, old flush"] = {"cupti_median_us": got["cupti_median_us"]}
        res[label] = row
        log(f"clock {label}: {row}")
    return res


def section_kind(r: Rig, ks) -> dict:
    """Times under this process's activity kind, the parse cost per record, and whether records stop
    and start again when the kind is disabled and enabled after the context exists."""
    from cupti import cupti
    clock = r.clock
    res = {"kind": os.environ.get("PROBE_KIND", "CONCURRENT_KERNEL")}
    times = {}
    for label, (launch, out, _) in ks.items():
        got = timed_loop(r, launch, out, reps=40, flush=r.flusher)
        times[label] = {"cupti_median_us": got["cupti_median_us"], "events_median_us": got["events_median_us"],
                        "collect_ms_40_reps": got["collect_ms"]}
    res["times"] = times
    launch = ks["vector_add n16M"][0]
    parse = getattr(clock, "parse", None)
    if parse is not None:
        parse.update(records=0, s=0.0)
    clock.mark()
    for _ in range(300):
        launch()
    r.stream.synchronize()
    t0 = time.perf_counter()
    n = len(clock.collect())
    res["collect_300"] = {"records": n, "ms": round((time.perf_counter() - t0) * 1e3, 2),
                          "callback_ms": round(parse["s"] * 1e3, 2) if parse else None}
    kind = getattr(clock, "kind", cupti.ActivityKind.CONCURRENT_KERNEL)
    toggles = []
    for step in ("disable", "enable"):
        (cupti.activity_disable if step == "disable" else cupti.activity_enable)(kind)
        clock.mark()
        for _ in range(50):
            launch()
        r.stream.synchronize()
        toggles.append((step, len(clock.collect())))
    res["toggle_50_launches"] = toggles
    log(f"kind: {res}")
    return res


SPINS = [(blocks, ns) for blocks in (1, 132, 4096) for ns in (0, 5000, 20000)]


def spin_kernels(r: Rig):
    cp = r.cp
    out = {}
    for blocks, ns in SPINS:
        buf = cp.zeros(2 * blocks, dtype=cp.uint64)
        out[f"spin b{blocks} {ns}ns"] = (r.launcher(r.cubin, "spin", (blocks, 1, 1), (32, 1, 1),
                                                    [r.ptr(buf), r.i64(ns)]), buf, ())
    return out


def section_offset(r: Rig) -> dict:
    """Record duration minus the kernel's own span (first block's start to last block's end, by
    %globaltimer inside it): what the clock adds beyond execution, by block count and length."""
    cp = r.cp
    res = {}
    for label, (launch, buf, _) in spin_kernels(r).items():
        got = timed_loop(r, launch, buf, reps=30, flush=r.flusher, poison=False)
        spans = []
        for _ in range(5):
            r.flusher(r.stream)
            launch()
            r.stream.synchronize()
            v = cp.asnumpy(buf).reshape(-1, 2).astype(float)
            spans.append((v[:, 1].max() - v[:, 0].min()) / 1000.0)
        span = statistics.median(spans)
        res[label] = {"record_us": got["cupti_median_us"], "events_us": got["events_median_us"],
                      "span_us": round(span, 3),
                      "record_minus_span_us": round(got["cupti_median_us"] - span, 3) if got["cupti_median_us"] else None}
    log(f"offset ({os.environ.get('PROBE_KIND', 'CONCURRENT_KERNEL')}): {res}")
    return res


def ncu_child(label: str) -> None:
    r = Rig()
    ks = {**kernels(r), **spin_kernels(r)}
    launch, out, _ = ks[label]
    for _ in range(7):
        out.fill(0)
        r.flusher(r.stream)
        launch()
    r.stream.synchronize()


def section_ncu(ncu: str) -> dict:
    import csv
    import io
    res = {}
    names = {"vector_add": "vector_add", "gelu_bf16": "gelu_bf16", "matmul_f32": "matmul_f32", "spin": "spin"}
    labels = ["vector_add n16M", "vector_add n64M", "gelu_bf16 n16M", "gelu_bf16 n64M",
              "matmul_f32 sq256", "matmul_f32 rect"]
    if os.environ.get("PROBE_NCU_SPIN"):
        labels = [f"spin b{b} {ns}ns" for b, ns in SPINS]
    for label in labels:
        entry = names[label.split()[0]]
        row = {}
        for cc in (("all",) if os.environ.get("PROBE_NCU_SPIN") else ("all", "none")):
            cmd = [ncu, "--metrics", "gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,"
                   "dram__cycles_elapsed.avg.per_second", "--clock-control", "none", "--cache-control", cc,
                   "--csv", "--page", "raw", "-k", f"regex:^{entry}$", sys.executable, __file__, "--ncu-child", label]
            env = dict(os.environ, PROBE_NO_CUPTI="1")
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
            rows = [x for x in p.stdout.splitlines() if x.startswith('"')]
            if len(rows) < 3:
                row[cc] = {"error": (p.stderr or p.stdout)[-300:]}
                continue
            t = list(csv.reader(io.StringIO("\n".join(rows))))
            head, unit = t[0], t[1]
            got = {}
            for m in ("gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second", "dram__cycles_elapsed.avg.per_second"):
                c = head.index(m)
                got[f"{m} [{unit[c]}]"] = statistics.median(float(x[c].replace(",", "")) for x in t[2:])
            row[cc] = got
        res[label] = row
        log(f"ncu {label}: {row}")
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="probe5-out")
    ap.add_argument("--sections", default="cost,clock,ncu")
    ap.add_argument("--ncu-child")
    a = ap.parse_args()
    if a.ncu_child:
        ncu_child(a.ncu_child)
        return
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    secs = a.sections.split(",")
    res = {}
    if "cost" in secs or "clock" in secs or "kind" in secs or "offset" in secs:
        r = Rig()
        ks = kernels(r)
        if "cost" in secs:
            res["cost"] = section_cost(r, ks)
        if "clock" in secs:
            res["clock"] = section_clock(r, ks)
        if "kind" in secs:
            res["kind"] = section_kind(r, ks)
        if "offset" in secs:
            res["offset"] = section_offset(r)
    if "ncu" in secs:
        import shutil
        ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
        res["ncu"] = section_ncu(ncu)
    (out / "probe5.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
