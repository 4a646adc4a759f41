"""The device as the prompt describes it: DeviceInfo's per-SM limits, the shipped H200 file, the
compute ceiling per task, and the occupancy calculator (CPU)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kernel_forge.gpu import device_description as dd
from kernel_forge.common.errors import InputError
from kernel_forge.gpu.driver import DeviceInfo
from kernel_forge.model.limits import arch_limits
from kernel_forge.model.occupancy import occupancy, resources_for_case
from kernel_forge.model.task import load_task

from tests.support.fakes import H200

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "bench" / "evidence" / "h200-2026-12-01-s4" / "probe" / "probe.json"


@pytest.fixture(scope="module")
def h200():
    return dd.load(dd.shipped("h200"))


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


def test_the_shipped_h200_description_is_the_driver_s_values(h200):
    device, cal = h200
    probe = json.loads(PROBE.read_text())
    a, info = probe["device_attributes"], probe["device_info"]
    for key in ("name", "sms", "clock_khz", "l2_bytes", "max_smem_per_block", "max_smem_per_block_optin", "memory_bytes"):
        assert device[key] == info[key], key
    assert device["max_registers_per_sm"] == a["MAX_REGISTERS_PER_MULTIPROCESSOR"] == 65536
    assert device["max_registers_per_block"] == a["MAX_REGISTERS_PER_BLOCK"]
    assert device["max_smem_per_sm"] == a["MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"] == 233472
    assert device["reserved_smem_per_block"] == a["RESERVED_SHARED_MEMORY_PER_BLOCK"] == 1024
    assert device["max_threads_per_sm"] == a["MAX_THREADS_PER_MULTIPROCESSOR"]
    assert device["max_blocks_per_sm"] == a["MAX_BLOCKS_PER_MULTIPROCESSOR"]
    assert device["fp32_peak"] == info["fp32_peak"] and device["tensor_peak"] == info["tensor_peak"]
    assert cal["bandwidth"] == 4.26e12 and cal["copy_us"] == pytest.approx(2 * cal["copy_bytes"] / 4.26e12 * 1e6, rel=1e-6)
    assert set(cal) >= {"copy_bytes", "copy_us", "bandwidth", "fp32_peak", "tensor_peak", "theoretical_bandwidth"}


def test_a_bad_device_file_says_what_and_where(tmp_path):
    p = tmp_path / "dev.json"
    p.write_text("{")
    with pytest.raises(InputError, match=r"dev.json: invalid JSON at line 1"):
        dd.load(p)
    p.write_text(json.dumps({"calibration": {}}))
    with pytest.raises(InputError, match=r"\$\.device: a device description needs"):
        dd.load(p)
    p.write_text(json.dumps({"device": {"name": "x", "cc": [9, 0], "sms": 1, "clock_khz": 1, "l2_bytes": 1}}))
    with pytest.raises(InputError, match=r"\$\.device\.max_smem_per_block_optin: missing"):
        dd.load(p)
    dev = json.loads(dd.shipped().read_text())["device"]
    p.write_text(json.dumps({"device": dev, "calibration": {"copy_us": 3}}))
    with pytest.raises(InputError, match=r"\$\.calibration\.bandwidth"):
        dd.load(p)
    with pytest.raises(InputError, match="cannot read"):
        dd.load(tmp_path / "none.json")
    # a run's env.json is a device description too
    p.write_text(json.dumps({"device": dev, "calibration": None, "python": "3.12"}))
    assert dd.load(p)[1] is None


# ------------------------------------------------------------------------------- peaks

def _task(name):
    return load_task(ROOT / "manifests" / f"{name}.json")


@pytest.mark.parametrize("name, key", [("matmul_f32", "fp32"), ("softmax_rows", "fp32"), ("gelu_bf16", "fp16"),
                                       ("histogram", "int32"), ("vector_add", "fp32")])
def test_the_compute_ceiling_follows_the_operands(h200, name, key):
    peak, note = dd.compute_peak(_task(name), h200[0], h200[1])
    assert peak.key == key
    assert "tensor" in note


def test_tensor_cores_are_the_ceiling_only_for_16_bit_matrix_products(h200, tmp_path):
    data = json.loads((ROOT / "manifests" / "matmul_f32.json").read_text())
    data["signature"] = data["signature"].replace("const float* a, const float* b", "const __half* a, const __half* b")
    data["tolerance"] = {"atol": 1e-1, "rtol": 1e-2}
    for k in ("reference", "baselines", "initial", "templates"):
        data.pop(k, None)
    data["reference"] = {"python": str(ROOT / "references" / "matmul_f32.py") + ":reference"}
    data["initial"] = str(ROOT / "manifests" / "matmul_f32.cu")
    p = tmp_path / "hgemm.json"
    p.write_text(json.dumps(data))
    peak, note = dd.compute_peak(load_task(p), h200[0], h200[1])
    assert peak.key == "tensor16" and "allowed for matrix-product work" in note
    # fp32 matmul: TF32 would round its operands; the tensor peak is never its ceiling
    peak, note = dd.compute_peak(_task("matmul_f32"), h200[0], h200[1])
    assert peak.key == "fp32" and "TF32" in note and "split-precision" in note


def test_a_tf32_mma_kernel_of_an_fp32_task_gets_the_split_tf32_ceiling(h200):
    from kernel_forge.kernels.library import by_name

    task = _task("matmul_f32")
    tf = by_name("gemm_tf32x3_mma").source()
    peak, note = dd.compute_peak(task, h200[0], h200[1], tf)
    assert peak.key == "tf32x3" and peak.flops == pytest.approx(h200[0]["tensor_peak"] / 6)
    assert "535 TFLOP/s TF32 peak" in note and "three products" in note
    # an FFMA kernel, a kernel that only names tf32 in a comment, a 16-bit task: as before
    assert dd.compute_peak(task, h200[0], h200[1], by_name("gemm_simt_warptile").source())[0].key == "fp32"
    assert dd.compute_peak(task, h200[0], h200[1], "// no tf32 here: mma later\n")[0].key == "fp32"
    assert dd.compute_peak(_task("matmul_f16"), h200[0], h200[1], tf)[0].key == "tensor16"


def test_the_device_section_for_matmul_f32(h200):
    text = dd.render(h200[0], h200[1], _task("matmul_f32"))
    assert "NVIDIA H200 (sm_90, compute capability 9.0), driver 13.0: 132 SMs at 1980 MHz" in text
    assert "Memory: measured copy bandwidth 4260 GB/s" in text
    assert "- fp32 FMA on CUDA cores: 66.9 TFLOP/s  <- the ceiling for this task" in text
    assert "1070" not in text and "16-bit tensor cores" not in text          # not shown as a ceiling at all
    assert "Ridge point for this task: 15.7 FLOP/byte" in text
    assert ("- threads: 2048 per SM (64 warps of 32), 1024 per block (block dims up to [1024, 1024, 64]); at most 32 "
            "resident blocks per SM") in text
    assert "65536 32-bit registers per SM, 65536 per block, at most 255 per thread" in text
    assert "233472 bytes (228 KiB) per SM" in text and "49152 bytes (48 KiB) of static" in text
    assert "232448 bytes (227 KiB) in all with dynamic shared memory" in text and "the harness opts every launch in" in text
    assert "reserves 1024 bytes per block" in text
    assert "CUBIN for sm_90 (`--gpu-architecture=sm_90`), C++17, `-lineinfo`, no `--use_fast_math`" in text
    assert "`// kforge: cooperative = true`" in text and "at most blocks-per-SM x 132 SMs" in text
    assert "cold L2" in text and "evict-last" in text
    assert "initial globals" in text and "CUPTI" in text
    assert dd.render(None, None, _task("matmul_f32")).startswith("# Device\n(unknown")


def test_the_device_section_of_a_bf16_elementwise_task_keeps_to_cuda_cores(h200):
    text = dd.render(h200[0], h200[1], _task("gelu_bf16"))
    assert "- fp16/bf16 packed (half2) FMA on CUDA cores: 133.8 TFLOP/s  <- the ceiling for this task" in text
    assert "this task's 2.5 FLOP/byte is below the CUDA-core ridge point" in text


def test_without_calibration_the_theoretical_bandwidth_is_named_as_such(h200):
    text = dd.render(h200[0], None, _task("vector_add"))
    assert "Memory: theoretical bandwidth (not measured) 4814 GB/s" in text


# --------------------------------------------------------------------------- occupancy

def test_occupancy_matches_the_driver_on_the_h200(h200):
    """cuOccupancyMaxActiveBlocksPerMultiprocessor on the H200 (probe): a 32-register kernel with
    2 KB of static shared memory fits 32/16/8/4/2 blocks at 64..1024 threads."""
    probe = json.loads(PROBE.read_text())
    regs = probe["func_attrs_mm_plain"]["CU_FUNC_ATTRIBUTE_NUM_REGS"]
    smem = probe["func_attrs_mm_plain"]["CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES"]
    for threads, blocks in probe["occupancy_mm_plain"].items():
        r = occupancy(int(threads), regs, smem, 0, h200[0])
        assert r["blocks_per_sm"] == blocks, threads
        assert r["occupancy"] == 1.0 and r["source"] == "computed"


def test_occupancy_limits_agree_with_ncu(h200):
    """ncu's launch__occupancy_limit_registers / _warps / _blocks for that kernel at 256 threads."""
    r = occupancy(256, 32, 2048, 0, h200[0])
    assert (r["limits"]["registers"], r["limits"]["threads"], r["limits"]["blocks"]) == (8, 8, 32)


