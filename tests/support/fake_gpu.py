"""A NumPy stand-in for CuPy and the driver calls of kernel_forge.gpu, for running the worker's
code (gpu/runner.py, gpu/resident.py, gpu/compare.py's plumbing) on a machine without a GPU.

Device pointers are the NumPy buffers' own addresses, so driver memsets and copies, kernel
arguments and CuPy views all reach the same bytes.  "Kernels" are Python functions given the
launch's argument values; the fingerprint kernel computes ``host_fingerprint`` and the comparison
kernels compute ``verify.element_checks``: this fake tests the plumbing, the GPU tests test the
CUDA code.
"""
from __future__ import annotations

import types

import numpy as np

from kernel_forge.common.dtypes import BY_NAME
from kernel_forge.gpu import driver as real_driver
from kernel_forge.gpu.fingerprint import host_fingerprint
from kernel_forge.gpu.mask import host_mask, unmask_at
from kernel_forge.model.task import Tolerance
from kernel_forge.model.tolerance import element_checks


class Memory:
    def __init__(self):
        self.bases: list[np.ndarray] = []

    def alloc(self, nbytes: int, align: int = 256) -> np.ndarray:
        base = np.zeros(max(int(nbytes), 1) + align, dtype=np.uint8)
        off = (-base.ctypes.data) % align
        self.bases.append(base)
        return base[off:off + int(nbytes)]

    def resolve(self, ptr: int, nbytes: int) -> np.ndarray:
        for base in self.bases:
            lo = base.ctypes.data
            if lo <= ptr and ptr + nbytes <= lo + base.nbytes:
                return base[ptr - lo:ptr - lo + nbytes]
        raise AssertionError(f"no allocation holds {nbytes} bytes at {ptr:#x}")


MEM = Memory()
PAGE = 2 << 20


class _Ptr:
    def __init__(self, arr: "FakeArray"):
        self.arr = arr

    @property
    def ptr(self) -> int:
        return int(self.arr.a.ctypes.data)

    def copy_from_device_async(self, src: "_Ptr", nbytes: int, stream=None) -> None:
        MEM.resolve(self.ptr, nbytes)[:] = MEM.resolve(src.ptr, nbytes)


class FakeArray:
    def __init__(self, a: np.ndarray):
        self.a = a

    data = property(lambda self: _Ptr(self))
    nbytes = property(lambda self: self.a.nbytes)
    size = property(lambda self: self.a.size)
    shape = property(lambda self: self.a.shape)
    dtype = property(lambda self: self.a.dtype)
    flags = property(lambda self: types.SimpleNamespace(c_contiguous=self.a.flags.c_contiguous))

    def reshape(self, *shape):
        return FakeArray(self.a.reshape(*shape))

    def view(self, dtype):
        return FakeArray(self.a.view(dtype))

    def __getitem__(self, key):
        if isinstance(key, FakeArray):
            return _new(self.a[key.a])
        got = self.a[key]
        return FakeArray(got) if isinstance(got, np.ndarray) and np.shares_memory(got, self.a) else _new(np.asarray(got))

    def __setitem__(self, key, value):
        self.a[key] = value.a if isinstance(value, FakeArray) else value

    def __len__(self):
        return len(self.a)

    def get(self, stream=None):
        return self.a.copy()

    def fill(self, value):
        self.a.fill(value)

    def set(self, host, stream=None):      # cupy.ndarray.set: host -> device, same shape and dtype
        assert host.shape == self.a.shape and host.dtype == self.a.dtype, (host.shape, self.a.shape)
        self.a[...] = host

    def copy(self):
        return _new(self.a)


def _new(host: np.ndarray) -> FakeArray:
    host = np.ascontiguousarray(host)
    raw = MEM.alloc(host.nbytes)
    arr = raw.view(host.dtype).reshape(host.shape) if host.nbytes else np.empty(host.shape, host.dtype)
    arr[...] = host
    return FakeArray(arr)


class _Stream:
    def __init__(self, non_blocking=False):
        self.ptr = 0x5000

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def synchronize(self):
        pass


class _Event:
    def record(self, stream=None):
        pass

    def synchronize(self):
        pass


def _fingerprint_kernel(grid, block, args):
    array, nbytes, key, out, mkey, masked = args
    raw = array.a.reshape(-1).view(np.uint8)[:int(nbytes)]
    if int(masked):
        raw = host_mask(raw, int(mkey))
    with np.errstate(over="ignore"):
        out.a[0] = np.uint64(out.a[0]) + np.uint64(host_fingerprint(raw, int(key)))


