"""The harness's own small kernels around a timed launch: the L2 flush, the warm-up read, a marker.

**Cold.**  A memset of twice the L2 does not evict lines a kernel loaded with an ``evict_last``
cache policy (``createpolicy`` + ``ld.global.L2::cache_hint``, ``prefetch...L2::evict_last``,
``cp.async`` hints, ``applypriority``): on the H200 a 16×16 tiled matmul with such loads measured
12.3 µs after a memset flush against 15.0 µs for its plain twin.  It also leaves twice the L2 of
dirty lines whose write-back overlaps the next kernel (4-6 µs on a 2^24-element vector add).
So :class:`L2Flusher` reads a buffer of twice the L2 with an ``evict_last`` policy of its own —
displacing every line, evict_last ones included — and then, once every block has read its share,
``discard.global.L2``\\ s that buffer, which invalidates its lines without writing anything back:
the timed launch starts with an L2 holding nothing of the candidate's and nothing dirty
(evidence: probe/FINDINGS.md).

**One kernel.**  The two phases need every read done before any discard.  ``kf_flush_once`` does
both in one launch: it is launched cooperatively (``cuLaunchCooperativeKernel``, so every block is
resident at once) with as many blocks as fit, and its blocks wait for each other between the
phases on a counter that only grows (each launch waits for it to reach ``target``, the previous
launch's target plus the grid; 32-bit wrap-around is harmless).  One kernel instead of two is one
CUPTI record fewer per timed launch, and turning a record into a Python object costs about 80 µs
on the H200: 8 ms of every 100 timed launches.  Where a cooperative launch is not possible (the
device, a failed self-check, ``KFORGE_FLUSH=split``) the two kernels ``kf_flush`` and
``kf_discard`` do the same in two launches.

**Warm** (``--no-flush``): :meth:`L2Flusher.warm` reads the given buffers just before the launch, so
whatever of them fits is resident, whatever the previous launch or the poisoning left behind.

Every kernel here is named ``kf_*`` (see :mod:`.kernel_clock`: the clock attributes every other
kernel to the candidate).  The eviction-priority instructions need sm_80; on older GPUs the
flush falls back to plain loads (those GPUs have no such priorities to defeat).
"""
from __future__ import annotations

import os

SOURCE = r"""
// four independent evict_last loads in flight per thread: the read runs at DRAM speed
#if __CUDA_ARCH__ >= 800
#define KF_LOAD(v, p) asm volatile("ld.global.L2::cache_hint.v4.f32 {%0,%1,%2,%3}, [%4], %5;" \
                                   : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p), "l"(pol))
#else
#define KF_LOAD(v, p) asm volatile("ld.global.cg.v4.f32 {%0,%1,%2,%3}, [%4];" \
                                   : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p))
#endif
// phase 1: every line of buf read with an evict_last policy; returns what it read (kept live)
__device__ __forceinline__ float kf_read_all(const float4* buf, long long n4) {
    float acc = 0.f;
    unsigned long long pol = 0;
#if __CUDA_ARCH__ >= 800
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
#endif
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n4; i += 4 * stride) {
        float4 v0, v1, v2, v3;
        KF_LOAD(v0, buf + i);
        KF_LOAD(v1, buf + i + stride);
        KF_LOAD(v2, buf + i + 2 * stride);
        KF_LOAD(v3, buf + i + 3 * stride);
        acc += (v0.x + v1.x + v2.x + v3.x) + (v0.y + v1.y + v2.y + v3.y)
             + (v0.z + v1.z + v2.z + v3.z) + (v0.w + v1.w + v2.w + v3.w);
    }
    for (; i < n4; i += stride) {
        float4 v;
        KF_LOAD(v, buf + i);
        acc += v.x + v.y + v.z + v.w;
    }
    return acc;
}

// phase 2: every line of buf invalidated, nothing written back
__device__ __forceinline__ void kf_drop_all(const char* buf, long long nbytes) {
#if __CUDA_ARCH__ >= 800
    for (long long off = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 128; off + 128 <= nbytes;
         off += (long long)gridDim.x * blockDim.x * 128)
        asm volatile("discard.global.L2 [%0], 128;" :: "l"(buf + off) : "memory");
#endif
}

extern "C" __global__ void kf_flush(const float4* buf, long long n4, float* sink) {
    const float acc = kf_read_all(buf, n4);
    if (acc == 1234.5f) sink[0] = acc;   // never true: keeps the loads
}

extern "C" __global__ void kf_discard(const char* buf, long long nbytes) {
    kf_drop_all(buf, nbytes);
}

// both phases in one cooperative launch (every block resident): the blocks meet between them on
// `arrived`, which every launch raises by gridDim.x; this launch's blocks go on once it reaches
// `target` (the previous launch's target + gridDim.x)
extern "C" __global__ void kf_flush_once(const float4* buf, long long n4, float* sink, unsigned int* arrived,
                                         unsigned int target) {
    const float acc = kf_read_all(buf, n4);
    if (acc == 1234.5f) sink[0] = acc;   // never true: needs every value read, so every read is done
    __syncthreads();
    if (threadIdx.x == 0) {
        atomicAdd(arrived, 1u);
        while ((int)(target - *(volatile unsigned int*)arrived) > 0) {
#if __CUDA_ARCH__ >= 700
            __nanosleep(64);
#endif
        }
    }
    __syncthreads();
    kf_drop_all((const char*)buf, n4 * 16);
}

extern "C" __global__ void kf_warm(const unsigned int* buf, long long words, unsigned int* sink) {
    unsigned int acc = 0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += (long long)gridDim.x * blockDim.x)
        acc ^= __ldcg(buf + i);
    if (acc == 0x9e3779b9u && sink[0] == 1u) sink[1] = acc;
}

extern "C" __global__ void kf_mark() {}
"""