@pytest.mark.parametrize("threads, regs, static, dynamic, blocks, limiter", [
    (256, 128, 0, 0, 2, "registers"),            # 4096 registers a warp: 4 warps per partition
    (256, 72, 0, 0, 3, "registers"),             # 72 x 32 = 2304 -> 2304 per warp: 7 per partition, 28 warps
    (128, 32, 48 * 1024, 0, 4, "shared_memory"),  # 49152 + 1024 reserved per block
    (128, 32, 0, 100 * 1024, 2, "shared_memory"),
    (32, 16, 0, 0, 32, "blocks"),
    (1024, 32, 0, 0, 2, "threads"),
    (1024, 255, 0, 0, 0, "registers"),           # does not fit one block
    (128, 32, 40000, 200000, 0, "shared_memory"),  # above the opt-in maximum
])
def test_occupancy_cases(h200, threads, regs, static, dynamic, blocks, limiter):
    r = occupancy(threads, regs, static, dynamic, h200[0])
    assert (r["blocks_per_sm"], r["occupancy_limiter"]) == (blocks, limiter)
    assert r["warps_per_sm"] == blocks * -(-threads // 32)
    if blocks == 0:
        assert r["problem"]


def test_resources_for_case_reads_ptxas_and_the_launch(h200):
    info = {"resources": {"registers": 40, "spill_stores": 8, "spill_loads": 4, "smem": 4096, "stack": 16}}
    r = resources_for_case(info, {"grid": [10, 1, 1], "block": [16, 16, 1], "shared_mem": 1024}, h200[0])
    assert (r["threads_per_block"], r["registers"], r["static_smem"], r["dynamic_smem"]) == (256, 40, 4096, 1024)
    assert (r["spill_stores"], r["spill_loads"], r["local_bytes"]) == (8, 4, 16)
    assert r["blocks_per_sm"] == 6          # 40 regs -> 1280 per warp: 12 warps per partition, 48 warps
    assert resources_for_case({"resources": {}}, {"block": [1]}, h200[0]) is None
    assert resources_for_case(info, None, h200[0]) is None


def test_an_ada_gpu_fits_fewer_threads(h200):
    ada = dd.complete({**json.loads(json.dumps(replace(H200, cc=(8, 9)).to_json())),
                       "max_threads_per_sm": None, "max_smem_per_sm": None, "max_blocks_per_sm": None})
    r = occupancy(1024, 32, 0, 0, ada)
    assert ada["max_threads_per_sm"] == 1536 and r["blocks_per_sm"] == 1
