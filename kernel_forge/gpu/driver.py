"""The CUDA driver API through ``cuda.bindings.driver``: probe, device facts, load, launch.

CuPy owns the primary context (it is made current by the first CuPy allocation); this module
never creates another.  Every binding call goes through :func:`check`, which raises
:class:`~kernel_forge.common.errors.CudaError` with the driver's name and description of the error.
"""
from __future__ import annotations

import ctypes
from dataclasses import asdict, dataclass, fields

import numpy as np

from kernel_forge.common.errors import CudaError, EnvironmentProblem, NoGPUError
from kernel_forge.model.limits import arch_limits

#: errors after which the context is unusable: the worker must exit.
STICKY = {
    "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_MISALIGNED_ADDRESS",
    "CUDA_ERROR_INVALID_ADDRESS_SPACE", "CUDA_ERROR_INVALID_PC", "CUDA_ERROR_LAUNCH_FAILED",
    "CUDA_ERROR_HARDWARE_STACK_ERROR", "CUDA_ERROR_ASSERT", "CUDA_ERROR_LAUNCH_TIMEOUT",
    "CUDA_ERROR_ECC_UNCORRECTABLE", "CUDA_ERROR_CONTEXT_IS_DESTROYED", "CUDA_ERROR_UNKNOWN",
}


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise EnvironmentProblem(f"cuda-bindings is not installed ({exc})",
                                 hint='pip install "cuda-kernel-forge[cu13]" (or [cu12])') from None
    return driver


def error_name(status) -> tuple[str, str]:
    drv = _driver()
    _, name = drv.cuGetErrorName(status)
    _, desc = drv.cuGetErrorString(status)
    name = name.decode() if isinstance(name, bytes) else str(status)
    desc = desc.decode() if isinstance(desc, bytes) else ""
    return name, desc


def check(result, call: str):
    """Unpack ``(status, *outputs)``; raise :class:`CudaError` unless status is success."""
    drv = _driver()
    status = result[0] if isinstance(result, tuple) else result
    if status != drv.CUresult.CUDA_SUCCESS:
        name, desc = error_name(status)
        raise CudaError(call, name, desc)
    if not isinstance(result, tuple) or len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


def probe() -> None:
    """Raise :class:`NoGPUError` unless a driver and at least one GPU answer."""
    try:
        drv = _driver()
        check(drv.cuInit(0), "cuInit")
        n = check(drv.cuDeviceGetCount(), "cuDeviceGetCount")
    except CudaError as exc:
        raise NoGPUError(f"{exc.call} returned {exc.code}") from None
    except EnvironmentProblem:
        raise
    except Exception as exc:  # noqa: BLE001 - no libcuda raises instead of returning a code
        raise NoGPUError(f"the CUDA driver library could not be loaded ({type(exc).__name__}: {exc})") from None
    if not n:
        raise NoGPUError("the driver reports no CUDA device")


