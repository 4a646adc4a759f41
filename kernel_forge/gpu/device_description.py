"""The device as the model and the diagnosis see it: limits, peaks, and how candidates are built and timed.

A *device description* file (``kernel_forge/data/devices/h200.json`` ships one) holds a
``device`` object (``DeviceInfo.to_json()``) and a ``calibration`` object (what
``Gate.calibrate()`` measures), so ``kforge optimize --dry-run --device FILE`` prints the whole
prompt on a machine with no GPU.  :func:`complete` fills the per-SM limits an older ``env.json``
lacks from the device's arch.  :func:`compute_peak` picks the FLOP/s ceiling that applies to a
task: the CUDA-core rate of its operands' type, and the 16-bit tensor-core rate only where the
operands are 16-bit floats (TF32 would round float32 operands, so it is never a float32 task's
ceiling).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from kernel_forge.common.errors import InputError
from kernel_forge.model.limits import target_arch

#: keys a description's ``device`` object must have (the rest default from the arch)
REQUIRED_DEVICE_KEYS = ("name", "cc", "sms", "clock_khz", "l2_bytes", "max_smem_per_block_optin")


def complete(device: dict | None) -> dict | None:
    """``device`` with every key of today's ``DeviceInfo.to_json()`` (arch defaults for missing
    per-SM limits; peaks recomputed), keeping any extra keys it had."""
    if not device:
        return None
    from kernel_forge.gpu.driver import DeviceInfo

    full = DeviceInfo.from_json(device).to_json()
    full = json.loads(json.dumps(full))   # tuples -> lists, as the file has them
    return {**device, **full}


def load(path: str | Path) -> tuple[dict, dict | None]:
    """(device, calibration) from a device description file; :class:`InputError` saying what
    and where when the file is unreadable or lacks a key."""
    from kernel_forge.common.reads import read_json_file

    p = Path(path)
    data = read_json_file(p, "device description")
    if not isinstance(data, dict) or not isinstance(data.get("device"), dict):
        raise InputError(f"{p}: $.device: a device description needs a \"device\" object",
                         hint="see kernel_forge/data/devices/h200.json, or a run's env.json")
    for k in REQUIRED_DEVICE_KEYS:
        if k not in data["device"]:
            raise InputError(f"{p}: $.device.{k}: missing", hint=f"a device object needs {', '.join(REQUIRED_DEVICE_KEYS)}")
    cal = data.get("calibration")
    if cal is not None and not isinstance(cal, dict):
        raise InputError(f"{p}: $.calibration must be an object or null")
    if cal and not isinstance(cal.get("bandwidth"), (int, float)):
        raise InputError(f"{p}: $.calibration.bandwidth: the measured copy bandwidth (bytes/s) is missing")
    return complete(data["device"]), cal


def shipped(name: str = "h200") -> Path:
    """The path of a device description shipped with kernel_forge."""
    return Path(str(resources.files("kernel_forge").joinpath(f"data/devices/{name}.json")))


# -- compute peaks ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Peak:
    key: str          #: "fp32" | "fp64" | "fp16" | "int32" | "tensor16"
    label: str        #: what the model reads
    flops: float      #: operations per second
    unit: str = "TFLOP/s"


def operand_type(task) -> str:
    """The arithmetic type of a task, from its buffer parameters: "float64", "float32",
    "float16" (16-bit floats, bf16 included) or "int"."""
    bufs = [a for a in task.args if a.is_buffer]
    inputs = [a for a in bufs if a.param.const] or bufs
    floats = [a.param.dtype for a in inputs if a.param.dtype.is_float]
    if not floats:
        floats = [a.param.dtype for a in bufs if a.param.dtype.is_float]
    if not floats:
        return "int"
    if any(d.bits == 64 for d in floats):
        return "float64"
    if all(d.bits == 16 for d in floats):
        return "float16"
    return "float32"


def peaks(device: dict) -> dict[str, Peak]:
    d = complete(device) or {}
    return {"fp32": Peak("fp32", "fp32 FMA on CUDA cores", d.get("fp32_peak", 0.0)),
            "fp64": Peak("fp64", "fp64 FMA", d.get("fp64_peak", 0.0)),
            "fp16": Peak("fp16", "fp16/bf16 packed (half2) FMA on CUDA cores", d.get("fp16_peak", 0.0)),
            "int32": Peak("int32", "int32 on CUDA cores (IMAD as 2 ops)", d.get("int32_peak", 0.0), "Tops/s"),
            "tensor16": Peak("tensor16", "16-bit tensor cores (dense fp16/bf16 mma)", d.get("tensor_peak", 0.0))}


def max_intensity(task) -> float | None:
    """The highest FLOPs per byte of the task's cost model over its performance cases."""
    best = None
    for case in task.cases_with("performance"):
        flops, nbytes = task.cost(case)
        if flops and nbytes:
            best = max(best or 0.0, flops / nbytes)
    return best


