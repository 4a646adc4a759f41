"""The device as the prompt describes it: the shipped H200 file and the compute ceiling per task (CPU).
DeviceInfo itself is in test_driver.py, the occupancy calculator in tests/model/test_occupancy.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_forge.gpu import device_description as dd
from kernel_forge.common.errors import InputError
from kernel_forge.model.task import load_task


ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "bench" / "evidence" / "h200-2026-12-01-s4" / "probe" / "probe.json"


@pytest.fixture(scope="module")
def h200():
    return dd.load(dd.shipped("h200"))


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
    assert "CUBIN for sm_90 (`--gpu-architecture=sm_90a`), C++17, `-lineinfo`, no `--use_fast_math`" in text
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
