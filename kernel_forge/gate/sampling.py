"""Which elements of the kept outputs the parent re-checks after a run, drawn only once the run
is over: uniform picks plus every element the worker's comparison named as a mismatch."""
from __future__ import annotations

import numpy as np

from kernel_forge.model.worker_protocol import Observation

__all__ = ["sample_indices"]


def sample_indices(obs: Observation, shapes: dict[str, tuple[int, ...]], seed: int,
                   sample_size: int) -> dict[str, dict[str, np.ndarray]]:
    """Per kept stage and output, the flat indices to re-check (``seed``: drawn after the run)."""
    rng = np.random.default_rng(seed)
    out: dict[str, dict[str, np.ndarray]] = {}
    for stage in obs.stages:
        if not stage.kept:
            continue
        out[stage.stage] = {}
        for chk in stage.outputs:
            if chk.total <= 0 or chk.shape_error:
                continue
            picks = rng.integers(0, chk.total, size=min(chk.total, sample_size))
            shape = shapes[chk.name]
            named = [np.ravel_multi_index(tuple(f["index"]), shape) for f in chk.first
                     if len(f["index"]) == len(shape) and all(0 <= i < n for i, n in zip(f["index"], shape))]
            out[stage.stage][chk.name] = np.unique(np.concatenate([picks, np.asarray(named, dtype=np.int64)]))
    return out