@dataclass(frozen=True)
class DeviceInfo:
    ordinal: int
    name: str
    cc: tuple[int, int]
    sms: int
    clock_khz: int
    mem_clock_khz: int
    bus_width_bits: int
    memory_bytes: int
    l2_bytes: int
    max_threads_per_block: int
    max_block: tuple[int, int, int]
    max_grid: tuple[int, int, int]
    max_smem_per_block: int
    max_smem_per_block_optin: int
    driver_version: str
    # per-SM limits (None: not read from the driver, e.g. an older env.json: the arch's value is used)
    max_registers_per_sm: int | None = None       #: MAX_REGISTERS_PER_MULTIPROCESSOR (32-bit registers)
    max_registers_per_block: int | None = None    #: MAX_REGISTERS_PER_BLOCK
    max_registers_per_thread: int | None = None   #: 255 on every arch since sm_35 (no driver attribute)
    max_smem_per_sm: int | None = None            #: MAX_SHARED_MEMORY_PER_MULTIPROCESSOR (bytes)
    reserved_smem_per_block: int | None = None    #: RESERVED_SHARED_MEMORY_PER_BLOCK (bytes the system takes)
    max_threads_per_sm: int | None = None         #: MAX_THREADS_PER_MULTIPROCESSOR
    max_blocks_per_sm: int | None = None          #: MAX_BLOCKS_PER_MULTIPROCESSOR
    warp_size: int | None = None                  #: WARP_SIZE
    const_bytes: int | None = None                #: TOTAL_CONSTANT_MEMORY (bytes of __constant__ memory)
    fp32_to_fp64_ratio: int | None = None         #: SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO
    cooperative_launch: bool = True               #: COOPERATIVE_LAUNCH (cuLaunchCooperativeKernel works)

    @property
    def arch(self) -> str:
        return f"sm_{self.cc[0]}{self.cc[1]}"

    def limit(self, name: str) -> int:
        """A per-SM limit: the driver's value, else the arch's (:data:`ARCH_LIMITS`)."""
        value = getattr(self, name)
        if value is not None:
            return int(value)
        return arch_limits(tuple(self.cc))[name]

    @property
    def theoretical_bandwidth(self) -> float:
        """bytes/s from memory clock and bus width (DDR: x2)."""
        return 2.0 * self.mem_clock_khz * 1e3 * self.bus_width_bits / 8

    @property
    def fp32_peak(self) -> float:
        """FLOP/s of plain fp32 FMA on CUDA cores (2 flops per FMA)."""
        return 2.0 * self.sms * _FP32_LANES.get(self.cc, 128) * self.clock_khz * 1e3

    @property
    def tensor_peak(self) -> float:
        """Dense 16-bit tensor-core FLOP/s, the fastest rate any honest kernel can reach."""
        return 2.0 * self.sms * _TENSOR_FMA_PER_CLK.get(self.cc[0], 2048) * self.clock_khz * 1e3

    @property
    def fp64_peak(self) -> float:
        """FLOP/s of fp64 FMA on CUDA cores (the fp32 peak over the driver's fp32:fp64 ratio)."""
        return self.fp32_peak / max(1, self.limit("fp32_to_fp64_ratio"))

    @property
    def fp16_peak(self) -> float:
        """FLOP/s of packed half2/bfloat162 FMA on CUDA cores (no tensor cores)."""
        return 2.0 * self.sms * _FP16_LANES.get(tuple(self.cc), 128) * self.clock_khz * 1e3

    @property
    def int32_peak(self) -> float:
        """int32 operations/s (IMAD counted as 2, like an FMA)."""
        return 2.0 * self.sms * 64 * self.clock_khz * 1e3

    def to_json(self) -> dict:
        d = asdict(self)
        for name in ARCH_LIMIT_NAMES:
            d[name] = self.limit(name)
        d.update(arch=self.arch, theoretical_bandwidth=self.theoretical_bandwidth,
                 fp32_peak=self.fp32_peak, tensor_peak=self.tensor_peak, fp64_peak=self.fp64_peak,
                 fp16_peak=self.fp16_peak, int32_peak=self.int32_peak)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "DeviceInfo":
        """The inverse of :meth:`to_json`; keys an older ``env.json`` lacks take the arch's values
        (per-SM limits) or neutral ones, and derived keys (``arch``, peaks) are recomputed."""
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["cc"] = tuple(kw.get("cc") or (0, 0))
        for k in ("max_block", "max_grid"):
            if k in kw:
                kw[k] = tuple(kw[k])
        defaults = dict(ordinal=0, name="unknown GPU", sms=0, clock_khz=0, mem_clock_khz=0, bus_width_bits=0,
                        memory_bytes=0, l2_bytes=0, max_threads_per_block=1024, max_block=(1024, 1024, 64),
                        max_grid=(2_147_483_647, 65535, 65535), max_smem_per_block=49152,
                        max_smem_per_block_optin=49152, driver_version="")
        for k, v in defaults.items():
            kw.setdefault(k, v)
        return cls(**kw)