#: a kernel that multiplies on the TF32 tensor cores (mma.sync ... .tf32 / wgmma ... .tf32)
_TF32_MMA = re.compile(r"\b(?:mma\.sync|wgmma\.mma_async)[\w.]*\.tf32\b")


def uses_tf32_mma(source: str | None) -> bool:
    return bool(source) and _TF32_MMA.search(source) is not None


def tf32x3_peak(device: dict) -> Peak:
    """The ceiling of split-precision TF32: the dense TF32 mma rate (half the 16-bit one) spent
    three times per fp32 product (a_hi*b_hi + a_hi*b_lo + a_lo*b_hi)."""
    d = complete(device) or {}
    return Peak("tf32x3", "TF32 tensor cores, 3 products per fp32 product (split precision)",
                d.get("tensor_peak", 0.0) / 2 / 3)


def compute_peak(task, device: dict, calibration: dict | None = None, source: str | None = None) -> tuple[Peak, str]:
    """The ceiling that applies to ``task`` and a sentence on tensor cores for it.  16-bit
    operands get the tensor-core peak only where the work is matrix-product-like: its FLOPs per
    byte exceed the CUDA-core ridge point (an elementwise bf16 kernel never reaches tensor cores).
    A float32 task whose kernel (``source``) multiplies with TF32 mma gets the split-precision TF32
    ceiling: it meets an fp32 tolerance only with the three-product split."""
    p = peaks(device)
    kind = operand_type(task)
    if kind == "float32" and uses_tf32_mma(source):
        tp = tf32x3_peak(device)
        return tp, ("tensor cores: this kernel runs the fp32 products on the TF32 tensor pipe (mma .tf32); one "
                    "TF32 product rounds each operand to 11 significant bits, too coarse for an fp32 tolerance at "
                    "large k, so it must split each operand into TF32 hi + lo parts and add three products "
                    f"(a_hi*b_hi + a_hi*b_lo + a_lo*b_hi): the ceiling is a third of the "
                    f"{tp.flops * 3 / 1e12:.0f} TFLOP/s TF32 peak (the fp32 FMA peak is "
                    f"{p['fp32'].flops / 1e12:.1f} TFLOP/s); the gate's tolerance decides")
    if kind == "float64":
        return p["fp64"], "tensor cores: not the ceiling here (float64 operands)"
    if kind == "float16":
        bw, _ = bandwidth(calibration, device)
        ai = max_intensity(task)
        if ai is not None and bw and ai <= p["fp16"].flops / bw:
            return p["fp16"], (f"tensor cores: only matrix-product work could use them; this task's {ai:.1f} FLOP/byte "
                               "is below the CUDA-core ridge point, so the ceiling is the half2 FMA rate")
        return p["tensor16"], ("tensor cores: allowed for matrix-product work on the 16-bit operands (mma/wmma); "
                               f"without them the ceiling is {p['fp16'].flops / 1e12:.1f} TFLOP/s (half2 FMA)")
    if kind == "int":
        return p["int32"], "tensor cores: not the ceiling here (integer data)"
    return p["fp32"], ("tensor cores: not the ceiling for this task: its operands are float32, and one TF32 "
                       "tensor-core product rounds them to 10-bit mantissas, so the ceiling is the fp32 FMA rate; "
                       "split-precision TF32 (three products of the TF32 hi and lo parts of each operand) keeps "
                       f"fp32-level error at up to {tf32x3_peak(device).flops / 1e12:.0f} TFLOP/s of fp32 products")


def bandwidth(calibration: dict | None, device: dict | None) -> tuple[float | None, str]:
    """(bytes/s, where it comes from): the measured copy bandwidth, else the theoretical one."""
    if calibration and calibration.get("bandwidth"):
        return float(calibration["bandwidth"]), "measured copy bandwidth"
    d = complete(device) or {}
    if d.get("theoretical_bandwidth"):
        return float(d["theoretical_bandwidth"]), "theoretical bandwidth (not measured)"
    return None, "unknown"


# -- the prompt's device section ---------------------------------------------------------------
def _kib(n: int) -> str:
    return f"{n} bytes ({n / 1024:g} KiB)"


