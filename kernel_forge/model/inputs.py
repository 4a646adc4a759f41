"""Seeded input generation on the host (NumPy), identical in every process that asks.

Inputs are never produced by proposer-written code: each buffer is drawn from the manifest's
``init`` with a generator seeded by (seed, case index, parameter index), so the gate's worker and
the reference side regenerate the same bytes independently.
"""
from __future__ import annotations

import hashlib
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from kernel_forge.common.dtypes import from_float, poison_value, to_float
from kernel_forge.common.errors import ManifestError
from kernel_forge.common.json_path import json_path
from kernel_forge.model.task import Arg, Case, Task


@dataclass
class CaseInputs:
    """Host arrays for one case draw. Buffers hold *storage* values (bf16 as uint16 bits)."""

    case: Case
    seed: int
    buffers: dict[str, np.ndarray]      # every pointer parameter: inputs, in/out initial values, poisoned outputs
    scalars: dict[str, int | float]

    def checksum(self, name: str) -> str:
        return hashlib.sha256(np.ascontiguousarray(self.buffers[name]).view(np.uint8)).hexdigest()[:16]


#: elements drawn per independent random stream; chunks are drawn in parallel threads (NumPy
#: releases the GIL while filling), and the values depend only on (seed, case, parameter, chunk)
CHUNK = 1 << 22


def _random(kind: str, n: int, ftype, params: dict, key: list[int]) -> np.ndarray:
    """``n`` draws of ``kind`` as a flat array, chunked over independent seeded streams."""
    out = np.empty(n, dtype=np.int64 if kind == "randint" else ftype)

    def fill(c: int) -> None:
        rng = np.random.default_rng(key + [c])
        part = out[c * CHUNK:(c + 1) * CHUNK]
        if kind == "normal":
            rng.standard_normal(out=part, dtype=ftype)
            part *= ftype(params.get("std", 1.0))
            part += ftype(params.get("mean", 0.0))
        elif kind == "uniform":
            lo, hi = params.get("low", -1.0), params.get("high", 1.0)
            rng.random(out=part, dtype=ftype)
            part *= ftype(hi - lo)
            part += ftype(lo)
        else:
            part[...] = rng.integers(int(params.get("low", 0)), int(params.get("high", 100)), size=part.size)

    chunks = range(max(1, -(-n // CHUNK)))
    if len(chunks) == 1:
        fill(0)
    else:
        with ThreadPoolExecutor(max_workers=min(len(chunks), os.cpu_count() or 1, 16)) as pool:
            list(pool.map(fill, chunks))
    return out


def _draw(task: Task, arg: Arg, case: Case, key: list[int]) -> np.ndarray:
    shape = task.shape(arg, case)
    n = int(np.prod(shape))
    dt = arg.param.dtype
    init = arg.init
    kind = init.kind
    numbers = init.numbers(case.vars)           # expressions (a randint's "high": "V") for this case
    if kind == "zeros":
        values = np.zeros(shape)
    elif kind == "ones":
        values = np.ones(shape)
    elif kind == "constant":
        values = np.full(shape, numbers.get("value"))
    elif kind == "arange":
        values = (numbers.get("start", 0) + numbers.get("step", 1) * np.arange(n)).reshape(shape)
    elif kind in ("normal", "uniform", "randint"):
        if kind == "randint" and dt.kind == "uint" and int(numbers.get("low", 0)) < 0:
            raise ManifestError(f"randint low {numbers.get('low')} is negative but {arg.name} is {dt.name}",
                                file=str(task.path), json_path=json_path("args", arg.name, "init", "low"))
        # float32 draws are twice as fast and exact enough for 32-bit and narrower buffers
        ftype = np.float64 if dt.bits == 64 else np.float32
        values = _random(kind, n, ftype, numbers, key).reshape(shape)
    elif kind == "npy":
        from kernel_forge.common.reads import Unreadable, open_input
        from kernel_forge.model.task import MAX_NPY, npy_header

        path = (task.path.parent / init.get("path")).resolve()
        where = json_path("args", arg.name, "init", "path")
        npy_header(path, str(task.path), where)       # a file that is not .npy is named without its bytes
        try:
            with open_input(path, ".npy file", limit=MAX_NPY) as f:
                values = np.load(f, allow_pickle=False)
        except Unreadable as exc:
            raise ManifestError(exc.message, file=str(task.path), json_path=where) from None
        except (OSError, ValueError, EOFError):
            raise ManifestError(f"{path} is not a readable .npy file (its data is cut short or damaged)",
                                file=str(task.path), json_path=where) from None
        if values.size != int(np.prod(shape)):
            raise ManifestError(f"{path} holds {values.size} elements, shape {shape} needs "
                                f"{int(np.prod(shape))}", file=str(task.path),
                                json_path=json_path("args", arg.name, "init", "path"))
        values = values.reshape(shape)
    else:  # pragma: no cover - the schema forbids it
        raise ManifestError(f"unknown init {kind!r}", file=str(task.path), json_path=json_path("args", arg.name, "init"))
    if dt.kind != "float" and kind in ("normal", "uniform"):
        values = np.rint(values)
    if dt.name in ("bfloat16", "bool"):
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
        key = [seed & 0xFFFFFFFFFFFF, zlib.crc32(case.name.encode()), i]
        buffers[arg.name] = _draw(task, arg, case, key)
    return CaseInputs(case=case, seed=seed, buffers=buffers, scalars=scalars)


def host_values(arg: Arg, array: np.ndarray) -> np.ndarray:
    """Storage → values a reference computes with (bf16 widened to float32; bool bytes as NumPy bools)."""
    if arg.param.dtype.name == "bool":
        return np.asarray(array, dtype=np.uint8).view(np.bool_)
    return to_float(array, arg.param.dtype) if arg.param.dtype.name == "bfloat16" else array
