"""Cross-entropy's gradient through a softmax: each row of probabilities less the one-hot of its
target, times the row's loss gradient.

    y[r, c] = (x[r, c] - (c == index[r])) * scale[r]        (``accumulate``: y[r, c] += ...)

``scale`` is a per-row buffer (llm.c's ``crossentropy_softmax_backward``: ``dlosses[b, t]``), a
float scalar (a mean loss's 1 / N passed in), one over an integer scalar (``/ N``), or 1.  A target
outside the row (PyTorch's ignore_index, -100) leaves its row's gradient 0 (or ``y`` as it was, when
the kernel adds)."""
from __future__ import annotations

from typing import Iterator

import numpy as np

from kernel_forge.kinds.match import Match, close, param_for


def onehot_grad(x: np.ndarray, ids: np.ndarray, scale) -> np.ndarray:
    """(x - onehot(ids)) * scale, x [rows, cols]; rows whose id is outside [0, cols) are 0."""
    rows, cols = x.shape
    valid = (ids >= 0) & (ids < cols)
    hot = np.zeros_like(x)
    hot[np.flatnonzero(valid), ids[valid]] = 1.0
    out = (x - hot) * scale
    out[~valid] = 0.0
    return out


def _scales(probe, rows: int, taken: tuple) -> Iterator[tuple[dict, dict, object]]:
    """(binding, params, the scale's values) for each way a row's scale can be given."""
    for w in probe.inputs_of(rows, floating=True):
        if w not in taken:
            yield {"w": w}, {"scale": "row"}, probe.values[w].reshape(rows, 1)
    for a, v in probe.float_scalars().items():
        yield {"alpha": a}, {"scale": "scalar"}, v
        if v:
            yield {"alpha": a}, {"scale": "scalar", "divide": True}, 1.0 / v
    for a, v in probe.int_scalars().items():
        if v > 1:
            yield {"alpha": a}, {"scale": "scalar", "divide": True}, 1.0 / v
    yield {}, {"scale": "none"}, 1.0


def find_onehot_grad(probe) -> Iterator[Match]:
    """See the module docstring."""
    from kernel_forge.kinds.rows import _adds_to_start

    outs = probe.buffers(output=True)
    if len(outs) != 1 or not probe.arg(outs[0]).param.dtype.is_float:
        return
    y = outs[0]
    n, got = probe.sizes[y], probe.outputs[y]
    start = probe.values[y] if probe.arg(y).init is not None else None
    for idx in probe.inputs_of(floating=False):
        rows = probe.sizes[idx]
        if rows == 0 or n % rows or n // rows < 2:
            continue
        cols = n // rows
        ids = probe.values[idx].astype(np.int64)
        if not ((ids >= 0) & (ids < cols)).any():
            continue
        for x in probe.inputs_of(n, floating=True):
            if x == y:
                continue
            r_name = param_for(probe, rows)
            base = {"y": y, "x": x, "index": idx, "rows": r_name, "cols": param_for(probe, cols, avoid=(r_name,))}
            for bind, params, scale in _scales(probe, rows, (x, y)):
                pred = onehot_grad(probe.values[x].reshape(rows, cols), ids, scale).reshape(-1)
                fits_set = close(got, pred)
                fits_add = start is not None and close(got, start + pred)
                if not (fits_set or fits_add):
                    continue
                adds = fits_add and (not fits_set or _adds_to_start(probe, y))
                extra = {"ignored": "zero"} if not ((ids >= 0) & (ids < cols)).all() else {}
                yield Match("onehot_grad", {**base, **bind}, {**params, "accumulate": bool(adds), **extra})
