"""Tests of kernel_forge/gpu/driver.py: DeviceInfo, check, probe, packed arguments; on a GPU, the device, a launch."""
from __future__ import annotations

import ctypes
import json
import types

import numpy as np
import pytest

from kernel_forge.common.errors import CudaError, EnvironmentProblem, NoGPUError
from kernel_forge.gpu import device_description as dd
from kernel_forge.gpu import driver
from kernel_forge.gpu.driver import DeviceInfo
from kernel_forge.model.limits import arch_limits

from tests.support.fakes import H200


# ---------------------------------------------------------------------------- DeviceInfo

def test_device_info_keeps_old_keys_and_adds_per_sm_limits():
    d = H200.to_json()         # built without the new fields, as before this round
    old_keys = {"ordinal", "name", "cc", "sms", "clock_khz", "mem_clock_khz", "bus_width_bits", "memory_bytes",
                "l2_bytes", "max_threads_per_block", "max_block", "max_grid", "max_smem_per_block",
                "max_smem_per_block_optin", "driver_version", "arch", "theoretical_bandwidth", "fp32_peak", "tensor_peak"}
    assert old_keys <= set(d)
    assert (d["max_registers_per_sm"], d["max_registers_per_thread"], d["max_smem_per_sm"], d["reserved_smem_per_block"],
            d["max_threads_per_sm"], d["max_blocks_per_sm"], d["warp_size"]) == (65536, 255, 233472, 1024, 2048, 32, 32)
    assert d["fp64_peak"] == d["fp32_peak"] / 2 and d["fp16_peak"] == 2 * d["fp32_peak"]


def test_an_older_env_json_loads_with_the_arch_defaults():
    old = {k: v for k, v in json.loads(json.dumps(H200.to_json())).items()
           if not k.startswith(("max_registers", "max_threads_per_sm", "max_blocks", "reserved", "warp", "const",
                                "fp32_to", "fp64", "fp16", "int32")) and k != "max_smem_per_sm"}
    back = DeviceInfo.from_json(old)
    assert back.cc == (9, 0) and back.limit("max_smem_per_sm") == 233472 and back.limit("max_blocks_per_sm") == 32
    full = dd.complete(old)
    assert full["max_threads_per_sm"] == 2048 and full["arch"] == "sm_90" and full["fp64_peak"] > 0
    # a driver value wins over the arch's
    assert DeviceInfo.from_json({**old, "max_blocks_per_sm": 16}).limit("max_blocks_per_sm") == 16
    # an Ada GPU's limits differ from Hopper's
    assert arch_limits((8, 9))["max_threads_per_sm"] == 1536 and arch_limits((8, 9))["max_smem_per_sm"] == 100 * 1024
    assert arch_limits((9, 5))["max_smem_per_sm"] == 228 * 1024     # an unknown newer arch: the nearest older one


def test_the_peaks_are_the_per_sm_rates_times_the_sms_and_the_clock():
    # H200 as fakes.H200 describes it: 132 SMs at 1,980 MHz, sm_90, HBM at 2,619 MHz on a 6,144-bit bus
    assert H200.arch == "sm_90"
    assert H200.fp32_peak == 2 * 132 * 128 * 1.98e9 == 66.90816e12          # 128 FP32 lanes, an FMA is 2 flops
    assert H200.tensor_peak == 2 * 132 * 2048 * 1.98e9                      # dense 16-bit tensor FMAs per SM per clock
    assert H200.fp16_peak == 2 * 132 * 256 * 1.98e9 and H200.int32_peak == 2 * 132 * 64 * 1.98e9
    assert H200.theoretical_bandwidth == 2 * 2.619e9 * 6144 / 8 == 4.022784e12   # DDR: two transfers a clock
    turing = DeviceInfo.from_json({**H200.to_json(), "cc": [7, 5], "fp32_to_fp64_ratio": None})
    assert turing.fp32_peak == 2 * 132 * 64 * 1.98e9 and turing.fp64_peak == turing.fp32_peak / 32
    future = DeviceInfo.from_json({"cc": [11, 0], "sms": 1, "clock_khz": 1_000_000})     # not in the tables
    assert future.fp32_peak == 2 * 128 * 1e9 and future.tensor_peak == 2 * 2048 * 1e9
    assert (future.name, future.max_block, future.max_smem_per_block) == ("unknown GPU", (1024, 1024, 64), 49152)


def scripted_driver(**calls):
    """The bits of cuda.bindings.driver that check() and probe() use; status 0 is success."""
    names = {0: ("CUDA_SUCCESS", "no error"), 100: ("CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"),
             700: ("CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered")}
    drv = types.SimpleNamespace(CUresult=types.SimpleNamespace(CUDA_SUCCESS=0),
                                cuGetErrorName=lambda s: (0, names[s][0].encode()),
                                cuGetErrorString=lambda s: (0, names[s][1].encode()))
    drv.__dict__.update(calls)
    return drv