# FP32 lanes per SM (CUDA programming guide, arithmetic instruction throughput table)
_FP32_LANES = {(7, 0): 64, (7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 7): 128, (8, 9): 128,
               (9, 0): 128, (10, 0): 128, (12, 0): 128}
# dense fp16/bf16 tensor FMAs per SM per clock (NVIDIA architecture whitepapers)
_TENSOR_FMA_PER_CLK = {7: 512, 8: 1024, 9: 2048, 10: 4096, 12: 2048}
# fp16/bf16 FMA results per SM per clock on CUDA cores (packed half2; programming guide throughput table)
_FP16_LANES = {(7, 0): 128, (7, 5): 128, (8, 0): 256, (8, 6): 128, (8, 7): 256, (8, 9): 128,
               (9, 0): 256, (10, 0): 256, (12, 0): 128}

#: per-SM limits by compute capability (CUDA C++ Programming Guide, "Technical Specifications per
#: Compute Capability"); used only where the driver's value was not recorded
ARCH_LIMIT_NAMES = ("max_registers_per_sm", "max_registers_per_block", "max_registers_per_thread",
                    "max_smem_per_sm", "reserved_smem_per_block", "max_threads_per_sm", "max_blocks_per_sm",
                    "warp_size", "const_bytes", "fp32_to_fp64_ratio")
_KB = 1024