_BLOCK = 256
#: KFORGE_FLUSH=split: the two-kernel flush even where the one-kernel one works
ENV = "KFORGE_FLUSH"


class L2Flusher:
    """Flush (cold), warm and mark, on a given stream.  One per worker process.  ``kind`` says
    which flush it uses: "once" (``kf_flush_once``, cooperative) or "split" (two kernels), and
    ``why_split`` why not the first."""

    def __init__(self, l2_bytes: int, sms: int = 132, arch: str | None = None):
        import cupy

        self._cp = cupy
        nbytes = max(2 * int(l2_bytes), 64 << 20)
        nbytes = (nbytes + 127) // 128 * 128
        self.buf = cupy.ones(nbytes // 4, dtype=cupy.float32)
        self.sink = cupy.zeros(2, dtype=cupy.uint32)
        module = cupy.RawModule(code=SOURCE, options=("--std=c++17",))
        self._flush = module.get_function("kf_flush")
        self._discard = module.get_function("kf_discard")
        self._warm = module.get_function("kf_warm")
        self._mark = module.get_function("kf_mark")
        self._grid = (max(1, 8 * int(sms)),)   # 2048 threads per SM
        cupy.cuda.Device().synchronize()
        self.kind, self.why_split = "split", ""
        self._once = None
        if os.environ.get(ENV, "").strip().lower() == "split":
            self.why_split = f"{ENV}=split"
        elif not arch:
            self.why_split = "no arch given"
        else:
            self._set_up_once(arch, int(sms))

    def _set_up_once(self, arch: str, sms: int) -> None:
        """Compile and load ``kf_flush_once``, size its grid to what fits at once, and run it once;
        any failure leaves the two-kernel flush in place (``why_split`` says why)."""
        from kernel_forge.common.errors import CudaError
        from kernel_forge.gpu import driver
        from kernel_forge.gpu.nvrtc import compile_source

        cp = self._cp
        try:
            module = driver.Module(compile_source(SOURCE, arch=arch, file_label="kf_flush.cu").cubin, "kf_flush_once")
            drv = driver._driver()
            dev = driver.check(drv.cuCtxGetDevice(), "cuCtxGetDevice")
            coop = driver.check(drv.cuDeviceGetAttribute(
                drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, dev), "cuDeviceGetAttribute")
            if not int(coop):
                self.why_split = "no cooperative launches on this GPU"
                module.unload()
                return
            per_sm = int(driver.check(drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(module.function, _BLOCK, 0),
                                      "cuOccupancyMaxActiveBlocksPerMultiprocessor"))
            if per_sm < 1:
                self.why_split = "kf_flush_once does not fit on an SM"
                module.unload()
                return
            self._arrived = cp.zeros(1, dtype=cp.uint32)
            cp.cuda.Device().synchronize()
            self._target = 0
            self._once_grid = (min(8, per_sm) * sms, 1, 1)
            self._once_args = driver.PackedArgs([
                (int(self.buf.data.ptr), driver.ctypes.c_void_p), (self.buf.size // 4, driver.ctypes.c_longlong),
                (int(self.sink.data.ptr), driver.ctypes.c_void_p), (int(self._arrived.data.ptr), driver.ctypes.c_void_p),
                (0, driver.ctypes.c_uint)])
            self._once = module
            stream = cp.cuda.Stream(non_blocking=True)
            self._launch_once(stream)              # the self-check: it must run and finish
            stream.synchronize()
            driver.synchronize("kf_flush_once self-check")
            self.kind = "once"
        except Exception as exc:  # noqa: BLE001 - any failure: the two-kernel flush stays
            if isinstance(exc, CudaError) and exc.code in driver.STICKY:
                raise
            self._once = None
            self.why_split = f"{type(exc).__name__}: {exc}"[:300]

    def _launch_once(self, stream) -> None:
        from kernel_forge.gpu import driver

        target = (self._target + self._once_grid[0]) & 0xFFFFFFFF
        self._once_args._holders[4].value = target
        driver.launch(self._once, self._once_grid, (_BLOCK, 1, 1), 0, stream.ptr, self._once_args, cooperative=True)
        self._target = target                      # only once the launch is in the stream

    @property
    def nbytes(self) -> int:
        return int(self.buf.nbytes)

    def __call__(self, stream) -> None:
        """Evict every L2 line (evict_last included) and leave nothing dirty; stream-ordered."""
        if self._once is not None:
            self._launch_once(stream)
            return
        np = __import__("numpy")
        with stream:
            self._flush(self._grid, (_BLOCK,), (self.buf, np.int64(self.buf.size // 4), self.sink))
            self._discard(self._grid, (_BLOCK,), (self.buf, np.int64(self.buf.nbytes)))

    def warm(self, arrays, stream) -> None:
        """Read ``arrays`` (contiguous CuPy arrays) through the L2, in order, before a launch."""
        np = __import__("numpy")
        with stream:
            for a in arrays:
                words = int(a.nbytes) // 4
                if words:
                    self._warm(self._grid, (_BLOCK,), (a, np.int64(words), self.sink))

    def mark(self, stream) -> None:
        """An empty harness kernel: separates timed launches for the kernel clock."""
        with stream:
            self._mark((1,), (1,), ())