def _compare_kernel(name: str):
    dname, _ename, _mode = name[len("kf_compare_"):].split("_")
    dtype = BY_NAME[dname]

    def run(grid, block, args):
        a, e, n, atol, rtol, _floor, _poison, check_poison, counts, maxes, mask, want, akey, amasked, ekey, emasked = args
        stored = a.a[:int(n)]
        if int(amasked):
            stored = unmask_at(stored, np.arange(int(n)), int(akey))
        expected = e.a[:int(n)]
        if int(emasked):
            expected = unmask_at(expected, np.arange(int(n)), int(ekey))
        bits = stored.view(dtype.numpy)
        el = element_checks(bits, expected, dtype, Tolerance(float(atol), float(rtol)),
                            check_poison=bool(check_poison))
        counts.a[0] += int(el.bad.sum())
        counts.a[1] += int(el.unwritten.sum())
        counts.a[2] += int(el.nonfinite_bad.sum())
        for i, v in enumerate((el.diff, el.rel, el.ratio)):
            m = np.float64(v.max() if v.size else 0.0)
            maxes.a[i] = max(int(maxes.a[i]), int(np.array([m]).view(np.uint64)[0]))
        if int(want):
            mask.a[:int(n)] = el.bad
    return run


def _mask_kernel(grid, block, args):
    src, dst, n, key = args
    dst.a[:int(n)] = unmask_at(src.a[:int(n)].copy(), np.arange(int(n)), int(key))


def _state_copy(grid, block, args):
    table, n = args
    for a, b, nbytes, _sym in table.a.reshape(-1, 4)[:int(n)]:
        MEM.resolve(int(a), int(nbytes))[:] = MEM.resolve(int(b), int(nbytes))


def _state_diff(grid, block, args):
    table, n, flags = args
    for a, b, nbytes, sym in table.a.reshape(-1, 4)[:int(n)]:
        if not np.array_equal(MEM.resolve(int(a), int(nbytes)), MEM.resolve(int(b), int(nbytes))):
            flags.a[int(sym)] = 1


_STATE = {"kf_state_copy": _state_copy, "kf_state_diff": _state_diff}


#: every kf_ kernel launched through a RawModule, by name (tests read it)
KF_LAUNCHES: list[str] = []
#: name -> Python stand-in ``fn(grid, block, args)`` for harness kernels a test provides itself
KERNELS: dict[str, object] = {}


class _RawModule:
    def __init__(self, code="", options=()):
        self.code = code

    def get_function(self, name):
        if name in KERNELS:                     # a test's own stand-in for a harness kernel
            fn = KERNELS[name]
        else:
            fn = (_mask_kernel if name.startswith("kf_mask_") else _STATE.get(name) or _compare_kernel(name))

        def launch(grid, block, args):
            KF_LAUNCHES.append(name)
            fn(grid, block, args)
        return launch