def render(device: dict | None, calibration: dict | None, task=None) -> str:
    """The device section of the prompt: identity, memory, peaks (which one applies to
    ``task``), per-SM limits, and how candidates are built and timed."""
    d = complete(device)
    if not d:
        return ("# Device\n(unknown: no GPU was asked. On a GPU run this section gives the SM count, per-SM "
                "limits, measured bandwidth and compute peaks; `--dry-run --device FILE.json` shows it from a "
                "stored description.)")
    mhz = d["clock_khz"] / 1000
    lines = ["# Device",
             f"{d['name']} ({d['arch']}, compute capability {d['cc'][0]}.{d['cc'][1]}), driver {d.get('driver_version') or '?'}: "
             f"{d['sms']} SMs at {mhz:.0f} MHz (boost), {d.get('memory_bytes', 0) / 2**30:.0f} GiB of device memory, "
             f"L2 {d['l2_bytes'] / 2**20:.0f} MiB."]
    bw, bw_src = bandwidth(calibration, d)
    mem = f"Memory: {bw_src} {bw / 1e9:.0f} GB/s" if bw else "Memory: bandwidth unknown"
    if bw and calibration and calibration.get("bandwidth"):
        mem += " (device-to-device copy, bytes read + written counted; the roofline below uses it)"
    if d.get("theoretical_bandwidth") and bw_src.startswith("measured"):
        mem += f"; theoretical {d['theoretical_bandwidth'] / 1e9:.0f} GB/s"
    lines.append(mem + ".")
    lines.append(f"Compute peaks at {mhz:.0f} MHz (dense, an FMA counts as 2 operations):")
    applies = compute_peak(task, d, calibration) if task is not None else None
    for p in peaks(d).values():
        if applies is not None and p.key == "tensor16" and applies[0].key != "tensor16":
            continue     # never shown as a ceiling to a task whose operands it would round
        mark = "  <- the ceiling for this task" if applies is not None and p.key == applies[0].key else ""
        lines.append(f"- {p.label}: {p.flops / 1e12:.1f} {p.unit}{mark}")
    if applies is not None:
        peak, tc = applies
        lines.append(f"- {tc}")
        if bw:
            lines.append(f"Ridge point for this task: {peak.flops / bw:.1f} FLOP/byte ({peak.label} / {bw_src}): "
                         "a kernel whose FLOPs per byte of compulsory traffic fall below it is memory-bound, above it "
                         "compute-bound.")
    warp = d["warp_size"]
    lines += ["",
              "Per-SM limits (they decide occupancy; a block's resources must fit on one SM):",
              f"- threads: {d['max_threads_per_sm']} per SM ({d['max_threads_per_sm'] // warp} warps of {warp}), "
              f"{d['max_threads_per_block']} per block (block dims up to {list(d['max_block'])}); "
              f"at most {d['max_blocks_per_sm']} resident blocks per SM",
              f"- registers: {d['max_registers_per_sm']} 32-bit registers per SM, {d['max_registers_per_block']} per block, "
              f"at most {d['max_registers_per_thread']} per thread (allocated per warp in units of 256; more registers "
              "per thread = fewer resident warps; beyond the limit ptxas spills to local memory)",
              f"- shared memory: {_kib(d['max_smem_per_sm'])} per SM (carved out of the unified L1); per block "
              f"{_kib(d['max_smem_per_block'])} of static `__shared__` arrays at most, and up to "
              f"{_kib(d['max_smem_per_block_optin'])} in all with dynamic shared memory (`extern __shared__`, sized "
              "by `shared_mem`; the harness opts every launch in); the system reserves "
              f"{d['reserved_smem_per_block']} bytes per block",
              f"- {d['const_bytes']} bytes of `__constant__` memory; grid dims up to {list(d['max_grid'])}",
              "",
              "How candidates are built and timed:",
              f"- NVRTC compiles the file to a CUBIN for {d['arch']} "
              f"(`--gpu-architecture={target_arch(d['arch'])}`), C++17, "
              "`-lineinfo`, no `--use_fast_math` (expf, sinf, division are the accurate versions unless you call "
              "the intrinsics, e.g. __expf, yourself); each tunable or define arrives as `-DNAME=VALUE`.",
              "- One `cuLaunchKernel` per timed run (no device-side launches), with the grid, block and dynamic shared "
              "memory of your `// kforge:` header or the task's default launch; `// kforge: cooperative = true` "
              "launches it with `cuLaunchCooperativeKernel` instead, so `cooperative_groups::this_grid().sync()` works "
              f"(then every block must be resident at once: at most blocks-per-SM x {d['sms']} SMs).",
              "- Every timed launch starts with a cold L2: the whole L2 is evicted before each launch (lines "
              "marked evict-last included), outside the timed window; nothing from one launch is cached for the next.",
              "- Every launch starts from the module's initial globals (`__device__` variables are restored), "
              "outputs are poisoned before it, and every case is drawn again with fresh random inputs.",
              "- The time is the kernel's own GPU time (CUPTI activity records; CUDA events where CUPTI is "
              "unavailable), the median over many launches; the score is the geometric mean of the "
              "performance cases' medians."]
    return "\n".join(lines)