def device_info(ordinal: int = 0) -> DeviceInfo:
    drv = _driver()
    probe()
    dev = check(drv.cuDeviceGet(ordinal), "cuDeviceGet")
    A = drv.CUdevice_attribute

    def attr(name: str, default: int = 0) -> int:
        a = getattr(A, name, None)
        if a is None:
            return default
        status, value = drv.cuDeviceGetAttribute(a, dev)
        return int(value) if status == drv.CUresult.CUDA_SUCCESS else default

    def attr_or_none(name: str) -> int | None:
        value = attr(name, -1)
        return value if value > 0 else None

    name = check(drv.cuDeviceGetName(256, dev), "cuDeviceGetName")
    name = bytes(name).split(b"\x00")[0].decode(errors="replace")
    mem = check(drv.cuDeviceTotalMem(dev), "cuDeviceTotalMem")
    dv = check(drv.cuDriverGetVersion(), "cuDriverGetVersion")
    clock = attr("CU_DEVICE_ATTRIBUTE_CLOCK_RATE") or 1_980_000
    mem_clock = attr("CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE")
    return DeviceInfo(
        ordinal=ordinal, name=name,
        cc=(attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"),
            attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")),
        sms=attr("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
        clock_khz=clock, mem_clock_khz=mem_clock,
        bus_width_bits=attr("CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH"),
        memory_bytes=int(mem), l2_bytes=attr("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE"),
        max_threads_per_block=attr("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK"),
        max_block=(attr("CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X"), attr("CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y"),
                   attr("CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z")),
        max_grid=(attr("CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X"), attr("CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y"),
                  attr("CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z")),
        max_smem_per_block=attr("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK"),
        max_smem_per_block_optin=attr("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
        driver_version=f"{dv // 1000}.{(dv % 1000) // 10}",
        max_registers_per_sm=attr_or_none("CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR"),
        max_registers_per_block=attr_or_none("CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK"),
        max_smem_per_sm=attr_or_none("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"),
        reserved_smem_per_block=attr_or_none("CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK"),
        max_threads_per_sm=attr_or_none("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR"),
        max_blocks_per_sm=attr_or_none("CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR"),
        warp_size=attr_or_none("CU_DEVICE_ATTRIBUTE_WARP_SIZE"),
        const_bytes=attr_or_none("CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY"),
        fp32_to_fp64_ratio=attr_or_none("CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO"),
        cooperative_launch=bool(attr("CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH", 1)),
    )


class Module:
    """A loaded CUBIN and its entry function."""

    def __init__(self, cubin: bytes, entry: str):
        drv = _driver()
        self._cubin = cubin  # keep the bytes alive while loaded
        self.handle = check(drv.cuModuleLoadData(cubin), "cuModuleLoadData")
        try:
            self.function = check(drv.cuModuleGetFunction(self.handle, entry.encode()),
                                  f"cuModuleGetFunction({entry})")
        except CudaError:
            self.unload()
            raise
        self.entry = entry

    def attribute(self, name: str) -> int:
        drv = _driver()
        a = getattr(drv.CUfunction_attribute, name)
        return int(check(drv.cuFuncGetAttribute(a, self.function), f"cuFuncGetAttribute({name})"))

    def set_max_dynamic_smem(self, nbytes: int) -> None:
        drv = _driver()
        a = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        check(drv.cuFuncSetAttribute(self.function, a, int(nbytes)), "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")

    def param_sizes(self) -> list[int] | None:
        """Sizes of the kernel's parameters from the image (cuFuncGetParamInfo), or None if the
        driver lacks the call."""
        drv = _driver()
        fn = getattr(drv, "cuFuncGetParamInfo", None)
        if fn is None:
            return None
        sizes = []
        for i in range(256):
            status, _offset, size = fn(self.function, i)
            if status != drv.CUresult.CUDA_SUCCESS:
                break
            sizes.append(int(size))
        return sizes

    def unload(self) -> None:
        if getattr(self, "handle", None) is not None:
            drv = _driver()
            drv.cuModuleUnload(self.handle)
            self.handle = None


class PackedArgs:
    """Kernel arguments packed as a ``void**`` array of pointers to ctypes values."""

    def __init__(self, values: list[tuple[object, type]]):
        self._holders = [ctype(v) for v, ctype in values]
        self._ptrs = np.array([ctypes.addressof(h) for h in self._holders], dtype=np.uint64)

    @property
    def pointer(self) -> int:
        return int(self._ptrs.ctypes.data)


def launch(module: Module, grid, block, smem: int, stream_ptr: int, args: PackedArgs, *,
           cooperative: bool = False) -> None:
    """One launch on the stream; ``cooperative``: with cuLaunchCooperativeKernel (every block
    co-resident, so ``cooperative_groups::this_grid().sync()`` works)."""
    drv = _driver()
    if cooperative:
        check(drv.cuLaunchCooperativeKernel(module.function, *map(int, grid), *map(int, block), int(smem),
                                            drv.CUstream(stream_ptr), args.pointer), "cuLaunchCooperativeKernel")
        return
    check(drv.cuLaunchKernel(module.function, *map(int, grid), *map(int, block), int(smem),
                             drv.CUstream(stream_ptr), args.pointer, 0), "cuLaunchKernel")


def synchronize(call: str = "cuCtxSynchronize") -> None:
    drv = _driver()
    check(drv.cuCtxSynchronize(), call)


def versions() -> dict:
    """Versions of the CUDA pieces in this process (no GPU needed beyond the driver probe)."""
    out: dict[str, object] = {}
    try:
        import cuda.bindings as cb
        out["cuda_bindings"] = getattr(cb, "__version__", "?")
    except ImportError:
        out["cuda_bindings"] = None
    try:
        from kernel_forge.gpu.nvrtc import nvrtc_version
        out["nvrtc"] = nvrtc_version()
    except Exception:  # noqa: BLE001
        out["nvrtc"] = None
    try:
        import cupy
        out["cupy"] = cupy.__version__
        try:
            out["cupy_cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
        except Exception:  # noqa: BLE001
            out["cupy_cuda_runtime"] = None
    except Exception:  # noqa: BLE001
        out["cupy"] = None
    return out


def device_count() -> int:
    """How many CUDA devices the driver reports (raises NoGPUError without one)."""
    probe()
    drv = _driver()
    return int(check(drv.cuDeviceGetCount(), "cuDeviceGetCount"))
