"""Hypotheses that move data: 2-D stencils and small convolutions (K x K taps, edge modes), 1-D
convolutions along rows (a mask of k taps), pooling (S x S windows, stride S), nearest-neighbour
upsampling, transposes, gathers (embedding lookups with integer indices) and row picks (one element
of each row by an integer index, then mapped: cross-entropy's loss)."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from typing import Iterator

from kernel_forge.kinds.match import Match, close, dims, param_for

#: how a stencil reads outside the image: clamp to the edge, or read zero
EDGES = ("clamp", "zero")
#: a stencil's edge modes besides those: reflect without the edge pixel (OpenCV's BORDER_REFLECT_101,
#: numpy's "reflect"), with it (scipy.ndimage's "reflect", numpy's "symmetric"), periodic ("wrap")
#: and two boundaries where no output is computed, as HPC stencils (Jacobi, heat) write them: the
#: outputs within the stencil's reach of an edge keep x's value (``keep``: a Dirichlet boundary) or
#: are 0 (``clear``)
BORDERS = ("keep", "clear")
STENCIL_EDGES = (*EDGES, "reflect", "symmetric", "wrap", *BORDERS)
_NUMPY_PAD = {"clamp": "edge", "zero": "constant", "reflect": "reflect", "symmetric": "symmetric", "wrap": "wrap",
              "keep": "constant", "clear": "constant"}


def _bordered(pred: np.ndarray, x: np.ndarray, inner: np.ndarray, edge: str) -> np.ndarray:
    """``pred`` with the outputs outside ``inner`` set as a border mode says (x's value, or 0)."""
    if edge not in BORDERS:
        return pred
    return np.where(inner, pred, x if edge == "keep" else 0.0)
#: pixels of the top band a stencil is fitted on
BAND = 1 << 16


def _shifted(img: np.ndarray, k: int, edge: str, rows: int | None = None) -> np.ndarray:
    """(rows*w, k*k) for the top ``rows`` rows (all by default): column dy*k+dx holds
    img[i+dy-r, j+dx-r] under the edge mode."""
    r = k // 2
    padded = np.pad(img, r, mode=_NUMPY_PAD[edge])
    h, w = img.shape
    rows = h if rows is None else min(rows, h)
    return np.stack([padded[dy:dy + rows, dx:dx + w].reshape(-1) for dy in range(k) for dx in range(k)], axis=1)


def _least_squares(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The taps t minimising |a t - b|: from the normal equations (a few k x k, against an SVD of all of
    ``a``: 100x faster on a busy machine), by an SVD where they are singular.  A fit is checked
    against the values afterwards, so a poor one is refused there."""
    try:
        return np.linalg.solve(a.T @ a, a.T @ b)
    except np.linalg.LinAlgError:
        return np.linalg.lstsq(a, b, rcond=None)[0]


def _images(probe, least: int) -> Iterator[tuple[str, str, int, int, np.ndarray, np.ndarray]]:
    """(x, y, h, w, x as an h x w image, y's values) for the one floating-point output y and each
    input x of its size, every split of that size into at least ``least`` rows and columns."""
    outs = probe.buffers(output=True)
    if len(outs) != 1 or not probe.arg(outs[0]).param.dtype.is_float:
        return
    y = outs[0]
    size = probe.sizes[y]
    for x in probe.inputs_of(size):
        if x == y:
            continue
        for h, w in dims(probe, size):
            if h >= least and w >= least:
                yield x, y, h, w, probe.values[x].reshape(h, w), probe.outputs[y]


def find_stencil(probe) -> Iterator[Match]:
    """A K x K stencil (K = 3, 5, 7) with its taps a parameter or fitted, under an edge mode of
    STENCIL_EDGES.  Fitted taps come from the interior pixels, which no edge mode reaches (one
    least-squares fit per K); each edge mode is then checked on the whole top band."""
    for x, y, h, w, img, got in _images(probe, 3):
        for k in (3, 5, 7):
            if h < k or w < k:
                continue
            r = k // 2
            band = min(h, max(k, BAND // w))         # the top rows only: edges on three sides are real
            want = got[:band * w]
            weights = [wb for wb in probe.inputs_of(k * k) if wb not in (x, y)]
            cache: dict = {}

            def shifted(edge, k=k, band=band):      # built when first asked for
                if edge not in cache:
                    cache[edge] = _shifted(img, k, edge, band)
                return cache[edge]

            inner = np.zeros((band, w), bool)
            inner[r:min(band, h - r), r:w - r] = True             # rows and columns no edge mode reaches
            inner = inner.reshape(-1)
            xs = img[:band].reshape(-1)
            if weights:                            # the taps are a parameter
                for edge in STENCIL_EDGES:
                    a = shifted(edge)
                    for wb in weights:
                        conv = a @ probe.values[wb]
                        if close(want, _bordered(conv, xs, inner, edge)):
                            yield _match(probe, x, y, h, w, k, edge, taps=wb)
                        elif edge not in BORDERS:
                            yield from _conv_epilogues(probe, x, y, h, w, k, edge, wb, conv, want)
                continue
            fits = [None] if inner.sum() >= 2 * k * k else [e for e in STENCIL_EDGES if e not in BORDERS]
            for fit in fits:
                a = shifted(fit or "zero")
                taps = _least_squares(a[inner] if fit is None else a, want[inner] if fit is None else want)
                taps = np.where(np.abs(taps) < 1e-7, 0.0, taps)
                grid = taps.reshape(k, k)
                if [k // 2] in (list(np.flatnonzero(grid.any(axis=1))), list(np.flatnonzero(grid.any(axis=0)))):
                    continue     # the middle row or column only: a 1-D stencil (stencil1d, or a box filter's
                                 # window, radius a parameter)
                if np.count_nonzero(taps) <= 1:
                    continue
                if fit is None and not close(want[inner], a[inner] @ taps):
                    continue                       # not a stencil inside: no edge mode can make it one
                for edge in ([fit] if fit else STENCIL_EDGES):
                    if close(want, _bordered(shifted(edge) @ taps, xs, inner, edge)):
                        yield _match(probe, x, y, h, w, k, edge, values=[float(t) for t in taps])
    return


#: counts of constant taps a 1-D stencil is fitted with: odd where the output keeps x's length (the
#: window centred on its output), any in ``valid`` mode (a forward difference: 2); up to 17 (the
#: radius 8 of cuda-samples' separable convolution)
STENCIL1D_K = (2, 3, 4, 5, 7, 9, 11, 13, 15, 17)
#: the longest taps buffer a 1-D convolution is tried with
STENCIL1D_MAX = 255


def _window(img: np.ndarray, k: int, edge: str) -> np.ndarray:
    """(rows*out, k) for a rows x n signal: column j holds x[r, i - off + j] under the edge mode
    (off = k // 2), or x[r, i + j] for the n - k + 1 outputs of ``valid``."""
    n = img.shape[1]
    if edge == "valid":
        return np.stack([img[:, j:j + n - k + 1].reshape(-1) for j in range(k)], axis=1)
    r = k // 2
    padded = np.pad(img, ((0, 0), (r, k - 1 - r)), mode=_NUMPY_PAD[edge])
    return np.stack([padded[:, j:j + n].reshape(-1) for j in range(k)], axis=1)


def find_stencil1d(probe) -> Iterator[Match]:
    """A 1-D convolution or stencil along each row of x (one row: a signal; PMPP's 1-D convolution),
    or down each column of x's planes (a separable filter's column pass): ``y[r, i] = sum_j t[j] *
    x[r, i - k//2 + j]`` under an edge mode of STENCIL_EDGES, or over the ``n - k + 1`` positions
    whose window lies inside (``valid``); the taps a buffer of k values, read as written or reversed
    (a true convolution), or constants fitted on the interior (k of STENCIL1D_K)."""
    outs = probe.buffers(output=True)
    if len(outs) != 1 or not probe.arg(outs[0]).param.dtype.is_float:
        return
    y = outs[0]
    for x in probe.inputs_of():
        if x == y:
            continue
        for axis, planes, h, n, sig, view in _signals(probe, x, y):
            if n < 3:
                continue
            for t in [t for t in probe.inputs_of() if t not in (x, y) and 2 <= probe.sizes[t] <= min(n, STENCIL1D_MAX)]:
                k = probe.sizes[t]
                taps = probe.values[t]
                edges = ["valid"] if probe.sizes[y] == planes * h * (n - k + 1) else []
                if probe.sizes[y] == planes * h * n:
                    edges += list(STENCIL_EDGES)
                for edge in edges:
                    a = _window(sig, k, edge)
                    got = view(n - k + 1 if edge == "valid" else n)
                    inner = _inner1d(sig.shape, k) if edge in BORDERS else None
                    for flip in (False, True):
                        if close(got, _bordered(a @ (taps[::-1] if flip else taps), sig.reshape(-1), inner, edge)):
                            yield _match1d(probe, x, y, axis, planes, h, n, k, edge, flip, taps=t)
            for k in STENCIL1D_K:
                if n >= 2 * k:
                    yield from _fitted1d(probe, x, y, axis, planes, h, n, k, sig, view)


def _signals(probe, x, y) -> Iterator[tuple]:
    """(axis, planes, count, n, signals, view) for each way x can be a batch of 1-D signals of n
    values: its rows (axis ``rows``: count rows, planes 1), or the columns of its planes (``cols``:
    planes x [n rows, count columns], from x's declared shape or a rows x cols split).  ``signals`` is
    the (signals, n) array; ``view(m)`` is y's values arranged the same way for m outputs a signal."""
    got = probe.outputs[y]
    size = probe.sizes[x]
    splits = list(dims(probe, size))
    if probe.params_of(size) and (1, size) not in splits:
        splits.append((1, size))
    for h, n in splits:
        yield "rows", 1, h, n, probe.values[x].reshape(h, n), (lambda m: got)
    shape = [int(v) for v in probe.task.shape(probe.arg(x), probe.inputs.case)]
    planes3 = [(math.prod(shape[:-2]), shape[-2], shape[-1])] if len(shape) >= 3 else []
    for planes, n, w in planes3 + [(1, r, c) for r, c in splits if r > 1 and c > 1]:
        sig = probe.values[x].reshape(planes, n, w).transpose(0, 2, 1).reshape(planes * w, n)

        def view(m, planes=planes, w=w):
            if got.size != planes * m * w:
                return got                  # not this mode's size: compared and refused
            return got.reshape(planes, m, w).transpose(0, 2, 1).reshape(-1)
        yield "cols", planes, w, n, sig, view


def _inner1d(shape: tuple, k: int) -> np.ndarray:
    """The flat mask of the outputs of (signals, n) whose k-window (from -k//2) lies inside."""
    r = k // 2
    inner = np.zeros(shape, bool)
    inner[:, r:shape[1] - (k - 1 - r)] = True
    return inner.reshape(-1)


def _fitted1d(probe, x, y, axis, planes, h, n, k, sig, view) -> Iterator[Match]:
    """Constant taps of a k-point 1-D stencil, fitted on the positions no edge mode reaches."""
    if probe.sizes[y] == planes * h * (n - k + 1):
        edges, a, got = ["valid"], _window(sig, k, "valid"), view(n - k + 1)
        inner = np.ones(a.shape[0], bool)
    elif probe.sizes[y] == planes * h * n and k % 2:
        edges, a, got = list(STENCIL_EDGES), _window(sig, k, "zero"), view(n)
        inner = _inner1d(sig.shape, k)
    else:
        return
    if inner.sum() < 2 * k:
        return
    taps = _least_squares(a[inner], got[inner])
    taps = np.where(np.abs(taps) < 1e-7, 0.0, taps)
    if np.count_nonzero(taps) <= 1 or not (taps[0] or taps[-1]) or not close(got[inner], a[inner] @ taps):
        return                  # one tap is a map; both end taps zero, a shorter stencil (tried first)
    for edge in edges:
        if close(got, _bordered(_window(sig, k, edge) @ taps, sig.reshape(-1), inner, edge)):
            yield _match1d(probe, x, y, axis, planes, h, n, k, edge, False, values=[float(v) for v in taps])
            return


def _match1d(probe, x, y, axis, planes, h, n, k, edge, flip, taps=None, values=None) -> Match:
    """A rows match: ``rows`` the h signals (None for one), ``cols`` their length n.  A cols match:
    ``rows`` the length n down each column, ``cols`` the h columns, ``planes`` (None for one)."""
    if axis == "rows":
        rows = param_for(probe, h) if h > 1 else None
        binding = {"x": x, "y": y, "taps": taps, "rows": rows, "cols": param_for(probe, n, avoid=(rows,))}
    else:
        rows = param_for(probe, n)
        cols = param_for(probe, h, avoid=(rows,))
        binding = {"x": x, "y": y, "taps": taps, "planes": param_for(probe, planes, avoid=(rows, cols)) if planes > 1
                   else None, "rows": rows, "cols": cols}
    binding["k"] = param_for(probe, k, avoid=(binding["rows"], binding["cols"])) if taps else None
    params = {"k": k, "edge": edge, "flip": flip, **({"axis": "cols"} if axis == "cols" else {})}
    if values is not None:
        params["taps"] = _tap_values(probe, x, values)
    return Match("stencil1d", binding, params)


#: a window's values (NaN where it reaches into the padding) -> the pooled value
_POOL_OPS = {"max": lambda v: np.nanmax(v, axis=-1), "mean": lambda v: np.nansum(v, axis=-1) / v.shape[-1],
             "sum": lambda v: np.nansum(v, axis=-1), "mean_valid": lambda v: np.nanmean(v, axis=-1)}


def find_pool2d(probe) -> Iterator[Match]:
    """K x K windows with stride S and P rows and columns of padding on every side (floor mode: a last
    partial window dropped) over the planes of x's declared shape [..., rows, cols], their max, mean
    or sum into y: first S = K without padding (2 or 3: params window and op), then K of 2 to 5 with
    S of 1 to K and P up to K // 2 (params window, stride, pad, op; a padded mean either counts the
    padding, as PyTorch's default and ggml do, ``mean``, or not, ``mean_valid``).  A max pooling may also
    write where each maximum was (``indices``: its place in x's plane, the first of equal values, as
    PyTorch's max_pool2d_with_indices does for the backward)."""
    outs = probe.buffers(output=True)
    floats = [o for o in outs if probe.arg(o).param.dtype.is_float]
    ints = [o for o in outs if not probe.arg(o).param.dtype.is_float]
    if len(floats) != 1 or len(ints) > 1 or (ints and probe.sizes[ints[0]] != probe.sizes[floats[0]]):
        return
    y, indices = floats[0], (ints[0] if ints else None)
    for x in probe.inputs_of():
        shape = [int(v) for v in probe.task.shape(probe.arg(x), probe.inputs.case)]
        if len(shape) < 2 or x == y:
            continue
        planes, h, w = math.prod(shape[:-2]), shape[-2], shape[-1]
        img = probe.values[x].reshape(planes, h, w)
        for k, stride, pad in _pool_shapes(h, w):
            oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
            if oh < 1 or ow < 1 or probe.sizes[y] != planes * oh * ow:
                continue
            padded = np.pad(img, ((0, 0), (pad, pad), (pad, pad)), constant_values=np.nan)
            win = np.lib.stride_tricks.sliding_window_view(padded, (k, k), axis=(1, 2))
            win = win[:, ::stride, ::stride][:, :oh, :ow].reshape(planes, oh, ow, k * k)
            plain = stride == k and pad == 0
            for op, fn in _POOL_OPS.items():
                if (op == "mean_valid" and not pad) or not close(probe.outputs[y], fn(win).reshape(-1)):
                    continue
                if indices is not None and (op != "max" or not np.array_equal(
                        probe.outputs[indices].astype(np.int64), _window_argmax(win, h, w, k, stride, pad, oh, ow))):
                    continue
                rows = param_for(probe, h)
                params = {"window": k, "op": op} if plain else {"window": k, "stride": stride, "pad": pad, "op": op}
                binding = {"x": x, "y": y, "planes": None, "rows": rows, "cols": param_for(probe, w, avoid=(rows,))}
                if indices is not None:
                    binding["indices"] = indices
                named = param_for(probe, planes, avoid=(rows, binding["cols"])) if planes > 1 else None
                if named is not None:
                    yield Match("pool2d", {**binding, "planes": named}, params)
                yield Match("pool2d", binding, params)     # the planes only in x's size (ggml: NC in no parameter)


def _window_argmax(win: np.ndarray, h: int, w: int, k: int, stride: int, pad: int, oh: int, ow: int) -> np.ndarray:
    """The place in its plane (row * w + col) of each window's first maximum (the padding never wins)."""
    at = np.pad(np.arange(h * w).reshape(h, w), ((pad, pad), (pad, pad)), constant_values=-1)
    places = np.lib.stride_tricks.sliding_window_view(at, (k, k))[::stride, ::stride][:oh, :ow].reshape(oh, ow, k * k)
    first = np.argmax(np.where(np.isnan(win), -np.inf, win), axis=-1)        # (planes, oh, ow)
    return np.take_along_axis(places[None], first[..., None], axis=-1).reshape(-1)


def _pool_shapes(h: int, w: int) -> list[tuple[int, int, int]]:
    """(window, stride, pad) to try, the plain S x S windows first."""
    out = [(s, s, 0) for s in (2, 3)]
    for k in range(2, 6):
        for stride in range(1, k + 1):
            for pad in range(0, k // 2 + 1):
                if (k, stride, pad) not in out and k <= min(h, w) + 2 * pad:
                    out.append((k, stride, pad))
    return out


def find_resample(probe) -> Iterator[Match]:
    """Nearest-neighbour upsampling by an integer factor S (2, 3 or 4) of the planes of x's declared
    shape [..., rows, cols]: y[p, i, j] = x[p, i // S, j // S] (``interpolate(mode="nearest")``)."""
    outs = probe.buffers(output=True)
    if len(outs) != 1:
        return
    y = outs[0]
    for x in probe.inputs_of(floating=probe.arg(y).param.dtype.is_float):
        shape = [int(v) for v in probe.task.shape(probe.arg(x), probe.inputs.case)]
        if len(shape) < 2 or x == y:
            continue
        planes, h, w = math.prod(shape[:-2]), shape[-2], shape[-1]
        for s in (2, 3, 4):
            if probe.sizes[y] != planes * h * w * s * s:
                continue
            up = probe.values[x].reshape(planes, h, w).repeat(s, axis=1).repeat(s, axis=2)
            if close(probe.outputs[y], up.reshape(-1)):
                rows = param_for(probe, h)
                yield Match("resample", {"x": x, "y": y, "planes": param_for(probe, planes) if planes > 1 else None,
                                         "rows": rows, "cols": param_for(probe, w, avoid=(rows,))},
                            {"scale": s, "mode": "nearest"})


#: the activations a convolution's epilogue is tried with (kinds.maps.FUNCTIONS)
CONV_ACTS = ("identity", "relu", "leaky_relu", "sigmoid", "tanh", "silu", "gelu_tanh", "gelu_erf")


def _conv_epilogues(probe, x, y, h, w, k, edge, wb, conv, want) -> Iterator[Match]:
    """A convolution layer's epilogue over a stencil with its taps a parameter: ``act(conv + b)``, b a
    float parameter or a buffer of one value (a single-channel conv's bias), act from CONV_ACTS."""
    from kernel_forge.kinds.maps import FUNCTIONS

    biases = [(None, 0.0), *probe.float_scalars().items(),
              *((b, float(probe.values[b][0])) for b in probe.inputs_of(1, floating=True) if b not in (x, y, wb))]
    for bias, bv in biases:
        for act in CONV_ACTS:
            if bias is None and act == "identity":
                continue
            with np.errstate(all="ignore"):
                pred = FUNCTIONS[act][0](conv + bv)
            if not close(want, pred):
                continue
            m = _match(probe, x, y, h, w, k, edge, taps=wb)
            yield Match(m.kind, {**m.binding, "bias": bias}, {**m.params, "act": act})
            return


def _match(probe, x, y, h, w, k, edge, taps=None, values=None) -> Match:
    rows = param_for(probe, h)
    binding = {"x": x, "y": y, "taps": taps, "rows": rows, "cols": param_for(probe, w, avoid=(rows,))}
    params = {"k": k, "edge": edge}
    if values is not None:
        params["taps"] = _tap_values(probe, x, values)
    return Match("stencil2d", binding, params)


def _tap_values(probe, x, values) -> list[float]:
    """Fitted taps as the pattern will hold them: to 7 decimals for float data; for doubles (computed in
    double) a short decimal or a fraction of a small denominator (1/9) where the fit is that to 1e-13,
    else the fit itself."""
    if probe.arg(x).param.dtype.name != "float64":
        return [round(v, 7) for v in values]
    out = []
    for v in values:
        near = [c for c in (round(v, 12), float(Fraction(v).limit_denominator(4096))) if abs(c - v) <= 1e-13 * max(1.0, abs(v))]
        out.append(near[0] if near else float(v))
    return out


def find_transpose(probe) -> Iterator[Match]:
    outs = probe.buffers(output=True)
    if 2 <= len(outs) <= 4:
        yield from _split_permutes(probe, outs)
    if len(outs) != 1:
        return
    y = outs[0]
    size = probe.sizes[y]
    for x in probe.inputs_of(size, floating=None):
        if x == y:
            continue
        for rows, cols in dims(probe, size):
            if rows > 1 and cols > 1 and close(probe.outputs[y], probe.values[x].reshape(rows, cols).T.reshape(-1)):
                r = param_for(probe, rows)
                yield Match("transpose", {"x": x, "y": y, "rows": r, "cols": param_for(probe, cols, avoid=(r,))}, {})
        for bias, values in _permute_biases(probe, x, y):
            for outer, rows, mid, cols, inner in _axis_swaps(probe, x, y, values=values):
                binding = {"x": x, "y": y}
                if bias:
                    binding.update(bias=bias, bias_len=param_for(probe, probe.sizes[bias]))
                    if inner == 1 or binding["bias_len"] is None:
                        continue                            # a bias is added to runs that move whole
                for role, value in (("outer", outer), ("rows", rows), ("mid", mid), ("cols", cols), ("inner", inner)):
                    binding[role] = param_for(probe, value) if value > 1 else None
                if all(binding[r] for r, v in (("outer", outer), ("mid", mid), ("inner", inner)) if v > 1):
                    yield Match("transpose", binding, {})       # (a size no parameter carries could not be bound)
    return


def _permute_biases(probe, x: str, y: str) -> Iterator[tuple[str | None, np.ndarray | None]]:
    """(bias, x's values with it added) for a permute that adds a bias first: none, then each float input of
    fewer values that x's size is a multiple of, added along x's last values (bias[i % len]: attention's
    q, k, v biases added as the heads are permuted, FasterTransformer's add_QKV_bias_transpose, ONNX
    Runtime's AddBiasTranspose: over a split input's parts, one bias of q, k and v's together)."""
    yield None, None
    if not probe.arg(x).param.dtype.is_float:
        return
    size = probe.sizes[x]
    for b in probe.inputs_of(floating=True):
        n = probe.sizes[b]
        if b in (x, y) or not 1 < n < size or size % n:
            continue
        with np.errstate(all="ignore"):
            yield b, (probe.values[x].reshape(-1, n) + probe.values[b][None, :]).reshape(-1)


def _split_permutes(probe, outs: list[str]) -> Iterator[Match]:
    """One input split into 2-4 outputs of one size, each a permute of its part: llm.c's attention
    ``permute_kernel(q, k, v, inp, B, N, NH, d)``, inp [B, N, 3, NH, d] into q, k, v [B, NH, N, d].
    x's declared shape has an axis of len(outs) (the parts); output j is x's part j with two axis
    groups swapped (:func:`_axis_swaps`), the same swap for every part, and a part's values after that
    axis (``part``) cover whole runs of the swap (a multiple of cols * inner)."""
    size, parts = probe.sizes[outs[0]], len(outs)
    if any(probe.sizes[o] != size for o in outs):
        return
    case = probe.inputs.case
    for x in probe.inputs_of(size * parts, floating=None):
        shape = [int(v) for v in probe.task.shape(probe.arg(x), case)]
        for axis, bias, values in ((a, b, v) for a, n in enumerate(shape) if n == parts
                                   for b, v in _permute_biases(probe, x, outs[0])):
            before, after = math.prod(shape[:axis]), math.prod(shape[axis + 1:])
            split = (probe.values[x] if values is None else values).reshape(before, parts, after)
            part_shape = shape[:axis] + shape[axis + 1:]
            swaps = None
            for j, y in enumerate(outs):
                got = set(_axis_swaps(probe, x, y, values=split[:, j, :].reshape(-1), x_shape=part_shape))
                swaps = got if swaps is None else swaps & got
                if not swaps:
                    break
            for outer, rows, mid, cols, inner in sorted(swaps or ()):
                if inner == 1 or after % (cols * inner):
                    continue
                binding = {"x": x, "y": outs[0], **{f"y{j}": o for j, o in enumerate(outs[1:], 1)}}
                for role, value in (("outer", outer), ("rows", rows), ("mid", mid), ("cols", cols), ("inner", inner)):
                    binding[role] = param_for(probe, value) if value > 1 else None
                binding["part"] = param_for(probe, after)
                if bias:                 # its length a parameter's, or the parts' (q, k and v's biases in one)
                    n = probe.sizes[bias]
                    binding.update(bias=bias, bias_len=param_for(probe, n) or (
                        f"{parts}*{binding['part']}" if binding["part"] and n == parts * after else None))
                    if binding["bias_len"] is None:
                        continue
                if binding["part"] and all(binding[r] for r, v in (("outer", outer), ("mid", mid), ("inner", inner))
                                           if v > 1):
                    yield Match("transpose", binding, {"parts": parts})
                    return


def _axis_swaps(probe, x, y, values=None, x_shape=None) -> Iterator[tuple[int, int, int, int, int]]:
    """(outer, rows, mid, cols, inner) for each pair of groups of consecutive axes of ``x`` -- its
    declared shape, or ``y``'s with the pair swapped back -- whose swap is ``y``: x as [outer, rows,
    mid, cols, inner] is y as [outer, cols, mid, rows, inner] (a batched transpose, a 0213 permute of
    heads, NCHW -> NHWC: C swapped with the group H, W ...).  ``values``, ``x_shape``: x's values and
    shape in place of its own (one part of a split input)."""
    case = probe.inputs.case
    shapes = []
    for name, swap in ((x, False), (y, True)):
        shape = [int(v) for v in probe.task.shape(probe.arg(name), case)]
        if name == x and x_shape is not None:
            shape = x_shape
        if len(shape) >= 3:
            shapes.append((shape, swap))
    xv = probe.values[x] if values is None else values
    seen = set()
    for shape, swap in shapes:
        d = len(shape)
        for i in range(d):
            for j in range(i + 1, d):
                for k in range(j, d):
                    for l in range(k + 1, d + 1):
                        a, b = math.prod(shape[i:j]), math.prod(shape[k:l])
                        if swap:         # y's groups a and b: x holds them the other way round
                            a, b = b, a
                        parts = (math.prod(shape[:i]), a, math.prod(shape[j:k]), b, math.prod(shape[l:]))
                        if a == 1 or b == 1 or parts in seen:
                            continue
                        seen.add(parts)
                        got = np.swapaxes(xv.reshape(parts), 1, 3).reshape(-1)
                        if close(probe.outputs[y], got):
                            yield parts


def find_gather(probe) -> Iterator[Match]:
    """Rows of a table picked by integer indices (plus a row of a second table by position), or
    the other way round: rows of a source written to the rows of ``y`` the indices name (a scatter:
    ``index_copy_``, a KV cache's append by slot; ``y`` keeps its other rows, a negative index is
    skipped), or added to them (``add``: ``index_add_``, an embedding's gradient, a GNN's
    scatter-sum; an index may repeat)."""
    outs = probe.buffers(output=True)
    if len(outs) == 2 and all(probe.arg(o).in_out for o in outs):
        for y, pos in (outs, outs[::-1]):
            yield from _scatters(probe, y, pos)
    if len(outs) != 1:
        return
    y = outs[0]
    got = probe.outputs[y]
    if probe.arg(y).in_out:
        yield from _scatters(probe, y)
    for idx in probe.inputs_of(floating=False):
        n = probe.sizes[idx]
        if n == 0 or probe.sizes[y] % n:
            continue
        dim = probe.sizes[y] // n
        ids = probe.values[idx].astype(np.int64)
        for table in probe.inputs_of(floating=None):
            if table in (idx, y) or probe.sizes[table] % dim:
                continue
            vocab = probe.sizes[table] // dim
            rows = param_for(probe, n)
            binding = {"y": y, "index": idx, "table": table, "rows": rows, "cols": param_for(probe, dim, avoid=(rows,))}
            if ids.min() < 0 or ids.max() >= vocab:
                yield from _vocabulary_shares(probe, binding, ids, vocab, dim, got)
                continue
            picked = probe.values[table].reshape(vocab, dim)[ids]
            if close(got, picked.reshape(-1)):
                yield Match("gather", binding, {})
                continue
            for pos in probe.inputs_of(floating=True):   # plus a row of a second table by position (row mod P)
                if pos in (idx, y, table) or probe.sizes[pos] % dim:
                    continue
                held = probe.sizes[pos] // dim         # its rows: P, or more (llm.c's wpe holds maxT >= T rows)
                for period in dict.fromkeys([held, *(v for v in probe.int_scalars().values() if 1 <= v < held)]):
                    if n % period:
                        continue
                    added = picked + probe.values[pos].reshape(held, dim)[np.arange(n) % period]
                    if close(got, added.reshape(-1)) and param_for(probe, period) is not None:
                        yield Match("gather", {**binding, "pos": pos, "period": param_for(probe, period)}, {})
                        break
                else:
                    continue
                break
            else:
                yield from _vocabulary_shares(probe, binding, ids, vocab, dim, got, plain=False)
                yield from _scaled_gathers(probe, binding, picked.reshape(-1), got)
        yield from _gathers_along_middle(probe, y, idx, got)
    return


def _scaled_gathers(probe, binding: dict, picked: np.ndarray, got: np.ndarray) -> Iterator[Match]:
    """Rows picked and scaled (T5's and Gemma's embedding times sqrt(d_model)): the factor a float
    parameter, the square root of an integer one (``scale_sqrt``), or a constant written in the kernel
    (``scale``), read off the reference by least squares."""
    den = float(np.dot(picked, picked))
    if den == 0.0:
        return
    c = float(np.dot(np.asarray(got, dtype=np.float64), picked)) / den
    if not np.isfinite(c) or abs(c - 1.0) < 1e-6 or not close(got, c * picked):
        return
    for name, value in probe.float_scalars().items():
        if abs(c - value) <= 1e-5 * abs(c):
            yield Match("gather", {**binding, "scale": name}, {})
            return
    for name, value in probe.int_scalars().items():
        if value > 0 and abs(c - math.sqrt(value)) <= 1e-5 * abs(c):
            yield Match("gather", {**binding, "scale": name}, {"scale_sqrt": True})
            return
    yield Match("gather", binding, {"scale": float(np.float32(c))})


def _vocabulary_shares(probe, binding: dict, ids: np.ndarray, vocab: int, dim: int, got: np.ndarray,
                       plain: bool = True) -> Iterator[Match]:
    """An embedding split across GPUs (TensorRT-LLM's lookup, Megatron's vocabulary-parallel embedding):
    the table holds rows ``offset .. offset + vocab - 1`` of the vocabulary, a token inside them takes
    row ``index - offset`` and one outside writes a row of zeros (the shares are summed after).
    ``offset`` an integer parameter (or none: indices past the table's rows give zeros); ``plain``:
    whether an offset of 0 is to be tried (not when every index was inside and the plain gather failed)."""
    table = probe.values[binding["table"]].reshape(vocab, dim)
    used = {binding["rows"], binding["cols"]}
    for off_name, off in [(None, 0), *((k, v) for k, v in probe.int_scalars().items() if k not in used)]:
        if off_name is None and not plain:
            continue
        shifted = ids - off
        inside = (shifted >= 0) & (shifted < vocab)
        if not inside.any():
            continue
        want = np.where(inside[:, None], table[np.clip(shifted, 0, vocab - 1)], 0.0)
        if not close(got, want.reshape(-1)):
            continue
        size = param_for(probe, vocab, avoid=(*used, off_name))
        if size is not None:
            yield Match("gather", {**binding, "offset": off_name, "vocab": size}, {"outside": "zero"})


def _gathers_along_middle(probe, y, idx, got) -> Iterator[Match]:
    """An index_select along a middle axis: ``y[o, i, :] = table[o, index[i], :]`` with ``outer`` blocks
    of ``vocab`` rows in the table (torch.index_select(dim=1), candle's index_select with its left
    size)."""
    n = probe.sizes[idx]
    ids = probe.values[idx].astype(np.int64)
    if n == 0 or ids.min() < 0:
        return
    for outer in sorted({v for v in probe.int_scalars().values() if v > 1 and probe.sizes[y] % (v * n) == 0}):
        cols = probe.sizes[y] // (outer * n)
        for table in probe.inputs_of(floating=None):
            if table in (idx, y) or probe.sizes[table] % (outer * cols):
                continue
            vocab = probe.sizes[table] // (outer * cols)
            if ids.max() >= vocab:
                continue
            picked = probe.values[table].reshape(outer, vocab, cols)[:, ids, :]
            if not close(got, picked.reshape(-1)):
                continue
            o = param_for(probe, outer)
            rows = param_for(probe, n, avoid=(o,))
            c = param_for(probe, cols, avoid=(o, rows))
            v = param_for(probe, vocab, avoid=(o, rows, c))
            if None not in (o, rows, c, v):
                yield Match("gather", {"y": y, "index": idx, "table": table, "rows": rows, "cols": c,
                                       "outer": o, "vocab": v}, {})


def _scatters(probe, y, pos: str | None = None) -> Iterator[Match]:
    """Scatters into ``y``; with ``pos`` (a second output), scatter-adds that also add each source row
    into row (row mod period) of ``pos`` (llm.c's encoder backward: dwte[token] and dwpe[t])."""
    got = probe.outputs[y]
    for idx in probe.inputs_of(floating=False):
        n = probe.sizes[idx]
        ids = probe.values[idx].astype(np.int64)
        for x in probe.inputs_of(floating=None):
            if x in (idx, y) or n == 0 or probe.sizes[x] % n:
                continue
            dim = probe.sizes[x] // n
            if probe.sizes[y] % dim or ids.max() >= probe.sizes[y] // dim:
                continue
            keep = ids >= 0
            rows = param_for(probe, n)
            binding = {"y": y, "index": idx, "table": x, "rows": rows, "cols": param_for(probe, dim, avoid=(rows,))}
            src = probe.values[x].reshape(n, dim)[keep]
            added = probe.values[y].reshape(-1, dim).copy()      # rows added where their index says (index_add_,
            np.add.at(added, ids[keep], src)                      # an embedding's gradient, a GNN's scatter-sum)
            if pos is not None:
                if close(got, added.reshape(-1)):
                    yield from _position_sums(probe, pos, binding, probe.values[x].reshape(n, dim))
                continue
            if len(set(ids[keep].tolist())) != int(keep.sum()):
                if close(got, added.reshape(-1)):                 # a slot named twice: only a sum has one answer
                    yield Match("gather", binding, {"scatter": True, "add": True})
                continue
            want = probe.values[y].reshape(-1, dim).copy()
            want[ids[keep]] = src
            if close(got, want.reshape(-1)):
                yield Match("gather", binding, {"scatter": True})
            elif close(got, added.reshape(-1)):
                yield Match("gather", binding, {"scatter": True, "add": True})


def _position_sums(probe, pos: str, binding: dict, src: np.ndarray) -> Iterator[Match]:
    """The scatter-add ``binding`` whose source rows are also added into row (row mod period) of
    ``pos``: the period its rows, or an integer parameter's value below that."""
    n, dim = src.shape
    if probe.sizes[pos] % dim:
        return
    held = probe.sizes[pos] // dim
    for period in dict.fromkeys([held, *(v for v in probe.int_scalars().values() if 1 <= v < held)]):
        if n % period:
            continue
        summed = probe.values[pos].reshape(held, dim).copy()
        np.add.at(summed, np.arange(n) % period, src)
        if close(probe.outputs[pos], summed.reshape(-1)) and param_for(probe, period) is not None:
            yield Match("gather", {**binding, "pos": pos, "period": param_for(probe, period)},
                        {"scatter": True, "add": True})
            return


def find_row_pick(probe) -> Iterator[Match]:
    """``y[r] = f(table[r, index[r]])``: one element of each row of a table, in the column an
    integer index names per row, mapped by ``f`` from the elementwise functions
    (:data:`kernel_forge.kinds.maps.FUNCTIONS`: identity, -log, log, exp ...).  llm.c's
    crossentropy_forward is ``losses[b, t] = -log(probs[b, t, targets[b, t]])``.  An index outside
    the row (PyTorch's ignore_index, -100) may write 0 (``ignored: zero``)."""
    from kernel_forge.kinds.maps import FUNCTIONS

    outs = probe.buffers(output=True)
    if len(outs) != 1 or not probe.arg(outs[0]).param.dtype.is_float:
        return
    y = outs[0]
    rows = probe.sizes[y]
    got = probe.outputs[y]
    for idx in probe.inputs_of(rows, floating=False):
        ids = probe.values[idx].astype(np.int64)
        for table in probe.inputs_of(floating=True):
            size = probe.sizes[table]
            if table == y or rows == 0 or size % rows or size == rows:
                continue
            cols = size // rows
            off = (ids < 0) | (ids >= cols)               # an ignored target (PyTorch's ignore_index): a 0 loss
            if off.all() or (off.any() and np.any(got[off] != 0.0)):
                continue
            picked = probe.values[table].reshape(rows, cols)[np.arange(rows), np.where(off, 0, ids)]
            r = param_for(probe, rows)
            binding = {"y": y, "index": idx, "table": table, "rows": r, "cols": param_for(probe, cols, avoid=(r,))}
            for act, (fn, _) in FUNCTIONS.items():
                with np.errstate(all="ignore"):
                    want = np.where(off, 0.0, fn(picked))
                if close(got, want):
                    yield Match("row_pick", binding, {"act": act, **({"ignored": "zero"} if off.any() else {})})
    yield from _gathers_along_rows(probe, y, got)


def _gathers_along_rows(probe, y, got) -> Iterator[Match]:
    """``y[r, j] = table[r, index[r, j]]``: k picks a row (``torch.gather(table, 1, index)``,
    ``np.take_along_axis``), k a parameter; y and the index hold rows x k values."""
    n = probe.sizes[y]
    for idx in probe.inputs_of(n, floating=False):
        ids = probe.values[idx].astype(np.int64)
        if ids.size == 0 or ids.min() < 0:
            continue
        for rows, k in dims(probe, n):
            if k < 2 or rows < 1:
                continue
            for table in probe.inputs_of(floating=True):
                size = probe.sizes[table]
                if table == y or size % rows or size // rows <= ids.max():
                    continue
                cols = size // rows
                picked = probe.values[table].reshape(rows, cols)[np.arange(rows)[:, None], ids.reshape(rows, k)]
                if close(got, picked.reshape(-1)):
                    r = param_for(probe, rows)
                    c = param_for(probe, cols, avoid=(r,))
                    yield Match("row_pick", {"y": y, "index": idx, "table": table, "rows": r, "cols": c,
                                             "picks": param_for(probe, k, avoid=(r, c))}, {"act": "identity"})


# ----------------------------------------------------------------------------- box filters

def _box(img: np.ndarray, r: int, axis: int, edge: str) -> np.ndarray:
    """The sum of the 2r+1 values around each one along ``axis`` (0: down a column, 1: along a row)."""
    pad = [(0, 0), (0, 0)]
    pad[axis] = (r, r)
    p = np.pad(img, pad, mode="edge" if edge == "clamp" else "constant")
    c = np.cumsum(p, axis=axis)
    c = np.concatenate([np.zeros((1, p.shape[1])) if axis == 0 else np.zeros((p.shape[0], 1)), c], axis=axis)
    n = img.shape[axis]
    hi = np.take(c, np.arange(2 * r + 1, 2 * r + 1 + n), axis=axis)
    lo = np.take(c, np.arange(0, n), axis=axis)
    return hi - lo


def find_box_filter(probe) -> Iterator[Match]:
    """A 1-D box filter along the rows or the columns of an image whose radius is a parameter
    (cuda-samples' boxFilter x and y passes): the mean or the sum of the 2r+1 values around each
    pixel, edges clamped or zero."""
    for x, y, h, w, img, got in _images(probe, 2):
        rows = param_for(probe, h)
        cols = param_for(probe, w, avoid=(rows,))
        for name, r in probe.int_scalars().items():
            if name in (rows, cols) or not 1 <= r < max(h, w):
                continue
            for axis, label in ((0, "y"), (1, "x")):
                for edge in EDGES:
                    s = _box(img, r, axis, edge)
                    for norm, want in (("mean", s / (2 * r + 1)), ("sum", s)):
                        if close(got, want.reshape(-1)):
                            yield Match("box_filter", {"x": x, "y": y, "rows": rows, "cols": cols, "radius": name},
                                        {"axis": label, "edge": edge, "norm": norm})
    return
