"""``kforge doctor``: what this machine has, in one report (never prints a key's value)."""
from __future__ import annotations

import os
import platform
import shutil
from importlib import metadata

from kernel_forge.common.errors import KForgeError, NoGPUError

LLM_KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def collect() -> dict:
    from kernel_forge import __version__

    report: dict = {"kernel_forge": __version__, "python": platform.python_version(),
                    "platform": platform.platform()}
    pkgs = {}
    for dist in ("cuda-bindings", "cuda-python", "cuda-pathfinder", "cupy-cuda13x", "cupy-cuda12x", "cupy",
                 "nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu12", "numpy", "jsonschema", "click",
                 "anthropic", "openai", "matplotlib"):
        v = _version(dist)
        if v:
            pkgs[dist] = v
    report["packages"] = pkgs
    try:
        from kernel_forge.gpu.nvrtc import include_dirs, nvrtc_version, supported_archs
        report["nvrtc"] = {"version": nvrtc_version(), "archs": supported_archs(), "include_dirs": include_dirs()}
    except KForgeError as exc:
        report["nvrtc"] = {"error": str(exc)}
    except Exception as exc:  # noqa: BLE001
        report["nvrtc"] = {"error": f"{type(exc).__name__}: {exc}"}
    gpu: dict = {"ok": False}
    try:
        from kernel_forge.gpu import driver
        info = driver.device_info(0)
        gpu = {"ok": True, **info.to_json()}
    except NoGPUError as exc:
        gpu["error"] = str(exc)
    except KForgeError as exc:
        gpu["error"] = str(exc)
    except Exception as exc:  # noqa: BLE001
        gpu["error"] = f"{type(exc).__name__}: {exc}"
    report["gpu"] = gpu
    majors = {}
    if pkgs.get("cuda-bindings"):
        majors["cuda-bindings"] = int(pkgs["cuda-bindings"].split(".")[0])
    for k in ("cupy-cuda13x", "cupy-cuda12x"):
        if k in pkgs:
            majors[k] = 13 if "13" in k else 12
    nv = report["nvrtc"].get("version")
    if nv:
        majors["nvrtc"] = int(nv.split(".")[0])
    if gpu.get("ok"):
        majors["driver"] = int(gpu["driver_version"].split(".")[0])
    report["cuda_majors"] = majors
    libs = {k: v for k, v in majors.items() if k != "driver"}
    agree = len(set(libs.values())) <= 1
    if "driver" in majors and libs and max(libs.values()) > majors["driver"]:
        agree = False
    report["cuda_majors_agree"] = agree
    if gpu.get("ok") and report["nvrtc"].get("archs"):
        cc = gpu["cc"][0] * 10 + gpu["cc"][1]
        report["nvrtc_supports_gpu"] = cc in report["nvrtc"]["archs"]
    report["llm_keys"] = {k: bool(os.environ.get(k)) for k in LLM_KEYS}
    report["compute_sanitizer"] = shutil.which("compute-sanitizer")
    return report


def render(r: dict) -> str:
    lines = [f"kernel_forge {r['kernel_forge']} on Python {r['python']} ({r['platform']})"]
    g = r["gpu"]
    if g.get("ok"):
        lines.append(f"GPU      {g['name']} ({g['arch']}), {g['sms']} SMs, {g['memory_bytes'] / 2**30:.0f} GiB, "
                     f"L2 {g['l2_bytes'] / 2**20:.0f} MiB, driver CUDA {g['driver_version']}")
        lines.append(f"peaks    fp32 {g['fp32_peak'] / 1e12:.1f} TFLOP/s, tensor (16-bit) {g['tensor_peak'] / 1e12:.0f} "
                     f"TFLOP/s, memory {g['theoretical_bandwidth'] / 1e9:.0f} GB/s (theoretical)")
    else:
        lines.append(f"GPU      none: {g.get('error')}")
    n = r["nvrtc"]
    if "version" in n:
        lines.append(f"NVRTC    {n['version']} (archs {min(n['archs'])}..{max(n['archs'])}); headers: "
                     f"{', '.join(n['include_dirs']) or 'none found (cuda_fp16.h will fail)'}")
    else:
        lines.append(f"NVRTC    unavailable: {n['error']}")
    lines.append("packages " + ", ".join(f"{k} {v}" for k, v in r["packages"].items()))
    lines.append(f"CUDA     majors {r['cuda_majors']} -> {'agree' if r['cuda_majors_agree'] else 'DISAGREE: install one extra, [cu12] or [cu13], matching the driver'}")
    if "nvrtc_supports_gpu" in r:
        lines.append(f"arch     NVRTC {'can' if r['nvrtc_supports_gpu'] else 'CANNOT'} compile for this GPU")
    lines.append("LLM keys " + ", ".join(f"{k} {'set' if v else 'not set'}" for k, v in r["llm_keys"].items()))
    lines.append(f"sanitizer {r['compute_sanitizer'] or 'compute-sanitizer not on PATH (--sanitize unavailable)'}")
    if not g.get("ok"):
        from kernel_forge.common.errors import NO_GPU_COMMANDS
        lines.append("without a GPU these work: " + ", ".join(NO_GPU_COMMANDS))
    return "\n".join(lines)


def gpu_arch() -> str:
    from kernel_forge.gpu import driver
    return driver.device_info(0).arch