def make_cupy():
    cp = types.ModuleType("cupy")
    cp.__version__ = "fake"
    cp.uint8, cp.uint32, cp.uint64, cp.int64, cp.float32 = np.uint8, np.uint32, np.uint64, np.int64, np.float32
    cp.asarray = lambda x, dtype=None: x if isinstance(x, FakeArray) else _new(np.asarray(x, dtype=dtype))
    cp.asnumpy = lambda x: x.a.copy()
    cp.empty_like = lambda x: _new(np.empty_like(x.a))
    cp.empty = lambda n, dtype=np.float32: _new(np.empty(n, dtype=dtype))
    cp.zeros = lambda n, dtype=np.float32: _new(np.zeros(n, dtype=dtype))
    cp.ones = lambda n, dtype=np.float32: _new(np.ones(n, dtype=dtype))
    cp.concatenate = lambda arrays: _new(np.concatenate([x.a for x in arrays]))
    cp.flatnonzero = lambda x: _new(np.flatnonzero(x.a))

    def add(x, y, out=None):            # what cupy_add baselines call
        if out is None:
            return _new(x.a + y.a)
        if ALLOCATORS:                  # like CuPy: a temporary from the current allocator first
            tmp = ALLOCATORS[-1](x.a.nbytes)
            TEMPORARIES.append(tmp.ptr)
            MEM.resolve(tmp.ptr, x.a.nbytes).view(x.a.dtype)[:] = x.a + y.a
        np.add(x.a, y.a, out=out.a)
        return out

    cp.add = add
    cp.RawKernel = lambda src, name: _fingerprint_kernel
    cp.ndarray = lambda size, dtype=np.uint8, memptr=None: FakeArray(
        MEM.resolve(memptr.ptr, size * np.dtype(dtype).itemsize).view(dtype))
    cp.RawModule = _RawModule
    cuda = types.SimpleNamespace()
    cuda.Device = lambda o=0: types.SimpleNamespace(use=lambda: None, synchronize=lambda: None)
    cuda.Stream = _Stream
    cuda.Event = _Event
    cuda.get_elapsed_time = lambda a, b: 0.02
    cuda.runtime = types.SimpleNamespace(memGetInfo=lambda: (64 << 20, 141 << 30))
    cuda.UnownedMemory = lambda ptr, size, owner: types.SimpleNamespace(ptr=ptr, size=size)
    cuda.MemoryPointer = lambda mem, offset: types.SimpleNamespace(ptr=mem.ptr + offset)
    class _Memory:                          # cupy.cuda.Memory: a raw allocation (cudaMalloc: whole
        def __init__(self, size):           # 2 MiB pages come 2 MiB-aligned)
            self.a = MEM.alloc(size, align=PAGE if size % PAGE == 0 else 256)
            self.size = int(size)
            self.ptr = int(self.a.ctypes.data)

    class _Pool:                            # cupy.cuda.MemoryPool(allocator=...): no reuse here
        instances: list = []

        def __init__(self, allocator=None):
            self.allocator = allocator
            self.freed = 0
            _Pool.instances.append(self)

        def malloc(self, size):
            return self.allocator(size)

        def free_all_blocks(self):
            self.freed += 1

    class _Using:
        def __init__(self, allocator):
            self.allocator = allocator

        def __enter__(self):
            ALLOCATORS.append(self.allocator)
            return self

        def __exit__(self, *exc):
            ALLOCATORS.pop()
            return False

    cuda.Memory = _Memory
    cuda.MemoryPool = _Pool
    cuda.using_allocator = _Using
    cp.cuda = cuda
    cp.get_default_memory_pool = lambda: types.SimpleNamespace(free_all_blocks=lambda: None)
    return cp


#: allocators made current with cupy.cuda.using_allocator (a Python baseline's scrubbed pool)
ALLOCATORS: list = []
#: device pointers of the temporaries a baseline's cupy.add made through that allocator
TEMPORARIES: list = []


# -- the driver --------------------------------------------------------------------------------