def test_check_unpacks_the_outputs_and_raises_the_driver_s_name_and_description(monkeypatch):
    monkeypatch.setattr(driver, "_driver", lambda: scripted_driver())
    assert driver.check((0,), "cuInit") is None and driver.check(0, "cuCtxSynchronize") is None
    assert driver.check((0, 42), "cuDeviceGetCount") == 42
    assert driver.check((0, "a", "b"), "cuFuncGetParamInfo") == ("a", "b")
    with pytest.raises(CudaError) as err:
        driver.check((700, None), "cuLaunchKernel")
    assert (err.value.call, err.value.code) == ("cuLaunchKernel", "CUDA_ERROR_ILLEGAL_ADDRESS")
    assert str(err.value) == ("cuLaunchKernel failed: CUDA_ERROR_ILLEGAL_ADDRESS "
                              "(an illegal memory access was encountered)")


@pytest.mark.parametrize("calls, words", [
    (dict(cuInit=lambda flags: (100,)), "cuInit returned CUDA_ERROR_NO_DEVICE"),
    (dict(cuInit=lambda flags: (0,), cuDeviceGetCount=lambda: (0, 0)), "the driver reports no CUDA device"),
    (dict(cuInit=lambda flags: (_ for _ in ()).throw(OSError("libcuda.so.1: cannot open shared object file"))),
     "the CUDA driver library could not be loaded (OSError: libcuda.so.1: cannot open shared object file)"),
])
def test_probe_says_why_there_is_no_gpu(monkeypatch, calls, words):
    monkeypatch.setattr(driver, "_driver", lambda: scripted_driver(**calls))
    with pytest.raises(NoGPUError) as err:
        driver.probe()
    assert err.value.message == f"no usable NVIDIA GPU: {words}"


def test_without_cuda_bindings_the_error_says_what_to_install(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_bindings(name, globals=None, locals=None, fromlist=(), level=0):
        if name.startswith("cuda.bindings") or (name == "cuda" and fromlist and "bindings" in fromlist):
            raise ImportError("No module named 'cuda.bindings'")
        return real(name, globals, locals, fromlist, level)

    monkeypatch.setattr(builtins, "__import__", no_bindings)
    with pytest.raises(EnvironmentProblem) as err:
        driver.probe()                    # not a NoGPUError: the GPU may be there, the package is not
    assert err.value.message.startswith("cuda-bindings is not installed")
    assert err.value.hint == 'pip install "cuda-kernel-forge[cu13]" (or [cu12])'


def test_packed_arguments_are_an_array_of_pointers_to_each_value():
    packed = driver.PackedArgs([(0xDEAD000, ctypes.c_void_p), (-7, ctypes.c_int), (2.5, ctypes.c_float)])
    ptrs = (ctypes.c_uint64 * 3).from_address(packed.pointer)
    assert ctypes.c_void_p.from_address(ptrs[0]).value == 0xDEAD000
    assert ctypes.c_int.from_address(ptrs[1]).value == -7
    assert ctypes.c_float.from_address(ptrs[2]).value == 2.5


# -- on a GPU -----------------------------------------------------------------------------------

VADD = r'''
extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
'''


@pytest.mark.gpu
def test_the_device_facts_come_from_the_driver():
    driver.probe()
    info = driver.device_info(0)
    assert driver.device_count() >= 1 and info.name and info.sms > 0 and info.clock_khz > 0
    assert info.arch == f"sm_{info.cc[0]}{info.cc[1]}" and info.cc >= (7, 0)
    assert info.max_threads_per_block == 1024 and info.warp_size == 32
    assert info.max_smem_per_block_optin >= info.max_smem_per_block == 48 * 1024
    assert info.memory_bytes > 2**30 and info.l2_bytes > 0 and info.max_registers_per_sm == 65536
    back = DeviceInfo.from_json(json.loads(json.dumps(info.to_json())))     # as env.json records it
    assert back.to_json() == info.to_json()


@pytest.mark.gpu
def test_a_module_is_loaded_and_launched_with_packed_arguments_and_a_wrong_entry_is_a_cuda_error():
    import cupy as cp

    from kernel_forge.gpu.nvrtc import compile_source

    driver.probe()
    info = driver.device_info(0)
    cp.cuda.Device(0).use()
    n = 1000
    a = cp.arange(n, dtype=cp.float32)
    b = cp.full(n, 0.5, dtype=cp.float32)
    c = cp.zeros(n, dtype=cp.float32)
    cubin = compile_source(VADD, arch=info.arch).cubin
    mod = driver.Module(cubin, "vadd")
    try:
        assert mod.param_sizes() in (None, [8, 8, 8, 4])
        assert mod.attribute("CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK") == 1024
        args = driver.PackedArgs([(a.data.ptr, ctypes.c_void_p), (b.data.ptr, ctypes.c_void_p),
                                  (c.data.ptr, ctypes.c_void_p), (n, ctypes.c_int)])
        stream = cp.cuda.Stream(non_blocking=True)
        cp.cuda.Device().synchronize()
        driver.launch(mod, (4, 1, 1), (256, 1, 1), 0, stream.ptr, args)
        stream.synchronize()
        driver.synchronize()
        assert np.array_equal(cp.asnumpy(c), np.arange(n, dtype=np.float32) + 0.5)
    finally:
        mod.unload()
    assert mod.handle is None
    with pytest.raises(CudaError) as err:
        driver.Module(cubin, "nope")
    assert err.value.call == "cuModuleGetFunction(nope)" and err.value.code == "CUDA_ERROR_NOT_FOUND"
