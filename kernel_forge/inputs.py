"""Seeded input generation on the host (NumPy), identical in every process that asks.

Inputs are never produced by proposer-written code: each buffer is drawn from the manifest's
``init`` with a generator seeded by (seed, case index, parameter index), so the gate's worker and
the reference side regenerate the same bytes independently.
"""
from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass

import numpy as np

from .dtypes import from_float, poison_value, to_float
from .errors import ManifestError
from .task import Arg, Case, Task


@dataclass
class CaseInputs:
    """Host arrays for one case draw. Buffers hold *storage* values (bf16 as uint16 bits)."""

    case: Case
    seed: int
    buffers: dict[str, np.ndarray]      # every pointer parameter: inputs, in/out initial values, poisoned outputs
    scalars: dict[str, int | float]

    def checksum(self, name: str) -> str:
        return hashlib.sha256(np.ascontiguousarray(self.buffers[name]).view(np.uint8)).hexdigest()[:16]


def _draw(task: Task, arg: Arg, case: Case, rng: np.random.Generator) -> np.ndarray:
    shape = task.shape(arg, case)
    dt = arg.param.dtype
    init = arg.init
    kind = init.kind
    if kind == "zeros":
        values = np.zeros(shape)
    elif kind == "ones":
        values = np.ones(shape)
    elif kind == "constant":
        values = np.full(shape, init.get("value"))
    elif kind == "arange":
        values = (init.get("start", 0) + init.get("step", 1) * np.arange(int(np.prod(shape)))).reshape(shape)
    elif kind == "normal":
        # float32 draws are twice as fast and exact enough for 32-bit and narrower buffers
        ftype = np.float64 if dt.bits == 64 else np.float32
        values = rng.standard_normal(size=shape, dtype=ftype)
        values *= ftype(init.get("std", 1.0))
        values += ftype(init.get("mean", 0.0))
    elif kind == "uniform":
        ftype = np.float64 if dt.bits == 64 else np.float32
        lo, hi = init.get("low", -1.0), init.get("high", 1.0)
        values = rng.random(size=shape, dtype=ftype)
        values *= ftype(hi - lo)
        values += ftype(lo)
    elif kind == "randint":
        lo, hi = int(init.get("low", 0)), int(init.get("high", 100))
        if dt.kind == "uint" and lo < 0:
            raise ManifestError(f"randint low {lo} is negative but {arg.name} is {dt.name}",
                                file=str(task.path), json_path=f"$.args.{arg.name}.init.low")
        values = rng.integers(lo, hi, size=shape)
    elif kind == "npy":
        path = (task.path.parent / init.get("path")).resolve()
        values = np.load(path, allow_pickle=False)
        if values.size != int(np.prod(shape)):
            raise ManifestError(f"{path} holds {values.size} elements, shape {shape} needs "
                                f"{int(np.prod(shape))}", file=str(task.path),
                                json_path=f"$.args.{arg.name}.init.path")
        values = values.reshape(shape)
    else:  # pragma: no cover - the schema forbids it
        raise ManifestError(f"unknown init {kind!r}", file=str(task.path), json_path=f"$.args.{arg.name}.init")
    if dt.kind != "float" and kind in ("normal", "uniform"):
        values = np.rint(values)
    if dt.name == "bfloat16":
        return from_float(values.astype(np.float32), dt)
    return np.ascontiguousarray(values.astype(dt.numpy, copy=False))


def generate(task: Task, case: Case, seed: int) -> CaseInputs:
    """Every buffer of ``case`` drawn with ``seed``; pure outputs are filled with the poison value."""
    buffers: dict[str, np.ndarray] = {}
    scalars: dict[str, int | float] = {}
    for i, arg in enumerate(task.args):
        if not arg.is_buffer:
            scalars[arg.name] = task.scalar(arg, case)
            continue
        if arg.init is None:
            buffers[arg.name] = np.full(task.shape(arg, case), poison_value(arg.param.dtype),
                                        dtype=arg.param.dtype.numpy)
            continue
        # keyed by the case's name, so adding or reordering cases leaves other draws unchanged
        rng = np.random.default_rng([seed & 0xFFFFFFFFFFFF, zlib.crc32(case.name.encode()), i])
        buffers[arg.name] = _draw(task, arg, case, rng)
    return CaseInputs(case=case, seed=seed, buffers=buffers, scalars=scalars)


def host_values(arg: Arg, array: np.ndarray) -> np.ndarray:
    """Storage → values a reference computes with (bf16 widened to float32)."""
    return to_float(array, arg.param.dtype) if arg.param.dtype.name == "bfloat16" else array