ATTRS = {"CU_FUNC_ATTRIBUTE_NUM_REGS": 16, "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES": 0,
         "CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES": 0, "CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES": 0,
         "CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK": 1024, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES": 49152}
DEVICE_ATTRS = {"CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR": 2048,
                "CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR": 32,
                "CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR": 65536,
                "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 233472,
                "CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK": 1024}

#: the Python "kernel" every launch runs, given the launch's argument values (set by a test)
KERNEL: dict[str, object] = {"run": lambda values, module: None}
LAUNCHES: list[tuple] = []


class FakeModule:
    loads = 0

    def __init__(self, cubin: bytes, entry: str):
        self.cubin, self.entry, self.function = cubin, entry, "fn"
        self.attrs = dict(ATTRS)
        self.handle = self
        self.globals: dict[str, int] = {}     #: name -> device pointer (cuModuleGetGlobal)
        FakeModule.loads += 1

    def global_ptr(self, name: str, size: int = 4096) -> int:
        if name not in self.globals:
            self.globals[name] = int(MEM.alloc(size).ctypes.data)
        return self.globals[name]

    def attribute(self, name: str) -> int:
        return self.attrs[name]

    def set_max_dynamic_smem(self, nbytes: int) -> None:
        self.attrs["CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES"] = nbytes

    def param_sizes(self):
        return [8, 8, 8, 4]

    def unload(self):
        pass


def _launch(module, grid, block, smem, stream_ptr, args, *, cooperative=False):
    values = [h.value for h in args._holders]
    LAUNCHES.append((tuple(grid), tuple(block)))
    COOPERATIVE.append(bool(cooperative))
    KERNEL["run"](values, module)


COOPERATIVE: list[bool] = []


def _ok(*out):
    return (0, *out)


def make_driver():
    drv = types.SimpleNamespace()
    drv.CUresult = types.SimpleNamespace(CUDA_SUCCESS=0)
    drv.CUdevice_attribute = types.SimpleNamespace(**{k: k for k in DEVICE_ATTRS})
    drv.CUstream = lambda x: x
    drv.cuDeviceGet = lambda o: _ok(o)
    drv.cuDeviceGetAttribute = lambda attr, dev: _ok(DEVICE_ATTRS[attr])
    drv.cuOccupancyMaxActiveBlocksPerMultiprocessor = lambda f, threads, smem: _ok(2048 // threads)

    def memset(width):
        def call(ptr, pattern, n, stream):
            MEM.resolve(ptr, n * width).view(f"<u{width}")[:] = pattern
            return _ok()
        return call

    drv.cuMemsetD8Async, drv.cuMemsetD16Async, drv.cuMemsetD32Async = memset(1), memset(2), memset(4)

    def memcpy(dst, src, nbytes, stream):
        MEM.resolve(dst, nbytes)[:] = MEM.resolve(src, nbytes)
        return _ok()

    drv.cuMemcpyDtoDAsync = memcpy
    drv.cuMemcpyDtoD = lambda dst, src, nbytes: memcpy(dst, src, nbytes, None)
    drv.cuModuleGetGlobal = lambda module, name: _ok(module.global_ptr(name.decode()), 4096)
    return drv


def device_info(ordinal=0):
    return real_driver.DeviceInfo(
        ordinal=ordinal, name="Fake H200", cc=(9, 0), sms=132, clock_khz=1_980_000, mem_clock_khz=2_619_000,
        bus_width_bits=6144, memory_bytes=141 << 30, l2_bytes=1 << 20, max_threads_per_block=1024,
        max_block=(1024, 1024, 64), max_grid=(2**31 - 1, 65535, 65535), max_smem_per_block=49152,
        max_smem_per_block_optin=232448, driver_version="13.0")


class FakeFlusher:
    """gpu/flush.py's L2Flusher: its kf_ kernels have nothing to do here."""

    kind, why_split = "split", "the fake GPU"

    def __init__(self, l2_bytes: int, sms: int = 132, arch: str | None = None):
        self.calls: list[str] = []

    def __call__(self, stream) -> None:
        self.calls.append("flush")

    def warm(self, arrays, stream) -> None:
        self.calls.append("warm")

    def mark(self, stream) -> None:
        self.calls.append("mark")


def install(monkeypatch) -> None:
    """Put the fakes in place of CuPy and the driver calls for one test."""
    import sys

    import kernel_forge.gpu.compare as compare_mod
    import kernel_forge.gpu.fingerprint as fp_mod
    import kernel_forge.gpu.runner as runner_mod

    monkeypatch.setattr(runner_mod, "L2Flusher", FakeFlusher)

    monkeypatch.setitem(sys.modules, "cupy", make_cupy())
    drv = make_driver()
    monkeypatch.setattr(real_driver, "_driver", lambda: drv)
    monkeypatch.setattr(real_driver, "probe", lambda: None)
    monkeypatch.setattr(real_driver, "device_info", device_info)
    monkeypatch.setattr(real_driver, "Module", FakeModule)
    monkeypatch.setattr(real_driver, "launch", _launch)
    monkeypatch.setattr(real_driver, "synchronize", lambda call="": None)
    monkeypatch.setattr(fp_mod, "_kernel", None)
    monkeypatch.setattr(compare_mod, "_kernels", {})
    import kernel_forge.gpu.mask as mask_mod
    import kernel_forge.gpu.module_state as state_mod
    monkeypatch.setattr(mask_mod, "_module", None)
    monkeypatch.setattr(state_mod, "_module", None)
    LAUNCHES.clear()
    COOPERATIVE.clear()
    KF_LAUNCHES.clear()
    KERNELS.clear()
    ALLOCATORS.clear()
    TEMPORARIES.clear()


def floats(ptr: int, n: int) -> np.ndarray:
    """The float32 device buffer at ``ptr`` (a kernel's view of its argument)."""
    return MEM.resolve(ptr, 4 * n).view(np.float32)


__all__ = ["install", "KERNEL", "LAUNCHES", "MEM", "floats"]
