"""Second probe: CUPTI records (enabled before the context exists) and clean vs dirty L2 flushes."""
import json, sys, time
from pathlib import Path
import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parents[4]))   # the repository (this script sits beside its evidence)
sys.path.insert(0, str(Path(__file__).resolve().parent))
from cupti import cupti
counts = {}
kernels = []
ext = {}
def req():
    return 8 << 20, 0
def done(acts):
    for a in acts:
        counts[int(a.kind)] = counts.get(int(a.kind), 0) + 1
        if a.kind == cupti.ActivityKind.CONCURRENT_KERNEL:
            kernels.append((a.name, a.start, a.end, a.correlation_id))
        elif a.kind == cupti.ActivityKind.EXTERNAL_CORRELATION:
            ext[a.correlation_id] = a.external_id
cupti.activity_register_callbacks(req, done)
cupti.activity_enable(cupti.ActivityKind.CONCURRENT_KERNEL)
cupti.activity_enable(cupti.ActivityKind.EXTERNAL_CORRELATION)
import probe_step5 as P
K = P.Kernels()
cp = K.cp
from kernel_forge.gpu import driver
stream = cp.cuda.Stream(non_blocking=True)
L = K.launcher("k_empty", (1, 1, 1), (32, 1, 1), [], stream)
for _ in range(10): L()
stream.synchronize(); cupti.activity_flush_all(1)
out = {"after_10_empty": dict(counts), "kernels": len(kernels), "ext": len(ext), "sample": kernels[:2]}
print(out, flush=True)
l2 = K.info.l2_bytes
fbuf = cp.ones(2 * l2 // 4, dtype=cp.float32); sink = cp.zeros(1, dtype=cp.float32)
grid = (4 * K.info.sms, 1, 1)
flush_last = K.launcher("k_flush_last", grid, (256, 1, 1), [(fbuf.data.ptr, driver.ctypes.c_void_p), (fbuf.size // 4, driver.ctypes.c_longlong), (sink.data.ptr, driver.ctypes.c_void_p)], stream)
discard = K.launcher("k_discard", grid, (256, 1, 1), [(fbuf.data.ptr, driver.ctypes.c_void_p), (fbuf.nbytes, driver.ctypes.c_longlong)], stream)
def memset(s):
    with s: fbuf.fill(0)
flushes = {"memset": memset, "last": lambda s: flush_last(), "last+discard": lambda s: (flush_last(), discard()),
           "memset+discard": lambda s: (memset(s), discard()), "none": None}
class C:
    def push(self, i): cupti.activity_push_external_correlation_id(cupti.ExternalCorrelationKind.CUSTOM0, i)
    def pop(self): cupti.activity_pop_external_correlation_id(cupti.ExternalCorrelationKind.CUSTOM0)
    def take(self):
        global kernels, ext
        cupti.activity_flush_all(1)
        k, e = list(kernels), dict(ext); kernels.clear(); ext.clear(); return k, e
cc = C()
cases = []
for n in (1 << 20, 1 << 24, 1 << 26):
    a = cp.random.standard_normal(n, dtype=cp.float32); b = cp.random.standard_normal(n, dtype=cp.float32); c = cp.empty(n, dtype=cp.float32)
    cases.append((f"vadd_{n}", K.launcher("k_vadd", ((n + 255) // 256, 1, 1), (256, 1, 1), [(a.data.ptr, driver.ctypes.c_void_p), (b.data.ptr, driver.ctypes.c_void_p), (c.data.ptr, driver.ctypes.c_void_p), (n, driver.ctypes.c_int)], stream), (a, b, c)))
for (m, n, k) in ((256, 256, 256), (384, 256, 320), (1024, 1024, 1024)):
    a = cp.random.standard_normal(m * k, dtype=cp.float32); b = cp.random.standard_normal(k * n, dtype=cp.float32); c = cp.empty(m * n, dtype=cp.float32)
    for kern in ("k_mm_plain", "k_mm_last"):
        cases.append((f"{kern}_{m}", K.launcher(kern, ((n + 15) // 16, (m + 15) // 16, 1), (16, 16, 1), [(a.data.ptr, driver.ctypes.c_void_p), (b.data.ptr, driver.ctypes.c_void_p), (c.data.ptr, driver.ctypes.c_void_p), (m, driver.ctypes.c_int), (n, driver.ctypes.c_int), (k, driver.ctypes.c_int)], stream), (a, b, c)))
cases.append(("empty", L, ()))
res = {}
for name, launch, keep in cases:
    row = {}
    for fname, f in flushes.items():
        for blocking in (False, True):
            prep = (lambda c=keep[-1]: c.fill(np.float32(-7.0))) if keep else None
            r = P.timing_run(K, launch, stream, reps=100, warmup=10, flush=f, cupti=cc, prepare=prep, blocking=blocking)
            row[fname + ("/blk" if blocking else "")] = (round(r["events_us"], 2), round(r.get("cupti_us") or -1, 2), r.get("cupti_n"), round(r.get("cupti_cv") or 0, 4))
    res[name] = row
    print(name, json.dumps(row), flush=True)
out["res"] = res
out["counts"] = counts
Path(sys.argv[1]).write_text(json.dumps(out, indent=1, default=str))
